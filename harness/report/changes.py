"""What ran where over a run: each node's Kafka release, each finalized feature's level,
and the transaction protocol each client spoke, as tracks of segments in time.

All of it is in the history already (docs/history.md): the cluster record names the
release the nodes started on and the feature levels their storage was formatted with;
an `upgrade` or `downgrade` op's ok value names the release of every node after it
(`releases`), a `finalize` op's the finalized levels after it (`features`); and a client
that says its protocol (the Java client) puts `txn_protocol` on every `begin_txn` it
completes. A change is placed at the completion of the op that made it (for a step that
moved every node, the completion of the whole step) and, for a client, at the begin of
its first transaction on the new protocol.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from onceproof.history.format import BEGIN_TXN, CLUSTER
from onceproof.workloads.faults import RELEASE_KINDS

RELEASE, FEATURE, PROTOCOL = "release", "feature", "protocol"


@dataclass
class Segment:
    start: float
    end: float
    text: str


@dataclass
class Track:
    row: str  # "n1", "transaction.version", or a client process
    kind: str  # RELEASE, FEATURE or PROTOCOL
    segments: list[Segment] = field(default_factory=list)

    def at(self, t: float, text: str, end: float) -> bool:
        """From t on, the track says `text`; whether that is a change."""
        if self.segments and self.segments[-1].text == text:
            return False
        if self.segments:
            self.segments[-1].end = t
        self.segments.append(Segment(t, end, text))
        return len(self.segments) > 1


@dataclass
class Changes:
    tracks: list[Track]
    lines: list[str]  # each change in words, in time order

    def __bool__(self) -> bool:
        return bool(self.tracks)


def _cluster_record(faults: pd.DataFrame) -> dict:
    had = faults.loc[faults["f"] == CLUSTER, "value"]
    return had.iloc[0] if len(had) and isinstance(had.iloc[0], dict) else {}


def _done(faults: pd.DataFrame, kind: str) -> list:
    """The ops of one release kind that completed with a value, in completion order."""
    ops = faults[(faults["f"] == kind) & faults["end"].notna()].sort_values("end")
    return [op for op in ops.itertuples(index=False) if isinstance(op.done_value, dict)]


def releases_and_features(faults: pd.DataFrame, end: float) -> tuple[list[Track], list[tuple[float, str]]]:
    """A track per node (its release) and per feature a finalize named (its level), when
    the run changed a release or finalized a feature; with the changes in words."""
    record = _cluster_record(faults)
    start, nodes = record.get("kafka_version"), record.get("nodes") or []
    moves = [op for kind in RELEASE_KINDS if kind != "finalize" for op in _done(faults, kind)]
    finals = _done(faults, "finalize")
    if not moves and not finals:
        return [], []
    said: list[tuple[float, str]] = []
    # Nodes only when one moved: a run that only finalized a feature ran one release.
    nodes_t = {str(n): Track(f"n{n}", RELEASE) for n in nodes} if moves else {}
    for track in nodes_t.values():
        track.at(0.0, start or "?", end)
    for op in sorted(moves, key=lambda o: o.end):
        for node, release in (op.done_value.get("releases") or {}).items():
            track = nodes_t.setdefault(str(node), Track(f"n{node}", RELEASE))
            before = track.segments[-1].text if track.segments else "?"
            if track.at(float(op.end), str(release), end):
                said.append((float(op.end), f"node {node}: Kafka {before} -> {release} "
                                            f"({op.f}, op {op.op})"))
    formatted = record.get("features") or {}
    named = list(dict.fromkeys((op.value or op.done_value).get("feature") for op in finals))
    features_t = {name: Track(name, FEATURE) for name in named if name}
    for name, track in features_t.items():
        track.at(0.0, str(formatted.get(name, "as formatted")), end)
    for op in finals:
        levels = op.done_value.get("features") or {}
        for name, track in features_t.items():
            if name in levels:
                before = track.segments[-1].text
                if track.at(float(op.end), str(levels[name]), end):
                    said.append((float(op.end), f"{name}: {before} -> {levels[name]} "
                                                f"(finalize, op {op.op})"))
    return [*nodes_t.values(), *features_t.values()], said


def protocols(begins: pd.DataFrame, values: dict[int, dict], last: dict[str, float],
              end: float) -> tuple[list[Track], list[tuple[float, str]]]:
    """A track per client process that said its transaction protocol on a begin_txn
    (values: complete index -> the begin's ok value; last: each process's last second)."""
    tracks: dict[str, Track] = {}
    said: list[tuple[float, str]] = []
    for op in begins.sort_values("start").itertuples(index=False):
        protocol = values.get(int(op.complete_index), {}).get("txn_protocol")
        if protocol is None:
            continue
        text = f"v{protocol}" if protocol else "unknown"
        track = tracks.get(op.process)
        if track is None:
            track = tracks[op.process] = Track(op.process, PROTOCOL)
            said.append((float(op.start), f"{op.process}: {text} from its first transaction "
                                          f"(op {op.op})"))
        before = track.segments[-1].text if track.segments else None
        if track.at(float(op.start), text, last.get(op.process, end)):
            said.append((float(op.start), f"{op.process}: {before} -> {text} at its "
                                          f"transaction of op {op.op}"))
    return list(tracks.values()), said


def build(ops: pd.DataFrame, faults: pd.DataFrame, read_values, end: float) -> Changes:
    """The tracks of a run (ops: the client ops; faults: the nemesis's ops, cluster
    record included; read_values(indexes) -> {index: value}) and their changes in words.
    A client that kept one protocol after a feature changed says so too."""
    release_tracks, said = releases_and_features(faults, end)
    begins = ops[(ops["f"] == BEGIN_TXN) & (ops["outcome"] == "ok") & ops["complete_index"].notna()]
    values = read_values([int(i) for i in begins["complete_index"]]) if len(begins) else {}
    last = ops.groupby("process")["end"].max().fillna(end).to_dict() if len(ops) else {}
    protocol_tracks, more = protocols(begins, values, last, end)
    changed = [s.start for t in release_tracks if t.kind == FEATURE for s in t.segments[1:]]
    last_begin = begins.groupby("process")["start"].max().to_dict() if len(begins) else {}
    if changed:
        for track in protocol_tracks:
            if (len({s.text for s in track.segments}) == 1
                    and track.segments[0].start < changed[0] < last_begin[track.row]):
                more.append((float(last_begin[track.row]),
                             f"{track.row}: {track.segments[0].text} throughout, also after "
                             f"the finalize at {changed[0]:.1f} s"))
    lines = [f"{t:.1f} s: {what}" for t, what in sorted(said + more, key=lambda x: x[0])]
    return Changes(release_tracks + protocol_tracks, lines)
