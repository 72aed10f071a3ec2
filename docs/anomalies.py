"""Write the anomaly parts of docs/checkers.md from the registry (checkers/registry.py,
which gathers the definitions each family module holds).

    python docs/anomalies.py          # rewrite them in docs/checkers.md
    python docs/anomalies.py --check  # exit 1 if they are out of date (tests/test_anomaly.py)

A generated part sits between `<!-- anomalies: KEY -->` and `<!-- /anomalies -->`: KEY
`table` is the table of every type, its severity and family; KEY a family's name is the
definitions of that family's types. The prose around them is written by hand.
"""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from onceproof.checkers import anomaly, registry

DOC = Path(__file__).resolve().parent / "checkers.md"
_PART = re.compile(r"(<!-- anomalies: (\w+) -->\n)(.*?)(<!-- /anomalies -->)", re.S)


def table() -> str:
    families = list(dict.fromkeys(a.family for a in registry.REGISTRY))
    rows = ["| type | severity | family |", "|------|----------|--------|"]
    for fam in families:
        types = [a for a in registry.REGISTRY if a.family == fam]
        for sev in dict.fromkeys(a.severity for a in types):
            names = ", ".join(a.name for a in types if a.severity == sev)
            rows.append(f"| {names} | {sev} | {fam} |")
    return "\n".join(rows) + "\n"


def witnesses(a: anomaly.Anomaly) -> str:
    return ", ".join(f"`{c}` ({what})" if what else f"`{c}`" for c, what in a.witnesses.items())


def definitions(family: str) -> str:
    return "".join(
        textwrap.fill(f"- **{a.name}**: {a.definition} *Witnesses*: {witnesses(a)}.",
                      width=88, subsequent_indent="  ", break_on_hyphens=False) + "\n"
        for a in registry.REGISTRY if a.family == family)


def render(text: str) -> str:
    def part(m: re.Match) -> str:
        key = m.group(2)
        body = table() if key == "table" else definitions(key)
        return m.group(1) + body + m.group(4)
    return _PART.sub(part, text)


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    keys = [m.group(2) for m in _PART.finditer(text)]
    families = list(dict.fromkeys(a.family for a in registry.REGISTRY))
    if sorted(keys) != sorted(["table", *families]):
        print(f"{DOC}: needs one generated part for each of table, {', '.join(families)}; "
              f"has {', '.join(keys) or 'none'}")
        return 1
    want = render(text)
    if argv[1:] == ["--check"]:
        if want != text:
            print(f"{DOC} is out of date with the registry (checkers/registry.py): run "
                  "python docs/anomalies.py")
            return 1
        return 0
    DOC.write_text(want, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
