"""step5attn replay's checks of its paths (issue 9): --out naming the case
itself (same path, hard link, symlink) or a missing directory is refused
with exit 2 before the case is read, the case is left as it was; a device
file is refused without reading it; a good --out gets the outputs.

usage: cli_replay_test.py STEP5ATTN CASE"""

import os
import shutil
import subprocess
import sys
import tempfile


def run(tool, *args):
    p = subprocess.run([tool, "replay", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main(tool, source):
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        case = os.path.join(tmp, "case.safetensors")
        shutil.copyfile(source, case)
        original = open(case, "rb").read()
        os.link(case, os.path.join(tmp, "hard"))
        os.symlink(case, os.path.join(tmp, "soft"))
        for out in (case, os.path.join(tmp, "hard"), os.path.join(tmp, "soft"),
                    os.path.join(tmp, ".", "case.safetensors")):
            rc, stdout, err = run(tool, case, "--out", out)
            if rc != 2 or "is the case file itself" not in err or "case:" in stdout:
                failures.append(f"--out {out}: exit {rc} (expected 2), stderr {err!r}")
            if open(case, "rb").read() != original:
                failures.append(f"--out {out} changed the case file")
        missing = os.path.join(tmp, "no", "such", "dir", "out.safetensors")
        rc, stdout, err = run(tool, case, "--out", missing)
        if rc != 2 or "does not exist" not in err or "case:" in stdout:
            failures.append(f"--out in a missing directory: exit {rc}, stdout {stdout!r}, stderr {err!r}")
        rc, _, err = run(tool, case, "--out", tmp)
        if rc != 2 or "is a directory" not in err:
            failures.append(f"--out DIR: exit {rc}, stderr {err!r}")
        rc, _, err = run(tool, "/dev/zero")
        if rc != 1 or "not a regular file" not in err:
            failures.append(f"replay /dev/zero: exit {rc}, stderr {err!r}")
        rc, _, err = run(tool, case, "--max-memory", "0")
        if rc != 2 or "--max-memory" not in err:
            failures.append(f"--max-memory 0: exit {rc}, stderr {err!r}")
        out = os.path.join(tmp, "out.safetensors")
        rc, stdout, err = run(tool, case, "--out", out, "--check")
        if rc != 0 or not os.path.exists(out) or "ok: 0 of" not in stdout:
            failures.append(f"good --out: exit {rc}, stdout {stdout!r}, stderr {err!r}")
    for f in failures:
        print("FAIL:", f)
    print(f"cli replay: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
