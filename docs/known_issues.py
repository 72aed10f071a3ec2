"""Write the catalogue part of docs/known-issues.md from checkers/known.py CATALOGUE.

    python docs/known_issues.py          # rewrite it in docs/known-issues.md
    python docs/known_issues.py --check  # exit 1 if it is out of date (tests/test_known_issues.py)

The generated part sits between `<!-- known-issues -->` and `<!-- /known-issues -->`;
the prose around it is written by hand.
"""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from onceproof.checkers import known

DOC = Path(__file__).resolve().parent / "known-issues.md"
_PART = re.compile(r"(<!-- known-issues -->\n)(.*?)(<!-- /known-issues -->)", re.S)


def _fill(text: str) -> str:
    return textwrap.fill(text, width=88, subsequent_indent="  ", break_on_hyphens=False,
                         break_long_words=False) + "\n"


def catalogue() -> str:
    rows = ["| issue | state | affects | anomaly | op kind | documented |",
            "|---|---|---|---|---|---|"]
    for i in known.CATALOGUE:
        doc = i.documented.removeprefix("docs/")
        rows.append(f"| [{i.id}]({i.links[0]}) | {i.state} | "
                    f"{'; '.join(r.text for r in i.affects)} | {i.anomaly or 'none'} | "
                    f"{i.op_kind or '-'} | [findings]({doc}) |")
    out = "\n".join(rows) + "\n\n"
    for i in known.CATALOGUE:
        links = ", ".join(f"<{u}>" for u in i.links)
        out += f"### {i.id}\n\n"
        out += _fill(f"- **What**: {i.title}.")
        out += _fill(f"- **State**: {i.state}. **Affects**: "
                     f"{'; '.join(r.text for r in i.affects)}.")
        out += _fill(f"- **Links**: {links}.")
        out += _fill(f"- **Signature**: {i.signature}")
        out += _fill(f"- **Documented**: [findings.md]({i.documented.removeprefix('docs/')})")
        out += "\n"
    return out


def render(text: str) -> str:
    return _PART.sub(lambda m: m.group(1) + catalogue() + m.group(3), text)


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    if len(_PART.findall(text)) != 1:
        print(f"{DOC}: needs one generated part between <!-- known-issues --> and "
              "<!-- /known-issues -->")
        return 1
    new = render(text)
    if "--check" in argv:
        if new != text:
            print(f"{DOC} is out of date: run python docs/known_issues.py")
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
