"""The kernel launches of each forward call, without a GPU: a forward's
host time is almost all CUDA driver time per launch (docs/performance.md,
"Host time per forward"), so the launch count is its budget. Runs
`step5attn bench --no-check` against the stand-in CUDA runtime of
bench/host_work (launches do nothing; the events' "elapsed ms" is the
number of launches between them, so each row's ms column is its launches
per forward) and compares the layer rows with the counts the design gives.

usage: launch_budget_test.py STEP5ATTN STANDIN_DIR"""

import os
import re
import subprocess
import sys

FILTER = "decode ctx 128K b32,verify ctx 128K b32,bf16 decode ctx 1024K b128"

# (layer, phase, shape) -> launches per forward, bf16 and fp8 alike.
EXPECTED = {
    # indexer, select (with the K/V write, summaries and ring write folded
    # in), attention
    ("csa", "decode", "ctx 128K b32"): 3,
    # the cache update on its own (a verify row may score a region an
    # earlier row of its request closes), indexer, select, attention
    ("csa", "verify", "ctx 128K b32"): 4,
    # 128 x 8 x 131,072 fp32 scores (537 MB) exceed max_score_bytes (256 MB):
    # two score chunks of 64 rows, each with indexer, select and attention,
    # after the cache update on its own
    ("csa", "decode", "ctx 1024K b128"): 7,
    # attention with the K/V write folded in
    ("swa", "decode", "ctx 128K b32"): 1,
    ("swa", "decode", "ctx 1024K b128"): 1,
    # the K/V write on its own (rows of a request read each other's keys),
    # attention
    ("swa", "verify", "ctx 128K b32"): 2,
}

ROW = re.compile(
    r"^\s+(csa|swa) layer (\w+) (decode|verify) (ctx \d+K b\d+) q\d+ (\w+)\s+([0-9.]+) ms ")


def main(tool, standin_dir):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = standin_dir + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    p = subprocess.run([tool, "bench", "--no-check", "--filter", FILTER],
                       capture_output=True, text=True, timeout=600, env=env)
    failures = []
    if p.returncode != 0:
        failures.append(f"bench exited {p.returncode}: {p.stderr.strip()[-400:]}")
    header = p.stdout.splitlines()[:1]
    if not header or "cudart stand-in" not in header[0]:
        failures.append(f"bench did not run on the stand-in runtime: first line {header}")
    seen = {}
    for line in p.stdout.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        layer, kv, phase, shape, regime, ms = m.groups()
        key = (layer, phase, shape)
        if key not in EXPECTED:
            continue
        launches = float(ms)
        seen[key] = seen.get(key, 0) + 1
        if launches != EXPECTED[key]:
            failures.append(f"{layer} {kv} {phase} {shape} {regime}: {launches:g} launches "
                            f"per forward, expected {EXPECTED[key]}")
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
