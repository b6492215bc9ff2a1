"""Prints why each skipped CTest test was skipped, from `ctest --output-junit`:
ctest itself lists skipped tests without the reason GTEST_SKIP gave.

usage: ctest_skips.py JUNIT_XML"""

import sys
import xml.etree.ElementTree as ET


def reason(output: str) -> str:
    """GoogleTest prints 'file:line: Skipped' and then the message."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.endswith(": Skipped"):
            message = []
            for follow in lines[i + 1:]:
                if follow.startswith("[  SKIPPED ]"):
                    break
                message.append(follow.strip())
            return " ".join(m for m in message if m) or "(no message)"
    return "(no message)"


def main(path: str) -> int:
    skipped = 0
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is None:
            continue
        skipped += 1
        out = case.find("system-out")
        print(f"  skipped {case.get('name')}: {reason(out.text if out is not None else '')}")
    print(f"{skipped} tests skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
