"""Drives one server through real Ironic as BMO would, with the lab's fake
agent as its ramdisk: enroll (redfish driver, iPXE boot, agent inspection,
direct deploy), manage, inspect, provide (automated cleaning), deploy an
image with a config drive, undeploy (cleaning again). Then a deploy of an
image the server cannot download, which must fail with Ironic's message.

Prints one line per phase, `phase=<name> seconds=<n> state=<provision
state>`, and `inventory=<json>` for the inspection data; exits 1 at the
first phase that ends in another state.

Usage: ironic_cycle.py IRONIC_URL REDFISH_URL SYSTEM_UUID MAC IMAGE_URL SHA256
"""

import json
import sys
import time
import urllib.error
import urllib.request

API, REDFISH, SYSTEM, MAC, IMAGE, SHA = sys.argv[1:7]
VERSION = "1.89"  # what BMO v0.13 requires at least


def req(method, path, body=None):
    r = urllib.request.Request(
        API + path, method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json",
                 "X-OpenStack-Ironic-API-Version": VERSION})
    try:
        with urllib.request.urlopen(r, timeout=30) as rsp:
            raw = rsp.read()
            return rsp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def must(status, body, what):
    if status >= 300:
        print(f"error={what}: {status} {body}")
        sys.exit(1)
    return body


def ready(url, secs=90):
    t = time.time()
    while time.time() - t < secs:
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except Exception:
            time.sleep(0.5)
    print(f"error={url} never answered")
    sys.exit(1)


ready(API + "/v1/")
ready(REDFISH + "/redfish/v1/Systems")
node = must(*req("POST", "/v1/nodes", {
    "name": "lab-ironic-1", "driver": "redfish",
    "boot_interface": "ipxe", "inspect_interface": "agent", "deploy_interface": "direct",
    "driver_info": {
        "redfish_address": REDFISH,
        "redfish_system_id": f"/redfish/v1/Systems/{SYSTEM}",
        "redfish_username": "admin", "redfish_password": "password",
        "deploy_kernel": f"{IMAGE.rsplit('/', 1)[0]}/ipa.kernel",
        "deploy_ramdisk": f"{IMAGE.rsplit('/', 1)[0]}/ipa.initramfs",
    }}), "enroll")["uuid"]
must(*req("POST", "/v1/ports", {"node_uuid": node, "address": MAC, "pxe_enabled": True}), "port")


def phase(name, target, done, secs, extra=None):
    body = {"target": target}
    body.update(extra or {})
    must(*req("PUT", f"/v1/nodes/{node}/states/provision", body), name)
    t = time.time()
    while time.time() - t < secs:
        _, n = req("GET", f"/v1/nodes/{node}")
        if n["provision_state"] in done:
            err = (n.get("last_error") or "").replace("\n", " ")
            print(f"phase={name} seconds={time.time() - t:.1f} state={n['provision_state']} "
                  f"power={n['power_state']} error={json.dumps(err)}")
            return n
        time.sleep(0.5)
    print(f"phase={name} timeout after {secs} s: {n['provision_state']}")
    sys.exit(1)


def expect(n, state):
    if n["provision_state"] != state:
        sys.exit(1)


expect(phase("manage", "manage", ["manageable", "enroll"], 60), "manageable")
expect(phase("inspect", "inspect", ["manageable", "inspect failed"], 180), "manageable")
_, inv = req("GET", f"/v1/nodes/{node}/inventory")
print("inventory=" + json.dumps(inv["inventory"]))
expect(phase("clean", "provide", ["available", "clean failed"], 180), "available")
info = {"image_source": IMAGE, "image_os_hash_algo": "sha256", "image_os_hash_value": SHA,
        "image_disk_format": "raw"}
must(*req("PATCH", f"/v1/nodes/{node}", [{"op": "add", "path": "/instance_info", "value": info}]),
     "instance_info")
configdrive = {"user_data": "#cloud-config\nhostname: lab-ironic-1\n",
               "meta_data": {"uuid": SYSTEM, "name": "lab-ironic-1"}}
expect(phase("deploy", "active", ["active", "deploy failed"], 240, {"configdrive": configdrive}),
       "active")
expect(phase("undeploy", "deleted", ["available", "clean failed", "error"], 240), "available")
# An image the server cannot download: Ironic's own failure, in its words.
info["image_source"] = IMAGE + ".missing"
must(*req("PATCH", f"/v1/nodes/{node}", [{"op": "add", "path": "/instance_info", "value": info}]),
     "instance_info")
phase("bad-image", "active", ["active", "deploy failed"], 240, {"configdrive": configdrive})
