"""The hand-written KAFKA-12671 plan with the leaders' verification off (plan-noverify.json),
on each client library side by side: librdkafka and the Java client 3.8.0 speak
transaction protocol v1, the Java client of the release v2 (KIP-890 part 2), whose epoch
bump on every commit or abort should fence the held produce where the verification no
longer refuses it.

A run tests that only when the plan did what the bug needs: a send of a transaction was
left unsure, the transaction's abort landed before the heal let the held produce go, and
a later transaction committed (which is what carries the produce in). Each client runs
the plan on one fresh cluster until a run did, at most --runs times; the table gives
every run's anomalies, whether it did, and the transaction protocol its client spoke.

    python docs/findings/kafka-12671-late-produce/clients.py [--runs 6] [--out DIR]
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from onceproof.cluster.cluster import Cluster
from onceproof.history.format import CLUSTER
from onceproof.history.read import read_events
from onceproof.run.backends import client_spec, on_client
from onceproof.trial import run_trial

PLAN = Path(__file__).parent / "plan-noverify.json"
CLIENTS = ("librdkafka", "java", "java:3.8.0")


def did_what_the_bug_needs(events: list[dict]) -> bool:
    """An unsure send's transaction aborted before the heal, and a commit after it."""
    heal = next((i for i, e in enumerate(events) if e["f"] == "heal"), len(events))
    before, after = events[:heal], events[heal:]
    unsure = {e["txn"] for e in events if e["f"] == "send" and e["type"] == "info"}
    aborted = any(e["f"] == "abort_txn" and e["type"] == "ok" and e.get("txn") in unsure
                  for e in before)
    return aborted and any(e["f"] == "commit_txn" and e["type"] == "ok" for e in after)


@click.command()
@click.option("--runs", default=6, show_default=True, help="most runs per client")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None)
def main(runs: int, out: Path | None) -> None:
    out = out or Path(tempfile.mkdtemp(prefix="kafka-12671-clients-"))
    plan = json.loads(PLAN.read_text())
    rows = []
    for client in CLIENTS:
        library, release = client_spec(client)
        folder = out / client.replace(":", "-")
        with Cluster(folder / "cluster", 3) as cluster:
            for k in range(runs):
                trial = run_trial(on_client(plan, library, release), cluster, folder / f"run-{k}")
                events = read_events(trial.history)
                tested = next(e for e in events if e["f"] == CLUSTER)["value"]
                begun = sorted({e["value"].get("txn_protocol") for e in events
                                if e["f"] == "begin_txn" and e["type"] == "ok"} - {None})
                did = did_what_the_bug_needs(events)
                rows.append({"client": client, "run": k, "kafka": tested.get("kafka_version"),
                             "broker": tested.get("broker"), "libraries": tested.get("clients"),
                             "txn_protocols": begun,
                             "did_what_the_bug_needs": did,
                             "anomalies": sorted(trial.verdict.counts),
                             "valid": trial.verdict.valid})
                click.echo(json.dumps(rows[-1]), err=True)
                if did:
                    break
    table = Table(title="KAFKA-12671's plan, verification off, by client")
    for name in ("client", "run", "libraries", "protocol", "did what the bug needs", "anomalies"):
        table.add_column(name)
    for r in rows:
        table.add_row(r["client"], str(r["run"]), json.dumps(r["libraries"]),
                      ",".join(f"v{p}" for p in r["txn_protocols"]) or "-",
                      "yes" if r["did_what_the_bug_needs"] else "no",
                      ", ".join(r["anomalies"]) or "none")
    Console(width=140).print(table)
    (out / "clients.json").write_text(json.dumps(rows, indent=1))
    click.echo(f"figures in {out / 'clients.json'}")


if __name__ == "__main__":
    main()
