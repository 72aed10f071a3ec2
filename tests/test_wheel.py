"""What `pip install onceproof` gives another project: the wheel, installed with its
dependencies into a fresh virtualenv outside the repository, holds one top-level package,
answers `onceproof --version` and `python -m onceproof --version`, and runs the example
property of docs/writing-properties.md from a project folder of its own (no conftest of
ours) on the plugin's own cluster, passing with its evidence."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "test_my_producers.py"
PROPERTY = "test_my_producers_write_each_value_once"
GENERIC = ("harness", "checkers", "workloads")

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(), reason="needs the source tree"),
]


def _env(venv: Path) -> dict[str, str]:
    """The environment of a user's shell with the venv activated: nothing of this test
    session's interpreter, Hypothesis profile or onceproof settings leaks in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "HYPOTHESIS_PROFILE",
                        "PYTEST_ADDOPTS", "PYTEST_PLUGINS") and not k.startswith("ONCEPROOF_")}
    return env | {"VIRTUAL_ENV": str(venv),
                  "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}


def _run(args, env, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def test_the_wheel_runs_an_example_property_outside_the_repository(
        tmp_path, pytestconfig, deadline, record_property):
    if deadline is not None and time.monotonic() >= deadline:
        pytest.skip("the session's --time-limit was spent: this test starts a cluster")
    assert ROOT not in tmp_path.parents  # everything below happens outside the repository
    seconds: dict[str, float] = {}
    started = time.monotonic()

    # The wheel: one top-level package, as its metadata and its RECORD say.
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, ROOT],
         dict(os.environ), tmp_path, 600)
    wheel = next(wheels.glob("onceproof-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        info = next(n.split("/")[0] for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        assert z.read(f"{info}/top_level.txt").decode().split() == ["onceproof"]
        recorded = {line.split(",")[0].split("/")[0]
                    for line in z.read(f"{info}/RECORD").decode().splitlines() if line}
    assert recorded == {"onceproof", info}, recorded
    seconds["wheel"] = time.monotonic() - started

    # A fresh virtualenv (no system site-packages) gets the wheel and its dependencies
    # from the package index, through pip's cache.
    mark = time.monotonic()
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], dict(os.environ), tmp_path, 120)
    env, python = _env(venv), venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel],
         env, tmp_path, 1200)
    seconds["venv_and_install"] = time.monotonic() - mark
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     env, tmp_path, 60).stdout.strip())
    assert (site / "onceproof" / "api.py").is_file()
    assert not [n for n in GENERIC if (site / n).exists()], sorted(p.name for p in site.iterdir())
    where = _run([python, "-c", "import onceproof; print(onceproof.__file__)"], env, tmp_path, 60)
    assert Path(where.stdout.strip()).is_relative_to(site)

    for command in ([venv / "bin" / "onceproof", "--version"],
                    [python, "-m", "onceproof", "--version"]):
        out = _run(command, env, tmp_path, 120).stdout
        assert out.startswith("onceproof 0") and "Kafka " in out and "librdkafka " in out, out

    # A project of its own: the example property and nothing else, run on the cluster
    # the plugin starts, with the example's budget of 2 plans.
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(EXAMPLE, project / EXAMPLE.name)
    junit = project / "junit.xml"
    args = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", project,
            "--artifacts", project / "artifacts", "--shrink-budget", "60",
            "--junitxml", junit, project / EXAMPLE.name]
    if pytestconfig.getoption("--kafka-version"):
        args += ["--kafka-version", pytestconfig.getoption("--kafka-version")]
    mark = time.monotonic()
    done = subprocess.run([str(a) for a in args], env=env, cwd=project, capture_output=True,
                          text=True, timeout=1500)
    seconds["property"] = time.monotonic() - mark
    seconds["total"] = time.monotonic() - started
    for name, value in seconds.items():
        record_property(f"seconds_{name}", round(value, 1))
    print("wheel test seconds:", {k: round(v, 1) for k, v in seconds.items()})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout, done.stdout

    # Its evidence: the plans it ran acknowledged writes, as its JUnit properties and its
    # trials' folders show.
    case = ET.parse(junit).getroot().find(f".//testcase[@name='{PROPERTY}']")
    assert case is not None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    examples = int(props["onceproof_examples"])
    exercised = json.loads(props["onceproof_exercised"])
    assert 1 <= examples <= 2, props
    assert exercised.get("acknowledged_writes", 0) > 0, exercised
    runs = sorted((project / "artifacts" / "trials" / PROPERTY).glob("*/history.jsonl"))
    assert len(runs) == examples
    # True, not merely truthy: a verdict with nothing to judge says "unknown" there.
    valid = [json.loads((r.parent / "verdict.json").read_text())["valid"] for r in runs]
    assert all(v is True for v in valid), valid
