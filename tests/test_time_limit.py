"""The nightly's hard bound: once the session's --time-limit is spent, no property or suite
starts another cluster example, and nothing that ran no example passes for checked.

No cluster is needed: past the limit nothing may touch one, which is what is tested."""
from __future__ import annotations

import time
from functools import partial
from types import SimpleNamespace

import pytest

from onceproof import pytest_plugin
from onceproof.search import Search, hunt
from onceproof.workloads.suites import SUITES

PLAN = {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}},
        "steps": [{"ops": {"p0": {"f": "send"}}}]}
SPENT = time.monotonic() - 1


def _property_search(name, artifacts, deadline, properties=None):
    """A search set up as the plugin's `trials` fixture sets it up, with no cluster."""
    return Search(name, None, artifacts, budget=60, deadline=deadline,
                  on_cut=partial(pytest_plugin.stopped_by_time_limit, name,
                                 [] if properties is None else properties))


def test_a_property_stopped_before_its_first_example_is_skipped(tmp_path):
    search = _property_search("prop", tmp_path, SPENT)
    with pytest.raises(pytest.skip.Exception, match="time-limit"):
        search.run(PLAN)
    assert not (tmp_path / "trials").exists()


def test_a_property_stopped_later_passes_and_is_named_in_the_summary(tmp_path):
    properties: list = []
    search = _property_search("prop_later", tmp_path, SPENT, properties)
    search.examples = 4  # four examples ran before the limit
    assert search.run(PLAN) is None
    assert search.cut
    # The test's report carries it to the session's summary (a worker's too, under xdist).
    report = SimpleNamespace(when="teardown", user_properties=properties)
    pytest_plugin.pytest_runtest_logreport(report)
    assert pytest_plugin._CUT.pop("prop_later") == 4


def test_no_limit_means_no_stop(tmp_path):
    assert not _property_search("x", tmp_path, None).spent()
    assert not _property_search("x", tmp_path, time.monotonic() + 3600).spent()


def test_after_the_first_failure_the_budget_stops_the_search_without_a_cut(tmp_path):
    search = _property_search("shrinking", tmp_path, None)
    search.started -= 61  # it failed first at its start, 61 s ago: the budget is 60 s
    search.seconds_to_first = 0.0
    assert search.run(PLAN) is None
    assert not search.cut


@pytest.mark.parametrize("name", ["non_idempotent_retries", "correct_pipeline"])
def test_a_suite_past_the_limit_runs_no_plan_and_is_not_counted_as_caught_or_passed(tmp_path, name):
    result = hunt(SUITES[name], SimpleNamespace(n=3), tmp_path, max_examples=3, deadline=SPENT)
    assert result.examples == 0 and result.cut
    assert not result.caught  # a known-good suite that ran nothing has not passed
    assert result.counterexample is None
    assert result.known_good == SUITES[name].known_good
    assert result.outcome == "not run (time limit)"
