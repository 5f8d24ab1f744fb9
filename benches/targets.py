# Which targets of issue 13 this run meets, from its own figures (benches/run.sh prints them).
import json, pathlib
rows = json.loads(pathlib.Path("target/loadgen.json").read_text())
crit = {}
for est in pathlib.Path("target/criterion/function").glob("*/new/estimates.json"):
    name = json.loads((est.parent / "benchmark.json").read_text())["function_id"]
    crit[name] = json.loads(est.read_text())["median"]["point_estimate"] / 1000
def row(server, conc=1, nodes=0):
    return next(r for r in rows if r["server"] == server and r["concurrency"] == conc and r["nodes"] == nodes)
ours, echo, canned = row("metalplane"), row("floor:echo-rust-sdk"), row("floor:canned-response")
compose = crit["compose: built-in example"]
def ok(b): return "met" if b else "missed"
print("| target (issue 13) | measured | |")
print("|---|---:|---|")
for peer, want in (("python-sdk", 20), ("kcl-in-python", 100)):
    x = row(peer)["cpu_per_req_us"] / ours["cpu_per_req_us"]
    print(f"| server CPU/req >= {want}x below {peer} | {x:.1f}x ({row(peer)['cpu_per_req_us']:.0f} vs {ours['cpu_per_req_us']:.0f} µs) | {ok(x >= want)} |")
gap = ours["p50_us"] - echo["p50_us"]
print(f"| p50(ours) - p50(echo) <= 2 x compose median ({2*compose:.0f} µs), concurrency 1 | {gap:.0f} µs | {ok(gap <= 2*compose)} |")
print(f"| of it, the response's bytes: p50(canned) - p50(echo) | {canned['p50_us'] - echo['p50_us']:.0f} µs | same 5.4 KB answer, nothing composed |")
comp = ours["p50_us"] - canned["p50_us"]
print(f"| of it, composing: p50(ours) - p50(canned) | {comp:.0f} µs | {comp/compose:.1f} x compose median |")
print(f"| the floor: the Rust SDK echo's CPU/req (16 B answer) | {echo['cpu_per_req_us']:.0f} µs | python-sdk / echo = {row('python-sdk')['cpu_per_req_us'] / echo['cpu_per_req_us']:.1f}x |")
scale = sorted((r for r in rows if r["server"] == "metalplane" and r["nodes"]), key=lambda r: r["nodes"])
if len(scale) >= 2:
    a, b = scale[-2], scale[-1]
    growth = (b["cpu_per_req_us"] / a["cpu_per_req_us"]) / (b["nodes"] / a["nodes"])
    print(f"| linear growth with fleet size: (CPU/req ratio) / (node ratio), {a['nodes']} -> {b['nodes']} nodes | {growth:.2f} | {ok(growth <= 1.1)} |")
