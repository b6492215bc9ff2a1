"""The kernel launches of each forward call, without a GPU: a forward's
host time is almost all CUDA driver time per launch (docs/performance.md,
"Host time per forward"), so the launch count is its budget. Runs
`step5attn bench --no-check` against the stand-in CUDA runtime of
bench/host_work (launches do nothing; the events' "elapsed ms" is the
number of launches between them, so each row's ms column is its launches
per forward) and compares the layer rows of its JSON with the counts the
design gives.

usage: launch_budget_test.py STEP5ATTN STANDIN_DIR"""

import json
import os
import subprocess
import sys
import tempfile

FILTER = "decode ctx 128K b32,verify ctx 128K b32,bf16 decode ctx 1024K b128"

K, M = 1024, 1024 * 1024

# (layer, phase, context, batch) -> launches per forward, bf16 and fp8 alike.
EXPECTED = {
    # indexer, select (with the K/V write, summaries and ring write folded
    # in), attention
    ("csa", "decode", 128 * K, 32): 3,
    # the cache update on its own (a verify row may score a region an
    # earlier row of its request closes), indexer, select, attention
    ("csa", "verify", 128 * K, 32): 4,
    # 128 x 8 x 131,072 fp32 scores (537 MB) exceed max_score_bytes (256 MB):
    # two score chunks of 64 rows, each with indexer, select and attention,
    # after the cache update on its own
    ("csa", "decode", M, 128): 7,
    # attention with the K/V write folded in
    ("swa", "decode", 128 * K, 32): 1,
    ("swa", "decode", M, 128): 1,
    # the K/V write on its own (rows of a request read each other's keys),
    # attention
    ("swa", "verify", 128 * K, 32): 2,
}


def main(tool, standin_dir):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = standin_dir + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        p = subprocess.run([tool, "bench", "--no-check", "--filter", FILTER, "--json", out],
                           capture_output=True, text=True, timeout=600, env=env)
        rows = []
        if os.path.exists(out):
            with open(out) as f:
                rows = json.load(f)["results"]
    failures = []
    if p.returncode != 0:
        failures.append(f"bench exited {p.returncode}: {p.stderr.strip()[-400:]}")
    header = p.stdout.splitlines()[:1]
    if not header or "cudart stand-in" not in header[0]:
        failures.append(f"bench did not run on the stand-in runtime: first line {header}")
    seen = {}
    for r in rows:
        key = (r["layer"], r["phase"], r["context"], r["batch"])
        if r["op"] != "layer" or key not in EXPECTED:
            continue
        launches = r["ms"]
        seen[key] = seen.get(key, 0) + 1
        if launches != EXPECTED[key]:
            failures.append(f"{r['layer']} {r['kv']} {r['phase']} ctx {r['context']} "
                            f"b{r['batch']} {r['regime']}: {launches:g} launches per forward, "
                            f"expected {EXPECTED[key]}")
    for key in EXPECTED:
        if key not in seen:
            failures.append(f"no bench row for {key}")
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"launch budget: {sum(seen.values())} rows as expected")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
