//! Builds MetalPlane's runtime image and its Crossplane package without a
//! Docker daemon: static release binaries, deterministic tar+gzip layers,
//! an OCI image config and manifest, written as one tarball that is both
//! an OCI image layout and a `docker save` archive (what
//! `crossplane xpkg push -f` and go-containerregistry read).

pub mod lab;
pub mod procstat;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use flate2::Compression;
use flate2::write::GzEncoder;
use oci_spec::image::{
    Descriptor, DescriptorBuilder, HistoryBuilder, ImageConfigurationBuilder, ImageIndexBuilder,
    ImageManifestBuilder, MediaType, RootFsBuilder, Sha256Digest,
};
use serde_json::json;
use sha2::{Digest, Sha256};

/// The annotation (manifest) and label prefix (config) that mark the layer
/// holding package.yaml.
pub const XPKG_ANNOTATION: &str = "io.crossplane.xpkg";
pub const XPKG_BASE: &str = "base";
pub const RUN_AS: &str = "2000:2000";
pub const ENTRYPOINT: &str = "/usr/local/bin/function-metalplane";
pub const BINARIES: [&str; 2] = ["function-metalplane", "metalplane-bmc"];
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}")]
    Build(String),
    #[error("OCI: {0}")]
    Oci(#[from] oci_spec::OciSpecError),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

fn io<T>(what: impl Into<String>, r: std::io::Result<T>) -> Result<T, Error> {
    r.map_err(|e| Error::Io(what.into(), e))
}

/// The name Crossplane's package manager gives a package it installs as a
/// dependency: the repository path without the registry, as a DNS label
/// (`xpkg.ToDNSLabel(ref.Context().RepositoryStr())`). Compositions and
/// WatchOperations must reference the Function by this name.
pub fn dependency_name(package: &str) -> String {
    let no_tag = package.split(['@']).next().unwrap_or(package);
    let no_tag = match no_tag.rfind(':') {
        Some(i) if !no_tag[i..].contains('/') => &no_tag[..i],
        _ => no_tag,
    };
    let mut parts: Vec<&str> = no_tag.split('/').collect();
    if parts.len() > 1
        && (parts[0].contains('.') || parts[0].contains(':') || parts[0] == "localhost")
    {
        parts.remove(0);
    }
    let repo = parts.join("/");
    let mut out = String::new();
    for (i, b) in repo.bytes().enumerate() {
        if i == 63 {
            break;
        }
        match b {
            b'a'..=b'z' | b'0'..=b'9' => out.push(b as char),
            b'A'..=b'Z' => out.push(b.to_ascii_lowercase() as char),
            b'.' | b'/' | b':' | b'-' | b'_' => out.push('-'),
            _ => {}
        }
    }
    out.trim_matches('-').to_string()
}

pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Canonical, so the paths the lab prints are the ones a person types.
    std::fs::canonicalize(&root).unwrap_or(root)
}

/// `shared/` beside the checkout (upstream definitions and references; CI
/// lays a copy there); METALPLANE_SHARED overrides.
pub fn shared_dir() -> PathBuf {
    std::env::var_os("METALPLANE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("..").join("shared"))
}

pub fn out_dir() -> PathBuf {
    repo_root().join("target/xpkg")
}

/// A layer: gzip bytes plus the digests the manifest and config need.
pub struct Layer {
    pub gz: Vec<u8>,
    pub digest: String,
    pub diff_id: String,
    pub comment: String,
}

pub fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Files of a layer: (path in the image, mode, content). Directories are
/// added for every parent, root-owned, mtime 0, so digests are reproducible.
pub fn layer(files: &[(&str, u32, Vec<u8>)], comment: &str) -> Result<Layer, Error> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut dirs: Vec<String> = Vec::new();
    for (path, _, _) in files {
        let mut acc = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for p in &parts[..parts.len() - 1] {
            acc.push_str(p);
            acc.push('/');
            if !dirs.contains(&acc) {
                dirs.push(acc.clone());
            }
        }
    }
    for d in &dirs {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        io(
            format!("tar {d}"),
            builder.append_data(&mut h, d, std::io::empty()),
        )?;
    }
    for (path, mode, content) in files {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(*mode);
        h.set_size(content.len() as u64);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        io(
            format!("tar {path}"),
            builder.append_data(&mut h, path, content.as_slice()),
        )?;
    }
    let raw = io("tar", builder.into_inner())?;
    let mut gz = GzEncoder::new(Vec::new(), Compression::best());
    io("gzip", gz.write_all(&raw))?;
    let gz = io("gzip", gz.finish())?;
    Ok(Layer {
        digest: format!("sha256:{}", sha256_hex(&gz)),
        diff_id: format!("sha256:{}", sha256_hex(&raw)),
        gz,
        comment: comment.to_string(),
    })
}

/// package.yaml: the Function metadata, then the input CRDs.
pub fn package_yaml() -> Result<String, Error> {
    let root = repo_root();
    let mut out = io(
        "package/crossplane.yaml",
        std::fs::read_to_string(root.join("package/crossplane.yaml")),
    )?;
    let mut inputs: Vec<PathBuf> = io(
        "package/input",
        std::fs::read_dir(root.join("package/input")),
    )?
    .filter_map(|e| e.ok().map(|e| e.path()))
    .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
    .collect();
    inputs.sort();
    for p in inputs {
        out.push_str("\n---\n");
        out.push_str(&io(p.display().to_string(), std::fs::read_to_string(&p))?);
    }
    Ok(out)
}

fn descriptor(media: MediaType, bytes: &[u8]) -> Result<Descriptor, Error> {
    let digest: Sha256Digest = sha256_hex(bytes).parse()?;
    Ok(DescriptorBuilder::default()
        .media_type(media)
        .digest(digest)
        .size(bytes.len() as u64)
        .build()?)
}

/// Writes an image as a tarball that is both an OCI layout and a
/// docker-archive. `package_layer` is the index of the layer annotated as
/// the xpkg base, if any.
pub fn write_image(
    path: &Path,
    layers: &[Layer],
    package_layer: Option<usize>,
    tag: &str,
) -> Result<(), Error> {
    // Ordered maps: the config (and so the digest) must not depend on hash order.
    let mut labels = std::collections::BTreeMap::new();
    labels.insert(
        "org.opencontainers.image.title".to_string(),
        "metalplane".to_string(),
    );
    labels.insert(
        "org.opencontainers.image.version".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    );
    if let Some(i) = package_layer {
        // Annotations are lost in docker-archive tarballs; Crossplane's
        // tooling also reads the base layer from this config label.
        labels.insert(
            format!("{XPKG_ANNOTATION}:{}", layers[i].digest),
            XPKG_BASE.to_string(),
        );
    }
    let exposed: std::collections::BTreeMap<String, serde_json::Value> = [
        ("9443/tcp".to_string(), json!({})),
        ("8080/tcp".to_string(), json!({})),
    ]
    .into_iter()
    .collect();
    let cfg_json = json!({
        "User": RUN_AS,
        "Entrypoint": [ENTRYPOINT],
        "Env": ["PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
        "ExposedPorts": exposed,
        "WorkingDir": "/",
        "Labels": labels,
    });
    let config: oci_spec::image::Config = serde_json::from_value(cfg_json)?;
    let image_config = ImageConfigurationBuilder::default()
        .architecture(oci_spec::image::Arch::Amd64)
        .os(oci_spec::image::Os::Linux)
        .config(config)
        .rootfs(
            RootFsBuilder::default()
                .typ("layers")
                .diff_ids(layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>())
                .build()?,
        )
        .history(
            layers
                .iter()
                .map(|l| {
                    HistoryBuilder::default()
                        .created_by(l.comment.clone())
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()?,
        )
        .build()?;
    // Through a Value: oci-spec keeps labels and ports in HashMaps, whose
    // order changes per process; serde_json's map is sorted, so the config
    // digest (and the package's) is the same on every build.
    let config_bytes = serde_json::to_vec(&serde_json::to_value(&image_config)?)?;
    let config_desc = descriptor(MediaType::ImageConfig, &config_bytes)?;

    let mut layer_descs = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let mut d = descriptor(MediaType::ImageLayerGzip, &l.gz)?;
        if package_layer == Some(i) {
            d.set_annotations(Some(
                [(XPKG_ANNOTATION.to_string(), XPKG_BASE.to_string())]
                    .into_iter()
                    .collect(),
            ));
        }
        layer_descs.push(d);
    }
    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(config_desc.clone())
        .layers(layer_descs)
        .build()?;
    let manifest_bytes = serde_json::to_vec(&manifest)?;
    let mut manifest_desc = descriptor(MediaType::ImageManifest, &manifest_bytes)?;
    manifest_desc.set_annotations(Some(
        [(
            "org.opencontainers.image.ref.name".to_string(),
            tag.to_string(),
        )]
        .into_iter()
        .collect(),
    ));
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![manifest_desc])
        .build()?;
    let index_bytes = serde_json::to_vec(&index)?;

    let blob = |hex: &str| format!("blobs/sha256/{hex}");
    let docker_manifest = json!([{
        "Config": blob(&sha256_hex(&config_bytes)),
        "RepoTags": [tag],
        "Layers": layers.iter().map(|l| blob(l.digest.trim_start_matches("sha256:"))).collect::<Vec<_>>(),
    }]);
    let docker_bytes = serde_json::to_vec(&docker_manifest)?;

    let mut entries: Vec<(String, Vec<u8>)> = vec![
        (
            "oci-layout".into(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        ("index.json".into(), index_bytes),
        ("manifest.json".into(), docker_bytes),
        (blob(&sha256_hex(&manifest_bytes)), manifest_bytes),
        (blob(&sha256_hex(&config_bytes)), config_bytes),
    ];
    for l in layers {
        entries.push((blob(l.digest.trim_start_matches("sha256:")), l.gz.clone()));
    }
    let mut tarball = tar::Builder::new(Vec::new());
    for dir in ["blobs/", "blobs/sha256/"] {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_mtime(0);
        io("tar", tarball.append_data(&mut h, dir, std::io::empty()))?;
    }
    for (name, bytes) in &entries {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o644);
        h.set_size(bytes.len() as u64);
        h.set_mtime(0);
        io(
            format!("tar {name}"),
            tarball.append_data(&mut h, name, bytes.as_slice()),
        )?;
    }
    let data = io("tar", tarball.into_inner())?;
    if let Some(parent) = path.parent() {
        io(
            parent.display().to_string(),
            std::fs::create_dir_all(parent),
        )?;
    }
    io(path.display().to_string(), std::fs::write(path, data))
}

/// Static release binaries of both programs, built in `target_dir`.
pub fn build_binaries(target_dir: &Path) -> Result<PathBuf, Error> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(repo_root())
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            TARGET,
            "-p",
            "function-metalplane",
            "-p",
            "metalplane-bmc",
        ])
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .map_err(|e| Error::Build(format!("cannot run cargo: {e}")))?;
    if !status.success() {
        return Err(Error::Build(
            "cargo build of the static binaries failed".into(),
        ));
    }
    Ok(target_dir.join(TARGET).join("release"))
}

/// The runtime layer: both binaries, an /etc/passwd naming UID 2000, and
/// the build machine's CA bundle for BMCs with publicly signed certificates.
pub fn runtime_layer(bin_dir: &Path) -> Result<Layer, Error> {
    let mut files = Vec::new();
    for b in BINARIES {
        let p = bin_dir.join(b);
        files.push((
            format!("usr/local/bin/{b}"),
            0o755,
            io(p.display().to_string(), std::fs::read(&p))?,
        ));
    }
    files.push((
        "etc/passwd".into(),
        0o644,
        b"root:x:0:0:root:/root:/sbin/nologin\nmetalplane:x:2000:2000:metalplane:/:/sbin/nologin\n"
            .to_vec(),
    ));
    files.push((
        "etc/group".into(),
        0o644,
        b"root:x:0:\nmetalplane:x:2000:\n".to_vec(),
    ));
    if let Ok(ca) = std::fs::read(CA_BUNDLE) {
        files.push(("etc/ssl/certs/ca-certificates.crt".into(), 0o644, ca));
    }
    let refs: Vec<(&str, u32, Vec<u8>)> = files
        .iter()
        .map(|(p, m, c)| (p.as_str(), *m, c.clone()))
        .collect();
    layer(&refs, "metalplane binaries (static, run as 2000:2000)")
}

/// The Configuration's package.yaml: its metadata, the XRD, the
/// Composition and the WatchOperation.
pub fn configuration_yaml() -> Result<String, Error> {
    let root = repo_root();
    let mut out = String::new();
    for f in [
        "apis/crossplane.yaml",
        "apis/metalclusters/definition.yaml",
        "apis/metalclusters/composition.yaml",
        "apis/operations/watchoperation.yaml",
    ] {
        if !out.is_empty() {
            out.push_str("\n---\n");
        }
        out.push_str(&io(f, std::fs::read_to_string(root.join(f)))?);
    }
    Ok(out)
}

pub fn package_layer() -> Result<Layer, Error> {
    layer(
        &[("package.yaml", 0o644, package_yaml()?.into_bytes())],
        "crossplane package.yaml",
    )
}

/// Paths written by [`package`].
pub struct Outputs {
    pub runtime: PathBuf,
    pub xpkg: PathBuf,
    pub configuration: PathBuf,
}

/// Builds the runtime image tarball and the .xpkg from binaries in `bin_dir`.
pub fn assemble(bin_dir: &Path, out: &Path) -> Result<Outputs, Error> {
    let version = env!("CARGO_PKG_VERSION");
    let runtime = runtime_layer(bin_dir)?;
    let pkg = package_layer()?;
    let outputs = Outputs {
        runtime: out.join("metalplane-runtime.oci.tar"),
        xpkg: out.join("function-metalplane.xpkg"),
        configuration: out.join("configuration-metalplane.xpkg"),
    };
    write_image(
        &outputs.runtime,
        std::slice::from_ref(&runtime),
        None,
        &format!("metalplane:v{version}"),
    )?;
    write_image(
        &outputs.xpkg,
        &[runtime, pkg],
        Some(1),
        &format!("function-metalplane:v{version}"),
    )?;
    // A Configuration has no runtime: one layer, package.yaml only.
    let conf = layer(
        &[("package.yaml", 0o644, configuration_yaml()?.into_bytes())],
        "crossplane package.yaml",
    )?;
    write_image(
        &outputs.configuration,
        &[conf],
        Some(0),
        &format!("configuration-metalplane:v{version}"),
    )?;
    Ok(outputs)
}

/// The one command: build static binaries, then the images.
pub fn package() -> Result<Outputs, Error> {
    package_in(&repo_root().join("target"))
}

/// [`package`] with the binaries built in another target directory (a test
/// running under `cargo test` must not wait on the lock of its own).
pub fn package_in(target_dir: &Path) -> Result<Outputs, Error> {
    let bins = build_binaries(target_dir)?;
    assemble(&bins, &out_dir())
}

/// The XRD's schema rewritten from the API's types and edit rules; the
/// docs' edit table and API reference from the same.
pub fn generate() -> Result<(), String> {
    let path = repo_root().join("apis/metalclusters/definition.yaml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let fresh =
        metalplane::xrd::regenerate(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if fresh != text {
        std::fs::write(&path, fresh).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("rewrote {}", path.display());
    }
    type Regenerate = fn(&str) -> Result<String, String>;
    let pages: [(&str, Regenerate); 2] = [
        ("docs/day2.md", metalplane::fields::regenerate_edit_table),
        ("docs/api-reference.md", metalplane::reference::regenerate),
    ];
    for (page, regenerate) in pages {
        let path = repo_root().join(page);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let fresh = regenerate(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if fresh != text {
            std::fs::write(&path, fresh).map_err(|e| format!("{}: {e}", path.display()))?;
            println!("rewrote {}", path.display());
        }
    }
    Ok(())
}
