"""Starting and signalling the processes a cluster is made of (Kafka JVMs, toxiproxy).

A harness that crashes, or is killed with SIGKILL, runs no cleanup code, so cleanup cannot
rest on atexit alone: processes the harness owns are started with PR_SET_PDEATHSIG, which
makes the kernel SIGKILL them when their parent dies. The kernel ties that to the *thread*
that forked, so every spawn goes through one long-lived thread rather than whichever
worker thread happens to ask. A detached cluster (`onceproof cluster up`) opts out and is
stopped by pid from its state file instead.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onceproof-spawner")
_parent_pid = os.getpid()
_lock = threading.Lock()


def _die_with_parent() -> None:
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # The parent may have died between fork and prctl; then nobody would reap us.
    if os.getppid() != _parent_pid:
        os._exit(1)


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when the thread that forked it ends: for a
    process forked without exec (a client host, run/host.py)."""
    parent = os.getppid()
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def name_process(name: str) -> None:
    """Name this process as ps, top and /proc show it (15 bytes at most), so a process
    forked without exec says which one it is rather than "python"."""
    _libc.prctl(_PR_SET_NAME, name.encode()[:15])


def spawn(argv: list[str], log: Path, owned: bool = True, env: dict | None = None) -> int:
    """Start argv with stdout and stderr appended to log; return its pid."""
    def start() -> int:
        global _parent_pid
        _parent_pid = os.getpid()
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
                preexec_fn=_die_with_parent if owned else None)
        _reapers[proc.pid] = proc
        return proc.pid
    with _lock:
        return _spawner.submit(start).result()


# Popen objects of our children, kept so that they are reaped (no zombies) once they exit.
_reapers: dict[int, subprocess.Popen] = {}


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    proc = _reapers.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def paused(pid: int | None) -> bool:
    try:
        return bool(pid) and psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop(pid: int | None, grace: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after grace seconds; wait until it is gone."""
    if pid is None or not alive(pid):
        return
    signal_pid(pid, signal.SIGCONT)  # a paused process cannot act on SIGTERM
    signal_pid(pid, signal.SIGTERM)
    if not _wait_gone(pid, grace):
        kill(pid)


def kill(pid: int | None) -> None:
    if pid is None or not alive(pid):
        return
    signal_pid(pid, signal.SIGKILL)
    _wait_gone(pid, 10.0)


def _wait_gone(pid: int, timeout: float) -> bool:
    proc = _reapers.get(pid)
    try:
        if proc is not None:
            proc.wait(timeout)
        else:
            psutil.Process(pid).wait(timeout)
    except (subprocess.TimeoutExpired, psutil.TimeoutExpired):
        return False
    except psutil.Error:
        pass
    _reapers.pop(pid, None)
    return True


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            pass
    return total
