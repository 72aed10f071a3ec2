"""PySpark checkers: history -> Verdict (docs/checkers.md defines every anomaly)."""
from .verdict import Verdict, check

__all__ = ["Verdict", "check"]
