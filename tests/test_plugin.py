"""Installing onceproof changes no other project's tests: its pytest plugin loads, but
leaves Hypothesis's settings alone and starts nothing that a test did not ask for."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OTHER_PROJECTS_TEST = '''
import os
import sys
from pathlib import Path

from hypothesis import settings

def test_records_the_settings_it_sees(pytestconfig):
    plugged = pytestconfig.pluginmanager.has_plugin("onceproof")
    Path(os.environ["SEEN"]).write_text(f"{plugged}\\n{settings()!r}")
    assert settings().max_examples == 100

def test_nothing_of_the_cluster_or_spark_is_even_imported():
    assert "pyspark" not in sys.modules
    assert "onceproof.cluster.cluster" not in sys.modules
'''


def _settings_seen(folder: Path, *pytest_args: str) -> list[str]:
    """Runs the other project's tests and returns (plugin loaded?, Hypothesis settings)."""
    seen = folder / "seen.txt"
    # Hypothesis picks its own built-in 'ci' profile from many CI variables; both runs
    # share the environment, so whatever Hypothesis itself chooses is the baseline.
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"} | {"SEEN": str(seen)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *pytest_args, "--rootdir", str(folder), str(folder)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    return seen.read_text().split("\n", 1)


def test_another_projects_tests_keep_hypothesis_defaults(tmp_path):
    (tmp_path / "test_other.py").write_text(OTHER_PROJECTS_TEST)
    plugged, with_onceproof = _settings_seen(tmp_path)
    unplugged, without_onceproof = _settings_seen(tmp_path, "-p", "no:onceproof")
    assert (plugged, unplugged) == ("True", "False")
    assert with_onceproof == without_onceproof
