"""One plan run and checked in its own folder (`run_trial`), and the smallest failures kept.

A trial's folder holds plan.json, history.jsonl, verdict.json and a copy of the node and
toxiproxy logs. Because the system under test is nondeterministic, a plan that failed
once may pass when Hypothesis replays it; `Counterexamples` keeps the smallest failing
plan it has seen per test, whatever Hypothesis concludes about flakiness.
"""
from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from onceproof.checkers import Verdict, check, known
from onceproof.checkers.store import convert, read_table
from onceproof.cluster.cluster import Cluster
from onceproof.cluster.external import AnyCluster
from onceproof.history.access import values_at
from onceproof.history.format import BEGIN_TXN, COMMIT_TXN, NEMESIS, SEND, STREAMS
from onceproof.run.clients import producer_settings
from onceproof.run.execute import run, under_test
from onceproof.workloads.faults import FAULTS, RELEASE_KINDS, is_undo
from onceproof.workloads.plan import library_of, save, size


@dataclass
class Trial:
    plan: dict
    folder: Path
    verdict: Verdict
    seconds: float
    exercised: Counter[str] = field(default_factory=Counter)  # see `exercised`

    @property
    def anomalies(self) -> set[str]:
        """Every type found, notes included (Verdict.failing: those that fail it)."""
        return {t for t, n in self.verdict.counts.items() if n}

    @property
    def history(self) -> Path:
        """The recorded history (docs/history.md), in folder."""
        return self.folder / "history.jsonl"


def reproduces(saved_for: set[str], verdict: Verdict) -> bool:
    """Whether a run shows again what its plan was saved for (the types that failed the
    saved verdict): one of them fails this verdict too (Verdict.failing: a note does
    not count); for a plan saved for nothing in particular, anything failing it."""
    return bool(verdict.failing & saved_for) if saved_for else bool(verdict.failing)


def run_trial(plan: dict, cluster: AnyCluster, folder: str | Path, spark_master: str | None = None,
              on_progress: Callable[[float, float, str], None] | None = None) -> Trial:
    """Run plan on cluster, recording into folder, and check the history: on the Spark
    cluster at spark_master if one is named, else in this machine's processes."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if cluster.base:
        # The saved plan replays on any cluster with the settings this run had.
        plan = {**plan, "broker": {**cluster.base, **plan.get("broker", {})}}
    save(plan, folder / "plan.json")
    started = time.monotonic()
    result = run(plan, cluster, folder, on_progress)
    # Converted once, here: the check, the evidence below and the report all read it.
    tables = convert(result["history"], folder / "history.parquet")
    verdict = check(tables, spark_master=spark_master)
    seen = exercised(tables, result["history"])
    verdict.tested = {**under_test(cluster), "faults_injected": seen["faults"],
                      "clients": result["clients"], "txn_protocols": result["txn_protocols"],
                      "plan_clients": plan_clients(plan)}
    known.annotate(verdict)  # again, now that each client's library is known
    (folder / "verdict.json").write_text(json.dumps(verdict.to_dict(), indent=1, default=str))
    return Trial(plan, folder, verdict, time.monotonic() - started, seen)


def plan_clients(plan: dict) -> dict[str, dict]:
    """Each plan client's library, and whether its producer is idempotent (the setting
    as the plan gives it): what checkers/known.py matches a witness's process on."""
    out = {}
    for cid, spec in plan["clients"].items():
        idempotent = producer_settings(plan, spec).get("enable.idempotence")
        out[cid] = {"library": library_of(spec), "idempotent": str(idempotent).lower() == "true"}
    return out


def exercised(tables: Path, history: str | Path | None = None) -> Counter[str]:
    """What the clients of a plan did, so a claim that held can be told from one nothing
    tested: completed (ok) client ops per kind (`send`, `commit_txn`, `seek`, ...),
    `acknowledged_writes` (records in ok sends), `records_read` (records ok polls
    returned), `faults` (faults applied, undos left out) and `streams_committed_inputs`
    (the input offsets Streams applications' groups committed, summed), from the
    converted history. The harness's own final reads are left out: every run has them."""
    ops = read_table(tables, "ops", ["op", "process", "f", "type", "final", "n_records",
                                     "invoke_time", "complete_time", "complete_index"]).to_pandas()
    done = ops[(ops["type"] == "ok") & (ops["process"] != NEMESIS) & ~ops["final"].fillna(False)]
    seen: Counter[str] = Counter({f: int(n) for f, n in done["f"].value_counts().items()})
    fired = ops[(ops["type"] == "ok") & (ops["process"] == NEMESIS)]
    seen["faults"] = int(sum(1 for f in fired["f"] if f in FAULTS and not is_undo(f)))
    seen["acknowledged_writes"] = int(done.loc[done["f"] == SEND, "n_records"].sum())
    reads = read_table(tables, "reads", ["final"]).column("final").to_pandas()
    seen["records_read"] = int((~reads.fillna(False).astype(bool)).sum())
    # A Streams application's own commits are not in the history; the final phase's
    # fetch of its group's offsets says how far it got.
    offsets = read_table(tables, "offsets", ["f", "offset"]).to_pandas()
    seen["streams_committed_inputs"] = int(offsets.loc[offsets["f"] == STREAMS, "offset"].sum())
    seen.update(across_release_change(ops, tables, history))
    return +seen


def across_release_change(ops, tables: Path, history: str | Path | None) -> Counter[str]:
    """For a run that changed releases or finalized a feature (an ok upgrade, downgrade
    or finalize of the nemesis): the transactions committed before the first change
    began (`txns_committed_before_change`), while the changes went on, from its invoke to
    the last one's completion, nodes on two releases or a feature changing
    (`..._during_change`), and after (`..._after_change`); and, once
    transaction.version was finalized at 2 or more, the transactions begun after that on
    each protocol the clients said (`txns_begun_v1_after_finalize`,
    `txns_begun_v2_after_finalize`; only the Java client says it: docs/history.md)."""
    out: Counter[str] = Counter()
    changes = ops[(ops["process"] == NEMESIS) & (ops["type"] == "ok")
                  & ops["f"].isin(RELEASE_KINDS)]
    if changes.empty:
        return out
    first, last = changes["invoke_time"].min(), changes["complete_time"].max()
    client = ops[(ops["process"] != NEMESIS) & (ops["type"] == "ok") & ~ops["final"].fillna(False)]
    commits = client.loc[client["f"] == COMMIT_TXN, "complete_time"]
    out["txns_committed_before_change"] = int((commits < first).sum())
    out["txns_committed_during_change"] = int(((commits >= first) & (commits <= last)).sum())
    out["txns_committed_after_change"] = int((commits > last).sum())
    params = read_table(tables, "faults", ["op", "value"]).to_pandas().set_index("op")["value"]
    v2_at = [t for op, t in changes.loc[changes["f"] == "finalize", ["op", "complete_time"]]
             .itertuples(index=False) if _v2_finalize(params.get(op))]
    if not v2_at or history is None:
        return out
    begins = client[(client["f"] == BEGIN_TXN) & (client["invoke_time"] > min(v2_at))]
    for value in values_at(history, begins["complete_index"].dropna().astype(int)).values():
        if value.get("txn_protocol"):
            out[f"txns_begun_v{value['txn_protocol']}_after_finalize"] += 1
    return out


def _v2_finalize(value) -> bool:
    """Whether a finalize step's parameters (as the faults table keeps them) set
    transaction.version to 2 or more."""
    step = json.loads(value) if isinstance(value, str) else value or {}
    level = step.get("level")
    return (step.get("feature") == "transaction.version" and isinstance(level, int)
            and level >= 2)


def keep_logs(cluster: AnyCluster, folder: Path) -> None:
    if not isinstance(cluster, Cluster):
        return  # the logs of a cluster the harness did not start are its owner's
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    for node in cluster.topology.nodes:
        src = cluster.node_dir(node) / "server.log"
        if src.exists():
            shutil.copy(src, logs / f"node{node}.log")
    if (cluster.root / "toxiproxy.log").exists():
        shutil.copy(cluster.root / "toxiproxy.log", logs / "toxiproxy.log")


class Counterexamples:
    """The smallest failing plan per name of those offered to this store, saved under
    root/name/ with its evidence.

    A folder an earlier run left under that name is replaced by the first failure
    offered, even when its plan is smaller: what a search reports of its counterexample
    (its size, what it showed, how often its replays reproduce it) must be of a plan
    this search found, not of another run's in the same artifacts folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._kept: dict[str, int] = {}  # name -> size of the plan saved for it here

    def folder(self, name: str) -> Path:
        return self.root / name

    def offer(self, name: str, trial: Trial, cluster: AnyCluster) -> bool:
        """Keep trial if it is the first or the smallest failure offered for name."""
        if name in self._kept and self._kept[name] <= size(trial.plan):
            return False
        dest = self.folder(name)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(trial.folder, dest)
        keep_logs(cluster, dest)
        self._kept[name] = size(trial.plan)
        return True
