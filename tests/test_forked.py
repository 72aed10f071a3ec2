"""The local engine's worker processes (checkers/forked.py): results in order, from
other processes, and no worker outlives the process that forked it."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import psutil
import pyarrow as pa
import pytest

from onceproof.checkers import forked
from onceproof.history.parse import cores


def test_workers_are_other_processes_and_keep_the_order():
    pids = forked.each(lambda i: (i, os.getpid()), range(6), forked.MIN_WORK)
    assert [i for i, _ in pids] == list(range(6))
    workers = {pid for _, pid in pids}
    assert (os.getpid() not in workers) == (cores() > 1), workers


_SLEEPER = """
import time
from onceproof.checkers import forked
forked.each(lambda i: time.sleep(120), range(4), forked.MIN_WORK)
"""


def _group(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (OSError, psutil.Error):
            pass
    return out


@pytest.mark.skipif(cores() < 2 or not sys.platform.startswith("linux"),
                    reason="workers are forked only on a Linux machine of several cores")
def test_workers_die_with_the_process_that_forked_them():
    # kill -9 leaves no handler to run: the workers must not wait for items forever.
    parent = subprocess.Popen([sys.executable, "-c", _SLEEPER], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(_group(parent.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_group(parent.pid)) == 3, "the workers never started"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while _group(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _group(parent.pid) == []
    finally:
        for p in _group(parent.pid):
            p.kill()


def _result(i: int):
    frame = pd.DataFrame({"n": np.arange(i, i + 5), "s": ["a", None, "c", "d", str(i)]})
    table = pa.table({"x": pa.array(np.arange(100_000) * i), "t": pa.array(["w"] * 100_000)})
    return i, frame, table, {"nested": [table.slice(3, 2)]}


def test_results_come_back_whole_and_leave_no_files(tmp_path, monkeypatch):
    """Results travel through files the workers write (forked._spill): tables, frames
    and what holds them come back equal, their arrays writable, Arrow's buffers
    aligned; none of the files is left afterwards, nor when a worker fails."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    got = forked.each(_result, range(4), forked.MIN_WORK)
    for i, (n, frame, table, nested) in zip(range(4), got):
        want = _result(i)
        assert n == i
        pd.testing.assert_frame_equal(frame, want[1])
        assert table.equals(want[2]) and nested["nested"][0].equals(want[3]["nested"][0])
        frame.loc[0, "n"] = -1  # a private copy of the mapped page
        assert table.column("x").chunk(0).buffers()[1].address % 64 == 0
    assert list(tmp_path.iterdir()) == []

    def fails(i: int):
        if i == 2:
            raise ValueError("item 2")
        return _result(i)
    with pytest.raises(ValueError, match="item 2"):
        forked.each(fails, range(4), forked.MIN_WORK)
    assert list(tmp_path.iterdir()) == []


def test_results_come_through_the_pipe_where_no_file_can_be_written(monkeypatch):
    """No folder for the results (a full or read-only TMPDIR), or a worker that cannot
    write its file: the results come back all the same, through the pool's pipe."""
    def no_folder(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(tempfile, "mkdtemp", no_folder)
    got = forked.each(_result, range(3), forked.MIN_WORK)
    assert [n for n, *_ in got] == [0, 1, 2] and got[2][2].equals(_result(2)[2])
    monkeypatch.undo()

    def no_file(result, path):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(forked, "_spill", no_file)
    got = forked.each(_result, range(3), forked.MIN_WORK)
    assert [n for n, *_ in got] == [0, 1, 2] and got[1][1].equals(_result(1)[1])
