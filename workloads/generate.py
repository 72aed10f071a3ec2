"""Drawing plans from a strategy outside a test, reproducibly from a seed.

Hypothesis has no public "draw one value from this seed" call (`.example()` is for the
REPL and not seeded), so we run a one-example search under a fixed seed and keep what it
generated. The first examples Hypothesis tries are deliberately the simplest, so we skip
a few to get a plan of the size the strategy allows.
"""
from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, seed, settings


def draw_plans(strategy, count: int, seed_value: int, skip: int = 5) -> list[dict]:
    drawn: list[dict] = []

    @seed(seed_value)
    @settings(max_examples=count + skip, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), deadline=None)
    @given(strategy)
    def collect(plan):
        drawn.append(plan)

    collect()
    return drawn[skip:][:count] if len(drawn) > skip else drawn[-count:]
