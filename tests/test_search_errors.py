"""An error of the harness never reads as a pass (issue 61, point 1).

A search's result is a plan's verdict or nothing: an `assert` of the harness or the
checkers that fires inside a search must fail a known-good suite, a hunt and a
calibration leg, with its traceback in the artifacts and one line on the terminal, never
end as "passed" or "none found". Here the first plan of each search comes to a valid
verdict with its claim exercised, and the second trips an assertion planted where a
trial runs. No cluster: no plan touches one.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from onceproof import calibration, cli, search
from onceproof.checkers.verdict import Verdict
from onceproof.search import hunt
from onceproof.trial import Trial
from onceproof.workloads.suites import HISTORICAL, HUNTS, SUITES

PLANTED = "planted: an invariant of the run does not hold"


def _cluster():
    """What a search reads of its cluster before a plan runs on it."""
    return SimpleNamespace(n=3, faults=[], down_nodes=[], base={}, version="4.4.0",
                           refuses=lambda broker: None, lacks=lambda primitive: None)


@pytest.fixture
def planted(monkeypatch):
    """Each search's first plan passes, with writes, commits and a fault; its second
    trips an internal assertion of the harness."""
    ran: list[Path] = []

    def run_trial(plan, cluster, folder, spark_master=None):
        ran.append(Path(folder))
        holds = ran[-1].name == "0001"
        assert holds, PLANTED
        return Trial(plan, Path(folder), Verdict(valid=True), 1.0,
                     Counter(acknowledged_writes=9, commit_txn=3, faults=1))

    monkeypatch.setattr(search, "run_trial", run_trial)
    return ran


def _failed_with_the_planted_assertion(result, artifacts):
    assert result.error and "\n" not in result.error, result.error
    assert f"AssertionError: {PLANTED}" in result.error
    saved = list((artifacts / "errors").glob("*.txt"))
    assert len(saved) == 1 and str(saved[0]) in result.error
    assert "Traceback" in saved[0].read_text() and PLANTED in saved[0].read_text()
    assert result.examples == 2  # no plan ran after it
    assert result.counterexample is None and not result.idle


def test_a_known_good_suite_with_a_harness_assertion_fails(tmp_path, planted):
    result = hunt(SUITES["correct_pipeline"], _cluster(), tmp_path, max_examples=3, seed=0)
    assert not result.caught  # caught, for a known-good suite, means passed
    assert result.outcome == "HARNESS ERROR"
    _failed_with_the_planted_assertion(result, tmp_path)


def test_a_hunt_with_a_harness_assertion_fails(tmp_path, planted):
    result = hunt(HUNTS["delayed_end_txn"], _cluster(), tmp_path, max_examples=3, seed=0,
                  mode="concurrent")
    assert result.outcome == "HARNESS ERROR", result.outcome  # not "none found"
    _failed_with_the_planted_assertion(result, tmp_path)


def test_every_calibration_leg_with_a_harness_assertion_fails(tmp_path, planted, monkeypatch):
    @contextmanager
    def fresh(folder, nodes, release):
        yield _cluster()

    monkeypatch.setattr(calibration, "Cluster", fresh)
    h = HISTORICAL["kafka_16371"]
    rows = calibration.search_legs(h, tmp_path, examples=2, seed=0, replays=0)
    assert [row.has_bug for row in rows] == [True, False, False]  # must find it, must pass
    assert not any(row.held for row in rows), [(row.leg, row.outcome) for row in rows]
    for row in rows:
        assert not row.held and row.outcome == "HARNESS ERROR", (row.leg, row.outcome)
        assert f"AssertionError: {PLANTED}" in row.result.error


def test_the_hunts_command_says_so_in_one_line_and_exits_2(tmp_path, planted, monkeypatch):
    monkeypatch.setattr(cli, "_fresh_cluster", lambda *args: _contextual(_cluster()))
    done = CliRunner().invoke(cli.main, ["hunts", "--only", "delayed_end_txn", "--examples", "2",
                                         "--kafka-version", "4.4.0", "--seed", "0",
                                         "--artifacts", str(tmp_path)])
    assert done.exit_code == 2, done.output
    said = [line for line in done.stderr.splitlines() if "harness error" in line]
    assert len(said) == 1 and f"AssertionError: {PLANTED}" in said[0], done.stderr
    assert "Traceback" not in done.output


@contextmanager
def _contextual(value):
    yield value
