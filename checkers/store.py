"""A history's tables on disk: `convert` writes them as Parquet (one file, or for
steps one folder of bucket files, per table of checkers/tables.py, and a manifest with
the format version and stats); `read_parquet` opens such a folder as Tables, which
become Spark DataFrames only when a check asks for one on Spark. The reads are not a
file of their own: every reader here gives them as the steps of kind r, renamed
(flatten.READ_COLUMNS)."""
from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from onceproof.history.format import HistoryError

from .flatten import READ_COLUMNS, write_tables
from .tables import SCHEMAS, TABLES

MANIFEST = "manifest.json"
FORMAT = 10  # 10: the ops table's value columns follow the history's schema, after n_records
_READ_NAMES = {read: step for step, read in READ_COLUMNS}
T = TypeVar("T")


def tables_of(path: str | Path) -> tuple[dict[str, pa.Table], dict]:
    """The tables of a JSONL history (as Arrow tables, read back from a conversion in a
    temporary directory) and its stats: for looking at a small history's tables."""
    with tempfile.TemporaryDirectory(prefix="onceproof-") as d:
        convert(path, d)
        stats = json.loads((Path(d) / MANIFEST).read_text())["stats"]
        tables = {name: read_table(d, name) for name in TABLES + ("reads",)}
    return tables, stats


def _write(path: str | Path, out: str | Path,
           each=None) -> tuple[dict, list | None, threading.Thread]:
    """write_tables into `out`, and a thread (started) that removes their spool."""
    path, out = Path(path), Path(out)
    if path.is_dir():
        raise HistoryError(f"{path}: a directory without {MANIFEST}; pass a history.jsonl "
                           "or a directory written by `convert`")
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # a half-written conversion is no conversion
    spool = Path(tempfile.mkdtemp(prefix=".spool-", dir=out))
    try:
        stats, results = write_tables(path, out, spool, each)
    except BaseException:
        shutil.rmtree(spool, ignore_errors=True)
        raise
    # The spool's files are gigabytes at 10M events, which took 1.0 s to remove: a
    # check's finishers run meanwhile.
    removal = threading.Thread(target=shutil.rmtree, args=(spool,),
                               kwargs={"ignore_errors": True}, name="onceproof-spool")
    removal.start()
    return stats, results, removal


def convert(path: str | Path, out: str | Path) -> Path:
    """Write the tables of the JSONL history at `path` as Parquet under directory `out`."""
    stats, _, removal = _write(path, out)
    (Path(out) / MANIFEST).write_text(json.dumps({"format": FORMAT, "source": str(path),
                                                  "stats": stats}, indent=1))
    removal.join()
    return Path(out)


def convert_each(path: str | Path, out: str | Path,
                 each: Callable[[pa.Table], T]) -> tuple[dict, list[T], threading.Thread]:
    """`convert` without the steps table: `each` is run on every bucket of steps as it
    is made, in memory, in a worker process per core (spool.Steps.each). Returns
    the stats and the results, in bucket order, and the thread that removes the
    conversion's spool from `out`, for the caller to join before it removes `out`.
    `out` gets only the tables a check reads besides the steps (flatten.CHECK_READS)
    and no manifest: it is not a conversion, for a check that needs no files of the
    steps."""
    stats, results, removal = _write(path, out, each)
    assert results is not None
    return stats, results, removal


def is_converted(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / MANIFEST).is_file()


class Tables:
    """A history's tables as Spark DataFrames (read when first used), with the
    converter's stats."""

    def __init__(self, directory: Path, spark, stats: dict) -> None:
        self.dir = directory
        self.spark = spark
        self.stats = stats
        self._frames: dict = {}

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in SCHEMAS:
            raise AttributeError(name)
        if name == "reads":
            steps = self.steps
            return steps.where(steps["kind"] == "r").select(
                *(steps[step].alias(read) for step, read in READ_COLUMNS))
        if name not in self._frames:
            from .spark import struct_type
            self._frames[name] = self.spark.read.schema(struct_type(SCHEMAS[name])).parquet(
                str(self.dir / f"{name}.parquet"))
        return self._frames[name]

    def __getitem__(self, name: str):
        return getattr(self, name)


def read_manifest(directory: str | Path) -> dict:
    """The manifest of a folder `convert` wrote, if its tables are of this FORMAT."""
    directory = Path(directory)
    if not is_converted(directory):
        raise HistoryError(f"{directory}: no {MANIFEST}; convert the JSONL history first")
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (ValueError, OSError) as exc:
        raise HistoryError(f"{directory / MANIFEST}: not readable as JSON ({exc}); "
                           "convert the JSONL again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        manifest = manifest if isinstance(manifest, dict) else {}
        raise HistoryError(f"{directory}: Parquet tables of format {manifest.get('format')}, "
                           f"this onceproof reads format {FORMAT}; convert the JSONL again")
    for name in TABLES:
        if not (directory / f"{name}.parquet").exists():
            raise HistoryError(f"{directory}: missing {name}.parquet; convert the JSONL again")
    stats = manifest.get("stats")
    if not isinstance(stats, dict) or not isinstance(stats.get("evidence"), dict):
        raise HistoryError(f"{directory / MANIFEST}: no evidence in its stats; convert the "
                           "JSONL again")
    return manifest


def read_table(directory: str | Path, name: str, columns: list[str] | None = None,
               filters=None) -> pa.Table:
    """Table `name` of a converted folder, in Arrow (for small tables or few rows);
    filters in pyarrow's list form."""
    if name != "reads":
        return pq.read_table(Path(directory) / f"{name}.parquet", columns=columns,
                             filters=filters)
    wanted = columns or [read for _, read in READ_COLUMNS]
    unknown = [c for c in wanted + [f[0] for f in filters or ()] if c not in _READ_NAMES]
    if unknown:
        raise KeyError(f"the reads keep no column {unknown[0]!r}; they keep "
                       f"{', '.join(_READ_NAMES)}")
    steps = pq.read_table(
        Path(directory) / "steps.parquet", columns=["kind"] + [_READ_NAMES[c] for c in wanted],
        filters=[("kind", "=", "r")] + [(_READ_NAMES[c], op, v) for c, op, v in filters or ()])
    steps = steps.filter(pc.equal(steps.column("kind"), "r"))
    return pa.table({c: steps.column(_READ_NAMES[c]) for c in wanted})


def read_parquet(directory: str | Path, spark=None) -> Tables:
    """A converted folder as Tables; `spark` (a session) is needed only for
    Tables' DataFrames, and may be set later."""
    directory = Path(directory)
    return Tables(directory, spark, read_manifest(directory).get("stats", {}))
