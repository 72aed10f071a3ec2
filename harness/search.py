"""Hunting a suite: let Hypothesis search for a plan that shows the suite's anomaly, shrink
it within a time budget, then replay the smallest one to see how often it reproduces.

Searching is bounded by a number of plans; shrinking, which costs a cluster run per
attempt, by a time budget counted from the first failure: from then on every attempt is reported as passing without running, Hypothesis
gives up (often calling the failure flaky, which for a nondeterministic system it is), and
the smallest failure seen so far, kept by Counterexamples, is the result.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import Flaky

from onceproof.cluster.cluster import Cluster
from onceproof.trial import Counterexamples, Trial, run_trial
from onceproof.workloads.plan import load, size
from onceproof.workloads.suites import Suite


@dataclass
class HuntResult:
    suite: str
    expect: str
    caught: bool
    examples: int
    seconds_to_first: float | None
    shrunk_size: int | None
    reproduced: str
    counterexample: str | None
    cut: bool = False  # the deadline stopped the search before it was done


def hunt(suite: Suite, cluster: Cluster, artifacts: str | Path, spark=None,
         max_examples: int = 10, budget: float = 600.0, replays: int = 2,
         seed: int | None = None, deadline: float | None = None) -> HuntResult:
    """Search, shrink and replay one suite. No plan starts after `deadline` (a monotonic
    time); a suite the deadline stopped is `cut`, and one stopped before its first plan
    reports 0 examples and no verdict."""
    store = Counterexamples(Path(artifacts) / "counterexamples")
    scratch = Path(artifacts) / "trials" / suite.name
    started = time.monotonic()
    state = {"n": 0, "first": None, "cut": False}

    def caught(trial: Trial) -> bool:
        if suite.known_good:
            return not trial.verdict.valid
        return bool(trial.anomalies & suite.expect)

    @settings(max_examples=max_examples, deadline=None, database=None,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
              print_blob=False)
    @given(suite.strategy(cluster.n))
    def attempt(plan):
        if state["first"] is not None and time.monotonic() - started - state["first"] > budget:
            return
        if deadline is not None and time.monotonic() > deadline:
            state["cut"] = True
            return
        state["n"] += 1
        trial = run_trial(plan, cluster, scratch / f"{state['n']:04d}", spark)
        if caught(trial):
            if state["first"] is None:
                state["first"] = time.monotonic() - started
            store.offer(suite.name, trial, cluster)
            raise AssertionError(f"{suite.name}: {sorted(trial.anomalies)}")

    if seed is not None:
        attempt = hypothesis_seed(seed)(attempt)
    try:
        attempt()
    except (AssertionError, Flaky, BaseExceptionGroup) as exc:
        # The failure we asked for, or Hypothesis's flaky verdict on it; anything else
        # (a harness or checker error) must not pass for a result.
        if not _only_caught(exc):
            raise
    folder = store.folder(suite.name)
    found = (folder / "plan.json").exists()
    reproduced = "-"
    if found and replays and not (deadline is not None and time.monotonic() > deadline):
        hits = sum(caught(run_trial(load(folder / "plan.json"), cluster,
                                    scratch / f"replay-{i}", spark)) for i in range(replays))
        reproduced = f"{hits}/{replays}"
    # A suite that ran no plan has shown nothing either way.
    caught_it = state["n"] > 0 and ((not found) if suite.known_good else found)
    return HuntResult(
        suite=suite.name, expect=", ".join(sorted(suite.expect)) or "(none: must pass)",
        caught=caught_it, examples=state["n"], seconds_to_first=state["first"],
        shrunk_size=size(load(folder / "plan.json")) if found else None,
        reproduced=reproduced, counterexample=str(folder) if found else None,
        cut=state["cut"])


def _only_caught(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_caught(e) for e in exc.exceptions)
    if isinstance(exc, Flaky) and exc.__cause__ is not None:
        return _only_caught(exc.__cause__)
    return isinstance(exc, (AssertionError, Flaky))


def as_row(result: HuntResult) -> dict:
    return asdict(result)
