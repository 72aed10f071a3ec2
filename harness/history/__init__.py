"""Histories: the JSON Lines record of what every client saw (format: docs/history.md).

This package is the contract between the run and the checks: the run records with its
writer, the checks and the report read with its readers, and the format is stated here
once. Its modules, from the bottom up:

- format: what an event is, in plain Python (its kinds and fields, the nemesis, the
  rules' constants, HistoryError);
- schema: the same event as Arrow types (EVENT), which the fast reader parses against;
- writer: HistoryWriter, and Recorder, the calls a client records through;
- lines: the bytes of a history file (its whole lines, the truncated last one);
- rules: what a well-formed history is, event by event and between events;
- parse: the fast parse, in parts, one thread each;
- read: the two readers, `read_events` (per line) and `events_table` (fast);
- access: the few events a person looks at, by index (`values_at`, `nemesis_values`).

The writer and format need no pandas, numpy or Arrow: a run's client processes import
them, and nothing else of the package. Import each name from its module; this one
imports none.
"""
