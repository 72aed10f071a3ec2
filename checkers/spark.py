"""The SparkSession the checkers run in.

One session per process, made once: starting a JVM costs seconds, and every checker,
test and CLI call shares it. The defaults fit a laptop or a 2-core CI box; any Spark
master can be named instead (argument, or ONCEPROOF_SPARK_MASTER).
"""
from __future__ import annotations

import os

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"
_session: SparkSession | None = None


def session(master: str | None = None) -> SparkSession:
    """The cached SparkSession, created on first use.

    `master` (or ONCEPROOF_SPARK_MASTER) only matters for the first call; a later
    call naming a different master gets the existing session, because Spark allows one
    active context per JVM.
    """
    global _session
    if _session is not None and not _session.sparkContext._jsc.sc().isStopped():
        return _session
    master = master or os.environ.get("ONCEPROOF_SPARK_MASTER") or DEFAULT_MASTER
    # PySpark's own workers must run the interpreter the driver runs, or pandas UDFs
    # fail on a machine with several Pythons.
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", _python())
    builder = (
        SparkSession.builder.master(master)
        .appName("onceproof-check")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.fallback.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR")
    )
    _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    return _session


def _python() -> str:
    import sys
    return sys.executable
