"""The anomaly registry (checkers/registry.py, gathered from the families' ANOMALIES):
the families find exactly its types, and docs/checkers.md shows its definitions. No
Spark."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from onceproof.checkers import anomaly, registry
from onceproof.checkers.verdict import FAMILIES

ROOT = Path(__file__).resolve().parents[1]


# The order a verdict lists types in, as it was when the definitions moved from one
# table into their family modules: gathering them must not reorder them.
ORDER = ("duplicate", "inconsistent_offset", "unattributed_read", "corrupt_value", "lost_write",
         "unseen", "hanging_txn", "aborted_read", "precommitted_read", "torn_txn", "poll_skip",
         "nonmonotonic_poll", "rewind_mismatch", "nonmonotonic_send", "commit_order", "g0", "g1c",
         "g_single", "offset_regression", "stale_offset_fetch", "duplicate_output", "lost_input",
         "streams_duplicate_output", "streams_lost_input", "streams_uncommitted_input",
         "wrong_fold", "late_return", "unrecovered_partition", "unreadable_offsets")


def test_families_find_the_registry_types_in_its_order():
    assert {a.family for a in registry.REGISTRY} == {f.__name__.rsplit(".", 1)[1] for f in FAMILIES}
    assert tuple(t for f in FAMILIES for t in f.TYPES) == registry.TYPES
    # Each family defines its own types, beside the code that finds them.
    for f in FAMILIES:
        assert f.TYPES == tuple(a.name for a in f.ANOMALIES) == registry.of_family(
            f.__name__.rsplit(".", 1)[1])
        assert all(registry.BY_NAME[a.name] is a for a in f.ANOMALIES)


def test_the_order_of_the_types_is_unchanged():
    """A type added since sits beside its family's, so only the old ones' relative
    order is held here."""
    assert tuple(t for t in registry.TYPES if t in ORDER) == ORDER


def test_a_type_defined_in_another_familys_module_is_refused():
    import types
    stray = types.ModuleType("onceproof.checkers.loss")
    stray.ANOMALIES = (registry.BY_NAME["duplicate"],)
    stray.TYPES = ("duplicate",)
    with pytest.raises(ValueError, match=r"duplicate is defined in checkers/loss\.py"):
        registry._gathered((stray,))


def test_each_type_names_its_witnesses_and_a_severity():
    for a in registry.REGISTRY:
        assert a.severity in (anomaly.VIOLATION, anomaly.NOTE, anomaly.EITHER,
                              anomaly.LIVENESS), a.name
        assert a.definition, a.name
        assert "detail" in a.witnesses, a.name
        # Every row lists its ops as witnesses, in roles the registry names and the docs show.
        assert a.roles and a.witnesses["witnesses"], a.name
        assert all(role in a.witnesses["witnesses"] for role in a.roles), a.name
        assert set(a.witnesses) <= set(anomaly.COLUMNS) - {"type", "severity"}, a.name


def test_a_type_implies_only_other_types_of_the_registry():
    assert set(registry.IMPLIES) == set(registry.TYPES)
    for name, implied in registry.IMPLIES.items():
        assert implied <= set(registry.TYPES) - {name}, name
    bad = anomaly.Anomaly("x", "loss", anomaly.VIOLATION, "", MappingProxyType({}),
                          MappingProxyType({}), frozenset({"no_such_type"}))
    with pytest.raises(ValueError, match="x implies no_such_type"):
        registry._implications((*registry.REGISTRY, bad))


def test_cycles_alone_may_be_notes():
    assert {a.name for a in registry.REGISTRY if a.allows(anomaly.NOTE)} == {"g0", "g1c", "g_single"}


def test_stalls_are_the_liveness_family_alone():
    # A liveness type must never make a history invalid, and only the liveness family
    # judges stalls: safety and liveness stay apart in every verdict.
    assert {a.name for a in registry.REGISTRY if a.severity == anomaly.LIVENESS} == \
        set(registry.of_family("liveness")) == {"late_return", "unrecovered_partition",
                                                "unreadable_offsets"}


def test_the_liveness_definition_states_its_grace():
    from onceproof.checkers.liveness import LATE_MS
    assert f"{LATE_MS // 1000} s after" in registry.BY_NAME["late_return"].definition


def test_the_docs_show_the_registry():
    done = subprocess.run([sys.executable, "docs/anomalies.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_registry_module_needs_no_spark():
    """The report and the docs read it without a JVM (the anomalies' Spark schema is
    built on demand): the registry, with every family module it gathers, and the
    report's page, imported in a fresh process, load no Spark."""
    code = f"""if True:
        import sys
        from onceproof.checkers import registry
        assert registry.TYPES == {registry.TYPES!r}
        import onceproof.report.page
        assert "pyspark" not in sys.modules
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
