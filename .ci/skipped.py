"""Print the test cases a JUnit XML file says were skipped, each with its reason, so a
test that CI skipped (a tool missing on the machine, a time limit) is in every CI log,
never silent. The first line, `skipped: N of M tests`, is the one every issue's closing
note quotes.

usage: python .ci/skipped.py artifacts/junit.xml
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def skipped(path: str) -> tuple[int, list[tuple[str, str]]]:
    """(how many test cases, [(test, reason)] of those skipped), in file order."""
    root = ET.parse(path).getroot()
    cases = list(root.iter("testcase"))
    found = []
    for case in cases:
        mark = case.find("skipped")
        if mark is not None:
            reason = " ".join((mark.get("message") or mark.text or "no reason given").split())
            found.append((f"{case.get('classname')}::{case.get('name')}", reason))
    return len(cases), found


def main(path: str) -> None:
    try:
        total, found = skipped(path)
    except (OSError, ET.ParseError) as exc:
        print(f"skipped: cannot read {path}: {exc}")
        return
    print(f"skipped: {len(found)} of {total} tests" + (":" if found else ""))
    for name, reason in found:
        print(f"  {name}: {reason}")


if __name__ == "__main__":
    main(sys.argv[1])
