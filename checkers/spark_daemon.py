"""The checkers' Spark Python daemon: pyspark's own, with the checkers imported first.

Spark starts one daemon per session and forks a Python worker from it for each task
slot; a worker idle for a minute is stopped, and the next task forks a fresh one. A
fresh worker imports pandas, pyarrow and the checkers before its first bucket: 0.8 s
of CPU each. Imported here, in the daemon, once a session, every worker is forked with
them loaded. (pyspark's daemon imports the worker after forking because pandas and
pyarrow start threads on import, and a fork copies no thread; what the checkers use
after a fork already lives with that: checkers/forked.py forks a process that has
imported them.)
"""
from __future__ import annotations

from pyspark import daemon

from . import verdict  # noqa: F401  every family, and engine, numpy, pandas and pyarrow

if __name__ == "__main__":
    daemon.manager()
