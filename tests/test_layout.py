"""The package's shape: one import name, and imports that follow the data flow.

Formats sit at the bottom (the plan in workloads/, the history in onceproof.history,
with errors and memory beside them); the checks above the history; the machinery that
runs and reports above them; the shell wires it all. An import may only point down this
list, which is what lets each stage be used alone (check a history from elsewhere,
replay a plan without Hypothesis)."""
from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# folder -> the package name it installs as (pyproject.toml's package-dir)
FOLDERS = {"harness": "onceproof", "checkers": "onceproof.checkers",
           "workloads": "onceproof.workloads"}
# package -> the packages it may import of onceproof besides itself, whole
ALLOWED = {
    "onceproof.errors": set(),
    "onceproof.memory": set(),
    "onceproof.history": {"onceproof.memory"},
    "onceproof.workloads": set(),
    "onceproof.checkers": {"onceproof.history", "onceproof.memory"},
    "onceproof.cluster": {"onceproof.errors"},
    "onceproof.run": {"onceproof.errors", "onceproof.memory", "onceproof.history",
                      "onceproof.cluster", "onceproof.workloads"},
    "onceproof.report": {"onceproof.errors", "onceproof.history", "onceproof.checkers",
                         "onceproof.workloads"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            if name.startswith("onceproof.") or folder == "harness":
                found[name] = path
    return found


def _imports(name: str, path: Path) -> set[str]:
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            out.add(stem)
            # `from pkg import module` imports the module too
            out |= {f"{stem}.{a.name}" for a in node.names}
    return {m for m in out if m == "onceproof" or m.startswith("onceproof.")}


def _owner(name: str) -> str | None:
    for package in sorted(ALLOWED, key=len, reverse=True):
        if name == package or name.startswith(package + "."):
            return package
    return None


def _within(name: str, allowed: set[str]) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


def test_every_import_points_down_the_flow():
    modules = _modules()
    wrong = set()
    for name, path in sorted(modules.items()):
        owner = _owner(name)
        if owner is None:
            continue  # the shell may import anything
        allowed = ALLOWED[owner] | {owner}
        for target in sorted(_imports(name, path)):
            if target not in modules and target.rpartition(".")[0] in modules:
                target = target.rpartition(".")[0]  # `from module import name`
            if not _within(target, allowed):
                wrong.add(f"{name} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_rule_sees_an_upward_import(tmp_path):
    # The check above must not pass because it reads nothing.
    bad = tmp_path / "bad.py"
    bad.write_text("from onceproof.cluster.cluster import Cluster\nfrom .. import trial\n")
    assert _imports("onceproof.checkers.bad", bad) >= {"onceproof.cluster.cluster",
                                                       "onceproof.trial"}
    assert len(_modules()) > 40


@pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(), reason="needs the source tree")
def test_the_wheel_installs_one_top_level_name(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("onceproof-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"onceproof"}, tops
    assert "onceproof/history/read.py" in names
    assert "onceproof/checkers/verdict.py" in names
    assert "onceproof/report/templates/report.html" in names


def test_a_client_process_loads_neither_pandas_nor_arrow():
    # What a client's host imports (run/host.py, the fork server's preload) records
    # through the history writer, and needs none of the readers' pandas, numpy or Arrow.
    code = ("import sys, onceproof.run.host\n"
            "print(sorted(m for m in ('pandas', 'numpy', 'pyarrow', 'scipy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"]
