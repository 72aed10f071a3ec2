"""The command line as a user meets it: the installed `onceproof` script and
`python -m onceproof`, run as processes, answer --help and --version with exit 0, and
--help says where the docs are."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import confluent_kafka
import pytest
from click.testing import CliRunner

from onceproof import __version__
from onceproof.cli import main
from onceproof.cluster.provision import DEFAULT_KAFKA_VERSION

SCRIPT = Path(sys.executable).parent / "onceproof"
ROOT = Path(__file__).resolve().parent.parent


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            paths += _command_paths(command, prefix + (name,))
        else:
            paths.append(prefix + (name,))
    return paths


COMMANDS = _command_paths(main)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_the_command_tree_includes_the_cluster_subcommands():
    assert {("cluster", "up"), ("cluster", "down"), ("cluster", "status"), ("run",)} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "onceproof")
def test_every_command_prints_its_help_and_exits_0(path):
    done = _run(str(SCRIPT), *path, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Usage: onceproof {' '.join(path)}".rstrip())
    assert "internal error" not in done.stdout + done.stderr


@pytest.mark.parametrize("command", ["run", "versions"])
def test_the_workload_option_names_every_workload(command):
    from onceproof.workloads.strategies import WORKLOADS
    option = next(p for p in main.commands[command].params if p.name == "workload")
    assert option.help is not None
    assert set(WORKLOADS) <= set(option.help.rstrip(".").replace(",", " ").split())


def test_a_usage_error_is_reported_by_click_not_as_an_internal_error():
    done = _run(str(SCRIPT), "run", "--no-such-option")
    assert done.returncode == 2
    assert "No such option" in done.stderr
    assert "internal error" not in done.stderr


def test_version_names_onceproof_the_default_kafka_and_librdkafka():
    done = _run(str(SCRIPT), "--version")
    assert done.returncode == 0, done.stderr
    assert f"onceproof {__version__}" in done.stdout
    assert f"Kafka {DEFAULT_KAFKA_VERSION}" in done.stdout
    assert f"librdkafka {confluent_kafka.libversion()[0]}" in done.stdout


def test_help_ends_with_where_the_docs_are_and_every_doc_it_names_exists():
    done = CliRunner().invoke(main, ["--help"])
    assert done.exit_code == 0, done.output
    assert "Docs (the index is README.md's \"Docs\" section):" in done.output
    named = re.findall(r"[\w./-]+\.md", done.output.split("Docs (", 1)[1])
    assert "README.md" in named and len(named) > 5
    assert [path for path in named if not (ROOT / path).is_file()] == []
    # The epilog names every doc in docs/, as README.md's index does.
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md")) == \
        sorted(Path(path).name for path in named if path.startswith("docs/"))
    readme = (ROOT / "README.md").read_text()
    assert [path for path in named if path.startswith("docs/") and f"]({path})" not in readme] == []


def test_python_dash_m_onceproof_is_the_same_command():
    done = _run(sys.executable, "-m", "onceproof", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: python -m onceproof")
    assert all(name in done.stdout for name in main.commands)


def test_an_unknown_suite_or_hunt_is_one_clear_line():
    for command, names in (("suites", "non_idempotent_retries"), ("hunts", "delayed_end_txn")):
        done = _run(str(SCRIPT), command, "--only", "meteor")
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert "nothing named meteor to hunt" in lines[0] and names in lines[0]


def test_an_unknown_client_library_is_one_clear_line(tmp_path):
    for command in ("suites", "hunts", "run", "replay"):
        args = ("--out", str(tmp_path / "runs")) if command == "run" else ()
        if command == "replay":
            args = (str(ROOT / "tests" / "counterexamples" / "read_uncommitted_aborts.json"),)
        done = _run(str(SCRIPT), command, *args, "--client", "jvm")
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1, (command, done.stderr)
        assert "unknown client 'jvm': use one of librdkafka, java" in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()


def test_side_by_side_searches_print_a_column_per_client():
    from rich.console import Console

    from onceproof.cli import _table
    from onceproof.search import HuntResult
    rows = [HuntResult("non_idempotent_retries", "rounds", "duplicate", False, caught, n, first,
                       None, "1/1", None, client=client)
            for client, caught, n, first in (("librdkafka", True, 3, 40.0), ("java", False, 8, None))]
    # A hunt on a third client whose transactional clients never started: its "none
    # found" would say nothing, so the cell says what its plans did not do.
    rows += [HuntResult("delayed_end_txn", "concurrent", "", True, False, 3, None, None, "-",
                        None, exercised={"poll": 543, "faults": 12}, hunt=True, client=client)
             for client in ("librdkafka", "java")]
    rows[-2].exercised = {"commit_txn": 4524, "acknowledged_writes": 15052}
    console = Console(width=200, record=True)
    console.print(_table("Suites", rows, ("librdkafka", "java")))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "suite" in line)
    assert "librdkafka" in header and "java" in header
    row = next(line for line in text.splitlines() if "non_idempotent_retries" in line)
    assert "yes, 3 plans, first 40 s" in row and "NO, 8 plans, first -" in row
    hunt = next(line for line in text.splitlines() if "delayed_end_txn" in line)
    assert "none found, 3 plans" in hunt and "NOTHING EXERCISED" in hunt


def test_a_broker_setting_the_harness_owns_is_refused_before_anything_starts(tmp_path):
    own = tmp_path / "server.properties"
    own.write_text("node.id=7\nmin.insync.replicas=1\n")
    for args in (("--broker-config", "listeners=PLAINTEXT://:9092"),
                 ("--broker-config-file", str(own))):
        done = _run(str(SCRIPT), "run", "--out", str(tmp_path / "runs"), *args)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert "the harness sets" in lines[0] and ("listeners" in lines[0] or "node.id" in lines[0])
        assert not (tmp_path / "runs").exists()


def test_a_history_problem_is_one_line_and_a_warning_one_more(tmp_path):
    """A truncated last line is skipped with a warning; a damaged middle line refuses
    the history. Each reads as one line of its own, with no traceback or source line."""
    good = {"index": 0, "op": 0, "process": "p", "type": "invoke", "f": "commit_txn",
            "time": 1, "value": {}}
    history = tmp_path / "h.jsonl"
    history.write_text(json.dumps(good) + "\n" + '{"index": 1, "op"')
    done = _run(str(SCRIPT), "check", str(history))
    assert done.returncode == 2, done.stderr  # nothing left to judge: UNKNOWN
    assert done.stderr.splitlines() == [
        f"onceproof: warning: {history}:2: skipped a truncated last line (Expecting ':' "
        "delimiter); the writer probably died mid-write"]
    history.write_text(json.dumps(good) + "\n{not json\n" + json.dumps(good) + "\n")
    done = _run(str(SCRIPT), "check", str(history))
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"onceproof: {history}:2: not valid JSON")


def test_check_prints_each_types_first_witnesses(tmp_path):
    """Issue 52, point 3: the terminal summary names the first example's witnesses of
    each type (role, process, op), not only verdict.json and the report. In this
    process (CliRunner), so it is this checkout's code that prints."""
    from tests.histories import History
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    lost = h.send("p0", [(0, 2, 1)])
    h.send("p0", [(0, 3, 2)])
    seek = h.seek("c0", [(0, 0)])
    past = h.poll("c0", [(0, 0, 1), (0, 2, 3)])
    h.close()
    done = CliRunner().invoke(main, ["check", str(h.path), "--json", str(tmp_path / "v.json")])
    assert done.exit_code == 1, done.output
    assert (f"lost_write witnesses: writer: p0 op {lost}; reader: c0 op {past}; "
            f"scan start: c0 op {seek}") in done.output
    assert (f"poll_skip witnesses: reader: c0 op {past}; previous read: c0 op {past}; "
            f"skipped writer: p0 op {lost}") in done.output
    saved = json.loads((tmp_path / "v.json").read_text())
    assert saved["processes"][str(seek)] == "c0"


def test_check_prints_what_was_not_judged(tmp_path):
    """Issue 52, point 4: a VALID verdict says, at the terminal, what it rests on."""
    from tests.histories import History
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.send("p0", [(0, 2, 1)])
    h.assign("c0", [0])                 # no position: c0's scan begins at its read
    h.poll("c0", [(0, 1, 2)])
    h.close()
    done = CliRunner().invoke(main, ["check", str(h.path)])
    assert done.exit_code == 0, done.output
    assert "Not judged, for lack of information:" in done.output
    assert re.search(r"lost_write: 1 acknowledged writes no read returned", done.output)
    assert re.search(r"rewind_mismatch: 1 first reads of runs begun by an assign", done.output)
