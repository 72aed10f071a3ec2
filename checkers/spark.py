"""Everything of the checkers that needs pyspark: the SparkSession they run in, and
Spark schemas made from the Arrow schemas the rest of the checkers use.

Only a check that decides to run on Spark imports this module (checkers/verdict.py):
the local path never starts a JVM. One session per process, made once: starting a JVM
costs seconds, and every checker, test and CLI call shares it. The defaults fit a
laptop or a 2-core CI box; any Spark master can be named instead (argument, or
ONCEPROOF_SPARK_MASTER).
"""
from __future__ import annotations

import os

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
)

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
        # Every task's rows, anomalies and facts, reach the driver through the JVM
        # (checkers/engine.py): about 24 MB of compressed Arrow for the bench's
        # 1M-event history.
        # A cap, not a reservation.
        .config("spark.driver.memory", os.environ.get("ONCEPROOF_SPARK_MEMORY", "3g"))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.fallback.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
        # Workers forked with the checkers imported (checkers/spark_daemon.py).
        .config("spark.python.daemon.module", "onceproof.checkers.spark_daemon")
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile=file:{_quiet_log_config()}")
    )
    _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    return _session


# Spark's own default logs WARN lines (loopback hostname, native Hadoop) to stderr
# before setLogLevel can run; a user reading `onceproof check` wants only the verdict.
_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet_log_config() -> str:
    import tempfile
    path = os.path.join(tempfile.gettempdir(), f"onceproof-log4j2-{os.getuid()}.properties")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(_LOG4J)
    return path


def struct_type(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema of int64, string, bool and binary columns,
    and lists of structs of them (all nullable)."""
    return StructType([StructField(f.name, _spark_type(f.type)) for f in schema])


def _spark_type(t: pa.DataType):
    if pa.types.is_list(t):
        return ArrayType(_spark_type(t.value_type))
    if pa.types.is_struct(t):
        return StructType([StructField(t.field(i).name, _spark_type(t.field(i).type))
                           for i in range(t.num_fields)])
    return {pa.int64(): LongType(), pa.string(): StringType(), pa.bool_(): BooleanType(),
            pa.binary(): BinaryType()}[t]


def _python() -> str:
    import sys
    return sys.executable
