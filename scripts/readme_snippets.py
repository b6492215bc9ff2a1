"""Writes the README's tested code blocks to files, so CI compiles and runs
exactly what the README shows. A block is tested when the line before its
opening fence is `<!-- test: NAME -->`; it is written to OUT_DIR/NAME.

usage: readme_snippets.py README OUT_DIR"""

import os
import re
import sys


def main(readme: str, out_dir: str) -> int:
    text = open(readme, encoding="utf-8").read()
    blocks = re.findall(r"<!-- test: ([\w.]+) -->\n```\w*\n(.*?)\n```", text, re.S)
    if not blocks:
        print(f"{readme}: no tested code blocks", file=sys.stderr)
        return 1
    os.makedirs(out_dir, exist_ok=True)
    for name, code in blocks:
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write(code + "\n")
        print(f"{readme}: {name} ({code.count(chr(10)) + 1} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
