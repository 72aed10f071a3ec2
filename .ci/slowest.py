"""Print the slowest test cases of a JUnit XML file and the tests' total, so every CI log
(and every closing note that quotes one) says where CI's time went.

usage: python .ci/slowest.py artifacts/junit.xml [N]
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def main(path: str, n: int = 20) -> None:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        print(f"slowest: cannot read {path}: {exc}")
        return
    cases = [(float(c.get("time") or 0), f"{c.get('classname')}::{c.get('name')}")
             for c in root.iter("testcase")]
    cases.sort(reverse=True)
    print(f"the {min(n, len(cases))} slowest of {len(cases)} tests:")
    for seconds, name in cases[:n]:
        print(f"{seconds:9.1f} s  {name}")
    # Under pytest-xdist the cases overlap in time: their sum is more than the wall time.
    print(f"sum of all tests' times: {sum(s for s, _ in cases):.0f} s")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
