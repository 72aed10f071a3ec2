"""The checkers against the reference model (tests/support/synth/).

Two properties: a history the model synthesizes is valid, so the checkers must find no
violation in it; and the same kind of history with one injected anomaly of type X must
be reported with X, and with nothing else that is a violation, except what IMPLIES[X]
declares (the registry, checkers/registry.py). Notes (g0, and cycles real time allows)
may appear anywhere: Kafka allows them.

Each example is checked either the default way (a history this small in pandas, in
this process) or on Spark (local=False, the session's one SparkSession), so both engines
are held to the model.

Budget: 25 examples per property by default (each check is a few Spark jobs);
HYPOTHESIS_PROFILE=nightly runs 300, and ONCEPROOF_SYNTH_EXAMPLES overrides both. The
profiles themselves are registered by the onceproof pytest plugin; only the example
count is this module's.
"""
from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceproof.checkers import check
from onceproof.checkers.registry import IMPLIES, TYPES
from tests.histories import assert_witnessed
from tests.support.synth.clients import Shape, synthesize, write_history
from tests.support.synth.scenarios import NOTES, inject

_NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"
EXAMPLES = int(os.environ.get("ONCEPROOF_SYNTH_EXAMPLES") or (300 if _NIGHTLY else 25))

shapes = st.builds(
    Shape,
    processes=st.integers(2, 9),
    ops=st.integers(10, 300),
    partitions=st.integers(1, 3),
    pipeline=st.booleans(),
    nemesis=st.booleans(),
    whole_txn_reads=st.booleans(),
    seek_on_rewind=st.booleans(),
)


def _reproduce(seed: int, shape: Shape, anomaly: str | None, path, on_spark: bool) -> str:
    how = f"synthesize({seed}, {shape!r})"
    if anomaly:
        how = f"inject({how}, {anomaly!r}, random.Random({seed}))"
    return (f"history {path}; rebuild it with tests.support.synth: {how}; "
            f"checked with local={False if on_spark else None}")


@settings(max_examples=EXAMPLES, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), shape=shapes, on_spark=st.booleans())
def test_synthesized_valid_histories_pass(spark, tmp_path_factory, seed, shape, on_spark):
    path = write_history(synthesize(seed, shape), tmp_path_factory.mktemp("valid") / "h.jsonl")
    verdict = check(path, spark, local=False if on_spark else None)
    assert verdict.valid, f"{verdict.summary()}\n{_reproduce(seed, shape, None, path, on_spark)}"
    # Notes can only be cycles that real time allows.
    assert set(verdict.counts) <= {"g0", "g1c", "g_single"}, verdict.summary()


@settings(max_examples=EXAMPLES, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), shape=shapes, anomaly=st.sampled_from(TYPES),
       on_spark=st.booleans())
def test_one_injected_anomaly_is_reported_as_itself(spark, tmp_path_factory, seed, shape,
                                                    anomaly, on_spark):
    events = inject(synthesize(seed, shape), anomaly, random.Random(seed))
    path = write_history(events, tmp_path_factory.mktemp("bad") / "h.jsonl")
    verdict = check(path, spark, local=False if on_spark else None)
    why = f"{verdict.summary()}\n{_reproduce(seed, shape, anomaly, path, on_spark)}"
    assert verdict.counts.get(anomaly, 0) >= 1, f"{anomaly} not reported\n{why}"
    kinds = {ev["op"]: ev["f"] for ev in events}
    for exs in verdict.examples.values():
        for ex in exs:
            assert_witnessed(ex, kinds)
    assert set(verdict.violations) <= {anomaly} | IMPLIES[anomaly], why
    if anomaly not in NOTES:
        assert not verdict.valid, why


@pytest.mark.parametrize("anomaly", TYPES)
def test_each_injection_is_exactly_one_anomaly(spark, tmp_path, anomaly):
    """Every type, once, on one small history, on Spark: the property above samples
    types, so this keeps a missed type from hiding behind the sampling."""
    events = inject(synthesize(11, ops=60), anomaly, random.Random(11))
    verdict = check(write_history(events, tmp_path / "h.jsonl"), spark, local=False)
    assert verdict.counts.get(anomaly) == 1, verdict.summary()
    assert set(verdict.violations) <= {anomaly} | IMPLIES[anomaly], verdict.summary()
    kinds = {ev["op"]: ev["f"] for ev in events}
    for ex in verdict.examples[anomaly]:
        assert_witnessed(ex, kinds)


@pytest.mark.parametrize("variant", [0, 1, 2])
@pytest.mark.parametrize("on_spark", [False, True])
def test_each_poll_skip_variant_is_reported(spark, tmp_path, variant, on_spark):
    """poll_skip's scenario has three variants (tests/support/synth/scenarios.py): over
    a value a poll returned; by a consumer that does not rewind after an abort, seen at
    its first read after it (issue 52, point 1); over a value known only from its ack,
    beside the log's lost_write (point 2). Each on both engines."""
    events = inject(synthesize(11, ops=60), "poll_skip", random.Random(11), variant=variant)
    verdict = check(write_history(events, tmp_path / "h.jsonl"), spark,
                    local=False if on_spark else None)
    assert verdict.counts.get("poll_skip") == 1, verdict.summary()
    want = {"poll_skip", "lost_write"} if variant == 2 else {"poll_skip"}
    assert set(verdict.violations) == want, verdict.summary()
    kinds = {ev["op"]: ev["f"] for ev in events}
    for ex in verdict.examples["poll_skip"]:
        assert_witnessed(ex, kinds)


@pytest.mark.parametrize("on_spark", [False, True])
def test_pipelines_that_rewind_without_a_recorded_seek_are_valid(spark, tmp_path_factory, on_spark):
    """Issue 52, point 1: a pipeline whose rewinds after aborts are not recorded (no
    seek) reads again from where it stood outside the aborted transaction; no
    nonmonotonic_poll. Seeds whose pipeline aborted and read again are checked."""
    seen = 0
    for seed in range(40):
        events = synthesize(seed, Shape(ops=150, seek_on_rewind=False))
        aborted = {ev.get("txn") for ev in events if ev["f"] == "abort_txn"
                   and ev["process"].startswith("pipe")}
        if not aborted:
            continue
        seen += 1
        path = write_history(events, tmp_path_factory.mktemp("rewind") / "h.jsonl")
        verdict = check(path, spark, local=False if on_spark else None)
        assert verdict.valid, f"seed {seed}: {verdict.summary()}"
        if seen == 3:
            break
    assert seen, "no synthesized pipeline aborted"
