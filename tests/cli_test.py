"""The step5attn command line as a new user meets it: every command's
--help works and documents every flag of its synopsis, the README shows
the same synopsis, bad usage exits 2, and a command that needs a GPU exits
3 saying what is missing where the cuda backend cannot run.

usage: cli_test.py STEP5ATTN README"""

import re
import subprocess
import sys


def run(tool, *args):
    p = subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def main(tool, readme_path):
    failures = []
    readme = open(readme_path, encoding="utf-8").read()
    rc, usage, _ = run(tool, "--help")
    if rc != 0:
        failures.append(f"--help: exit {rc}")
    synopses = re.findall(r"^  (step5attn (\w+).*)$", usage, re.M)
    if len(synopses) < 5:
        failures.append(f"--help lists {len(synopses)} commands, expected 5")
    for line, command in synopses:
        if line not in readme:
            failures.append(f"README does not show the synopsis '{line}'")
        rc, text, _ = run(tool, command, "--help")
        if rc != 0 or not text.startswith(f"usage: {line}\n"):
            failures.append(f"{command} --help: exit {rc}, first line {text.splitlines()[:1]}")
        for flag in re.findall(r"--[a-z-]+", line):
            if not re.search(rf"^  {flag}\b.*\S", text, re.M):
                failures.append(f"{command} --help does not document {flag}")
        rc, _, err = run(tool, command, "--no-such-flag")
        if rc != 2 or "unknown option '--no-such-flag'" not in err:
            failures.append(f"{command} --no-such-flag: exit {rc} (expected 2), stderr {err!r}")

    rc, version, _ = run(tool, "version")
    cuda = re.search(r"^cuda: (.*)$", version, re.M)
    if rc != 0 or not cuda:
        failures.append(f"version: exit {rc}, no 'cuda:' line in {version!r}")
    elif cuda.group(1).startswith("can run here"):
        print("SKIPPED the exit-3 checks: the cuda backend can run here")
    else:
        for args in (["check", "--quick"], ["bench", "--check-only"], ["demo", "--device", "cuda"]):
            rc, _, err = run(tool, *args)
            if rc != 3 or "cannot run here" not in err or "cuda" not in err:
                failures.append(f"{' '.join(args)}: exit {rc} (expected 3), stderr {err!r}")

    for f in failures:
        print("FAIL:", f)
    print(f"cli: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
