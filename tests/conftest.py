"""Shared fixtures, and the Hypothesis profiles of onceproof's own suite.

The profiles live here, not in the pytest plugin, so that installing onceproof changes no
other project's Hypothesis settings. Each cluster example costs seconds, hence the small
example counts. Hypothesis loads its own derandomized "ci" profile whenever CI is set;
ours keeps that (CI runs the same examples every time). Nightly must explore new ones: it
is not derandomized, and it keeps an example database (.hypothesis/) that the nightly
workflow carries over. HYPOTHESIS_PROFILE picks one; else ci when CI is set, else dev.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
settings.register_profile("dev", max_examples=3, **_COMMON)
settings.register_profile("ci", max_examples=3, derandomize=True, database=None, **_COMMON)
settings.register_profile("nightly", max_examples=25, derandomize=False, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the checker tests that need one: starting a JVM costs seconds."""
    from onceproof.checkers.spark import session
    return session()


def pytest_collection_modifyitems(items) -> None:
    """Under pytest-xdist (tox runs two workers, `--dist loadgroup`), every test that needs
    a cluster of ours runs in one worker, one after another on the session's cluster, as
    without xdist; the tests that need none run in the other worker meanwhile, so they
    never wait behind a cluster test. A cluster test mostly waits (for faults, timeouts and
    settling), which leaves the CPU the other worker uses."""
    for item in items:
        if item.get_closest_marker("cluster") or item.get_closest_marker("spark_cluster"):
            item.add_marker(pytest.mark.xdist_group("cluster"))
