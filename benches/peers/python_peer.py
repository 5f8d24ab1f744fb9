"""Benchmark peer: MetalPlane's composition for a MetalCluster, written on
crossplane-function-sdk-python. It emits exactly MetalPlane's graph for the
built-in example (the load generator checks that before timing) but, unlike
MetalPlane, validates nothing: a peer doing less work than ours."""
import shlex

import click
from crossplane.function import cli as sdkcli, logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

INSTALLER = "/var/lib/metalplane/nvidia-installer.run"


def names(xr):
    c = f"{xr}-cluster"
    return {"ippool": f"{xr}-pool", "node": f"{xr}-node", "cluster": c, "mt": f"{c}-controlplane",
            "dt": f"{c}-controlplane-template", "kubeconfig": f"{c}-kubeconfig"}


def obj(ns, api, kind, name, spec):
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": ns}, "spec": spec}


def compose(xr):
    md, spec = xr["metadata"], xr["spec"]
    name, ns = md["name"], md.get("namespace", "default")
    n = names(name)
    net, k8s, host = spec["network"], spec["kubernetes"], spec["host"]
    infra = "infrastructure.cluster.x-k8s.io"
    out = {}
    out["ippool"] = obj(ns, "ipam.metal3.io/v1alpha1", "IPPool", n["ippool"], {
        "clusterName": n["cluster"], "namePrefix": n["node"],
        "pools": [{"start": net["nodeIP"], "end": net["nodeIP"]}], "prefix": net["prefix"],
        "gateway": net["gateway"], "dnsServers": [net["dnsServer"]]})
    out["cluster"] = obj(ns, "cluster.x-k8s.io/v1beta2", "Cluster", n["cluster"], {
        "clusterNetwork": {"pods": {"cidrBlocks": [net.get("podCIDR", "10.244.0.0/16")]},
                           "services": {"cidrBlocks": [net.get("serviceCIDR", "10.96.0.0/12")]},
                           "serviceDomain": "cluster.local"},
        "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": n["cluster"]},
        "infrastructureRef": {"apiGroup": infra, "kind": "Metal3Cluster", "name": n["cluster"]}})
    out["metal3cluster"] = obj(ns, f"{infra}/v1beta2", "Metal3Cluster", n["cluster"], {
        "cloudProviderEnabled": False, "controlPlaneEndpoint": {"host": net["nodeIP"], "port": 6443}})
    image = {"url": k8s["imageURL"], "checksumType": k8s.get("imageChecksumType", "sha256"),
             "diskFormat": k8s.get("imageDiskFormat", "qcow2")}
    if "imageChecksum" in k8s:
        image["checksum"] = k8s["imageChecksum"]
    out["metal3machinetemplate"] = obj(ns, f"{infra}/v1beta2", "Metal3MachineTemplate", n["mt"], {
        "nodeReuse": False, "template": {"spec": {
            "automatedCleaningMode": "metadata", "dataTemplate": {"name": n["dt"]},
            "hostSelector": {"matchLabels": {"metal.kube.farm/pool": host["pool"]}}, "image": image}}})
    iface = host["bootInterface"]
    out["metal3datatemplate"] = obj(ns, f"{infra}/v1beta2", "Metal3DataTemplate", n["dt"], {
        "clusterName": n["cluster"], "networkData": {
            "links": {"ethernets": [{"id": iface, "type": "phy", "name": iface, "macAddress": {"fromHostInterface": iface}}]},
            "networks": {"ipv4": [{"id": "baremetal", "link": iface, "ipAddressFromIPPool": n["ippool"],
                                   "routes": [{"network": "0.0.0.0", "prefix": 0, "gateway": {"fromIPPool": n["ippool"]}}]}]},
            "services": {"dns": [net["dnsServer"]]}}})
    # The node carries its Modelplane pool label from the start.
    node_labels = {**k8s.get("nodeLabels", {}),
                   "modelplane.ai/pool": (spec.get("inference") or {}).get("nodePool", "gpu")}
    labels = "metal3.io/uuid={{ ds.meta_data.uuid }}" + "".join(
        f",{k}={v}" for k, v in sorted(node_labels.items()))
    reg = {"name": "{{ ds.meta_data.name }}", "taints": [], "kubeletExtraArgs": [{"name": "node-labels", "value": labels}]}
    cfg = {"initConfiguration": {"nodeRegistration": reg}, "joinConfiguration": {"controlPlane": {}, "nodeRegistration": reg}}
    access = spec.get("access")
    if access and access.get("sshAuthorizedKeys"):
        cfg["users"] = [{"name": access.get("username", "metal3"), "sshAuthorizedKeys": access["sshAuthorizedKeys"],
                         "sudo": "ALL=(ALL) NOPASSWD:ALL", "shell": "/bin/bash"}]
    gpu = spec.get("gpu")
    if gpu:
        q = shlex.quote
        stop = "metalplane: stopping before kubeadm:"

        def step(cmd, what):
            # Every step ends the boot script on failure, before kubeadm.
            return f"{cmd} || {{ echo {q(f'{stop} {what} failed')} >&2; exit 1; }}"

        cmds = [
            "systemctl enable --now containerd",
            step("printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > /etc/modprobe.d/blacklist-nouveau.conf",
                 "blacklisting nouveau"),
            "modprobe -r nouveau || true",
            step('if command -v apt-get >/dev/null 2>&1; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "linux-headers-$(uname -r)" gcc make dkms; else dnf install -y "kernel-devel-$(uname -r)" gcc make dkms; fi',
                 "installing the kernel headers, compiler and DKMS"),
            step(f"install -d -m 0700 {q('/var/lib/metalplane')} && curl -fsSL --retry 5 --retry-delay 5 -o {q(INSTALLER)} {q(gpu['driverInstallerURL'])}",
                 "downloading the GPU driver installer"),
        ]
        if gpu.get("driverInstallerChecksum"):
            line = q(f"{gpu['driverInstallerChecksum'].lower()}  {INSTALLER}")
            msg = q(f"{stop} the sha256 of the GPU driver installer does not match gpu.driverInstallerChecksum")
            cmds.append(f"echo {line} | sha256sum -c - || {{ rm -f {q(INSTALLER)}; echo {msg} >&2; exit 1; }}")
        cmds += [step(f"sh {q(INSTALLER)} --silent --dkms", "installing the GPU driver"),
                 step("modprobe nvidia", "loading the nvidia kernel module")]
        cfg["preKubeadmCommands"] = cmds
    out["kubeadmcontrolplane"] = obj(ns, "controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", n["cluster"], {
        "replicas": 1, "version": k8s["version"],
        "machineTemplate": {"spec": {
            "infrastructureRef": {"apiGroup": infra, "kind": "Metal3MachineTemplate", "name": n["mt"]},
            "deletion": {"nodeDrainTimeoutSeconds": 600, "nodeVolumeDetachTimeoutSeconds": 300}}},
        "remediation": {"maxRetry": 3, "retryPeriodSeconds": 300, "minHealthyPeriodSeconds": 3600},
        "kubeadmConfigSpec": cfg})
    reboot = f"{n['cluster']}-reboot"
    out["remediation-template"] = obj(ns, f"{infra}/v1beta2", "Metal3RemediationTemplate", reboot, {
        "template": {"spec": {"strategy": {"type": "Reboot", "retryLimit": 2, "timeoutSeconds": 600}}}})
    out["controlplane-health"] = obj(ns, "cluster.x-k8s.io/v1beta2", "MachineHealthCheck", f"{n['cluster']}-controlplane", {
        "clusterName": n["cluster"],
        "selector": {"matchLabels": {"cluster.x-k8s.io/control-plane-name": n["cluster"]}},
        "checks": {"nodeStartupTimeoutSeconds": 3600, "unhealthyNodeConditions": [
            {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300},
            {"type": "Ready", "status": "False", "timeoutSeconds": 300}]},
        "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": 1},
                        "templateRef": {"apiVersion": f"{infra}/v1beta2", "kind": "Metal3RemediationTemplate", "name": reboot}}})
    status = {"controlPlaneEndpoint": f"{net['nodeIP']}:6443", "kubeconfigSecret": n["kubeconfig"],
              "hostPool": host["pool"], "controlPlaneAvailable": False, "phase": "WaitingForHost", "nodes": "0/1"}
    return out, status


class Runner(grpcv1.FunctionRunnerServiceServicer):
    def __init__(self):
        self.log = logging.get_logger()

    async def RunFunction(self, req, _ctx):
        rsp = response.to(req)
        xr = resource.struct_to_dict(req.observed.composite.resource)
        out, status = compose(xr)
        for name, o in out.items():
            resource.update(rsp.desired.resources[name], o)
            rsp.desired.resources[name].ready = fnv1.READY_FALSE
        resource.update(rsp.desired.composite, {"status": status})
        return rsp


@click.command()
@sdkcli.standard_options
def cli(**kw):
    sdkcli.run(Runner(), **kw)


if __name__ == "__main__":
    cli()
