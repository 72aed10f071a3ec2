"""Record values of a chosen size (issue 59 point 1): the padding derived from a record's
identity (run/values.py), the plan's and the CLI's value settings, and corrupt_value,
judged on small histories."""
from __future__ import annotations

import gzip
import json
import zlib

import pytest

from onceproof.checkers.store import convert, read_table
from onceproof.run import values as V
from onceproof.workloads.plan import PlanError, largest_value, validate, with_values
from tests.histories import History, example, found, verdict, witnessed

# -- the padding ------------------------------------------------------------------------

def test_without_a_size_a_value_is_its_identity_in_decimal_as_before():
    # Old histories and kept counterexamples were written so: byte-identical.
    assert V.encode(12345) == b"12345"
    assert V.Shape().encode(7, None) == b"7"
    assert V.decode(b"12345") == (12345, None)


@pytest.mark.parametrize("content", ["compressible", "random"])
@pytest.mark.parametrize("size", [32, 100, 1024, 16384])
def test_a_sized_value_has_that_size_names_its_identity_and_reads_back_clean(size, content):
    value = V.encode(987654321, size, content)
    assert len(value) == size
    assert value.startswith(b"987654321:")
    assert V.decode(value) == (987654321, None)
    # Derived from the identity alone: the same every time, different for another.
    assert V.encode(987654321, size, content) == value
    assert V.encode(987654322, size, content)[-16:] != value[-16:]


def test_compressible_values_compress_and_random_ones_do_not():
    comp, rand = V.encode(5, 16384, "compressible"), V.encode(5, 16384, "random")
    assert len(zlib.compress(comp)) < len(comp) / 20
    assert len(zlib.compress(rand)) > len(rand) * 0.99
    assert len(gzip.compress(b"".join(V.encode(v, 1024, "random") for v in range(64)))) > 64 * 1000


@pytest.mark.parametrize("content", ["compressible", "random"])
def test_a_changed_byte_is_found_where_it_is(content):
    value = bytearray(V.encode(42, 4096, content))
    for at in (20, 2000, 4095):
        bad = bytearray(value)
        bad[at] ^= 0x01
        assert V.decode(bytes(bad)) == (42, at)


def test_a_truncated_or_extended_value_is_corrupt_at_the_shorter_length():
    value = V.encode(42, 1000)
    assert V.decode(value[:999]) == (42, 999)
    assert V.decode(value + b"x") == (42, 1000)


def test_a_header_that_names_no_size_or_content_is_corrupt_after_the_identity():
    assert V.decode(b"42:x100:" + b"a" * 92) == (42, 3)
    assert V.decode(b"42:c10:" + b"a" * 3) == (42, 3)  # below the smallest size
    assert V.decode(b"42:c:") == (42, 3)


def test_a_value_that_names_no_identity_reads_as_none_and_corrupt():
    assert V.decode(b"") == (V.NO_IDENTITY, 0)
    assert V.decode(b"x1:c100:") == (V.NO_IDENTITY, 0)


def test_an_identity_changed_in_the_header_is_corrupt_in_its_padding():
    value = V.encode(41, 200)
    changed = b"42" + value[2:]
    identity, corrupt = V.decode(changed)
    assert identity == 42 and corrupt is not None and corrupt >= len(b"42:c200:")


def test_first_difference_halves_down_to_the_byte():
    want = bytes(range(256)) * 64
    for at in (0, 1, 63, 64, 5000, len(want) - 1):
        got = bytearray(want)
        got[at] ^= 0xFF
        assert V.first_difference(bytes(got), want) == at
    assert V.first_difference(want, want) is None


def test_a_shape_draws_sizes_by_identity_whatever_the_partition():
    shape = V.Shape((100, 16384), "random")
    sizes = {v: shape.size(v) for v in range(1, 2001)}
    assert set(sizes.values()) == {100, 16384}
    # Not by identity mod 2, which is the partition of 2 partitions: both sizes in each.
    for parity in (0, 1):
        assert {s for v, s in sizes.items() if v % 2 == parity} == {100, 16384}
    assert V.Shape().size(5) is None and V.Shape((64,)).size(5) == 64


def test_a_shape_comes_from_the_plans_mix():
    assert V.Shape.of({"mix": {"value_bytes": 1024}}) == V.Shape((1024,), "compressible")
    assert V.Shape.of({"mix": {"value_bytes": [100, 200], "value_content": "random"}}) == \
        V.Shape((100, 200), "random")
    assert V.Shape.of({}) == V.Shape()


# -- the plan ---------------------------------------------------------------------------

def _plan(**mix) -> dict:
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"p": {"role": "producer"}},
            "steps": [{"ops": {"p": {"f": "send"}}}]}
    return {**plan, "mix": mix} if mix else plan


@pytest.mark.parametrize("bad, words", [
    (0, "from 32"), (-5, "from 32"), (31, "not 31"), ((1 << 20) + 1, "1 MiB"),
    ("1k", "a size in bytes"), ([], "non-empty list"), ([100, True], "a size in bytes")])
def test_a_plan_refuses_value_sizes_it_cannot_make(bad, words):
    with pytest.raises(PlanError, match=r"mix\.value_bytes") as e:
        validate(_plan(value_bytes=bad))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_plan_refuses_unknown_content():
    with pytest.raises(PlanError, match=r"mix\.value_content: must be one of compressible, random"):
        validate(_plan(value_bytes=100, value_content="zeros"))


def test_value_settings_round_trip_and_name_the_largest_value():
    plan = with_values(_plan(), [100, 16384], "random")
    assert plan["mix"] == {"value_bytes": [100, 16384], "value_content": "random"}
    assert validate(plan).to_dict() == plan
    assert largest_value(plan) == 16384
    assert largest_value(with_values(_plan(), [1024])) == 1024
    assert largest_value(_plan()) is None
    assert with_values(_plan()) == _plan()


# -- corrupt_value ----------------------------------------------------------------------

def _sized_send(h: History, process: str, value: int, offset: int, size: int = 1024) -> int:
    rec = {"topic": "t", "partition": 0, "key": None, "value": value, "size": size}
    op = h.invoke(process, "send", {"records": [rec]})
    h.complete(op, "ok", {"records": [{**rec, "offset": offset}]})
    return op


def _poll(h: History, process: str, records: list[dict]) -> int:
    op = h.invoke(process, "poll", {"isolation": "read_committed"})
    h.complete(op, "ok", {"isolation": "read_committed", "records": [
        {"topic": "t", "partition": 0, "key": None, **r} for r in records]})
    return op


def test_corrupt_value(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _sized_send(h, "p0", 1, 0)
    send = _sized_send(h, "p0", 2, 1)
    poll = _poll(h, "c0", [{"offset": 0, "value": 1}, {"offset": 1, "value": 2, "corrupt": 517}])
    v = verdict(h)
    assert found(v) == {"corrupt_value"} and not v.valid
    ex = example(v, "corrupt_value", process="c0", op=poll, partition=0, offset=1, value=2)
    assert "byte 517" in ex["detail"]
    assert (poll, "reader") in witnessed(ex)
    assert (send, "writer") in witnessed(ex)


def test_sized_values_read_back_clean_are_valid_and_their_sizes_are_kept(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _sized_send(h, "p0", 1, 0, size=100)
    _sized_send(h, "p0", 2, 1, size=16384)
    _poll(h, "c0", [{"offset": 0, "value": 1}, {"offset": 1, "value": 2}])
    v = verdict(h)
    assert v.valid and found(v) == set()
    convert(h.path, tmp_path / "tables")
    writes = read_table(tmp_path / "tables", "writes", ["value", "size"]).to_pylist()
    assert sorted((w["value"], w["size"]) for w in writes) == [(1, 100), (2, 16384)]


def test_a_value_naming_no_identity_is_corrupt_and_unattributed(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _sized_send(h, "p0", 1, 0)
    poll = _poll(h, "c0", [{"offset": 0, "value": V.NO_IDENTITY, "corrupt": 0}])
    v = verdict(h)
    assert {"corrupt_value", "unattributed_read"} <= found(v)
    example(v, "corrupt_value", op=poll, value=V.NO_IDENTITY)


def test_a_history_line_with_a_negative_corrupt_is_refused(tmp_path):
    from onceproof.history.format import HistoryError
    h = History(tmp_path / "h.jsonl")
    _sized_send(h, "p0", 1, 0)
    _poll(h, "c0", [{"offset": 0, "value": 1, "corrupt": -3}])
    with pytest.raises(HistoryError, match="corrupt"):
        verdict(h)


def test_the_history_records_a_sized_value_as_it_was_sent(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _sized_send(h, "p0", 1, 0, size=2048)
    h.close()
    first = json.loads(h.path.read_text().splitlines()[0])
    assert first["value"]["records"][0]["size"] == 2048


# -- the Java agent makes and reads the same bytes --------------------------------------

@pytest.mark.parametrize("identity, size, content", [
    (42, 32, "compressible"), (987654321, 1000, "compressible"), (7, 100, "random"),
    (123456789012, 4096, "random")])
def test_the_java_agent_makes_and_reads_the_same_bytes(identity, size, content):
    import subprocess

    from onceproof.run.jvm_build import ensure_java_client
    dist = ensure_java_client("4.4.0")
    out = subprocess.run(["java", "-cp", dist.classpath, "OnceproofAgent", "--value",
                          str(identity), str(size), content],
                         capture_output=True, text=True, check=True).stdout.split()
    assert bytes.fromhex(out[0]) == V.encode(identity, size, content)
    assert out[1] == f"{identity},-1"


# -- the command line -------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--value-bytes", "0"], "--value-bytes must each be from 32"),
    (["--value-bytes", "-5"], "not -5"),
    (["--value-bytes", "abc"], "--value-bytes takes a size in bytes"),
    (["--value-bytes", "100,2000000"], "not 2000000"),
    (["--value-bytes", "100", "--value-content", "zeros"],
     "--value-content must be compressible or random, not 'zeros'"),
    # Above the topics' max.message.bytes (Kafka's default): refused with the numbers,
    # before any cluster starts.
    (["--value-bytes", "1048576"], "needs 1048704 bytes a record with its headers, above "
                                   "topic in's max.message.bytes 1048588")])
def test_run_refuses_value_settings_in_one_line_before_anything_starts(tmp_path, args, words):
    from click.testing import CliRunner

    from onceproof.cli import main
    done = CliRunner().invoke(main, ["run", *args, "--faults", "none", "--duration", "1",
                                     "--out", str(tmp_path / "runs")])
    assert done.exit_code == 2, done.output
    assert words in done.output and done.output.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_a_plan_whose_values_the_producer_refuses_is_named(tmp_path):
    from onceproof.workloads.plan import value_size_problem
    plan = with_values(_plan(), [500_000])
    assert value_size_problem(plan) is None
    plan["producer"] = {"message.max.bytes": 100_000}
    assert "client p's librdkafka message.max.bytes 100000" in value_size_problem(plan)
    plan = with_values(_plan(), [1 << 20])
    plan["topics"]["t"]["config"] = {"max.message.bytes": 2 << 20}
    plan["producer"] = {"message.max.bytes": 2 << 20}
    assert value_size_problem(plan) is None


def test_the_report_shows_bytes_per_second_beside_ops_per_second(tmp_path):
    from onceproof.report.history import load
    from onceproof.report.page import _throughput
    h = History(tmp_path / "history.jsonl")
    h.skipped = 0
    _sized_send(h, "p0", 1, 0, size=500_000)
    h.skipped += 10**9  # a second later
    _sized_send(h, "p0", 2, 1, size=500_000)
    h.close()
    history = load(tmp_path)
    text = _throughput(history)
    assert "client ops/s" in text and "records/s acknowledged" in text
    # 1 MB acknowledged over the history's span (a second and what the writes took).
    mb = float(text.split(", ")[-1].split(" MB/s")[0])
    assert mb == pytest.approx(1.0 / history.duration, abs=0.01)


# -- compressed transactional writes, on the cluster ------------------------------------

def _compressed_plan(library: str, topic: str) -> dict:
    """Two transactions of a transactional producer with lz4 on, each of 2 KiB
    compressible values (librdkafka compresses a batch only when that makes it
    smaller), then a read_committed consumer reads them back."""
    return {"topics": {topic: {"partitions": 2}},
            "producer": {"compression.type": "lz4"},
            "clients": {"t0": {"role": "txn_producer", "topic": topic, "client": library},
                        "c0": {"role": "consumer", "topic": topic, "client": library}},
            "mix": {"value_bytes": 2048, "value_content": "compressible"},
            "steps": [{"ops": {"t0": {"f": "begin"}}},
                      {"ops": {"t0": {"f": "send", "n": 6}}},
                      {"ops": {"t0": {"f": "commit"}}},
                      {"ops": {"t0": {"f": "begin"}}},
                      {"ops": {"t0": {"f": "send", "n": 6}}},
                      {"ops": {"t0": {"f": "commit"}}},
                      {"ops": {"c0": {"f": "poll", "n": 20, "timeout": 5}}},
                      {"ops": {"c0": {"f": "poll", "n": 20, "timeout": 3}}}]}


def _segment_batches(cluster, topic: str) -> list[str]:
    """What Kafka's own DumpLogSegments says of each batch in the topic's log segments
    on every node that holds a replica (one line per batch)."""
    import subprocess
    import zipfile
    from pathlib import Path

    from onceproof.cluster.provision import ensure_kafka_tools
    # In kafka-tools (Java) in the 4.x releases; in the broker's jar (Scala) before.
    main, classpath = "kafka.tools.DumpLogSegments", None
    if cluster.dist.release >= (3, 5):
        tools = ensure_kafka_tools(cluster.dist.version).classpath
        java_main = "org.apache.kafka.tools.DumpLogSegments"
        if any(java_main.replace(".", "/") + ".class" in zipfile.ZipFile(jar).namelist()
               for entry in tools.split(":") for jar in Path(entry.rstrip("*")).glob("kafka*.jar")):
            main, classpath = java_main, tools
    lines = []
    for node in cluster.topology.nodes:
        for segment in sorted((cluster.node_dir(node) / "data").glob(f"*{topic}-*/*.log")):
            out = subprocess.run(cluster._java(node, main, "--files", str(segment),
                                               classpath=classpath),
                                 capture_output=True, text=True, timeout=120, check=True)
            lines += [line for line in out.stdout.splitlines() if line.startswith("baseOffset:")]
    return lines


@pytest.mark.cluster
@pytest.mark.parametrize("library", ["librdkafka", "java"])
def test_compressed_transactional_writes_are_compressed_on_the_broker_and_read_back_whole(
        library, cluster, tmp_path):
    import uuid

    from onceproof.history.read import read_events
    from onceproof.trial import run_trial
    topic = f"lz4{library}{uuid.uuid4().hex[:6]}"
    trial = run_trial(_compressed_plan(library, topic), cluster, tmp_path)
    assert trial.verdict.valid and not trial.verdict.counts.get("corrupt_value"), \
        trial.verdict.counts
    events = read_events(tmp_path / "history.jsonl")
    assert sum(e["f"] == "commit_txn" and e["type"] == "ok" for e in events) == 2
    read = [(e.get("final"), r) for e in events if e["f"] == "poll" and e["type"] == "ok"
            for r in e["value"]["records"]]
    # Every record read back, each byte of its 2 KiB checked by its reader (no corrupt):
    # by the plan's consumer on the client under test, which reads some of them at least
    # (a cold JVM may fetch late), and by the final reads, which read every partition.
    assert len({r["value"] for _, r in read}) == 12 and not any("corrupt" in r for _, r in read)
    assert any(not final for final, _ in read), "the plan's consumer read nothing back"
    sent = [r for e in events if e["f"] == "send" and e["type"] == "ok" for r in e["value"]["records"]]
    assert {r["size"] for r in sent} == {2048}
    batches = _segment_batches(cluster, topic)
    data = [b for b in batches if "isControl: false" in b]
    markers = [b for b in batches if "isControl: true" in b]
    # Replicated to every node: each holds the data batches and the commit markers.
    assert data and markers, batches
    assert all("isTransactional: true" in b and "compresscodec: lz4" in b for b in data), data
    # Each batch of 2 KiB records of text holds far less than its records' bytes.
    for b in data:
        fields = b.split()
        count, size = (int(fields[fields.index(k) + 1]) for k in ("count:", "size:"))
        assert size < count * 2048 / 4, b


# -- suites and hunts -------------------------------------------------------------------

@pytest.mark.parametrize("command", ["suites", "hunts"])
@pytest.mark.parametrize("args, words", [
    (["--value-bytes", "0"], "--value-bytes must each be from 32"),
    (["--value-bytes", "100", "--value-content", "zeros"],
     "--value-content must be compressible or random, not 'zeros'"),
    (["--value-bytes", "1048576"], "needs 1048704 bytes a record with its headers, above "
                                   "topic t's max.message.bytes 1048588")])
def test_suites_and_hunts_refuse_value_settings_in_one_line_before_anything_starts(
        tmp_path, command, args, words):
    from click.testing import CliRunner

    from onceproof.cli import main
    done = CliRunner().invoke(main, [command, *args, "--only", "correct_transactions"
                                     if command == "suites" else "nothing",
                                     "--artifacts", str(tmp_path / "a")])
    assert done.exit_code == 2, done.output
    assert words in done.output and done.output.count("\n") == 1
    assert not (tmp_path / "a").exists()


def test_a_search_writes_the_value_settings_into_every_plan_it_runs(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from onceproof import search as S
    ran: list[dict] = []
    # What the search hands its trial (the trial itself is the cluster tests' business).
    monkeypatch.setattr(S, "run_trial", lambda plan, *a, **k: ran.append(plan) or
                        SimpleNamespace(exercised={}))
    search = S.Search("s", SimpleNamespace(faults=(), down_nodes=()), tmp_path,
                      app={"producer": {}, "consumer": {},
                           "values": {"value_bytes": [100, 2000], "value_content": "random"}})
    search.run(_plan())
    assert ran[0]["mix"]["value_bytes"] == [100, 2000]
    assert ran[0]["mix"]["value_content"] == "random"


def test_the_large_values_suite_draws_16_kib_compressible_lz4_plans_in_both_shapes():
    from onceproof.workloads.generate import draw_plans
    from onceproof.workloads.suites import SUITES
    suite = SUITES["large_values_compressed"]
    assert suite.known_good
    for mode in ("rounds", "concurrent"):
        plan = draw_plans(suite.strategy(mode=mode), 1, 0)[0]
        assert largest_value(plan) == 16384, mode
        assert validate(plan).mix.value_content == "compressible"
        assert plan["producer"]["compression.type"] == "lz4"
