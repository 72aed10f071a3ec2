"""A reference model of Kafka that synthesizes valid histories, and injects single anomalies.

Why it exists: the checkers must accept everything Kafka may legitimately do (gaps left by
aborted records and control markers, a last stable offset held back by an open
transaction, unknown outcomes, rewinds, write cycles between concurrent transactions) and
must name each anomaly they claim to find. Histories from a real cluster cannot prove
either, because nobody knows what they should contain. A history drawn from this model is
valid by construction, and `inject` adds one known anomaly to it, so a property test can
check the checkers against the model (tests/test_synth_property.py).

- model.py: the broker side (partition logs, transactions, group offsets);
- clients.py: simulated clients and the scheduler: `synthesize(seed, Shape(...))` and
  `synthesize_file` (streamed, for bench/checkers_bench.py);
- scenarios.py: one scripted scenario per anomaly type, and `inject`.
"""
