"""The rules tests/test_properties.py holds its runs to, without a cluster: a stall fails a
property as a violation does, unless the property names that stall and the call it is of.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from onceproof.checkers.verdict import Verdict
from onceproof.trial import Trial
from tests.test_properties import SEND_OFFSETS_STALL, _valid


class _Trials:
    """A search whose one plan ends with `verdict`."""

    def __init__(self, verdict: Verdict):
        self.verdict, self.failures = verdict, []

    def run(self, plan):
        return Trial(plan, Path("."), self.verdict, 1.0, Counter(faults=1))

    def failed(self, trial):
        self.failures.append(trial)
        return "failed"


def _stalled(call: str) -> Verdict:
    return Verdict(valid=True, counts={"late_return": 1}, stalls=["late_return"],
                   examples={"late_return": [{"type": "late_return", "detail":
                                              f"{call} given a 20 s timeout returned after 41 s"}]})


def test_a_valid_run_that_stalled_fails_a_property():
    trials = _Trials(_stalled("commit_txn"))
    with pytest.raises(AssertionError, match="failed"):
        _valid(trials, {})
    assert trials.failures  # kept as the property's counterexample


def test_a_property_may_allow_a_stall_of_one_call_and_no_other():
    _valid(_Trials(_stalled("send_offsets")), {}, allowed=(SEND_OFFSETS_STALL,))
    with pytest.raises(AssertionError):
        _valid(_Trials(_stalled("commit_txn")), {}, allowed=(SEND_OFFSETS_STALL,))


def test_a_violation_fails_whatever_is_allowed():
    trials = _Trials(Verdict(valid=False, counts={"duplicate": 1}))
    with pytest.raises(AssertionError):
        _valid(trials, {}, allowed=(SEND_OFFSETS_STALL,))
