"""The harness catches every configuration known to break exactly-once, and passes the
correct one: each suite is hunted on the session cluster at a small budget, and the table
(suite, expected anomaly, caught, time to first failure, shrunk size, reproduce rate: "-" in
CI, which replays none) is printed at the end of the session. `onceproof suites` runs the same
hunts with larger budgets.
"""
from __future__ import annotations

import os

import pytest

from onceproof.search import hunt
from onceproof.workloads.suites import SUITES

pytestmark = pytest.mark.cluster

EXAMPLES = int(os.environ.get("ONCEPROOF_SUITE_EXAMPLES", 10))
BUDGET = float(os.environ.get("ONCEPROOF_SUITE_BUDGET", 60))
# Replays measure how often a counterexample reproduces, which this test does not assert:
# none in CI (a replay of the slowest suites costs minutes), one each in the nightly,
# whose `onceproof suites --replays 5` measures it properly.
REPLAYS = int(os.environ.get("ONCEPROOF_SUITE_REPLAYS", 0))
# CI hunts in the rounds shape only; the nightly adds the concurrent one (tox.ini).
MODES = os.environ.get("ONCEPROOF_SUITE_MODES", "rounds").split(",")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(SUITES))
def test_suite_is_caught_or_passes(name, mode, cluster, pytestconfig, artifacts_dir, suite_rows,
                                   deadline):
    suite = SUITES[name]
    if mode not in suite.shapes:
        pytest.skip(f"{name} is hunted in {', '.join(suite.shapes)} plans only")
    # A caught suite stops at its first failure; the cap only costs when nothing is found.
    examples = 2 if suite.known_good else EXAMPLES
    result = hunt(suite, cluster, artifacts_dir / "suites", pytestconfig.getoption("--spark-master"),
                  max_examples=examples, budget=BUDGET, replays=REPLAYS, seed=0, deadline=deadline,
                  mode=mode)
    if result.cut and not result.caught:
        pytest.skip(f"the session's --time-limit stopped {name} after {result.examples} plans")
    suite_rows.append(result)
    if suite.known_good:
        assert result.caught, f"{name} found anomalies: see {result.counterexample}"
        # Passing is evidence only if transactions committed under the faults.
        assert result.exercised.get("commit_txn"), (
            f"{name}: no transaction committed in {result.examples} plans ({result.exercised})")
    else:
        assert result.caught, (f"{name}: no {result.expect} in {result.examples} plans; "
                               f"raise ONCEPROOF_SUITE_EXAMPLES or check the suite")
