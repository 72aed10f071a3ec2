"""Kafka settings a user brings: the broker settings a plan, a flag or a properties file
sets on top of the harness's own (harness/cluster/topology.py), and topic configs.

A map of settings is plain data, {name: value}, checked here once for every way in.
"""
from __future__ import annotations

import re
from pathlib import Path


# Broker settings that wire a node into the proxies, the quorum and its own disk: the
# harness sets them, and a plan or a user's config may not (docs/plans.md).
class SettingsError(ValueError):
    """Settings that cannot be used; the message says what to change."""


OWNED_SETTINGS = frozenset({
    "process.roles", "node.id", "broker.id", "listeners", "advertised.listeners",
    "controller.listener.names", "inter.broker.listener.name",
    "security.inter.broker.protocol", "listener.security.protocol.map",
    "controller.quorum.voters", "controller.quorum.bootstrap.servers", "log.dirs", "log.dir",
    "metadata.log.dir"})
OWNED_PREFIXES = ("listener.name.",)


def setting_text(value) -> str:
    """A setting's value as a properties file and the admin API spell it."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def owned_settings(keys) -> list[str]:
    """Which of these broker settings the harness owns."""
    return sorted(k for k in keys if k in OWNED_SETTINGS or k.startswith(OWNED_PREFIXES))


_NAME = re.compile(r"[a-z][a-z0-9_-]*(\.[A-Za-z0-9_-]+)*")


def settings_problem(settings, broker: bool = False) -> str | None:
    """What is wrong with a map of Kafka settings (None: nothing): keys are Kafka's
    dotted names, values strings, numbers or booleans; a broker map may not set what the
    harness owns."""
    if not isinstance(settings, dict):
        return "must map Kafka setting names to values, like {\"min.insync.replicas\": 2}"
    for key, value in settings.items():
        if not isinstance(key, str) or not _NAME.fullmatch(key):
            return f"{key!r} is not a Kafka setting name (lowercase, dotted)"
        if not isinstance(value, (str, int, float, bool)):
            return f"{key} must be a string, a number or true/false, not {type(value).__name__}"
    if broker and (owned := owned_settings(settings)):
        return (f"the harness sets {', '.join(owned)} itself (its nodes are wired through "
                f"proxies); remove {'it' if len(owned) == 1 else 'them'}")
    return None


def parse(pairs: tuple[str, ...] = (), file: str | Path | None = None) -> dict[str, str]:
    """Broker settings from a properties file, then KEY=VALUE pairs (which win), checked:
    a SettingsError names what is wrong and what to do."""
    settings = _gather(pairs, file, lambda pair: f"--broker-config {pair!r}: write it as "
                                                 "KEY=VALUE, like min.insync.replicas=2")
    if (problem := settings_problem(settings, broker=True)):
        where = f" (from {file} and --broker-config)" if file is not None else ""
        raise SettingsError(f"broker config{where}: {problem}")
    return settings


def parse_client(pairs: tuple[str, ...] = (), file: str | Path | None = None) -> dict[str, str]:
    """Client settings for a cluster the harness did not start (security.protocol, sasl.*,
    ssl.*), from a properties file, then KEY=VALUE pairs (which win). Their values may be
    secrets, so no error repeats one."""
    settings = _gather(pairs, file, lambda pair: "--client-config: an argument is not "
                       "KEY=VALUE (not shown: it may hold a secret); write each like "
                       "security.protocol=SASL_SSL")
    if "bootstrap.servers" in settings:
        raise SettingsError("client config: give the servers with --bootstrap, not bootstrap.servers")
    if (problem := settings_problem(settings)):
        raise SettingsError(f"client config: {problem}")
    return settings


# Client settings the harness sets on each client itself (its cluster, and its
# transactional id and group from the plan's names): an application's may not.
OWNED_CLIENT_SETTINGS = ("bootstrap.servers", "transactional.id", "group.id")
# Client settings whose values a record of the run does not repeat.
SECRET_MARKS = ("sasl.", "ssl.", "password", "secret")


def typed(value: str):
    """A setting's text as a plan writes it: true/false as booleans, integers as numbers."""
    if value in ("true", "false"):
        return value == "true"
    return int(value) if value.lstrip("-").isdigit() and value not in ("-", "") else value


def parse_application(kind: str, pairs: tuple[str, ...] = (),
                      file: str | Path | None = None) -> dict:
    """An application's producer or consumer settings (`kind`) from a properties file,
    then KEY=VALUE pairs (which win), checked, as a plan's `producer` or `consumer` map
    would hold them; a SettingsError names what is wrong and what to do."""
    option = f"--{kind}-config"
    settings = _gather(pairs, file, lambda pair: f"{option} {pair!r}: write it as KEY=VALUE, "
                                                 f"like acks=all", what=f"{kind} config")
    owned = [k for k in settings if k in OWNED_CLIENT_SETTINGS]
    if owned:
        raise SettingsError(f"{option}: the harness sets {', '.join(owned)} on each client "
                            "itself (the cluster, and names of the run's own); remove it")
    if (problem := settings_problem(settings)):
        raise SettingsError(f"{option}: {problem}")
    return {k: typed(v) for k, v in settings.items()}


def shown(settings: dict) -> dict:
    """Settings as a record of the run shows them: a secret's value as (set)."""
    return {k: "(set)" if any(m in k for m in SECRET_MARKS) else v
            for k, v in settings.items()}


def _gather(pairs: tuple[str, ...], file: str | Path | None, bad_pair,
            what: str = "broker config") -> dict[str, str]:
    """A properties file's settings, then KEY=VALUE pairs over them; bad_pair(pair) is
    the error for a pair that is not KEY=VALUE."""
    settings: dict[str, str] = {}
    if file is not None:
        settings.update(_read_properties(Path(file), what))
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SettingsError(bad_pair(pair))
        settings[key.strip()] = value.strip()
    return settings


def _read_properties(path: Path, what: str = "broker config") -> dict[str, str]:
    # Java's properties format as server.properties files use it: # and ! comments,
    # key=value, key: value or key value, and a trailing backslash continuing a line.
    try:
        text = path.read_text()
    except OSError as exc:
        raise SettingsError(f"cannot read {what} file {path}: {exc.strerror}") from None
    out: dict[str, str] = {}
    logical = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", logical)
        if not match:
            raise SettingsError(f"{path}:{number}: {logical!r} is not a setting; write key=value")
        out[match.group(1)] = match.group(2)
        logical = ""
    return out
