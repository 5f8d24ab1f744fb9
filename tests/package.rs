//! Opens the built package: the OCI layout and docker-archive views, the
//! manifest, the config (user, entrypoint, labels), the layers, the xpkg
//! annotation, and package.yaml. Builds it first (`cargo xtask package`)
//! when it is missing.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;
use serde_json::Value;

fn entries(tarball: &Path) -> BTreeMap<String, Vec<u8>> {
    let f = std::fs::File::open(tarball).unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
    let mut ar = tar::Archive::new(f);
    let mut out = BTreeMap::new();
    for e in ar.entries().expect("tar") {
        let mut e = e.expect("entry");
        let name = e.path().expect("path").display().to_string();
        let mut b = Vec::new();
        e.read_to_end(&mut b).expect("read");
        out.insert(name, b);
    }
    out
}

fn layer_files(gz: &[u8]) -> BTreeMap<String, (u32, u64, Vec<u8>)> {
    let mut ar = tar::Archive::new(GzDecoder::new(gz));
    let mut out = BTreeMap::new();
    for e in ar.entries().expect("layer tar") {
        let mut e = e.expect("entry");
        let name = e.path().expect("path").display().to_string();
        let mode = e.header().mode().expect("mode");
        let uid = e.header().uid().expect("uid");
        let mut b = Vec::new();
        e.read_to_end(&mut b).expect("read");
        out.insert(name, (mode, uid, b));
    }
    out
}

fn json(b: &[u8]) -> Value {
    serde_json::from_slice(b).expect("json")
}

fn blob<'a>(all: &'a BTreeMap<String, Vec<u8>>, digest: &str) -> &'a [u8] {
    let hex = digest.trim_start_matches("sha256:");
    let b = all
        .get(&format!("blobs/sha256/{hex}"))
        .unwrap_or_else(|| panic!("blob {digest} missing"));
    assert_eq!(xtask::sha256_hex(b), hex, "blob content matches its digest");
    b
}

/// The image manifest the OCI index points at.
fn image_manifest(all: &BTreeMap<String, Vec<u8>>) -> Value {
    let index = json(&all["index.json"]);
    json(blob(
        all,
        index["manifests"][0]["digest"].as_str().expect("digest"),
    ))
}

fn yaml_docs(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("package.yaml parses"))
        .collect()
}

fn built() -> xtask::Outputs {
    let out = xtask::out_dir();
    let o = xtask::Outputs {
        runtime: out.join("metalplane-runtime.oci.tar"),
        xpkg: out.join("function-metalplane.xpkg"),
        configuration: out.join("configuration-metalplane.xpkg"),
    };
    if !o.xpkg.exists() || !o.runtime.exists() || !o.configuration.exists() {
        return xtask::package_in(&xtask::repo_root().join("target/package-test"))
            .expect("cargo xtask package");
    }
    o
}

#[test]
fn the_xpkg_is_a_crossplane_package() {
    let o = built();
    let all = entries(&o.xpkg);
    assert_eq!(json(&all["oci-layout"])["imageLayoutVersion"], "1.0.0");
    let index = json(&all["index.json"]);
    let mdesc = &index["manifests"][0];
    assert_eq!(
        mdesc["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let manifest = json(blob(&all, mdesc["digest"].as_str().expect("digest")));
    assert_eq!(manifest["schemaVersion"], 2);
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 2, "runtime layer + package layer");
    for l in layers {
        assert_eq!(
            l["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        assert_eq!(
            l["size"].as_u64(),
            Some(blob(&all, l["digest"].as_str().expect("d")).len() as u64)
        );
    }
    let base: Vec<&Value> = layers
        .iter()
        .filter(|l| l["annotations"]["io.crossplane.xpkg"] == "base")
        .collect();
    assert_eq!(
        base.len(),
        1,
        "exactly one layer is annotated io.crossplane.xpkg: base"
    );
    assert_eq!(base[0]["digest"], layers[1]["digest"]);

    let config = json(blob(
        &all,
        manifest["config"]["digest"].as_str().expect("cfg"),
    ));
    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("linux"), Some("amd64"))
    );
    let c = &config["config"];
    assert_eq!(c["User"], "2000:2000", "non-root");
    assert_eq!(
        c["Entrypoint"],
        serde_json::json!(["/usr/local/bin/function-metalplane"])
    );
    assert!(c["ExposedPorts"].get("9443/tcp").is_some());
    let label = format!(
        "io.crossplane.xpkg:{}",
        layers[1]["digest"].as_str().expect("d")
    );
    assert_eq!(
        c["Labels"][&label], "base",
        "the base layer is also named in the config labels"
    );
    let diff_ids = config["rootfs"]["diff_ids"].as_array().expect("diff_ids");
    assert_eq!(diff_ids.len(), 2);

    // The docker-archive view names the same config and layers.
    let docker = json(&all["manifest.json"]);
    assert_eq!(
        docker[0]["Config"],
        format!(
            "blobs/sha256/{}",
            manifest["config"]["digest"]
                .as_str()
                .expect("c")
                .trim_start_matches("sha256:")
        )
    );
    assert_eq!(docker[0]["Layers"].as_array().map(Vec::len), Some(2));

    // package.yaml: the Function metadata and the input CRD.
    let pkg = layer_files(blob(&all, layers[1]["digest"].as_str().expect("d")));
    assert_eq!(
        pkg.keys().collect::<Vec<_>>(),
        ["package.yaml"],
        "package.yaml at the root, alone"
    );
    let text = String::from_utf8(pkg["package.yaml"].2.clone()).expect("utf-8");
    let docs = yaml_docs(&text);
    assert_eq!(docs[0]["apiVersion"], "meta.pkg.crossplane.io/v1");
    assert_eq!(docs[0]["kind"], "Function");
    assert_eq!(docs[0]["metadata"]["name"], "function-metalplane");
    assert_eq!(
        docs[0]["spec"]["capabilities"],
        serde_json::json!(["composition", "operation"])
    );
    assert!(
        docs[1..]
            .iter()
            .any(|d| d["kind"] == "CustomResourceDefinition"
                && d["spec"]["names"]["kind"] == "BMCRemediation")
    );
}

#[test]
fn the_runtime_layer_holds_both_static_binaries() {
    let o = built();
    let all = entries(&o.runtime);
    let manifest = image_manifest(&all);
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1);
    assert!(layers[0].get("annotations").is_none());
    let files = layer_files(blob(&all, layers[0]["digest"].as_str().expect("d")));
    for b in xtask::BINARIES {
        let (mode, uid, bytes) = &files[&format!("usr/local/bin/{b}")];
        assert_eq!(
            (*mode & 0o777, *uid),
            (0o755, 0),
            "{b}: root-owned, executable by UID 2000"
        );
        assert_eq!(&bytes[..4], b"\x7fELF", "{b} is an ELF binary");
        // A static executable has no PT_INTERP program header.
        assert!(
            !bytes
                .windows(27)
                .any(|w| w == b"/lib64/ld-linux-x86-64.so.2"),
            "{b} is static"
        );
    }
    assert!(String::from_utf8_lossy(&files["etc/passwd"].2).contains(":2000:2000:"));
}

#[test]
fn layers_are_reproducible() {
    let a = xtask::package_layer().expect("layer");
    let b = xtask::package_layer().expect("layer");
    assert_eq!(a.digest, b.digest, "same inputs, same digest");
}

#[test]
fn the_configuration_package_carries_the_api_and_depends_on_the_function() {
    let o = built();
    let all = entries(&o.configuration);
    let manifest = image_manifest(&all);
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["annotations"]["io.crossplane.xpkg"], "base");
    let files = layer_files(blob(&all, layers[0]["digest"].as_str().expect("d")));
    let text = String::from_utf8(files["package.yaml"].2.clone()).expect("utf-8");
    let docs = yaml_docs(&text);
    assert_eq!(
        (docs[0]["apiVersion"].as_str(), docs[0]["kind"].as_str()),
        (Some("meta.pkg.crossplane.io/v1"), Some("Configuration"))
    );
    let deps: Vec<String> = docs[0]["spec"]["dependsOn"]
        .as_array()
        .expect("dependsOn")
        .iter()
        .map(|d| {
            d["function"]
                .as_str()
                .or(d["provider"].as_str())
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    for want in [
        "function-metalplane",
        "provider-helm",
        "provider-kubernetes",
    ] {
        assert!(
            deps.iter().any(|d| d.ends_with(want)),
            "depends on {want}: {deps:?}"
        );
    }
    let kinds: Vec<&str> = docs[1..]
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "CompositeResourceDefinition",
            "Composition",
            "WatchOperation"
        ]
    );
    assert!(
        !kinds.contains(&"ClusterRole"),
        "ClusterRoles cannot ship in a Configuration"
    );
}

/// A Configuration's function dependency is installed under the name the
/// package manager derives from its repository path; the Composition and
/// the WatchOperation must call it by that name, or an installed
/// Configuration resolves no function. (The lab's install scenario shows
/// the same against Crossplane itself.)
#[test]
fn pipelines_reference_the_function_by_its_installed_name() {
    let text = xtask::configuration_yaml().expect("configuration yaml");
    let docs = yaml_docs(&text);
    let function = docs[0]["spec"]["dependsOn"]
        .as_array()
        .expect("dependsOn")
        .iter()
        .find_map(|d| d["function"].as_str())
        .expect("a function dependency");
    let installed = xtask::dependency_name(function);
    assert_eq!(installed, "kube-farm-function-metalplane");
    let mut refs = Vec::new();
    for d in &docs[1..] {
        let steps = d
            .pointer("/spec/pipeline")
            .or(d.pointer("/spec/operationTemplate/spec/pipeline"));
        for s in steps.and_then(Value::as_array).into_iter().flatten() {
            refs.push(s["functionRef"]["name"].as_str().unwrap_or("").to_string());
        }
    }
    assert_eq!(
        refs.len(),
        2,
        "Composition and WatchOperation steps: {refs:?}"
    );
    for r in refs {
        assert_eq!(r, installed);
    }
}

#[test]
fn dependency_names_follow_the_package_manager() {
    for (package, name) in [
        (
            "ghcr.io/kube-farm/function-metalplane",
            "kube-farm-function-metalplane",
        ),
        (
            "xpkg.crossplane.io/crossplane-contrib/provider-helm:v1.3.0",
            "crossplane-contrib-provider-helm",
        ),
        ("localhost:5000/a/b.c@sha256:00", "a-b-c"),
        ("registry.example:443/team/fn", "team-fn"),
    ] {
        assert_eq!(xtask::dependency_name(package), name, "{package}");
    }
}
