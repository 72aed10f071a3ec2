"""Checkers: history -> Verdict (docs/checkers.md defines every anomaly), in pandas,
on Spark for large histories."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .verdict import Verdict, check

__all__ = ["Verdict", "check"]


def __getattr__(name: str) -> Any:
    # Loaded when first asked for: a run's client processes (run/host.py) import the
    # history writer from this package and need none of the checkers' pandas or scipy.
    if name in __all__:
        from . import verdict
        return getattr(verdict, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
