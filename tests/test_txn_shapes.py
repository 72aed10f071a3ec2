"""Transactions shaped like applications and client-side faults, without a cluster
(issue 59 points 2 to 4): the mix's txn_sends and txn_pause_ms as next_op draws them and
shrinking reduces them, their checks in one line; pause_client and resume_client as the
registry acts them on a scene's clients; a crash's identity; the application's client
settings as the command line gives them to plans."""
from __future__ import annotations

import subprocess

import pytest
from hypothesis import find, settings

from onceproof.report import faults as report_faults
from onceproof.run.backends import librdkafka_unknown, on_client, settings_in_force
from onceproof.run.clients import RunContext
from onceproof.workloads import faults
from onceproof.workloads.ops import PAUSE_MS, Seeded, closing_op, next_op
from onceproof.workloads.plan import PlanError, validate
from onceproof.workloads.settings import SettingsError, parse_application
from onceproof.workloads.strategies import concurrent_plans, plans


def _stream(role: str, mix: dict, n: int, seed: int = 1) -> list[dict]:
    state: dict = {}
    choose = Seeded(seed)
    return [op for _ in range(n) if (op := next_op(role, state, choose, mix)) is not None]


def _transactions(ops: list[dict]) -> list[list[dict]]:
    """The ops between each begin and the commit or abort that ends it, that one included."""
    out: list[list[dict]] = []
    for op in ops:
        if op["f"] == "begin":
            out.append([])
        elif out:
            out[-1].append(op)
    return [t for t in out if t and t[-1]["f"] in ("commit", "abort")]


@pytest.mark.parametrize("seed", range(5))
def test_txn_sends_draws_each_transactions_sends_from_its_range(seed):
    txns = _transactions(_stream("txn_producer", {"txn_sends": [3, 6]}, 200, seed))
    assert len(txns) > 10
    for t in txns:
        sends = [op for op in t if op["f"] == "send"]
        assert 3 <= len(sends) <= 6 and t[:-1] == sends
    assert len({sum(op["f"] == "send" for op in t) for t in txns}) > 1  # drawn, not fixed


def test_a_read_write_transaction_polls_before_each_of_its_sends():
    for t in _transactions(_stream("rw_txn", {"txn_sends": [2, 2]}, 100)):
        assert [op["f"] for op in t[:-1]] == ["poll", "send", "poll", "send"]


@pytest.mark.parametrize("seed", range(5))
def test_a_transaction_pauses_once_between_sends_or_before_its_end(seed):
    txns = _transactions(_stream("txn_producer", {"txn_sends": [1, 4],
                                                  "txn_pause_ms": [100, 900]}, 300, seed))
    places = set()
    for t in txns:
        paused = [i for i, op in enumerate(t) if PAUSE_MS in op]
        assert len(paused) == 1 and 100 <= t[paused[0]][PAUSE_MS] <= 900
        assert paused[0] >= 1  # never before the first send: the transaction holds data
        places.add("end" if paused[0] == len(t) - 1 else "between sends")
    assert places == {"end", "between sends"}
    # Without txn_sends, the pause comes before the commit or the abort.
    for t in _transactions(_stream("txn_producer", {"txn_pause_ms": [5, 5]}, 200, seed)):
        assert [op.get(PAUSE_MS) for op in t] == [None] * (len(t) - 1) + [5]


def test_a_pipeline_processes_batches_with_a_pause_in_their_transaction():
    ops = _stream("pipeline", {"txn_sends": [2, 5], "txn_pause_ms": [0, 50]}, 50)
    assert all(2 <= op["rounds"] <= 5 and 2 <= op["pause_before"] <= op["rounds"] + 1
               and 0 <= op["pause_ms"] <= 50 for op in ops)
    assert {op["pause_before"] == op["rounds"] + 1 for op in ops} == {True, False}


def test_closing_a_shaped_transaction_commits_at_once():
    state: dict = {}
    choose = Seeded(3)
    mix = {"txn_sends": [5, 5], "txn_pause_ms": [1000, 1000]}
    next_op("txn_producer", state, choose, mix)
    next_op("txn_producer", state, choose, mix)
    assert closing_op("txn_producer", state) == {"f": "commit"} and state == {}
    assert next_op("txn_producer", state, choose, mix) == {"f": "begin"}


def _all_ops(plan: dict) -> list[dict]:
    return [op for step in plan["steps"] for op in (step.get("ops") or {}).values()]


def test_shrinking_reduces_sends_and_pauses_to_their_low_end():
    options = {"txn_sends": [2, 8], "txn_pause_ms": [10, 60000]}
    strategy = plans("transactions", faults=(), min_rounds=4, max_rounds=30, options=options)

    def many_sends_and_a_pause(plan: dict) -> bool:
        txns = _transactions([op for step in plan["steps"] for cid, op in
                              sorted((step.get("ops") or {}).items()) if cid == "t0"])
        return any(sum(op["f"] == "send" for op in t) >= 4 and any(PAUSE_MS in op for op in t)
                   for t in txns)
    smallest = find(strategy, many_sends_and_a_pause, settings=settings(max_examples=2000,
                                                                        database=None))
    t0 = [op for step in smallest["steps"] for cid, op in (step.get("ops") or {}).items()
          if cid == "t0"]
    txn = next(t for t in _transactions(t0) if sum(op["f"] == "send" for op in t) >= 4)
    assert sum(op["f"] == "send" for op in txn) == 4
    assert [op[PAUSE_MS] for op in txn if PAUSE_MS in op] == [10]
    validate(smallest)


@pytest.mark.parametrize("mix,where", [
    ({"txn_sends": [0, 3]}, "mix.txn_sends"), ({"txn_sends": [4, 2]}, "mix.txn_sends"),
    ({"txn_sends": [1, 51]}, "mix.txn_sends"), ({"txn_sends": 3}, "mix.txn_sends"),
    ({"txn_sends": [1.5, 2]}, "mix.txn_sends"), ({"txn_pause_ms": [-1, 5]}, "mix.txn_pause_ms"),
    ({"txn_pause_ms": [0, 120001]}, "mix.txn_pause_ms"), ({"txn_pause_ms": [True, 2]}, "mix.txn_pause_ms"),
])
def test_a_bad_range_is_refused_in_one_line(mix, where):
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"t0": {"role": "txn_producer"}},
            "duration": 5, "mix": mix}
    with pytest.raises(PlanError) as caught:
        validate(plan)
    assert str(caught.value).startswith(f"plan {where}: must ") and "\n" not in str(caught.value)


@pytest.mark.parametrize("op,words", [
    ({"f": "send", "pause_ms": -1}, "pause_ms must be milliseconds from 0 to 120000"),
    ({"f": "commit", "pause_ms": "soon"}, "pause_ms must be milliseconds"),
    ({"f": "send", "rounds": 2}, "rounds is a process op's"),
])
def test_a_bad_op_shape_is_refused_in_one_line(op, words):
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"t0": {"role": "txn_producer"}},
            "steps": [{"ops": {"t0": op}}]}
    with pytest.raises(PlanError, match=r"^plan steps\[0\]\.ops\.t0: " + words):
        validate(plan)
    validate({**plan, "steps": [{"ops": {"t0": {"f": "send", "pause_ms": 100}}}]})


# ---- client-side faults ------------------------------------------------------------------

class _Processes:
    """A scene's clients, as run/fleet.py's Fleet offers them, recording the calls."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.paused: set[str] = set()

    def pause(self, client):
        self.calls.append(("pause", client))
        self.paused.add(client)
        return [client]

    def resume(self, client):
        self.calls.append(("resume", client))
        out = sorted(self.paused if client is None else self.paused & {client})
        self.paused -= set(out)
        return out


class _Cluster:
    def heal(self):
        pass

    def heal_all(self):
        pass


def test_pause_client_stops_a_client_and_fires_its_resume_later():
    later: list = []
    clients = _Processes()
    scene = faults.Scene(_Cluster(), ["t"], None, clients, lambda s, step: later.append((s, step)))
    done = faults.apply(scene, {"f": "pause_client", "client": "x0", "ms": 25000})
    assert done == {"f": "pause_client", "client": "x0", "ms": 25000, "processes": ["x0"]}
    assert later == [(25.0, {"f": "resume_client", "client": "x0"})]
    # A heal continues every paused client, and says so; the later resume finds none.
    assert faults.apply(scene, {"f": "heal"}) == {"f": "heal", "resumed": ["x0"]}
    assert faults.apply(scene, later[0][1])["processes"] == []
    assert faults.apply(scene, {"f": "heal", "all": True}) == {"f": "heal", "all": True}


def test_a_client_fault_names_a_client_of_the_plan_of_any_role():
    plan = {"topics": {"t": {"partitions": 1}},
            "clients": {"p0": {"role": "producer"}, "c0": {"role": "consumer"}},
            "steps": [{"fault": {"f": "pause_client", "client": "c0", "ms": 1}},
                      {"fault": {"f": "resume_client"}}]}
    validate(plan)
    for step, words in (({"f": "pause_client", "client": "z9", "ms": 5},
                         "pause_client's client names no client of the plan: 'z9'"),
                        ({"f": "pause_client", "client": "p0", "ms": 600001}, "pause_client.s ms must be"),
                        ({"f": "pause_client", "client": "p0"}, "pause_client needs ms")):
        with pytest.raises(PlanError, match=r"^plan steps\[0\]\.fault: " + words):
            validate({**plan, "steps": [{"fault": step}]})


def test_pauses_are_drawn_around_the_timeouts_in_force():
    assert faults.pause_lengths({}) == [10000, 30000]
    plan = {"clients": {"x0": {"role": "pipeline", "config": {"max.poll.interval.ms": 60000}}},
            "producer": {"transaction.timeout.ms": 8000}}
    assert faults.pause_lengths(plan) == [4000, 10000, 12000, 30000, 90000]


def test_each_pause_window_ends_at_its_own_clients_resume(tmp_path):
    from onceproof.history.writer import HistoryWriter
    from onceproof.report.history import load
    seconds = iter(range(100))
    with HistoryWriter(tmp_path / "history.jsonl", clock=lambda: int(next(seconds) * 1e9)) as w:
        ids = {}
        for key, f, value in (("a", "pause_client", {"f": "pause_client", "client": "a", "ms": 9}),
                              ("b", "pause_client", {"f": "pause_client", "client": "b", "ms": 9}),
                              ("ra", "resume_client", {"f": "resume_client", "client": "a"}),
                              ("h", "heal", {"f": "heal"})):
            ids[key] = w.invoke("nemesis", f, value)
            w.ok(ids[key], value)
    h = load(tmp_path)
    wins = {win.label: win for win in report_faults.windows(h.fault_ops, h.duration)}
    assert wins["pause_client a 9ms"].closed_by == ids["ra"]
    assert wins["pause_client b 9ms"].closed_by == ids["h"]
    assert wins["pause_client a 9ms"].category == "client"


# ---- a crash's identity ------------------------------------------------------------------

def test_a_crash_comes_back_under_the_same_or_a_fresh_transactional_id():
    ctx = RunContext(None, {}, "r1", {"t": 1}, {"t0": {"role": "txn_producer"}})  # type: ignore[arg-type]
    assert ctx.tid("t0") == "onceproof-r1-tx-t0"
    ctx.identities["t0"] = 2
    assert ctx.tid("t0") == "onceproof-r1-tx-t0~2"
    assert ctx.client_of_tid("onceproof-r1-tx-t0~2") == ctx.client_of_tid(
        "onceproof-r1-tx-t0") == "t0"
    assert ctx.client_of_tid("onceproof-r1-tx-t9") is None
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"t0": {"role": "txn_producer"}},
            "duration": 5, "schedule": [{"at": 1, "crash": "t0", "identity": "fresh"},
                                        {"at": 2, "crash": "t0"}]}
    parsed = validate(plan)
    assert [e.fresh for e in parsed.schedule] == [True, False]
    assert parsed.to_dict() == plan
    with pytest.raises(PlanError, match=r"^plan schedule\[0\]\.identity: must be same or fresh"):
        validate({**plan, "schedule": [{"at": 1, "crash": "t0", "identity": "new"}]})


def test_concurrent_plans_draw_fresh_identities_for_transactional_clients_only():
    strategy = concurrent_plans("transactions", faults=(), duration=(120, 120), crash_every=10)
    smallest = find(strategy, lambda p: any(e.get("identity") == "fresh" for e in p["schedule"]),
                    settings=settings(max_examples=500, database=None))
    validate(smallest)
    for entry in smallest["schedule"]:
        if "identity" in entry:
            assert smallest["clients"][entry["crash"]]["role"] in ("txn_producer", "rw_txn")
    # The simplest plan of all crashes under the same id: the old form.
    plain = find(strategy, lambda p: bool(p["schedule"]), settings=settings(database=None))
    assert all("identity" not in e for e in plain["schedule"])


# ---- the application's client settings ----------------------------------------------------

def test_the_plans_own_settings_win_over_the_command_lines():
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}},
            "steps": [], "producer": {"linger.ms": 7}}
    out = on_client(plan, producer={"linger.ms": 50, "batch.num.messages": 500},
                    consumer={"fetch.wait.max.ms": 100})
    assert out["producer"] == {"linger.ms": 7, "batch.num.messages": 500}
    assert out["consumer"] == {"fetch.wait.max.ms": 100}
    force = settings_in_force(out)
    assert force["producer"]["linger.ms"] == 7 and force["producer"]["acks"] == "all"
    assert force["consumer"] == {"isolation.level": "read_committed", "fetch.wait.max.ms": 100}


def test_application_settings_are_typed_and_checked(tmp_path):
    f = tmp_path / "app.properties"
    f.write_text("# mine\nacks=1\nenable.idempotence=false\nlinger.ms=20\n")
    assert parse_application("producer", ("linger.ms=50",), f) == {
        "acks": 1, "enable.idempotence": False, "linger.ms": 50}
    for pairs, words in ((("nonsense",), "--producer-config 'nonsense': write it as KEY=VALUE"),
                         (("transactional.id=x",), "the harness sets transactional.id"),
                         (("Bad Name=1",), "is not a Kafka setting name")):
        with pytest.raises(SettingsError, match=words):
            parse_application("producer", pairs)


def test_librdkafka_names_the_settings_it_does_not_know():
    plan = {"clients": {"p0": {"role": "producer", "config": {"linger.msec": 5}}},
            "producer": {"acks": "all", "compression.type": "lz4"},
            "consumer": {"max.poll.interval.ms": 1000, "fetch.max.wait.ms": 10}}
    assert librdkafka_unknown(plan, "p0", None) == ["fetch.max.wait.ms", "linger.msec"]


@pytest.mark.parametrize("args,words", [
    (("run", "--producer-config", "linger.msec=5"),
     "--producer-config: librdkafka 2"),
    (("run", "--consumer-config", "fetch.max.wait.ms=5"), "knows no setting fetch.max.wait.ms"),
    (("run", "--producer-config", "acks"), "write it as KEY=VALUE"),
    (("replay", "--producer-config-file", "/nonexistent.properties", "plan.json"),
     "cannot read producer config file"),
    (("suites", "--producer-config", "bootstrap.servers=x"), "the harness sets bootstrap.servers"),
    (("hunts", "--consumer-config", "no.such.setting=1"), "knows no setting no.such.setting"),
    (("run", "--txn-sends", "0-3"), "--txn-sends takes LOW-HIGH with 1 <= LOW <= HIGH <= 50"),
    (("run", "--txn-sends", "many"), "--txn-sends takes a range LOW-HIGH such as 2-10"),
    (("run", "--txn-pause-ms", "9-200000"), "--txn-pause-ms takes LOW-HIGH with 0 <= LOW"),
])
def test_a_bad_client_setting_is_one_line_before_anything_starts(args, words, tmp_path):
    out = subprocess.run(["onceproof", *args], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1 and words in lines[0], out.stderr
    assert not list(tmp_path.iterdir())  # nothing started: no cluster, no artifacts


@pytest.mark.parametrize("mode", ["concurrent", "rounds"])
def test_the_run_commands_transaction_shape_reaches_the_plans_it_draws(mode):
    """`onceproof run --txn-sends 3-6 --txn-pause-ms 100-500`: a concurrent plan carries
    the ranges in its mix, a rounds plan's transactional ops were drawn with them."""
    from onceproof.run_job import JobOptions, draw_plans
    shape = {"txn_sends": [3, 6], "txn_pause_ms": [100, 500]}
    opts = JobOptions(workload="transactions", mode=mode, duration=20, txn_shape=shape)
    plan = draw_plans(opts.strategy(), 1, 3)[0]
    if mode == "concurrent":
        assert {k: plan["mix"][k] for k in shape} == shape
    else:
        paused = [op[PAUSE_MS] for s in plan["steps"] for op in s.get("ops", {}).values()
                  if PAUSE_MS in op]
        assert paused and all(100 <= ms <= 500 for ms in paused), paused
    validate(plan)
