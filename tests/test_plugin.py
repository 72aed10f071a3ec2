"""Installing onceproof changes no other project's tests: its pytest plugin loads, but
leaves Hypothesis's settings alone and starts nothing that a test did not ask for."""
from __future__ import annotations

import os
import subprocess
import sys

OTHER_PROJECTS_TEST = '''
import sys

from hypothesis import settings

def test_sees_hypothesis_defaults(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("onceproof")
    assert settings().max_examples == 100
    assert settings().deadline is not None
    assert not settings().suppress_health_check

def test_nothing_of_the_cluster_or_spark_is_even_imported():
    assert "pyspark" not in sys.modules
    assert "onceproof.cluster.cluster" not in sys.modules
'''


def test_another_projects_tests_keep_hypothesis_defaults(tmp_path):
    (tmp_path / "test_other.py").write_text(OTHER_PROJECTS_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
