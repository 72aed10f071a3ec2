"""The report's figures, as PNG data URIs, so the page stays one file.

Each figure is drawn at a fixed pixel width, and anything drawn per op is first reduced
to what those pixels can show, so a million-op history costs no more to draw than one of
a few thousand ops.
"""
from __future__ import annotations

import base64
import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from onceproof.report.faults import Window
from onceproof.workloads.faults import RELEASE_KINDS

OUTCOME_COLORS = {"ok": "#2ca02c", "fail": "#d62728", "info": "#ff7f0e"}
FAULT_COLORS = {"network": "#1f77b4", "request": "#d62728", "node": "#9467bd",
                "client": "#8c564b", "other": "#7f7f7f"}
WIDTH_IN, DPI = 13.0, 100
_PIXELS = int(WIDTH_IN * DPI)
_CHAR_PX = 6.5  # width of one label character at fontsize 8


def data_uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


MAX_LANES = 6
DENSE = 5000
MAX_LABELS = 60


def layout(windows: list[Window], span: float) -> tuple[list[int], list[bool]]:
    """A lane per window and whether its label is drawn. Windows in one lane never
    overlap, counting the width of their labels, so labels never print over each other.
    A run with thousands of faults labels only the windows wide enough to hold their
    label (the widest MAX_LABELS of them) and packs the rest into at most MAX_LANES."""
    per_px = span / _PIXELS if span > 0 else 1.0
    need = [(len(w.label) + 2) * _CHAR_PX * per_px for w in windows]
    if len(windows) <= MAX_LABELS:
        labelled = [True] * len(windows)
    else:
        fits = [i for i, w in enumerate(windows) if w.end - w.start >= need[i]]
        widest = set(sorted(fits, key=lambda i: windows[i].start - windows[i].end)[:MAX_LABELS])
        labelled = [i in widest for i in range(len(windows))]
    ends: list[float] = []
    lanes = []
    for i, w in enumerate(windows):
        reach = max(w.end, w.start + need[i]) if labelled[i] else w.end
        lane = next((k for k, e in enumerate(ends) if e <= w.start), None)
        if lane is None and len(ends) < MAX_LANES:
            lane = len(ends)
            ends.append(reach)
        elif lane is None:
            lane = min(range(len(ends)), key=ends.__getitem__)
            labelled[i] = False  # it overlaps a neighbour: its label would too
            ends[lane] = max(ends[lane], w.end)
        else:
            ends[lane] = reach
        lanes.append(lane)
    return lanes, labelled


def _min_width(span: float) -> float:
    # An op shorter than a pixel would vanish; one pixel is the least it is drawn as.
    return 1.5 * span / _PIXELS if span > 0 else 1e-9


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b - a) for a, b in out]


def _shade(ax, windows: list[Window], span: float) -> None:
    """The union of the windows of each kind, so overlapping faults do not darken into an
    opaque band, in one draw call per kind."""
    least = _min_width(span)
    for category, color in FAULT_COLORS.items():
        for point in (False, True):
            xr = _union([(w.start, max(w.end, w.start + least)) for w in windows
                         if w.category == category and w.point == point])
            if xr:
                ax.broken_barh(xr, (0, 1), transform=ax.get_xaxis_transform(), color=color,
                               alpha=0.25 if point else 0.10, lw=0, zorder=0)


def timeline(ops: pd.DataFrame, windows: list[Window], processes: list[str],
             span: float, final_at: float | None = None) -> str:
    """Ops per process over time, colored by outcome, with a lane per overlapping fault
    window at the top and every window shaded across all processes."""
    lane_of, labelled = layout(windows, span)
    n_lanes = max(lane_of, default=-1) + 1
    rows = len(processes) + n_lanes
    height = min(14.0, max(2.6, 0.26 * rows + 1.3))
    fig, ax = plt.subplots(figsize=(WIDTH_IN, height))
    y_of = {p: i for i, p in enumerate(processes)}
    _shade(ax, windows, span)
    ops = ops[ops["process"].isin(y_of)]
    lw = max(1.5, min(9.0, 170.0 / max(rows, 1)))
    # Past DENSE ops, a pixel holds many ops, and bars of one outcome drawn over another
    # would paint whole rows in the rarer color; each outcome gets its own stripe instead.
    dense = len(ops) > DENSE
    for k, outcome in enumerate(("ok", "fail", "info")):
        sel = ops[ops["outcome"] == outcome]
        if sel.empty:
            continue
        x0, x1, y = _segments(sel, y_of, span)
        ax.hlines(y + ((k - 1) * 0.27 if dense else 0), x0, x1, colors=OUTCOME_COLORS[outcome],
                  lw=lw / 3 if dense else lw, label=f"{outcome} ({len(sel)})",
                  zorder=2 if outcome == "ok" else 3)
    least = _min_width(span)
    for category, color in FAULT_COLORS.items():
        mine = [(w, lane) for w, lane in zip(windows, lane_of) if w.category == category]
        if mine:
            ax.hlines([len(processes) + lane + 0.2 for _, lane in mine],
                      [w.start for w, _ in mine], [max(w.end, w.start + least) for w, _ in mine],
                      colors=color, lw=min(lw, 4.0), zorder=2)
    for w, lane, show in zip(windows, lane_of, labelled):
        if show:
            # The y axis is inverted: y - 0.05 with va="bottom" sits just above the bar.
            ax.text(w.start, len(processes) + lane - 0.05, w.label + (" ?" if w.uncertain else "")
                    + ("" if w.closed_by is not None else " (never healed)"),
                    fontsize=8, color="#222222", va="bottom", ha="left", clip_on=True)
    if final_at is not None:
        ax.axvline(final_at, color="#444444", ls="--", lw=1, zorder=1)
        ax.text(final_at, -0.55, "final reads ", fontsize=8, color="#444444", va="center",
                ha="right")
    ticks = list(range(len(processes))) + [len(processes) + i for i in range(n_lanes)]
    ax.set_yticks(ticks, processes + ["faults" if n_lanes == 1 else f"faults {i + 1}"
                                      for i in range(n_lanes)])
    ax.set_ylim(-1, rows + 0.2)
    ax.invert_yaxis()
    ax.set_xlim(0, span * 1.01 if span > 0 else 1)
    ax.set_xlabel("seconds since the first event")
    ax.grid(axis="x", alpha=0.3)
    if len(ops):
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncols=3,
                  frameon=False, borderaxespad=0.2)
    fig.tight_layout()
    return data_uri(fig)


def _segments(ops: pd.DataFrame, y_of: dict, span: float):
    """Start, end and row of each op's bar; a pending op runs to the end. Past DENSE
    ops, bars are reduced to the pixels they cover on each row: each row's
    covered pixels, merged into runs, whatever the number of ops."""
    x0 = ops["start"].to_numpy(dtype=float)
    x1 = ops["end"].fillna(span).to_numpy(dtype=float)
    x1 = np.maximum(x1, x0 + _min_width(span))
    y = ops["process"].map(y_of).to_numpy(dtype=np.int64)
    if len(x0) <= DENSE or span <= 0:
        return x0, x1, y
    px = span / _PIXELS
    cols = _PIXELS + 2
    lo = np.clip(np.floor(x0 / px).astype(np.int64), 0, cols - 1)
    hi = np.clip(np.ceil(x1 / px).astype(np.int64), 0, cols - 1)
    rows = max(y_of.values()) + 1
    diff = np.zeros(rows * cols + 1, dtype=np.int64)
    np.add.at(diff, y * cols + lo, 1)
    np.add.at(diff, y * cols + hi, -1)
    covered = np.cumsum(diff[:-1]).reshape(rows, cols) > 0
    edges = np.diff(np.pad(covered.astype(np.int8), ((0, 0), (1, 1))), axis=1)
    r_start, c_start = np.nonzero(edges == 1)
    _, c_end = np.nonzero(edges == -1)
    return c_start * px, c_end * px, r_start


def bin_width(span: float, target: int = 80) -> float:
    """A round bin width (1, 2 or 5 times a power of ten seconds) giving about `target`
    bins; runs of a minute or more get at least one-second bins."""
    if span <= 0:
        return 1.0
    raw = span / target
    exp = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * 10 ** exp >= raw:
            width = m * 10 ** exp
            break
    return max(width, 1.0) if span >= 60 else width


def throughput(ops: pd.DataFrame, windows: list[Window], span: float) -> tuple[str, float]:
    """Ops completed per second, per outcome, with the fault windows shaded and labelled.
    Returns the image and the bin width used."""
    width = bin_width(span)
    edges = np.arange(0, span + width, width) if span > 0 else np.array([0.0, 1.0])
    if len(edges) < 2:
        edges = np.array([0.0, width])
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.6))
    _shade(ax, windows, span)
    top = 0.0
    done = ops[~ops["pending"]]
    for outcome in ("ok", "fail", "info"):
        t = done.loc[done["outcome"] == outcome, "end"].to_numpy(dtype=float)
        if len(t) == 0:
            continue
        counts, _ = np.histogram(t, bins=edges)
        rate = counts / width
        top = max(top, rate.max())
        ax.stairs(rate, edges, color=OUTCOME_COLORS[outcome], lw=1.6,
                  fill=outcome == "ok", alpha=0.35 if outcome == "ok" else 1.0,
                  label=f"{outcome}")
    lane_of, labelled = layout(windows, span)
    for w, lane in ((w, lane) for w, lane, show in zip(windows, lane_of, labelled) if show):
        ax.text(w.start, 0.97 - 0.09 * lane, w.label, transform=ax.get_xaxis_transform(),
                fontsize=8, color=FAULT_COLORS[w.category], va="top", ha="left", clip_on=True)
    n_lanes = max(lane_of, default=-1) + 1
    ax.set_ylim(0, max(top, 1.0) * (1.15 + 0.1 * n_lanes))
    ax.set_xlim(0, span * 1.01 if span > 0 else 1)
    ax.set_xlabel("seconds since the first event")
    ax.set_ylabel(f"ops completed / s\n(bins of {_seconds(width)})")
    ax.grid(alpha=0.3)
    if not done.empty:
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncols=3,
                  frameon=False, borderaxespad=0.2)
    fig.tight_layout()
    return data_uri(fig), width


def _seconds(s: float) -> str:
    if s >= 1:
        return f"{s:g} s"
    if s >= 1e-3:
        return f"{s * 1e3:g} ms"
    return f"{s * 1e6:g} µs"


_TRACK_COLORS = ("#9ecae1", "#3182bd", "#fdae6b", "#e6550d", "#a1d99b", "#31a354", "#bcbddc")


def tracks(rows, windows: list[Window], span: float) -> str:
    """What ran where over time (report.changes: each node's release, each finalized
    feature's level, each client's transaction protocol): a row per track, a bar per
    segment in a colour per value, labelled with it, and the release and feature
    changes' fault windows shaded."""
    height = min(10.0, max(1.8, 0.3 * len(rows) + 1.2))
    fig, ax = plt.subplots(figsize=(WIDTH_IN, height))
    _shade(ax, [w for w in windows if w.f in RELEASE_KINDS], span)
    colors: dict[str, str] = {}
    least = _min_width(span)
    for y, track in enumerate(rows):
        for seg in track.segments:
            color = colors.setdefault(seg.text, _TRACK_COLORS[len(colors) % len(_TRACK_COLORS)])
            ax.hlines(y, seg.start, max(seg.end, seg.start + least), colors=color, lw=9, zorder=2)
            ax.text(seg.start, y, " " + seg.text, fontsize=8, color="#222222", va="center",
                    ha="left", clip_on=True, zorder=3)
    ax.set_yticks(range(len(rows)), [f"{t.row} ({t.kind})" for t in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.invert_yaxis()
    ax.set_xlim(0, span * 1.01 if span > 0 else 1)
    ax.set_xlabel("seconds since the first event")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return data_uri(fig)
