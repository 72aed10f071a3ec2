"""The nightly's hard bound: once the session's --time-limit is spent, no property or suite
starts another cluster example, and nothing that ran no example passes for checked.

No cluster is needed: past the limit nothing may touch one, which is what is tested."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from onceproof import pytest_plugin
from onceproof.search import hunt
from onceproof.workloads.suites import SUITES

PLAN = {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}},
        "steps": [{"ops": {"p0": {"f": "send"}}}]}
SPENT = time.monotonic() - 1


def test_a_property_stopped_before_its_first_example_is_skipped(tmp_path):
    trials = pytest_plugin.Trials("prop", None, None, tmp_path, budget=60, deadline=SPENT)
    with pytest.raises(pytest.skip.Exception, match="time-limit"):
        trials.run(PLAN)
    assert not (tmp_path / "trials").exists()


def test_a_property_stopped_later_passes_and_is_named_in_the_summary(tmp_path):
    trials = pytest_plugin.Trials("prop_later", None, None, tmp_path, budget=60, deadline=SPENT)
    trials.count = 4  # four examples ran before the limit
    assert trials.run(PLAN) is None
    assert pytest_plugin._CUT.pop("prop_later") == 4


def test_no_limit_means_no_stop(tmp_path):
    assert not pytest_plugin.out_of_time(None, "x", 0)
    assert not pytest_plugin.out_of_time(time.monotonic() + 3600, "x", 0)


@pytest.mark.parametrize("name", ["non_idempotent_retries", "correct_pipeline"])
def test_a_suite_past_the_limit_runs_no_plan_and_is_not_counted_as_caught_or_passed(tmp_path, name):
    result = hunt(SUITES[name], SimpleNamespace(n=3), tmp_path, max_examples=3, deadline=SPENT)
    assert result.examples == 0 and result.cut
    assert not result.caught  # a known-good suite that ran nothing has not passed
    assert result.counterexample is None
