"""The client backends: the client libraries a plan client can run on, one entry each.

A backend is what the rest of the harness asks about a library: how to install it, which
host starts and speaks to one client process on it (run/host.py's HostedClient, whose
messages are run/protocol.py's), which roles it runs, which settings it refuses, and
what a run records about it. A new backend is its own module(s) and one entry here;
tests/test_backends.py's conformance test then runs it beside the others.

Which names a plan client's "client" may take is this registry's to say: the plan layer
(workloads/plan.py), which imports nothing of the run, checks only that it is a name, and
`refuse` (given every plan before anything starts: `on_client`, `prepare`) checks it here.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import KafkaException, Producer, libversion

from onceproof.run import jvm
from onceproof.run.clients import CLIENTS
from onceproof.run.host import HostedClient
from onceproof.workloads.ops import ROLES, STREAMS
from onceproof.workloads.plan import (
    JAVA,
    LIBRDKAFKA,
    RELEASE,
    PlanError,
    library_of,
    validate,
)

if TYPE_CHECKING:
    from onceproof.cluster.external import AnyCluster


class Prepared(Protocol):
    """What a backend made ready for one run; its release is what the run records."""
    @property
    def version(self) -> str: ...


@dataclass(frozen=True)
class Linked:
    """A library the harness's own process has loaded (librdkafka, by confluent-kafka)."""
    version: str


@dataclass(frozen=True)
class Backend:
    name: str  # what --client and a plan client's "client" say
    title: str  # what a message calls it
    about: str  # for --client's help
    # Runs one client process and speaks to it.
    host: type[HostedClient]
    # The roles it runs; a plan that gives it another is refused before the run starts.
    roles: frozenset[str]
    # What `onceproof install` fetches and builds for the Kafka release it names: a line
    # saying what and where, or None for a library that comes with onceproof's own
    # dependencies.
    install: Callable[[str], str | None]
    # What a run's clients on it need, fetched and built if need be (raises SetupError or
    # PlanError); given the plan and the cluster under test.
    prepare: Callable[[dict, AnyCluster], Prepared]
    # The settings a plan client is given that it knows under no name: (plan, client
    # id, what prepare gave). Plans are written in librdkafka's names (docs/plans.md);
    # a backend maps them to its own in its host.
    unknown_settings: Callable[[dict, str, Any], list[str]]
    # Whether its begin_txn ok says the transaction protocol it spoke (`txn_protocol`,
    # docs/history.md); a backend that cannot ask its library leaves it out.
    says_txn_protocol: bool
    # What prepare would give, as far as it is known before any cluster starts (to refuse
    # an application's settings, --producer-config, before a cluster is made): given the
    # client's release when the run names one; None when it cannot say yet.
    early: Callable[[str | None], Prepared | None]
    # What to say after "<title> <release> knows no setting X".
    unknown_advice: str
    # Whether a run may name its release of kafka-clients (--java-client-version, the
    # plan's java_client, a suite's --client NAME:RELEASE); else it is the one installed.
    takes_release: bool = False


_NO_SUCH = re.compile(r'No such configuration property: "([^"]+)"')


@lru_cache(maxsize=256)
def _librdkafka_knows(name: str) -> bool:
    """Whether librdkafka has a setting of this name (global or topic, producer or
    consumer: one namespace), as its configuration says when a client is made with it
    (no connection is made: no servers are given)."""
    try:
        Producer({name: "1", "log_level": 0})
    except KafkaException as exc:
        return _NO_SUCH.search(str(exc)) is None  # a value it refused: the name is known
    except (TypeError, ValueError):
        return True  # confluent-kafka's own settings (on_delivery, logger...)
    return True


def librdkafka_unknown(plan: dict, cid: str, prepared: Any) -> list[str]:
    """The settings a librdkafka plan client is given that librdkafka knows under no name."""
    spec = plan["clients"][cid]
    given = {**plan.get("producer", {}), **plan.get("consumer", {}), **spec.get("config", {})}
    return sorted(k for k in given if not _librdkafka_knows(k))


def _java_install(release: str) -> str:
    from onceproof.run.jvm_build import ensure_java_client
    dist = ensure_java_client(release)
    return f"Java client {dist.version}: {dist.home}"


def _java_early(release: str | None) -> Prepared | None:
    from onceproof.run.jvm_build import ensure_java_client
    return ensure_java_client(release) if release else None


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    # librdkafka through confluent-kafka, in a forked Python process (run/host.py,
    # run/clients.py). It has no Kafka Streams, and speaks only the first transaction
    # protocol, which it does not report.
    Backend(LIBRDKAFKA, "librdkafka", "the default", HostedClient, frozenset(CLIENTS),
            install=lambda release: None,
            prepare=lambda plan, cluster: Linked(libversion()[0]),
            unknown_settings=librdkafka_unknown,
            says_txn_protocol=False,
            early=lambda release: Linked(libversion()[0]),
            unknown_advice="; drop it, or name it as librdkafka's CONFIGURATION.md does"),
    # The Java client (kafka-clients) of a release, and Kafka Streams of the same, in a
    # JVM running the agent (run/jvm.py, run/java/OnceproofAgent.java).
    Backend(JAVA, "the Java client", "the Java client, transaction protocol v2 from 4.0", jvm.JavaClient,
            frozenset(ROLES), install=_java_install, prepare=jvm.prepare,
            unknown_settings=jvm.unknown_settings, says_txn_protocol=True, early=_java_early,
            unknown_advice=" (a librdkafka name?); drop it or run the client on librdkafka",
            takes_release=True),
)}


def of(spec: dict) -> Backend:
    """The backend a plan client runs on (`refuse` has checked it is one)."""
    return BACKENDS[library_of(spec)]


def refuse(plan: dict) -> None:
    """Refuse, in one line, a plan client that names no backend, or whose backend does not
    run its role."""
    for cid, spec in plan["clients"].items():
        if library_of(spec) not in BACKENDS:
            raise PlanError(f"plan clients.{cid}.client: must be one of {', '.join(BACKENDS)}, "
                            f"not {spec['client']!r}")
        backend = of(spec)
        if spec["role"] not in backend.roles:
            others = [b.name for b in BACKENDS.values() if spec["role"] in b.roles]
            raise PlanError(f"plan clients.{cid}: {backend.name} runs no {spec['role']} client; "
                            f"run it on {' or '.join(others) or 'no backend'} (its \"client\")")


def prepare(plan: dict, cluster: AnyCluster) -> dict[str, Prepared]:
    """Each backend the plan's clients run on, made ready for the run, in the registry's
    order; a client, a role or a setting one of them would not take is refused first."""
    refuse(plan)
    used = {library_of(spec) for spec in plan["clients"].values()}
    prepared = {name: b.prepare(plan, cluster) for name, b in BACKENDS.items() if name in used}
    for cid, spec in plan["clients"].items():
        backend = of(spec)
        if (unknown := backend.unknown_settings(plan, cid, prepared[backend.name])):
            said = unknown_text(backend.name, prepared[backend.name], unknown)
            raise PlanError(f"plan clients.{cid}: {said}")
    return prepared


def unknown_text(library: str, prepared: Prepared, unknown: list[str]) -> str:
    """What to say of settings a backend's client does not know."""
    backend = BACKENDS[library]
    return (f"{backend.title} {prepared.version} knows no setting {', '.join(unknown)}"
            f"{backend.unknown_advice}")


def unknown_application_settings(producer: dict, consumer: dict, library: str,
                                 prepared: Prepared) -> list[str]:
    """Which of an application's producer and consumer settings (--producer-config,
    --consumer-config) a backend's client knows under no name, asked before a run."""
    plan = {"clients": {"_": {"role": "txn_producer"}}, "producer": producer,
            "consumer": consumer}
    return BACKENDS[library].unknown_settings(plan, "_", prepared)


def settings_in_force(plan: dict) -> dict:
    """The plan-wide client settings a run's clients start from, as its history's
    cluster op and its report list them: the harness's defaults under the plan's
    `producer` and `consumer` (which --producer-config and --consumer-config fill), and
    each client's own `config` over them; secrets shown as (set)."""
    from onceproof.run.clients import consumer_settings, producer_settings
    from onceproof.workloads.settings import shown
    out = {"producer": shown(producer_settings(plan, {})),
           "consumer": shown(consumer_settings(plan, {}))}
    own = {cid: shown(spec["config"]) for cid, spec in plan["clients"].items() if spec.get("config")}
    return {**out, **({"clients": own} if own else {})}


def recorded(prepared: dict[str, Prepared]) -> dict[str, str]:
    """The client libraries a run drives, with their releases, as its history, summary
    and verdict name them."""
    return {name: p.version for name, p in prepared.items()}


def client_spec(text: str) -> tuple[str, str | None]:
    """A side-by-side client (suites' and hunts' --client): a backend's name, or one that
    takes a release at a release, `java:3.8.0`; (name, release or None)."""
    name, colon, release = text.partition(":")
    backend = BACKENDS.get(name)
    if backend is None or (colon and (not backend.takes_release or not RELEASE.fullmatch(release))):
        at = "".join(f", or {b.name}:RELEASE for {b.title} of a kafka-clients release such as "
                     f"{b.name}:3.8.0" for b in BACKENDS.values() if b.takes_release)
        raise PlanError(f"unknown client {text!r}: use one of {', '.join(BACKENDS)}{at} (--client)")
    return name, release or None


def side_by_side_help() -> str:
    """Suites' and hunts' --client help: every backend, and those taking a release."""
    at = "".join(f", or {b.name}:RELEASE for {b.title} of that kafka-clients release"
                 for b in BACKENDS.values() if b.takes_release)
    return (f"Run every plan's clients that name no client library on this one: "
            f"{', '.join(BACKENDS)}{at} (repeatable: the same searches on each, a column per "
            f"client; default: as the plans say, {LIBRDKAFKA} unless they name another).")


def on_client(plan: dict, library: str | None = None, java_version: str | None = None,
              producer: dict | None = None, consumer: dict | None = None) -> dict:
    """The plan with `library` for every client that names none (a streams client runs
    on Java: its role is Kafka Streams), `java_version` as the Java client's release (a
    run's --client and --java-client-version), and the application's `producer` and
    `consumer` settings (--producer-config, --consumer-config) under the plan's own,
    which win: written into the plan, so that its saved copy replays the same. Its
    clients are then refused here, in one line, if a backend would not run them."""
    if library is not None and library not in BACKENDS:
        raise PlanError(f"unknown client {library!r}: use one of {', '.join(BACKENDS)} (--client)")
    if java_version is not None and not RELEASE.fullmatch(java_version):
        raise PlanError(f"unknown Java client version {java_version!r}: name a kafka-clients "
                        "release like 3.8.0 (--java-client-version)")
    out = dict(plan)
    if library is not None:
        out["clients"] = {cid: {"client": library if c["role"] != STREAMS else JAVA, **c}
                          for cid, c in plan["clients"].items()}
    if java_version is not None:
        out["java_client"] = java_version
    for key, given in (("producer", producer), ("consumer", consumer)):
        if given:
            out[key] = {**given, **plan.get(key, {})}
    validate(out)
    refuse(out)
    return out


def client_help() -> str:
    """--client's help: every backend."""
    names = [f"{b.name} ({b.about})" for b in BACKENDS.values()]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return f"Client library of every plan client that names none: {listed}."
