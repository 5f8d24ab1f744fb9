#!/usr/bin/env bash
# One command for every benchmark: criterion (in process) and the load
# generator against the Python-SDK and KCL peers, side by side. Writes
# benches/results.md and prints it.
#   benches/run.sh            # COUNT=5000 requests per concurrency level
#   LAB=0 benches/run.sh      # without the lab figures (LAB_XRS=20 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${COUNT:-5000}"
VENV=.cache/bench-venv
if ! "$VENV/bin/python" -c "import crossplane.function, kcl_lib" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    crossplane-function-sdk-python==0.15.1 kcl-lib==0.13.2
fi
cargo build --release --locked -p function-metalplane -p metalplane-bench

# In process: criterion, with response::to as the floor measured in the same run.
cargo bench --locked -p metalplane-bench --bench compose -- --noplot >/dev/null
criterion=$(python3 - <<'PY'
import json, pathlib
root = pathlib.Path("target/criterion/function")
rows = []
for est in sorted(root.glob("*/new/estimates.json")):
    bench = json.loads((est.parent / "benchmark.json").read_text())["function_id"]
    e = json.loads(est.read_text())
    rows.append((bench, e["median"]["point_estimate"], e["mean"]["point_estimate"]))
floor = next(m for b, m, _ in rows if b.startswith("floor"))
print("| benchmark | median | mean | median / floor |")
print("|---|---:|---:|---:|")
for b, med, mean in rows:
    print(f"| {b} | {med/1000:.1f} µs | {mean/1000:.1f} µs | {med/floor:.1f}x |")
PY
)
fleet=$(python3 - <<'PY'
import json, pathlib
root = pathlib.Path("target/criterion/fleet")
rows = []
for est in sorted(root.glob("*/new/estimates.json")):
    bench = json.loads((est.parent / "benchmark.json").read_text())["function_id"]
    n = int(bench.split("=")[1])
    rows.append((n, json.loads(est.read_text())["median"]["point_estimate"]))
rows.sort()
one = rows[0][1]
print("| nodes | median | per node | median / 1 node |")
print("|---:|---:|---:|---:|")
for n, med in rows:
    print(f"| {n} | {med/1000:.1f} µs | {med/1000/n:.1f} µs | {med/one:.1f}x |")
PY
)

PY="$VENV/bin/python"
./target/release/loadgen --count "$COUNT" --concurrency 1,4,16 --scale 1,10,50 \
  --server 'metalplane=target/release/function-metalplane --insecure --address 127.0.0.1:{port} --metrics-address ""' \
  --server "python-sdk=$PY benches/peers/python_peer.py --insecure --address 127.0.0.1:{port}" \
  --server "kcl-in-python=$PY benches/peers/kcl_peer.py --insecure --address 127.0.0.1:{port}" \
  --floor 'floor:echo-rust-sdk=target/release/echo-fn --insecure --address 127.0.0.1:{port} --metrics-address ""' \
  --floor 'floor:canned-response=target/release/echo-fn --canned --insecure --address 127.0.0.1:{port} --metrics-address ""' \
  --results target/loadgen.md --json target/loadgen.json
# The issue's targets, from this run's figures only.
targets=$(python3 benches/targets.py)

# In the lab: the real controllers, one and then LAB_XRS MetalClusters
# (stages, comma-separated: 20 then 100 by default, about 80 minutes)
# (LAB=0 skips it; the lab needs root for its network namespace). Each
# steady-state window is LAB_WINDOW (600 s: the 10-minute polls of
# Crossplane's Usages and CAPM3's resync averaged, not caught or missed).
lab=""
if [ "${LAB:-1}" != 0 ]; then
  cargo xtask lab up
  cargo xtask lab perf --xrs "${LAB_XRS:-20,100}" --window "${LAB_WINDOW:-600}" --out target/lab-perf.md
  cargo xtask lab down
  lab=$(cat target/lab-perf.md)
fi

{
  echo "# MetalPlane benchmarks"
  echo
  echo "Run: $(date -u +%Y-%m-%dT%H:%MZ) by \`benches/run.sh\` (COUNT=$COUNT)."
  echo
  echo "## In process (criterion)"
  echo
  echo "$criterion"
  echo
  echo "### Compose cost by cluster size (every host claimed)"
  echo
  echo "$fleet"
  echo
  echo "## Over gRPC on loopback (loadgen)"
  echo
  cat target/loadgen.md
  echo
  echo "## Targets"
  echo
  echo "$targets"
  if [ -n "$lab" ]; then
    echo
    echo "## In the lab (cargo xtask lab perf)"
    echo
    echo "$lab"
  fi
} > benches/results.md
cat benches/results.md
