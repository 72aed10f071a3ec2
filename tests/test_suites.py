"""The harness catches every configuration known to break exactly-once, and passes the
correct one.

A known-bad suite is proven by its kept counterexample (tests/counterexamples/, written by
`onceproof suites --save-counterexamples`): the smallest plan a search found, replayed on
the session cluster until one run shows the suite's anomaly, a few runs at most. That
proves the faults, the clients and the checkers still make and catch the failure, at a
fraction of a search's cost. The search itself is what is tested for the known-good
suites (the search finds nothing) and for SEARCHED_IN_CI, which proves searching,
shrinking and keeping end to end. The nightly (ONCEPROOF_SUITE_SEARCH=all) searches every
suite in every shape it is hunted in, and, with ONCEPROOF_REFRESH_COUNTEREXAMPLES set,
searches anew for a kept counterexample that stopped reproducing and keeps the new one.
The table of both (suite, mode, expected anomaly, caught, plans, time to first failure,
shrunk size, reproduced) is printed at the end of the session.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from onceproof.search import (
    MAX_TRIES,
    MISS,
    hunt,
    keep,
    replay_kept,
    search_name,
    stale,
    suite_settings,
    tries_for,
)
from onceproof.workloads.plan import concurrent, load
from onceproof.workloads.suites import SUITES

KEPT = Path(__file__).parent / "counterexamples"
KNOWN_BAD = [name for name, s in SUITES.items() if not s.known_good]

EXAMPLES = int(os.environ.get("ONCEPROOF_SUITE_EXAMPLES", 10))
BUDGET = float(os.environ.get("ONCEPROOF_SUITE_BUDGET", 60))
# Runs of a kept counterexample before it counts as no longer reproducing: by default
# as many as its recorded reproduction needs to all miss less than once in 10,000
# (search.tries_for); ONCEPROOF_SUITE_TRIES sets one number for all. A search's replays.
TRIES = int(os.environ["ONCEPROOF_SUITE_TRIES"]) if "ONCEPROOF_SUITE_TRIES" in os.environ else None
REFRESH = bool(os.environ.get("ONCEPROOF_REFRESH_COUNTEREXAMPLES"))
# Replays measure how often a search's counterexample reproduces, which no test asserts:
# none in CI, one each in the nightly, whose `onceproof suites --replays 5` measures it.
REPLAYS = int(os.environ.get("ONCEPROOF_SUITE_REPLAYS", 0))
# CI searches in the rounds shape only; the nightly adds the concurrent one (tox.ini).
MODES = os.environ.get("ONCEPROOF_SUITE_MODES", "rounds").split(",")
# The known-bad suite CI still searches, so that searching, shrinking and keeping stay
# proven on every change: the one whose rounds search finds its failure soonest (16 s into
# its search when it was kept; the whole test took 99 s in CI).
SEARCHED_IN_CI = ("offsets_outside_txn_crash",)
# Suites that start a cluster of their own on another release and upgrade it (an
# upgrade under load) run apart from the session's cluster: CI runs one plan of
# UPGRADED_IN_CI (a couple of minutes), the nightly every one.
UPGRADES = [n for n, s in SUITES.items() if s.kafka]
UPGRADED_IN_CI = ("upgrade_transactions",)
UPGRADED = UPGRADES if os.environ.get("ONCEPROOF_SUITE_SEARCH") == "all" else list(UPGRADED_IN_CI)
SEARCHED = [n for n in SUITES if not SUITES[n].kafka
            and (os.environ.get("ONCEPROOF_SUITE_SEARCH") == "all"
                 or SUITES[n].known_good or n in SEARCHED_IN_CI)]


def _kept(name: str) -> Path:
    shapes = [KEPT / f"{search_name(SUITES[name], m)}.json" for m in SUITES[name].shapes]
    found = [path for path in shapes if path.exists()]
    assert len(found) == 1, (f"{name} needs one kept counterexample in {KEPT}, has {found}: "
                             f"onceproof suites --only {name} --save-counterexamples {KEPT}")
    return found[0]


@pytest.mark.parametrize("name", KNOWN_BAD)
def test_every_known_bad_suite_keeps_one_counterexample_of_its_own(name):
    kept = json.loads(_kept(name).read_text())
    suite = SUITES[name]
    assert kept["suite"] == name and kept["mode"] in suite.shapes
    assert concurrent(load(_kept(name))) == (kept["mode"] == "concurrent")
    assert set(kept["shown"]) & suite.expect, kept["shown"]


def test_a_kept_plan_gets_the_runs_its_recorded_rate_needs_to_show_its_anomaly():
    # All runs missing must stay rarer than MISS at the record's smoothed rate, and a
    # plan that reproduced less often gets more runs.
    for record in ("3/3", "2/3", "1/2", "5/5", "1/3"):
        shown, runs = map(int, record.split("/"))
        rate, tries = (shown + 1) / (runs + 2), tries_for(record)
        assert (1 - rate) ** tries <= MISS or tries == MAX_TRIES, record
        assert (1 - rate) ** (tries - 1) > MISS, record
    assert tries_for("2/3") > tries_for("3/3") > tries_for("5/5")
    assert tries_for(None) == tries_for("garbage") == MAX_TRIES


@pytest.mark.parametrize("name", KNOWN_BAD)
def test_a_kept_counterexample_was_found_with_its_suites_settings_of_today(name):
    # A suite edited since (a known-bad one into a correct configuration, say) would
    # still be "proven" by a plan frozen with its old settings: the kept file records
    # the settings it was found with, and they must be the suite's.
    path = _kept(name)
    why = stale(SUITES[name], json.loads(path.read_text()), path)
    assert why is None, why


def test_a_suite_edited_since_its_counterexample_was_kept_is_named_with_how_to_refresh():
    from dataclasses import replace
    path = _kept("read_uncommitted_aborts")
    kept = json.loads(path.read_text())
    fixed = replace(SUITES["read_uncommitted_aborts"],
                    config={"consumer": {"isolation.level": "read_committed"}})
    why = stale(fixed, kept, path)
    assert why is not None and "\n" not in why
    assert why.startswith("read_uncommitted_aborts: ") and "changed: config" in why
    assert "ONCEPROOF_REFRESH_COUNTEREXAMPLES=1" in why and "--save-counterexamples" in why
    assert "none recorded" in stale(SUITES["read_uncommitted_aborts"],
                                    {k: v for k, v in kept.items() if k != "suite_settings"}, path)


def test_a_kept_counterexample_is_the_plan_the_search_saved_and_what_it_showed(tmp_path):
    from onceproof.search import HuntResult
    found = tmp_path / "counterexamples" / "read_uncommitted_aborts"
    found.mkdir(parents=True)
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}},
            "steps": [{"ops": {"p0": {"f": "send"}}}]}
    (found / "plan.json").write_text(json.dumps(plan))
    (found / "verdict.json").write_text(json.dumps({"valid": False, "counts": {
        "aborted_read": 2, "duplicate": 0}}))
    settings = suite_settings(SUITES["read_uncommitted_aborts"])
    result = HuntResult("read_uncommitted_aborts", "rounds", "aborted_read", False, True, 3,
                        12.0, 1, "1/1", str(found), kafka_version="4.4.0", settings=settings)
    kept = keep(result, tmp_path / "kept")
    assert kept.name == "read_uncommitted_aborts.json"
    record = json.loads(kept.read_text())
    assert load(kept) == plan and record["shown"] == ["aborted_read"]
    assert record["suite_settings"] == settings
    assert stale(SUITES["read_uncommitted_aborts"], record, kept) is None
    assert record["kafka_version"] == "4.4.0" and record["search"]["examples"] == 3
    with pytest.raises(ValueError, match="known-bad"):
        keep(HuntResult("correct_pipeline", "rounds", "", True, True, 2, None, None, "-", None),
             tmp_path / "kept")


def test_no_counterexample_is_kept_for_a_suite_that_is_gone():
    names = {search_name(SUITES[n], m) for n in KNOWN_BAD for m in SUITES[n].shapes}
    assert {p.stem for p in KEPT.glob("*.json")} <= names


@pytest.mark.cluster
@pytest.mark.parametrize("name", KNOWN_BAD)
def test_a_kept_counterexample_still_shows_its_suites_anomaly(name, cluster, pytestconfig,
                                                             artifacts_dir, suite_rows, deadline):
    suite, path = SUITES[name], _kept(name)
    spark = pytestconfig.getoption("--spark-master")
    # A plan kept with other settings than the suite's proves nothing of the suite as it
    # is: not replayed, but searched anew where the nightly refreshes, else failed.
    outdated = stale(suite, json.loads(path.read_text()), path)
    if outdated and not REFRESH:
        pytest.fail(outdated, pytrace=False)
    result = None
    if not outdated:
        result = replay_kept(suite, path, cluster, artifacts_dir / "suites", spark, TRIES, deadline)
        if result.cut and not result.caught:
            pytest.skip(f"the session's --time-limit stopped {name} after {result.examples} runs")
        suite_rows.append(result)
    if (result is None or not result.caught) and REFRESH:
        mode = json.loads(path.read_text())["mode"]
        found = hunt(suite, cluster, artifacts_dir / "suites", spark, max_examples=EXAMPLES,
                     budget=BUDGET, replays=TRIES or 3, seed=None, deadline=deadline, mode=mode)
        suite_rows.append(found)
        assert not found.error, f"{name}: {found.error}"
        assert found.caught, f"{name}: no {found.expect} in {found.examples} plans, kept or searched"
        why = (outdated if result is None
               else f"{name}: the kept counterexample showed nothing in {result.examples} runs")
        warnings.warn(f"{why}; kept the search's new one in {keep(found, KEPT)}", stacklevel=1)
        return
    assert result.caught, (
        f"{name}: its kept counterexample {path} showed no {result.expect} in "
        f"{result.examples} runs; the nightly keeps a new one when this happens "
        f"(ONCEPROOF_REFRESH_COUNTEREXAMPLES=1), or run onceproof suites --only {name} "
        f"--save-counterexamples tests/counterexamples")


@pytest.mark.cluster
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", SEARCHED)
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
    assert not result.error, f"{name}: {result.error}"
    if suite.known_good:
        assert result.caught, f"{name} found anomalies: see {result.counterexample}"
        # Passing is evidence only if transactions committed under the faults (a Streams
        # application's, inside it, by the offsets its group committed), and a fault fired.
        committed = "streams_committed_inputs" if suite.workload == "streams" else "commit_txn"
        assert result.exercised.get(committed), (
            f"{name}: no transaction committed in {result.examples} plans ({result.exercised})")
        assert result.exercised.get("faults"), (
            f"{name}: no fault fired in {result.examples} plans ({result.exercised})")
    else:
        assert result.caught, (f"{name}: no {result.expect} in {result.examples} plans; "
                               f"raise ONCEPROOF_SUITE_EXAMPLES or check the suite")
        # What a search keeps is what CI replays: it must load back as the same plan.
        kept = keep(result, artifacts_dir / "kept")
        assert load(kept) == load(Path(result.counterexample) / "plan.json")


@pytest.mark.cluster
@pytest.mark.parametrize("name", UPGRADED)
def test_an_upgrade_suite_passes_through_its_rolling_upgrade_and_v2(name, pytestconfig,
                                                                    artifacts_dir, suite_rows,
                                                                    deadline):
    # On a fresh cluster of the release the suite starts on: the nodes move to its
    # target one after another under load and the mixed faults, v2 is finalized, and
    # nothing may go wrong. Its pass counts only with transactions committed before,
    # during and after the change and, at the end, transactions begun on v2 (its
    # evidence, Suite.evidence), and with every node really moved.
    from onceproof.cluster.cluster import Cluster
    suite = SUITES[name]
    examples = 2 if os.environ.get("ONCEPROOF_SUITE_SEARCH") == "all" else 1
    folder = artifacts_dir / "upgrades" / name
    with Cluster(folder / "cluster", 3, suite.kafka) as cluster:
        assert cluster.version == suite.kafka
        result = hunt(suite, cluster, folder, pytestconfig.getoption("--spark-master"),
                      max_examples=examples, budget=BUDGET, replays=0, seed=0,
                      deadline=deadline, mode="concurrent")
        moved = cluster.releases()
    if result.cut and not result.caught:
        pytest.skip(f"the session's --time-limit stopped {name} after {result.examples} plans")
    suite_rows.append(result)
    assert not result.error, f"{name}: {result.error}"
    assert result.caught, f"{name} found anomalies: see {result.counterexample}"
    assert not result.idle, f"{name}: {result.outcome} ({result.exercised})"
    assert set(result.needs) == set(suite.evidence) and not result.missing
    assert moved == dict.fromkeys(cluster.nodes, suite.upgrade_to), moved
    committed = "streams_committed_inputs" if suite.workload == "streams" else "commit_txn"
    assert result.exercised.get(committed) and result.exercised.get("faults"), result.exercised


def test_an_upgrade_suites_plans_move_every_node_then_finalize_then_restart_the_java_clients():
    # Drawn, not run: what an upgrade suite's plans hold besides their drawn load.
    from onceproof.workloads.generate import draw_plans
    from onceproof.workloads.plan import validate
    from onceproof.workloads.suites import UPGRADE_TO
    assert UPGRADES and set(UPGRADED_IN_CI) <= set(UPGRADES)
    for name in UPGRADES:
        suite = SUITES[name]
        assert suite.known_good and suite.shapes == ("concurrent",)
        for plan in draw_plans(suite.strategy(3, "concurrent"), 3, 1):
            validate(plan)
            entries = [e.get("fault", {}).get("f") or f"crash {e['crash']}" for e in plan["schedule"]]
            changes = [f for f in entries if f in ("upgrade", "finalize")]
            assert changes == ["upgrade"] * 3 + ["finalize"], entries
            # Every fault healed, every node back, right before each change.
            for i, f in enumerate(entries):
                if f in ("upgrade", "finalize"):
                    assert plan["schedule"][i - 1]["fault"] == {"f": "heal", "all": True}
            if suite.workload == "streams":
                continue
            libraries = {spec.get("client") for spec in plan["clients"].values()}
            assert libraries == {"java", "librdkafka"} or len(plan["clients"]) < 2, libraries
            assert plan["java_client"] == UPGRADE_TO
            java_txn = {cid for cid, spec in plan["clients"].items()
                        if spec["client"] == "java" and spec["role"] in ("txn_producer", "pipeline",
                                                                          "rw_txn")}
            after = entries[entries.index("finalize") + 1:]
            assert {f"crash {cid}" for cid in java_txn} <= set(after), (java_txn, after)


def test_a_pass_without_what_its_claim_needs_seen_is_not_exercised():
    # An upgrade suite whose plans committed transactions, but none after the change
    # and none on v2: no evidence for its claim, whatever else they did.
    from onceproof.search import HuntResult
    needs = list(SUITES["upgrade_transactions"].evidence)
    seen = {"commit_txn": 10, "acknowledged_writes": 30, "txns_committed_before_change": 4,
            "txns_committed_during_change": 6}
    result = HuntResult("upgrade_transactions", "concurrent", "", True, True, 1, None, None, "-",
                        None, exercised=seen, needs=needs)
    assert result.idle and result.missing == ["txns_committed_after_change",
                                              "txns_begun_v2_after_finalize"]
    assert result.outcome.startswith("NOT EXERCISED (none of: txns_committed_after_change")
    seen.update(txns_committed_after_change=1, txns_begun_v2_after_finalize=1)
    assert not result.idle and result.outcome == "passed"
