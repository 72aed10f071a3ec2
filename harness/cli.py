"""The `onceproof` command: one subcommand per stage of plan -> run -> history -> check.

Every subcommand turns the harness's own failures (SetupError) into one line on stderr and
exit code 2, so "Kafka is broken" (exit 1) is never confused with "the harness is broken".
"""
from __future__ import annotations

import sys

import click

from .errors import SetupError


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SetupError as exc:
            click.echo(f"onceproof: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
def main() -> None:
    """Evidence, not marketing, for Kafka's exactly-once claims."""


def _default_cluster_dir() -> str:
    from .provision import cache_dir
    return str(cache_dir() / "clusters" / "default")


kafka_version_option = click.option(
    "--kafka-version", envvar="ONCEPROOF_KAFKA_VERSION", default=None,
    help="Kafka release from Maven Central (default: the newest tested 4.x).")
cluster_dir_option = click.option(
    "--dir", "root", default=_default_cluster_dir, show_default="~/.cache/onceproof/clusters/default",
    help="Where the cluster keeps its data, logs and state.")


@main.group()
def cluster() -> None:
    """Stand up, inspect and tear down a local cluster behind toxiproxy."""


@cluster.command()
@click.option("--nodes", default=3, show_default=True, help="Number of KRaft nodes.")
@kafka_version_option
@cluster_dir_option
def up(nodes: int, kafka_version: str | None, root: str) -> None:
    """Start a cluster that keeps running after this command returns."""
    from . import cluster as cl
    if cl.status(root).get("running"):
        raise SetupError(f"a cluster is already running in {root}; "
                         f"stop it with `onceproof cluster down --dir {root}`")
    c = cl.Cluster(root, nodes, kafka_version, owned=False)
    c.up()
    click.echo(f"ready: Kafka {c.dist.version}, {nodes} nodes, bootstrap {c.bootstrap}")
    click.echo(f"logs and state in {c.root}")


@cluster.command()
@cluster_dir_option
def down(root: str) -> None:
    """Stop the cluster started by `onceproof cluster up`."""
    from . import cluster as cl
    stopped = cl.stop_detached(root)
    click.echo(f"stopped {stopped} processes" if stopped else f"no cluster running in {root}")


@cluster.command()
@cluster_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(root: str, as_json: bool) -> None:
    """Show nodes, proxies and the faults in force."""
    import json as _json

    from rich.console import Console
    from rich.table import Table

    from . import cluster as cl
    st = cl.status(root)
    if as_json:
        click.echo(_json.dumps(st, indent=1))
        return
    if "nodes" not in st:
        click.echo(f"no cluster in {root}; start one with `onceproof cluster up`")
        sys.exit(3)
    console = Console()
    console.print(f"Kafka {st['kafka_version']}  bootstrap {st['bootstrap']}  "
                  f"toxiproxy {st['toxiproxy']['api']} "
                  f"({'up' if st['toxiproxy']['alive'] else 'DOWN'})")
    nodes = Table("node", "pid", "state", title="Nodes")
    for n in st["nodes"]:
        state = "paused" if n["paused"] else "running" if n["alive"] else "down"
        nodes.add_row(str(n["node"]), str(n["pid"]), state)
    console.print(nodes)
    proxies = Table("proxy", "listen", "upstream", "enabled", "toxics", title="Proxies")
    for name, p in sorted(st["proxies"].items()):
        toxics = ", ".join(t["type"] + "/" + t["stream"] for t in p.get("toxics", []))
        proxies.add_row(name, p["listen"], p["upstream"], "yes" if p["enabled"] else "NO", toxics)
    console.print(proxies)
    faults = [f"{f['fault']} {({k: v for k, v in f.items() if k != 'fault'})}" for f in st["faults"]]
    console.print("Active faults: " + ("; ".join(faults) if faults else "none"))
