"""docs/writing-properties.md cannot drift from running code: it quotes the example files
exactly, every name it uses exists, the examples collect outside the repository, and
`holds_on` keeps the evidence rule. (tests/test_wheel.py runs an example for real, from
an installed wheel.)"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings
from hypothesis import strategies as st

import onceproof.api as api
from onceproof.api import holds_on

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "writing-properties.md"
EXAMPLES = ROOT / "docs" / "examples"
PLUGIN = ROOT / "harness" / "pytest_plugin.py"


def _quoted() -> dict[str, str]:
    """example path -> the python block that follows its marker in the doc."""
    pattern = re.compile(r"<!-- example: (\S+) -->\n```python\n(.*?)```", re.S)
    return dict(pattern.findall(DOC.read_text()))


def test_the_doc_quotes_every_example_file_exactly():
    quoted = _quoted()
    files = sorted(str(p.relative_to(ROOT)) for p in EXAMPLES.glob("*.py"))
    assert files and sorted(quoted) == files
    for path, block in quoted.items():
        assert block == (ROOT / path).read_text(), f"{DOC.name} quotes {path} out of date"


def test_every_public_name_is_documented_and_every_documented_name_exists():
    doc = DOC.read_text()
    for name in api.__all__:
        assert re.search(rf"`(onceproof\.api\.)?{name}[`(]", doc), f"{name} is not in {DOC.name}"
        assert getattr(api, name) is not None
    for block in re.findall(r"```python\n(.*?)```", doc, re.S):
        for names in re.findall(r"from onceproof\.api import ([\w, ]+)", block):
            for name in names.split(","):
                assert name.strip() in api.__all__, name


def test_every_attribute_the_doc_names_exists():
    from onceproof.cluster.cluster import Cluster
    doc = DOC.read_text()
    owners = {"trials": api.Search, "trial": api.Trial, "verdict": api.Verdict,
              "cluster": Cluster}
    named = {(owner, attr) for owner, attr in re.findall(r"`(trials|trial|verdict|cluster)\.(\w+)", doc)
             if attr not in ("json", "jsonl", "log")}  # verdict.json is a file
    assert len(named) > 15
    for owner, attr in sorted(named):
        cls = owners[owner]
        fields = getattr(cls, "__dataclass_fields__", {})
        ok = hasattr(cls, attr) or attr in fields or (not fields and attr in _instance_attrs(cls))
        assert ok, f"{DOC.name} names {owner}.{attr}, which {cls.__name__} does not have"


def _instance_attrs(cls) -> set[str]:
    """Attributes __init__ assigns (self.x = ..., or self.a, self.b = ...)."""
    import inspect
    source = inspect.getsource(cls.__init__)
    found = set(re.findall(r"self\.(\w+)\s*[:=]", source))
    for targets in re.findall(r"^\s*(self\.\w+(?:,\s*self\.\w+)+)\s*=", source, re.M):
        found |= set(re.findall(r"self\.(\w+)", targets))
    return found


def test_every_option_and_fixture_the_doc_names_is_the_plugins():
    doc, plugin = DOC.read_text(), PLUGIN.read_text()
    section = doc.split("## pytest options", 1)[1].split("\n## ", 1)[0]
    options = set(re.findall(r"`(--[\w-]+)", section))
    assert len(options) >= 8
    for option in options:
        assert f'"{option}"' in plugin, option
    for fixture in ("trials", "cluster"):
        assert re.search(rf"^def {fixture}\(", plugin, re.M), fixture


def test_importing_onceproof_api_loads_neither_the_cluster_nor_pandas_nor_spark():
    code = ("import sys, onceproof, onceproof.api; "
            "print(sorted(m for m in ('pyspark', 'pandas', 'onceproof.cluster.cluster', "
            "'onceproof.trial') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
    assert api.Trial.__name__ == "Trial"  # the lazy names resolve


def test_the_examples_collect_in_a_project_outside_the_repository(tmp_path):
    for path in EXAMPLES.glob("*.py"):
        (tmp_path / path.name).write_text(path.read_text())
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(list(EXAMPLES.glob('*.py')))} tests collected" in done.stdout


class _Trials:
    """A stand-in for the plugin's Search: each run exercises `gives`."""

    def __init__(self, gives: dict[str, int]):
        self.gives, self.examples, self.exercised = gives, 0, Counter()

    def run(self, plan):
        self.examples += 1
        self.exercised.update(self.gives)
        return plan


def _request() -> SimpleNamespace:
    return SimpleNamespace(node=SimpleNamespace(user_properties=[]))


def _property(calls: list):
    @holds_on(st.integers(), exercising=("acknowledged_writes",))
    @settings(max_examples=2, database=None)
    def test_claim(trials, plan):
        time.sleep(0.25)  # past Hypothesis's default deadline: holds_on turns it off
        calls.append(trials.run(plan))
    return test_claim


def test_holds_on_passes_with_evidence_and_keeps_the_projects_settings():
    calls: list = []
    test, request = _property(calls), _request()
    assert test.__name__ == "test_claim"
    test(_Trials({"acknowledged_writes": 3}), request)
    assert len(calls) == 2  # @settings(max_examples=2) under @holds_on
    props = dict(request.node.user_properties)
    assert props["onceproof_examples"] == 2
    assert json.loads(props["onceproof_exercised"]) == {"acknowledged_writes": 6}


def test_holds_on_fails_a_property_whose_claim_was_not_exercised():
    test, request = _property([]), _request()
    with pytest.raises(AssertionError, match="no acknowledged_writes in 2 examples"):
        test(_Trials({"send": 1}), request)
    assert dict(request.node.user_properties)["onceproof_examples"] == 2
