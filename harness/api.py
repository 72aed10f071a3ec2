"""What a project's own property tests import: `from onceproof.api import ...`
(docs/writing-properties.md is its guide).

The strategies draw plans (workloads/strategies.py, docs/plans.md); the pytest plugin's
`trials` fixture runs them on its cluster and checks them (a `Search`, whose `run` returns
a `Trial`); `holds_on` makes a property of a check and holds it to the evidence rule: a
property passes only if the examples it ran exercised its claim.

Importing this module costs Hypothesis and the plan strategies only; the cluster, the
run and the checkers (pandas, and Spark when a history needs it) load when a test runs a
plan, or when one of the names in _LAZY is first used.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings

from onceproof.workloads.faults import DRAWN, SETS
from onceproof.workloads.strategies import WORKLOADS, concurrent_plans, fault, plans

if TYPE_CHECKING:
    from onceproof.checkers.verdict import Verdict
    from onceproof.search import Search
    from onceproof.trial import Trial, run_trial

# Named sets of fault kinds for a strategy's `faults`: "mixed", "node", "net", "none".
FAULT_SETS: dict[str, tuple[str, ...]] = SETS
# Every fault kind and preset a strategy can draw (docs/plans.md describes each).
FAULT_KINDS: tuple[str, ...] = DRAWN

__all__ = ["FAULT_KINDS", "FAULT_SETS", "WORKLOADS", "Search", "Trial", "Verdict",
           "concurrent_plans", "fault", "holds_on", "plans", "run_trial"]

# name -> module: loaded on first use, so that importing onceproof.api starts no JVM and
# loads neither the cluster nor pandas.
_LAZY = {"Search": "onceproof.search", "Trial": "onceproof.trial",
         "run_trial": "onceproof.trial",
         "Verdict": "onceproof.checkers.verdict"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def holds_on(strategy, exercising: tuple[str, ...]) -> Callable[[Callable], Callable]:
    """Make `check(trials, plan)` a test: it must hold for every plan Hypothesis draws from
    strategy, and the examples run must, together, show each of `exercising` (keys of
    `Search.exercised`: completed client op kinds such as `send`, `commit_txn`, `seek`,
    and `acknowledged_writes`, `records_read`, `faults`).

    The test asks for the plugin's `trials` fixture. Hypothesis's settings are the
    project's (a profile, or `@settings(...)` under `@holds_on`), except that a cluster
    example has no deadline and no health check: it takes seconds by design. The test
    records what its examples exercised as the JUnit properties `onceproof_examples` and
    `onceproof_exercised` (JSON)."""
    def decorate(check: Callable) -> Callable:
        def each(trials, plan):
            return check(trials, plan)

        each.__name__, each.__qualname__ = check.__name__, check.__qualname__
        # @settings under @holds_on: Hypothesis keeps them on the function it decorated.
        own = getattr(check, "_hypothesis_internal_use_settings", None)
        each_plan = given(plan=strategy)(settings(
            own, deadline=None, suppress_health_check=list(HealthCheck))(each))

        def test(trials, request):
            try:
                each_plan(trials)
            finally:
                request.node.user_properties += [
                    ("onceproof_examples", trials.examples),
                    ("onceproof_exercised", json.dumps(dict(trials.exercised), sort_keys=True))]
            missing = [what for what in exercising if not trials.exercised[what]]
            assert not missing, (f"no {', '.join(missing)} in {trials.examples} examples: "
                                 f"the claim was not exercised ({dict(trials.exercised)})")

        test.__name__, test.__qualname__, test.__doc__ = (check.__name__, check.__qualname__,
                                                         check.__doc__)
        test.__module__ = check.__module__
        return test
    return decorate
