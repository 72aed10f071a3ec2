"""Known upstream issues apart from new ones (issue 59, point 5; checkers/known.py): a
verdict names the known issue each failing anomaly matches, and `--known-issues
report` lets a run whose every failing anomaly is known exit 0, while a new one still
fails it. Small histories of a few ops, checked for real (tests/histories.py)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from onceproof.checkers import Verdict, check, known
from onceproof.checkers.render import exit_code, run_check
from onceproof.cli import main
from onceproof.history.format import CLUSTER
from onceproof.report.page import write_report
from tests.histories import History

ROOT = Path(__file__).resolve().parent.parent
RDK = {"librdkafka": "2.16.0"}


def _cluster(h: History, clients: dict) -> None:
    """The cluster op the harness writes first: the Kafka release and the client libraries."""
    h.fault(CLUSTER, {"kafka_version": "4.4.0", "nodes": [1, 2, 3], "broker": {},
                      "clients": clients})


def _stall(h: History, process: str = "x0", f: str = "send_offsets", txn: int = 1) -> int:
    """A call of `process` given 20 s that the harness gave up on 40 s later, inside a
    transaction, as the send_offsets stall of findings.md looks."""
    t = f"{process}/{txn}"
    h.begin(process, t)
    op = h.late(process, f, 20, 40, type="info", txn=t)
    return op


def _stalled(tmp_path, clients=RDK, f="send_offsets", process="x0") -> Verdict:
    h = History(tmp_path / "h.jsonl")
    _cluster(h, clients)
    _stall(h, process, f)
    return check(h.close(), local=True)


# ----------------------------------------------------------------------------- matcher

def test_a_send_offsets_stall_on_librdkafka_matches_5511(tmp_path):
    v = _stalled(tmp_path)
    assert v.stalls == ["late_return"] and v.valid, v.summary()
    assert [(m["issue"], m["state"], m["type"], m["count"], m["of"]) for m in v.known] == [
        ("librdkafka #5511", "open", "late_return", 1, 1)]
    assert v.headline == "VALID, NOT LIVE (known issue only: librdkafka #5511)"
    assert "late_return: 1 (liveness); matches librdkafka #5511, open" in v.summary()
    # Shown either way; only the exit code depends on --known-issues.
    assert v.fails(known.FAIL) and not v.fails(known.REPORT)
    assert exit_code(v, "fail") == 1 and exit_code(v, "report") == 0


@pytest.mark.parametrize("clients,f,why", [
    (RDK, "commit_txn", "another op kind"),
    ({"librdkafka": "1.3.0"}, "send_offsets", "a librdkafka release before the range"),
    ({"java": "4.4.0"}, "send_offsets", "the Java client"),
    ({}, "send_offsets", "no client library known"),
    ({"librdkafka": "2.16.0", "java": "4.4.0"}, "send_offsets",
     "two libraries and no plan to say which process ran which"),
])
def test_a_stall_the_signature_does_not_cover_matches_nothing(tmp_path, clients, f, why):
    v = _stalled(tmp_path, clients, f)
    assert v.stalls == ["late_return"], why
    assert v.known == [] and known.match(v) == [], why
    assert v.fails(known.REPORT) and exit_code(v, "report") == 1, why
    assert "known issue" not in v.headline


def _plan_clients(**libraries) -> dict:
    return {cid: {"library": lib, "idempotent": True} for cid, lib in libraries.items()}


def test_with_a_plan_each_process_is_judged_on_its_own_client(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _cluster(h, {"librdkafka": "2.16.0", "java": "4.4.0"})
    _stall(h, "x0.1")         # x0's first replacement, on librdkafka
    _stall(h, "j0", txn=2)    # on the Java client
    v = check(h.close(), local=True)
    v.tested = {**v.tested, "plan_clients": _plan_clients(x0="librdkafka", j0="java")}
    known.annotate(v)
    assert [(m["issue"], m["count"], m["of"]) for m in v.known] == [("librdkafka #5511", 1, 2)]
    # One of the two stalls is new: it fails under report too, and says how much matched.
    assert v.unexplained == {"late_return"} and v.fails(known.REPORT)
    assert "matches librdkafka #5511, open (1 of 2)" in v.summary()
    assert "known issue" not in v.headline
    v.tested["plan_clients"] = _plan_clients(x0="librdkafka", j0="librdkafka")
    known.annotate(v)
    assert not v.fails(known.REPORT) and v.known[0]["count"] == 2


def _duplicate(h: History, txn: str | None = None) -> None:
    """p0's value 1 acknowledged at offset 0 and read at offsets 0 and 1."""
    if txn:
        h.begin("p0", txn)
    h.send("p0", [(0, 1, 0)], txn=txn)
    if txn:
        h.commit("p0", txn)
    h.poll("c0", [(0, 0, 1), (0, 1, 1)])


def test_a_known_stall_beside_a_new_violation_still_fails_under_report(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _cluster(h, RDK)
    _stall(h)
    _duplicate(h, txn="p0/1")  # a duplicate of a transactional send: not #4953
    v = check(h.close(), local=True)
    assert {"late_return", "duplicate"} <= v.failing, v.summary()
    assert [m["issue"] for m in v.known] == ["librdkafka #5511"]
    assert "duplicate" in v.unexplained and "late_return" not in v.unexplained
    assert v.fails(known.REPORT) and exit_code(v, "report") == 1
    assert "known issue" not in v.headline


@pytest.mark.parametrize("txn,idempotent,library,matches", [
    (None, True, "librdkafka", True),
    (None, False, "librdkafka", False),   # the application's settings, not the bug
    ("p0/1", True, "librdkafka", False),  # a transactional send
    (None, True, "java", False),
])
def test_an_idempotent_producers_duplicate_on_librdkafka_matches_4953(tmp_path, txn, idempotent,
                                                                      library, matches):
    h = History(tmp_path / "h.jsonl")
    _cluster(h, {library: "2.16.0" if library == "librdkafka" else "4.4.0"})
    _duplicate(h, txn)
    v = check(h.close(), local=True)
    assert "duplicate" in v.failing, v.summary()
    assert v.known == []  # without the plan, whether p0 is idempotent is not known
    v.tested["plan_clients"] = {"p0": {"library": library, "idempotent": idempotent},
                                "c0": {"library": library, "idempotent": True}}
    known.annotate(v)
    assert ([m["issue"] for m in v.known] == ["librdkafka #4953"]) is matches, v.known
    assert v.fails(known.REPORT) is (not matches or bool(v.failing - {"duplicate"}))


def test_what_the_verdict_did_not_keep_matches_nothing():
    ws = [{"role": "call", "f": "send_offsets", "process": "x0", "txn": True}]
    v = Verdict(valid=True, counts={"late_return": 60}, stalls=["late_return"],
                tested={"clients": RDK},
                shapes={"late_return": [{"n": 50, "witnesses": ws}, {"n": 10, "witnesses": None}]})
    assert [(m.count, m.of) for m in known.match(v)] == [(50, 60)]
    known.annotate(v)
    assert v.fails(known.REPORT)


def test_an_older_verdict_loads_and_matches_nothing(tmp_path):
    old = json.loads((ROOT / "docs/findings/send_offsets_hang-reset_peer-4.3.1/verdict.json")
                     .read_text())
    assert "shapes" not in old and "known" not in old
    v = Verdict.from_dict(old)
    assert v.stalls == ["late_return"] and v.shapes == {} and v.known == []
    assert known.match(v) == [] and v.fails(known.REPORT)
    # And what a verdict holds now survives its JSON.
    new = _stalled(tmp_path)
    again = Verdict.from_dict(json.loads(new.to_json()))
    assert again.known == new.known and again.shapes == new.shapes and not again.fails("report")


def test_the_crash_leaves_no_anomaly_so_matches_nothing():
    crash = known.BY_ID["librdkafka #5040"]
    assert crash.anomaly is None and crash.matches is None
    assert all(i.anomaly is None or i.matches is not None for i in known.CATALOGUE)


def test_release_ranges():
    r = known.Releases("librdkafka", first="1.4.0", fixed="2.17.0")
    assert r.covers("1.4.0") and r.covers("2.16.0-RC1") and not r.covers("2.17.0")
    assert not r.covers("1.3.9") and not r.covers(None) and not r.covers("")
    assert known.Releases("librdkafka").covers("0.9.1")


# ----------------------------------------------------------------------- exit codes

def _write(tmp_path, *, new: bool) -> Path:
    h = History(tmp_path / "history.jsonl")
    _cluster(h, RDK)
    _stall(h)
    if new:
        _stall(h, "x1", "commit_txn", txn=2)  # a stall of another call: not known
    return h.close()


@pytest.mark.parametrize("new", [False, True], ids=["known only", "known and new"])
def test_check_command_exit_codes_under_both_modes(tmp_path, new):
    path = _write(tmp_path, new=new)
    default = CliRunner().invoke(main, ["check", str(path)])
    fail = CliRunner().invoke(main, ["check", str(path), "--known-issues", "fail"])
    report = CliRunner().invoke(main, ["check", str(path), "--known-issues", "report",
                                       "--json", str(tmp_path / "v.json")])
    assert default.exit_code == fail.exit_code == 1, default.output
    assert report.exit_code == (1 if new else 0), report.output
    # Shown in every mode: the match is in the table and in the saved verdict.
    for done in (default, report):
        assert "matches librdkafka #5511, open" in " ".join(done.output.split())
    saved = json.loads((tmp_path / "v.json").read_text())
    assert [m["issue"] for m in saved["known"]] == ["librdkafka #5511"]
    assert ("known issue only" in report.output) is (not new)


def test_check_reads_each_processes_client_from_a_plan_beside_the_history(tmp_path, capsys):
    h = History(tmp_path / "history.jsonl")
    _cluster(h, {"librdkafka": "2.16.0", "java": "4.4.0"})
    _stall(h, "x0_2")
    h.close()
    assert run_check(str(h.path), known_issues="report") == 1  # which library: unknown
    (tmp_path / "plan.json").write_text(json.dumps({
        "topics": {"in": {"partitions": 1}},
        "clients": {"x0_2": {"role": "pipeline", "input": "in", "output": "in"},
                    "s0": {"role": "streams", "input": "in", "output": "in"}}}))
    assert CliRunner().invoke(main, ["check", str(h.path), "--known-issues", "report"]
                              ).exit_code == 0


def test_the_run_jobs_exit_code_under_both_modes(tmp_path):
    from onceproof.run_job import exit_code as job_exit
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    only = _stalled(tmp_path / "a")
    both = check(_write(tmp_path / "b", new=True), local=True)
    fine = Verdict(valid=True, stats={"evidence": {"writes": 1}})
    assert [job_exit([fine, only], mode) for mode in known.MODES] == [1, 0]
    assert [job_exit([only, both], mode) for mode in known.MODES] == [1, 1]
    assert job_exit([only, Verdict(valid=True, unknown="nothing")], "report") == 2


@pytest.mark.parametrize("command", [["check", "h.jsonl"], ["run"], ["replay", "plan.json"],
                                     ["versions"]])
def test_a_mode_it_does_not_know_is_one_line_exit_2(command):
    done = subprocess.run([sys.executable, "-m", "onceproof", *command, "--known-issues", "maybe"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert said == ["onceproof: --known-issues must be fail or report, not 'maybe'"], done.stderr


def test_the_cli_offers_the_modes_of_the_catalogue():
    from onceproof.cli import KNOWN_ISSUES_MODES
    assert KNOWN_ISSUES_MODES == known.MODES
    for name in ("run", "replay", "check", "versions"):
        option = next(p for p in main.commands[name].params if p.name == "known_issues")
        assert option.default == known.FAIL


# --------------------------------------------------------------------------- report

def test_the_report_names_the_match_and_colours_the_banner(tmp_path):
    _write(tmp_path, new=False)
    v = check(tmp_path / "history.jsonl", local=True)
    (tmp_path / "verdict.json").write_text(v.to_json())
    html = write_report(tmp_path).read_text()
    assert '<header class="banner known"><h1>VALID, NOT LIVE</h1>' in html
    assert "KNOWN ISSUES ONLY" in html and "librdkafka #5511, open" in html
    assert re.search(r'<a href="https://github.com/confluentinc/librdkafka/issues/5511">'
                     r'matches librdkafka #5511, open</a>', html)
    # The same stall with nothing known: NOT LIVE's own colour, not the valid green.
    (tmp_path / "verdict.json").write_text(json.dumps({**json.loads(v.to_json()), "known": []}))
    html = write_report(tmp_path).read_text()
    assert '<header class="banner notlive"><h1>VALID, NOT LIVE</h1>' in html
    assert "KNOWN ISSUES ONLY" not in html


# ----------------------------------------------------------------------------- docs

def test_the_doc_lists_the_catalogue_as_the_data_says():
    done = subprocess.run([sys.executable, "docs/known_issues.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (ROOT / "docs/known-issues.md").read_text()
    for issue in known.CATALOGUE:
        assert f"### {issue.id}" in text and issue.links[0] in text


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_each_issue_is_documented_where_it_says():
    findings = (ROOT / "docs/findings.md").read_text()
    anchors = {_anchor(m) for m in re.findall(r"^#+ (.*)$", findings, re.M)}
    for issue in known.CATALOGUE:
        path, _, anchor = issue.documented.partition("#")
        assert path == "docs/findings.md" and anchor in anchors, issue.id
        assert issue.id.split()[-1].lstrip("#") in findings, issue.id


def test_the_readme_table_has_the_known_issues_row():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## What a verdict means"):readme.index("## Options of")]
    assert re.search(r"^\| 0 \| `VALID, NOT LIVE \(known issue only: librdkafka #5511\)` .*"
                     r"--known-issues report", table, re.M), table


# ----------------------------------------------------------------------- real cluster

def _short_reset_peer_plan() -> dict:
    """findings.md's send_offsets stall after connection resets (docs/findings/
    send_offsets_hang-reset_peer-4.3.1, 3 of 3 replays), cut to 35 s: a slicer at 10 s,
    reset_peer on every client link from 15 s to 25 s; its crash at 53 s left out. On
    Kafka 4.4.0 with librdkafka 2.16.0 it stalled in 5 of 5 runs (issue 59's report)."""
    plan = json.loads((ROOT / "docs/findings/send_offsets_hang-reset_peer-4.3.1/plan.json")
                      .read_text())
    plan["duration"] = 35
    plan["schedule"] = [s for s in plan["schedule"] if "crash" not in s]
    return plan


@pytest.mark.cluster
def test_a_real_runs_send_offsets_stall_is_known_and_passes_under_report(cluster, tmp_path):
    from onceproof.trial import run_trial
    trial = run_trial(_short_reset_peer_plan(), cluster, tmp_path / "run")
    v = trial.verdict
    assert v.stalls == ["late_return"], v.summary()  # the stall did not show this time
    assert v.valid and v.failing == {"late_return"}, v.summary()
    assert all(s["witnesses"] and s["witnesses"][0]["f"] == "send_offsets"
               for s in v.shapes["late_return"]), v.shapes
    assert [(m["issue"], m["count"]) for m in v.known] == [
        ("librdkafka #5511", v.counts["late_return"])], v.known
    saved = json.loads((trial.folder / "verdict.json").read_text())
    assert saved["known"] == v.known and saved["tested"]["plan_clients"]["x0"]["library"] == \
        "librdkafka"
    # The real history through the command a nightly would run: exit 1 by default, 0
    # under report, the match shown both times.
    history = str(trial.history)
    fail = CliRunner().invoke(main, ["check", history])
    report = CliRunner().invoke(main, ["check", history, "--known-issues", "report"])
    assert (fail.exit_code, report.exit_code) == (1, 0), fail.output + report.output
    assert "matches librdkafka #5511, open" in report.output
    assert "known issue only: librdkafka #5511" in report.output
