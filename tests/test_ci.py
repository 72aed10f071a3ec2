"""CI skips nothing silently: the report's browser test finds chromium where .ci/run looks
for it (and installs it when it is not there), and CI's summary lists every skipped test
with its reason (.ci/skipped.py)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI_RUN = ROOT / ".ci" / "run"


def test_the_browser_test_finds_chromium_as_ci_run_does(tmp_path):
    # .ci/run installs chromium unless `command -v` finds it; a chromium found there,
    # wherever it is, must be the one the test runs, or CI would skip the test silently.
    name = re.search(r"command -v (\S+) >/dev/null \|\| missing\+=\(chromium\)",
                     CI_RUN.read_text()).group(1)
    fake = tmp_path / "bin" / name
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    ci_finds = subprocess.run(["bash", "-c", f"command -v {name}"], env=env, text=True,
                              capture_output=True, check=True).stdout.strip()
    test_finds = subprocess.run([sys.executable, "-c", "import tests.test_report as t; "
                                 "print(t.CHROMIUM)"], env=env, cwd=ROOT, text=True,
                                capture_output=True, check=True).stdout.strip()
    assert ci_finds == test_finds == str(fake)


def test_ci_prints_every_skipped_test_with_its_reason(tmp_path):
    (tmp_path / "test_some.py").write_text(
        "import pytest\n\n"
        "def test_runs():\n    pass\n\n"
        "@pytest.mark.skipif(True, reason='chromium is not on the PATH')\n"
        "def test_needs_a_browser():\n    pass\n\n"
        "def test_stopped():\n    pytest.skip('the time limit was spent')\n")
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-p", "no:onceproof", f"--junitxml={junit}", str(tmp_path / "test_some.py")],
                   cwd=tmp_path, capture_output=True, check=True)
    said = subprocess.run([sys.executable, str(ROOT / ".ci" / "skipped.py"), str(junit)],
                          text=True, capture_output=True, check=True).stdout.splitlines()
    assert said[0] == "skipped: 2 of 3 tests:"
    assert said[1:] == ["  test_some::test_needs_a_browser: chromium is not on the PATH",
                        "  test_some::test_stopped: the time limit was spent"]
    # CI's summary prints it, pass or fail, beside the slowest tests.
    report = re.search(r"report\(\) \{(.*?)\n\}", CI_RUN.read_text(), re.S).group(1)
    assert "python3 .ci/skipped.py artifacts/junit.xml" in report
