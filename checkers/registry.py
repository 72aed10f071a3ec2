"""Every anomaly type, gathered from the family modules that define them.

Each family module (checkers/log_values.py ... liveness.py) defines its types in its
`ANOMALIES`, beside the code that finds them (checkers/anomaly.py `define`). This module
gathers them, in the order of FAMILIES, which is also the order the checks run in:
REGISTRY, one `Anomaly` per type, in the order a verdict lists types in; BY_NAME, TYPES
and IMPLIES, derived from it; `of_family`.

The family modules import only checkers/anomaly.py for their definitions, never this
module, so nothing here is needed while they load. It imports no Spark: the report and
the docs read it without a JVM.
"""
from __future__ import annotations

from types import MappingProxyType, ModuleType

from . import (
    consumption,
    cycles,
    groups,
    isolation,
    liveness,
    log_values,
    loss,
    ordering,
    pipeline,
    streams,
)
from .anomaly import Anomaly

# The families, in the order their types are listed and their checks run
# (checkers/verdict.py).
FAMILIES: tuple[ModuleType, ...] = (log_values, loss, isolation, consumption, ordering, cycles,
                                    groups, pipeline, streams, liveness)


def _gathered(families: tuple[ModuleType, ...]) -> tuple[Anomaly, ...]:
    found: list[Anomaly] = []
    for module in families:
        family = module.__name__.rsplit(".", 1)[1]
        for a in module.ANOMALIES:
            if a.family != family:
                raise ValueError(f"{a.name} is defined in checkers/{family}.py but names the "
                                 f"family {a.family!r}")
        found += module.ANOMALIES
    names = [a.name for a in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"defined twice: {', '.join(twice)}")
    return tuple(found)


REGISTRY: tuple[Anomaly, ...] = _gathered(FAMILIES)

BY_NAME = MappingProxyType({a.name: a for a in REGISTRY})
# Every anomaly type, in the order a verdict lists them.
TYPES = tuple(BY_NAME)


def _implications(registry: tuple[Anomaly, ...]) -> MappingProxyType:
    names = {a.name for a in registry}
    for a in registry:
        if not a.implies <= names - {a.name}:
            raise ValueError(f"{a.name} implies {', '.join(sorted(a.implies))}: a type may "
                             "imply only other types of the registry")
    return MappingProxyType({a.name: a.implies for a in registry})


# type -> the other types one anomaly of it may also be (Anomaly.implies).
IMPLIES = _implications(REGISTRY)


def of_family(family: str) -> tuple[str, ...]:
    """The types a family (a checkers module's short name) finds, in registry order."""
    found = tuple(a.name for a in REGISTRY if a.family == family)
    if not found:
        raise ValueError(f"no anomaly type belongs to family {family!r}")
    return found
