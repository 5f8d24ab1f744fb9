#!/usr/bin/env python3
"""The lab's stand-in for ironic-python-agent (IPA) on simulated servers.

sushy-tools' fake driver keeps each server's power state and tells this
program (EXTERNAL_NOTIFICATION_URL) of every change. When a server powers
on from anything but its disk, the "ramdisk boots": after a boot delay the
agent sends its hardware inventory to Ironic's inspection endpoint, looks
itself up, heartbeats with its callback URL and serves Ironic's agent
commands (clean and deploy steps, bootloader, power off, logs) until the
server powers off. Writing the image downloads it from the image server and
checks its checksum, so a missing or wrong image fails as a real agent's
would.

Standard library only: it runs with any Python 3.11.
"""

import argparse
import base64
import hashlib
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
import uuid as uuidlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

LOG = logging.getLogger("fake-agent")

# The Ironic API version the agent speaks: agent tokens (1.62) and the
# verify-ca field (1.68) are the newest it needs.
API_VERSION = "1.68"
AGENT_VERSION = "10.0.0"
# Inspection calls a refused agent makes with its heartbeats.
INSPECT_TRIES = 6

CLEAN_STEPS = [
    {"step": "erase_devices_metadata", "priority": 99, "interface": "deploy",
     "reboot_requested": False, "abortable": True},
    {"step": "erase_devices", "priority": 10, "interface": "deploy",
     "reboot_requested": False, "abortable": True},
]
DEPLOY_STEPS = [
    {"step": "write_image", "priority": 80, "interface": "deploy",
     "reboot_requested": False},
]
HW_VERSION = {"generic_hardware_manager": "1.2"}


class Options:
    ironic = "http://127.0.0.1:6385"
    redfish = "http://127.0.0.1:8000"
    callback = "http://127.0.0.1:9999"
    boot_delay = 15.0
    step_delay = 2.0
    disk_gib = 500


def ironic(method, path, body=None, timeout=30, version=API_VERSION):
    """One request to Ironic's API; (status, parsed body)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        Options.ironic + path, data=data, method=method,
        headers={"Content-Type": "application/json",
                 "Accept": "application/json",
                 "X-OpenStack-Ironic-API-Version": version})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as rsp:
            raw = rsp.read()
            return rsp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def inventory(system):
    """What a real agent reports: the server's NICs under the names the
    MetalClusters use, CPU, memory, one disk, vendor and boot mode."""
    nics = system.get("nics") or []
    interfaces = [{
        "name": nic.get("name") or f"eth{i}",
        "mac_address": nic["mac"],
        "ipv4_address": nic.get("ip"),
        "has_carrier": True,
        "speed_mbps": 25000,
        "vendor": "0x15b3",
        "product": "0x1017",
        "lldp": None,
        "client_id": None,
    } for i, nic in enumerate(nics)]
    gib = 1024 ** 3
    return {
        "interfaces": interfaces,
        "cpu": {"model_name": "Intel(R) Xeon(R) Gold 6430", "frequency": "2100",
                "count": 64, "architecture": "x86_64",
                "flags": ["fpu", "vmx", "sse2", "avx2"]},
        "memory": {"total": 512 * gib, "physical_mb": 512 * 1024},
        "disks": [{"name": "/dev/sda", "model": "lab disk", "size": Options.disk_gib * gib,
                   "rotational": False, "vendor": "lab", "serial": system["uuid"][:8],
                   "wwn": None, "hctl": "0:0:0:0", "by_path": "/dev/disk/by-path/pci-0000:00:01.0"}],
        "system_vendor": {"product_name": system.get("name", "lab"),
                          "serial_number": system["uuid"], "manufacturer": "Lab"},
        "boot": {"current_boot_mode": "uefi", "pxe_interface": nics[0]["mac"] if nics else None},
        "bmc_address": "127.0.0.1",
        "hostname": system.get("name", "localhost"),
    }


class Result:
    """An agent command's result, as Ironic polls it."""

    def __init__(self, name, params):
        self.id = str(uuidlib.uuid4())
        self.name = name
        self.params = params
        self.status = "RUNNING"
        self.error = None
        self.result = None

    def finish(self, result=None, error=None):
        if error is None:
            self.status, self.result = "SUCCEEDED", result
        else:
            self.status = "FAILED"
            self.error = {"type": "CommandExecutionError", "code": 500,
                          "message": "Command execution failed", "details": str(error)}

    def view(self):
        return {"id": self.id, "command_name": self.name, "command_params": self.params,
                "command_status": self.status, "command_error": self.error,
                "command_result": self.result}


class Agent:
    """The ramdisk of one server, from power on to power off."""

    def __init__(self, system):
        self.system = system
        self.uuid = system["uuid"]
        self.node = None
        self.token = None
        self.timeout = 30
        self.results = {}
        self.order = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.beat_now = threading.Event()
        self.inspected = False
        self.inspect_tries = 0

    def boot(self):
        # Past sushy's power delay (1-11 s), so Ironic sees the power on
        # before the agent calls.
        if self.stopped.wait(Options.boot_delay):
            return
        if not self.inspect():
            self.lookup()
        self.heartbeats()

    def inspect(self):
        """Sends the inventory to Ironic's own inspection endpoint (API
        1.84). It is refused (404) unless the node waits for inspection,
        which is no error for a boot to clean or deploy, and (409) while
        Ironic still holds the node: the power on it waited for can land
        just before the agent calls. A refused agent tries again with its
        next heartbeats, as Ironic's agent retries its inspection call."""
        status, body = ironic("POST", "/v1/continue_inspection",
                              {"inventory": inventory(self.system)}, version="1.84")
        self.inspect_tries += 1
        LOG.info("%s: inspection data sent: %s %s", self.system.get("name"), status,
                 body if status >= 400 else "")
        if status >= 300:
            return False
        self.inspected = True
        # Accepted, Ironic answers as a lookup would (the token for fast
        # track); a token is handed out once, so an agent that looked up
        # already keeps its own.
        return self.take(body)

    def take(self, body):
        """Keeps the node and agent token of a lookup-like answer."""
        token = ((body or {}).get("config") or {}).get("agent_token")
        if not token or token == "******" or "node" not in body:
            return False
        self.node, self.token = body["node"], token
        self.timeout = int(body["config"].get("heartbeat_timeout", 30))
        LOG.info("%s: node %s, token received", self.system.get("name"), self.node["uuid"])
        return True

    def lookup(self):
        """Looks up until Ironic hands out an agent token: none is issued
        while inspection data is being processed."""
        name = self.system.get("name")
        mac = self.system["nics"][0]["mac"]
        while not self.stopped.is_set():
            status, body = ironic("GET", f"/v1/lookup?addresses={mac}")
            if status == 200 and self.take(body):
                return
            LOG.info("%s: no lookup yet: %s %s", name, status,
                     body if status != 200 else "no token")
            self.stopped.wait(3)

    def heartbeats(self):
        while not self.stopped.is_set():
            if not self.inspected and self.inspect_tries < INSPECT_TRIES:
                self.inspect()
            body = {"callback_url": f"{Options.callback}/{self.uuid}",
                    "agent_version": AGENT_VERSION}
            if self.token:
                body["agent_token"] = self.token
            status, rsp = ironic("POST", f"/v1/heartbeat/{self.node['uuid']}", body)
            if status == 404:
                LOG.info("%s: node gone, agent stops", self.system.get("name"))
                return
            if status == 400 and "token" in str(rsp):
                # Ironic dropped the token (a new provisioning operation).
                self.lookup()
                continue
            if status != 202:
                LOG.info("%s: heartbeat %s %s", self.system.get("name"), status, rsp)
            # Ironic's own agent: 0.3-0.6 of the timeout, sooner after a
            # command finished.
            wait = self.timeout * random.uniform(0.3, 0.6)
            self.beat_now.wait(min(wait, 10))
            self.beat_now.clear()

    def run(self, name, params):
        with self.lock:
            last = self.results[self.order[-1]] if self.order else None
            if last and last.status == "RUNNING":
                raise Busy(last.name)
            # Results carry the command without its extension, as IPA's
            # do: Ironic matches "execute_clean_step", not "clean.…".
            r = Result(name.split(".", 1)[-1], params)
            self.results[r.id] = r
            self.order.append(r.id)
        handler = COMMANDS.get(name)
        if handler is None:
            r.finish(error=f"unknown command {name}")
            return r
        sync, fn = handler
        if sync:
            try:
                r.finish(fn(self, **params))
            except Exception as e:  # the command's failure is its result
                r.finish(error=e)
            return r

        def work():
            if not self.stopped.wait(Options.step_delay):
                try:
                    r.finish(fn(self, **params))
                except Exception as e:
                    LOG.info("%s: %s failed: %s", self.system.get("name"), name, e)
                    r.finish(error=e)
            self.beat_now.set()
        threading.Thread(target=work, daemon=True).start()
        return r


class Busy(Exception):
    pass


def clean_steps(agent, node=None, ports=None, **_):
    return {"clean_steps": {"GenericHardwareManager": CLEAN_STEPS},
            "hardware_manager_version": HW_VERSION}


def clean_step(agent, step, node=None, ports=None, clean_version=None, **_):
    # The disks are only data here: the step is logged, as IPA logs it.
    LOG.info("%s: clean step %s done", agent.system.get("name"), step.get("step"))
    return {"clean_result": None, "clean_step": step}


def deploy_steps(agent, node=None, ports=None, **_):
    return {"deploy_steps": {"GenericHardwareManager": DEPLOY_STEPS},
            "hardware_manager_version": HW_VERSION}


def deploy_step(agent, step, node=None, ports=None, deploy_version=None, **kwargs):
    args = dict(kwargs)
    args.update(step.get("args") or {})
    if step.get("step") == "write_image":
        write_image(agent, args.get("image_info") or {}, args.get("configdrive"))
    return {"deploy_result": None, "deploy_step": step}


def write_image(agent, image_info, configdrive):
    """Downloads the image as the agent would and checks its checksum."""
    urls = image_info.get("urls") or []
    if not urls:
        raise ValueError("image_info has no urls")
    algo = image_info.get("os_hash_algo") or "md5"
    want = image_info.get("os_hash_value") or image_info.get("checksum")
    h = hashlib.new(algo)
    try:
        with urllib.request.urlopen(urls[0], timeout=60) as rsp:
            for chunk in iter(lambda: rsp.read(1 << 20), b""):
                h.update(chunk)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"Image download failed for {urls[0]}: HTTP {e.code}") from e
    if want and h.hexdigest() != want:
        raise RuntimeError(f"Image checksum mismatch for {urls[0]}: {algo} {h.hexdigest()} != {want}")
    LOG.info("%s: image %s written (%s ok), config drive %s",
             agent.system.get("name"), urls[0], algo,
             "present" if configdrive else "absent")


def nothing(agent, **_):
    return None


def partition_uuids(agent, **_):
    return {}


def power_off(agent, **_):
    """The agent's last act before an instance boots from disk: sushy's
    fake driver powers the server off."""
    url = f"{Options.redfish}/redfish/v1/Systems/{agent.uuid}/Actions/ComputerSystem.Reset"
    req = urllib.request.Request(url, data=json.dumps({"ResetType": "ForceOff"}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
    return None


def system_logs(agent, **_):
    return {"system_logs": base64.b64encode(b"").decode()}


# name -> (synchronous, handler)
COMMANDS = {
    "clean.get_clean_steps": (True, clean_steps),
    "clean.execute_clean_step": (False, clean_step),
    "deploy.get_deploy_steps": (True, deploy_steps),
    "deploy.execute_deploy_step": (False, deploy_step),
    "image.install_bootloader": (False, nothing),
    "standby.get_partition_uuids": (True, partition_uuids),
    "standby.power_off": (False, power_off),
    "standby.sync": (True, nothing),
    "log.collect_system_logs": (True, system_logs),
}

AGENTS = {}
AGENTS_LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        LOG.debug(fmt, *args)

    def reply(self, code, body=None):
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"null")

    def do_PUT(self):
        # sushy-tools' notification of a system's change.
        system = self.body() or {}
        pending = (system.get("pending_power") or {}).get("power_state") or ""
        with AGENTS_LOCK:
            running = AGENTS.pop(system.get("uuid"), None)
            if running is not None and (pending == "Off" or "Restart" in pending):
                running.stopped.set()
                LOG.info("%s powers off: the ramdisk stops", system.get("name"))
                running = None
            if running is not None:
                AGENTS[running.uuid] = running
            # Powering on, or a reset (which powers on again): the
            # ramdisk boots unless the server boots from its disk.
            elif (pending == "On" or "Restart" in pending) and system.get("boot_device") != "Hdd":
                agent = Agent(system)
                AGENTS[agent.uuid] = agent
                threading.Thread(target=agent.boot, daemon=True).start()
                LOG.info("%s powers on from %s: the ramdisk boots", system.get("name"),
                         system.get("boot_device"))
        self.reply(204)

    def agent(self):
        parts = urlparse(self.path).path.strip("/").split("/")
        with AGENTS_LOCK:
            return AGENTS.get(parts[0]), parts[1:]

    def do_GET(self):
        agent, rest = self.agent()
        if agent is None:
            return self.reply(404, {"message": "no agent"})
        if rest[:2] == ["v1", "commands"] and len(rest) == 2:
            return self.reply(200, {"commands": [agent.results[i].view() for i in agent.order]})
        if rest[:2] == ["v1", "commands"] and len(rest) == 3 and rest[2] in agent.results:
            return self.reply(200, agent.results[rest[2]].view())
        if rest in ([], ["v1"]):
            return self.reply(200, {"name": "lab fake agent", "version": AGENT_VERSION})
        self.reply(404, {"message": "not found"})

    def do_POST(self):
        agent, rest = self.agent()
        if agent is None or rest[:2] != ["v1", "commands"]:
            return self.reply(404, {"message": "no agent"})
        q = parse_qs(urlparse(self.path).query)
        token = (q.get("agent_token") or [None])[0]
        if agent.token and token != agent.token:
            return self.reply(401, {"message": "Token invalid."})
        body = self.body() or {}
        try:
            r = agent.run(body.get("name", ""), body.get("params") or {})
        except Busy as b:
            return self.reply(409, {"type": "AgentIsBusy", "code": 409,
                                    "message": "Agent is busy", "details": f"executing {b}"})
        self.reply(200, r.view())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", default="127.0.0.1:9999")
    p.add_argument("--ironic", default=Options.ironic)
    p.add_argument("--redfish", default=Options.redfish)
    p.add_argument("--boot-delay", type=float, default=Options.boot_delay)
    p.add_argument("--step-delay", type=float, default=Options.step_delay)
    p.add_argument("--debug", action="store_true", help="log every request served")
    a = p.parse_args()
    Options.ironic, Options.redfish = a.ironic.rstrip("/"), a.redfish.rstrip("/")
    Options.callback = f"http://{a.listen}"
    Options.boot_delay, Options.step_delay = a.boot_delay, a.step_delay
    logging.basicConfig(level=logging.DEBUG if a.debug else logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    host, port = a.listen.rsplit(":", 1)
    LOG.info("listening on %s, Ironic at %s", a.listen, Options.ironic)
    ThreadingHTTPServer((host, int(port)), Handler).serve_forever()


if __name__ == "__main__":
    main()
