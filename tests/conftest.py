"""Shared fixtures. One SparkSession serves the whole test session: starting a JVM
costs seconds."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from onceproof.checkers.spark import session
    return session()
