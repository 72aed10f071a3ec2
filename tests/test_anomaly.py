"""The anomaly registry (checkers/anomaly.py): the families find exactly its types, and
docs/checkers.md shows its definitions. No Spark."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from onceproof.checkers import anomaly
from onceproof.checkers.verdict import FAMILIES

ROOT = Path(__file__).resolve().parents[1]


def test_families_find_the_registry_types_in_its_order():
    assert {a.family for a in anomaly.REGISTRY} == {f.__name__.rsplit(".", 1)[1] for f in FAMILIES}
    assert tuple(t for f in FAMILIES for t in f.TYPES) == anomaly.TYPES


def test_each_type_names_its_witnesses_and_a_severity():
    for a in anomaly.REGISTRY:
        assert a.severity in (anomaly.VIOLATION, anomaly.NOTE, anomaly.EITHER,
                              anomaly.LIVENESS), a.name
        assert a.definition, a.name
        assert "detail" in a.witnesses, a.name
        # Every row lists its ops as witnesses, in roles the registry names and the docs show.
        assert a.roles and a.witnesses["witnesses"], a.name
        assert all(role in a.witnesses["witnesses"] for role in a.roles), a.name
        assert set(a.witnesses) <= set(anomaly.COLUMNS) - {"type", "severity"}, a.name


def test_a_type_implies_only_other_types_of_the_registry():
    assert set(anomaly.IMPLIES) == set(anomaly.TYPES)
    for name, implied in anomaly.IMPLIES.items():
        assert implied <= set(anomaly.TYPES) - {name}, name
    bad = anomaly.Anomaly("x", "loss", anomaly.VIOLATION, "", MappingProxyType({}),
                          MappingProxyType({}), frozenset({"no_such_type"}))
    with pytest.raises(ValueError, match="x implies no_such_type"):
        anomaly._implications((*anomaly.REGISTRY, bad))


def test_cycles_alone_may_be_notes():
    assert {a.name for a in anomaly.REGISTRY if a.allows(anomaly.NOTE)} == {"g0", "g1c", "g_single"}


def test_stalls_are_the_liveness_family_alone():
    # A liveness type must never make a history invalid, and only the liveness family
    # judges stalls: safety and liveness stay apart in every verdict.
    assert {a.name for a in anomaly.REGISTRY if a.severity == anomaly.LIVENESS} == \
        set(anomaly.of_family("liveness")) == {"late_return", "unrecovered_partition",
                                                "unreadable_offsets"}


def test_the_liveness_definition_states_its_grace():
    from onceproof.checkers.liveness import LATE_MS
    assert f"{LATE_MS // 1000} s after" in anomaly.BY_NAME["late_return"].definition


def test_the_docs_show_the_registry():
    done = subprocess.run([sys.executable, "docs/anomalies.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_registry_module_needs_no_spark():
    """The report and the docs read it without a JVM (its Spark schema is built on
    demand). Loaded from its file: the package's own imports are not this test's."""
    code = f"""if True:
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("registry", {str(ROOT / "checkers" / "anomaly.py")!r})
        sys.modules["registry"] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.TYPES == {anomaly.TYPES!r}
        assert "pyspark" not in sys.modules
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
