"""Checkers: history -> Verdict (docs/checkers.md defines every anomaly), in pandas,
on Spark for large histories."""
from __future__ import annotations

from .verdict import Verdict, check

__all__ = ["Verdict", "check"]
