#!/usr/bin/env python3
"""Who makes the lab API server's requests: the lab's audit log (every
request, with its user) summed over a time window by user, verb and
resource, per minute and per MetalCluster.

`cargo xtask lab perf` prints each steady-state window's span in UTC; pass
it here to see whose the window's requests are:

    benches/audit_by_actor.py --from 07:41:55 --to 07:43:55 --xrs 20 \
        [--base-from HH:MM:SS --base-to HH:MM:SS]

The API server's own metrics (what `lab perf` reports) count the same
requests without the user; this splits them. Times are UTC on the day of
the newest audit file.
"""

import argparse
import collections
import glob
import json
import os
import sys

TARGET = os.path.join(os.path.dirname(__file__), "..", "target")
# The running lab's logs, else the last one's (`lab down` keeps them).
LOGS = next(
    (d for d in (os.path.join(TARGET, "lab", "logs"), os.path.join(TARGET, "lab-logs"))
     if os.path.isdir(d)),
    os.path.join(TARGET, "lab", "logs"),
)


def actor(user):
    """A short name for a request's user (ServiceAccounts by name)."""
    return user.removeprefix("system:serviceaccount:")


def counts(files, day, start, end):
    """(user, verb, resource) -> requests received in [start, end)."""
    lo, hi = f"{day}T{start}", f"{day}T{end}"
    out = collections.Counter()
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                # Cheap filters before parsing: each request's last stage.
                if '"stage":"ResponseComplete"' not in line:
                    continue
                e = json.loads(line)
                t = e.get("requestReceivedTimestamp", "")
                if not lo <= t < hi:
                    continue
                o = e.get("objectRef", {})
                res = o.get("resource", "")
                if o.get("subresource"):
                    res += "/" + o["subresource"]
                out[(actor(e["user"]["username"]), e["verb"], res)] += 1
    return out


def minutes(start, end):
    def s(t):
        h, m, sec = (float(x) for x in t.split(":"))
        return h * 3600 + m * 60 + sec

    return max(s(end) - s(start), 1.0) / 60.0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="start", required=True, help="HH:MM:SS UTC")
    p.add_argument("--to", dest="end", required=True, help="HH:MM:SS UTC")
    p.add_argument("--xrs", type=int, default=1, help="MetalClusters in the window")
    p.add_argument("--base-from", help="baseline window start (no MetalCluster)")
    p.add_argument("--base-to", help="baseline window end")
    p.add_argument("--logs", default=LOGS, help="the lab's log folder")
    p.add_argument("--min", type=float, default=0.1, help="smallest per-XR rate shown")
    a = p.parse_args()

    files = sorted(glob.glob(os.path.join(a.logs, "audit*.log")), key=os.path.getmtime)
    if not files:
        sys.exit(f"no audit log under {a.logs} (is this the lab's log folder?)")
    day = None
    with open(files[-1], encoding="utf-8") as f:
        for line in f:
            day = json.loads(line).get("requestReceivedTimestamp", "")[:10]
            break
    win = counts(files, day, a.start, a.end)
    wmin = minutes(a.start, a.end)
    base, bmin = collections.Counter(), 1.0
    if a.base_from and a.base_to:
        base = counts(files, day, a.base_from, a.base_to)
        bmin = minutes(a.base_from, a.base_to)

    rows = []
    for key in set(win) | set(base):
        rate = win[key] / wmin
        extra = (rate - base[key] / bmin) / a.xrs
        rows.append((extra, rate, key))
    rows.sort(reverse=True)
    total = sum(win.values()) / wmin
    btotal = sum(base.values()) / bmin
    print(f"Audit log, {a.start}-{a.end} UTC ({wmin:.1f} min), {a.xrs} MetalClusters: "
          f"{total:.1f} requests/min, {(total - btotal) / a.xrs:.2f} per MetalCluster over the baseline.\n")
    print("| user | verb | resource | per minute | per MetalCluster per minute |")
    print("|---|---|---|---:|---:|")
    for extra, rate, (user, verb, res) in rows:
        if abs(extra) >= a.min:
            print(f"| {user} | {verb} | {res} | {rate:.1f} | {extra:.2f} |")


if __name__ == "__main__":
    main()
