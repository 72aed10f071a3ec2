"""The search policy shared by properties and suites (`Search`), and hunting one suite (`hunt`).

Searching is bounded by a number of plans (Hypothesis's max_examples); shrinking, which
costs a cluster run per attempt, by a time budget counted from the first failure: from
then on every attempt is reported as passing without running, Hypothesis gives up (often
calling the failure flaky, which for a nondeterministic system it is), and the smallest
failure seen so far, kept by Counterexamples, is the result. A session deadline stops
every search the same way; a search it stopped is `cut`.

A search ends "passed" or "none found" only when every plan it ran came to a verdict. The
one failure it asks Hypothesis for is `Shown`, raised by a suite's `attempt` for a plan
that showed what the suite is hunted for; any other exception (an `assert` of the harness
or the checkers included) stops the search as an error of the harness (`Search.broke`):
its traceback in the artifacts, one line in the result, which fails the suite, the hunt
or the calibration leg.

A known-bad suite's smallest counterexample can be kept (`keep`) as one JSON file, the
plan, what it showed and the suite's settings it was found with (`suite_settings`), and
proven again later by replaying it (`replay_kept`): a few runs of a plan that once failed
cost far less than the search that found it.
"""
from __future__ import annotations

import datetime
import json
import math
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import Flaky

from onceproof.checkers.verdict import Verdict
from onceproof.cluster.external import AnyCluster
from onceproof.errors import SetupError
from onceproof.run.backends import client_spec, on_client
from onceproof.trial import Counterexamples, Trial, run_trial
from onceproof.workloads.plan import load, size, with_values
from onceproof.workloads.suites import Suite


class Shown(Exception):
    """A plan showed what its suite is hunted for: the failure a suite's search asks
    Hypothesis to find and shrink, raised only by `hunt`'s attempt. No other exception
    out of a search is a result."""


class Search:
    """One search's policy: runs plans on a cluster, counts them, adds up what they
    exercised, offers failures to Counterexamples under `name`, and stops running plans
    once the budget after the first failure or the deadline (a monotonic time) is spent,
    or once an error of the harness broke it (`broke`).
    on_cut(examples run) is called whenever the deadline refuses a plan."""

    def __init__(self, name: str, cluster: AnyCluster, artifacts: str | Path,
                 spark_master: str | None = None, budget: float = 600.0,
                 deadline: float | None = None,
                 on_cut: Callable[[int], None] | None = None, client: str | None = None,
                 java_client_version: str | None = None, app: dict | None = None) -> None:
        self.name, self.cluster, self.spark_master = name, cluster, spark_master
        # The client library of every plan client that names none (pytest's --client).
        self.client, self.java_client_version = client, java_client_version
        # The application's producer and consumer settings, under each plan's own.
        self.app = app or {}
        self.budget, self.deadline, self.on_cut = budget, deadline, on_cut
        self.scratch = Path(artifacts) / "trials" / name
        self.errors = Path(artifacts) / "errors"
        # One line on the error of the harness that stopped this search (see broke).
        self.error: str | None = None
        self.store = Counterexamples(Path(artifacts) / "counterexamples")
        self.started = time.monotonic()
        self.examples = 0
        self.seconds_to_first: float | None = None
        self.cut = False  # the deadline stopped the search
        self.exercised: Counter[str] = Counter()

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def spent(self) -> bool:
        """Whether no further plan may run; notes a stop by the deadline as `cut`."""
        if self.error is not None:
            return True
        if (self.seconds_to_first is not None
                and time.monotonic() - self.started - self.seconds_to_first > self.budget):
            return True
        if self.past_deadline():
            self.cut = True
            return True
        return False

    def run(self, plan: dict) -> Trial | None:
        """Run plan on a healed cluster; None (nothing run) once the search is spent."""
        if self.spent():
            if self.cut and self.on_cut is not None:
                self.on_cut(self.examples)
            return None
        if self.cluster.faults or self.cluster.down_nodes:
            self.cluster.heal_all()
        self.examples += 1
        plan = on_client(plan, self.client, self.java_client_version,
                         self.app.get("producer"), self.app.get("consumer"))
        if (values := self.app.get("values")):
            # --value-bytes and --value-content, over the plan's own.
            plan = with_values(plan, values["value_bytes"], values["value_content"])
        trial = run_trial(plan, self.cluster, self.scratch / f"{self.examples:04d}",
                          self.spark_master)
        self.exercised.update(trial.exercised)
        return trial

    def failed(self, trial: Trial) -> str:
        """Record a failing trial; return the message for the assertion."""
        if self.seconds_to_first is None:
            self.seconds_to_first = time.monotonic() - self.started
        self.store.offer(self.name, trial, self.cluster)
        where = self.store.folder(self.name)
        return (f"{', '.join(sorted(trial.verdict.failing)) or 'invalid verdict'}; smallest "
                f"counterexample: {where} (replay: onceproof replay {where})")

    def broke(self, exc: BaseException) -> str:
        """Record an error of the harness (not a plan's verdict) that stops this search:
        its traceback in errors/<name>.txt under the artifacts; returns, and keeps as
        `error`, one line naming it and that file. No plan runs after it."""
        self.errors.mkdir(parents=True, exist_ok=True)
        path = self.errors / f"{self.name}.txt"
        path.write_text("".join(traceback.format_exception(exc)))
        said = next((line for line in str(exc).splitlines() if line.strip()), "")
        self.error = (f"harness error ({type(exc).__name__}{': ' + said if said else ''}); "
                      f"traceback in {path}")
        return self.error

    @property
    def counterexample(self) -> Path | None:
        """The folder of the smallest failing plan saved under this search's name, once
        this search has failed (a folder left by an earlier session proves nothing now)."""
        folder = self.store.folder(self.name)
        return folder if self.seconds_to_first is not None else None


# What a clean search needs to have seen for its pass to count (trial.exercised).
EVIDENCE = ("acknowledged_writes", "commit_txn", "streams_committed_inputs")


@dataclass
class HuntResult:
    suite: str
    mode: str
    expect: str
    known_good: bool  # the suite must pass: `caught` means it did
    caught: bool
    examples: int
    seconds_to_first: float | None
    shrunk_size: int | None
    reproduced: str
    counterexample: str | None
    cut: bool = False  # the deadline stopped the search before it was done
    exercised: dict[str, int] = field(default_factory=dict)  # summed over the plans run

    hunt: bool = False  # a hunt (workloads/suites.py HUNTS): caught means found
    found: list[str] = field(default_factory=list)  # what the counterexample showed
    kafka_version: str = ""
    client: str | None = None  # the client library the plans ran on (None: as they say)
    # One line on an error of the harness that stopped the search (Search.broke): the
    # search decided nothing, whatever it had run.
    error: str | None = None
    # The suite's settings its plans were drawn with (suite_settings), kept with its
    # counterexample.
    settings: dict = field(default_factory=dict)
    # What the suite's claim needs seen besides EVIDENCE (Suite.evidence: an upgrade
    # suite's transactions before, during and after the change, and v2 at the end).
    needs: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        """What the claim needs that the plans run did not show."""
        return [k for k in self.needs if not self.exercised.get(k)]

    @property
    def idle(self) -> bool:
        """A clean search (nothing found, or a known-good suite passed) whose plans had no
        write acknowledged, no transaction committed and no Streams input committed: its
        clients did nothing its claim is about (a client that could not start, say), so
        its pass is no evidence."""
        if self.error:
            return False
        clean = not self.caught if self.hunt else self.known_good and self.caught
        return clean and self.examples > 0 and (
            not any(self.exercised.get(k) for k in EVIDENCE) or bool(self.missing))

    @property
    def outcome(self) -> str:
        """The table's word for this row."""
        if self.error:
            return "HARNESS ERROR"
        if self.cut and not self.caught:
            return "stopped by time limit" if self.examples else "not run (time limit)"
        if self.idle and self.missing and any(self.exercised.get(k) for k in EVIDENCE):
            return f"NOT EXERCISED (none of: {', '.join(self.missing)})"
        if self.idle:
            return "NOTHING EXERCISED (no write acknowledged, nothing committed)"
        if self.hunt:
            return "FOUND " + ", ".join(self.found) if self.caught else "none found"
        if self.known_good:
            return "passed" if self.caught else "FAILED"
        return "yes" if self.caught else "NO"


def shows(suite: Suite, trial: Trial) -> bool:
    """Whether trial shows what the suite is hunted for: any violation for a known-good
    suite, any violation or stall for a hunt, one of its expected anomalies for a
    known-bad one (as a violation or stall, not a note)."""
    if suite.is_hunt:
        return not (trial.verdict.valid and trial.verdict.live)
    if suite.known_good:
        return not trial.verdict.valid
    return bool(trial.verdict.failing & suite.expect)


def hunt(suite: Suite, cluster: AnyCluster, artifacts: str | Path, spark_master: str | None = None,
         max_examples: int = 10, budget: float = 600.0, replays: int = 2,
         seed: int | None = None, deadline: float | None = None,
         mode: str = "rounds", client: str | None = None, app: dict | None = None) -> HuntResult:
    """Search, shrink and replay one suite with plans of `mode`'s shape, every plan client
    that names no client library on `client`. No plan starts after `deadline` (a
    monotonic time); a suite the deadline stopped is `cut`, and one stopped before its
    first plan reports 0 examples and no verdict. An error of the harness stops the
    search and is the result's `error` (neither caught nor passed); a SetupError (the
    cluster could not be set up or observed) is raised once its traceback is kept."""
    library, java_release = client_spec(client) if client else (None, None)
    search = Search(search_name(suite, mode, client), cluster, artifacts, spark_master, budget,
                    deadline, client=library, java_client_version=java_release, app=app)

    @settings(max_examples=max_examples, deadline=None, database=None,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
              print_blob=False)
    @given(suite.strategy(cluster.n, mode))
    def attempt(plan):
        try:
            trial = search.run(plan)
            shown = trial is not None and shows(suite, trial)
            said = search.failed(trial) if shown and trial is not None else ""
        except Exception as exc:
            # An error of the harness, not a plan's verdict: the search stops (no plan
            # runs after it), and what it had found decides nothing.
            search.broke(exc)
            if isinstance(exc, SetupError):
                setup.append(exc)
            return
        if shown:
            raise Shown(f"{suite.name}: {said}")

    setup: list[SetupError] = []
    if seed is not None:
        attempt = hypothesis_seed(seed)(attempt)
    try:
        attempt()
    except Exception as exc:
        # Only the failure we asked for, or Hypothesis's flaky verdict on it, is a
        # result; anything else (drawing a plan broke, say) is the harness's error.
        if not _only_shown(exc):
            search.broke(exc)
    if setup:
        # The cluster could not be set up or observed: the command's one line (exit 2).
        raise setup[0]
    folder = search.counterexample
    reproduced = "-"
    if folder is not None and replays and not search.past_deadline() and search.error is None:
        try:
            hits = sum(shows(suite, run_trial(load(folder / "plan.json"), cluster,
                                              search.scratch / f"replay-{i}", spark_master))
                       for i in range(replays))
            reproduced = f"{hits}/{replays}"
        except SetupError:
            raise
        except Exception as exc:
            search.broke(exc)
    found = folder is not None
    # A suite that ran no plan has shown nothing either way, nor has one the harness's
    # error stopped.
    caught = (search.examples > 0 and search.error is None
              and (found if suite.is_hunt or not suite.known_good else not found))
    shown: list[str] = []
    if folder is not None:
        v = Verdict.from_dict(json.loads((folder / "verdict.json").read_text()))
        shown = sorted(v.violations) + v.stalls
    expect = ("(any violation/stall)" if suite.is_hunt
              else ", ".join(sorted(suite.expect)) or "(none: must pass)")
    return HuntResult(
        suite=suite.name, mode=mode, expect=expect, hunt=suite.is_hunt, found=shown,
        kafka_version=cluster.version if search.examples else "",
        known_good=suite.known_good, caught=caught, examples=search.examples,
        seconds_to_first=search.seconds_to_first,
        shrunk_size=size(load(folder / "plan.json")) if folder is not None else None,
        reproduced=reproduced, counterexample=str(folder) if folder is not None else None,
        cut=search.cut, exercised=dict(search.exercised), client=client,
        error=search.error, settings=suite_settings(suite), needs=list(suite.evidence))


def suite_settings(suite: Suite) -> dict:
    """What a suite's plans are drawn with and stand for: its workload, its config (the
    clients', the topics' and the brokers' settings), its options and its faults, as
    plain JSON. A kept counterexample records them (`keep`), and is a plan of the suite
    only while they stay the same; how often and how long a search draws its faults is
    left out, since a kept plan is one of the suite's plans whatever they are."""
    return json.loads(json.dumps({"workload": suite.workload, "config": suite.config,
                                  "options": suite.options, "faults": list(suite.faults)},
                                 sort_keys=True))


def stale(suite: Suite, kept: dict, path: str | Path) -> str | None:
    """Why the counterexample kept at path (its record, `kept`) no longer stands for
    suite, in one line that says how to refresh it, or None while it does."""
    recorded = kept.get("suite_settings")
    now = suite_settings(suite)
    if recorded == now:
        return None
    changed = ("none recorded" if recorded is None else "changed: " + ", ".join(
        k for k in now if recorded.get(k) != now[k]))
    return (f"{suite.name}: the suite's settings ({changed}) are not those its kept "
            f"counterexample {path} was found with; refresh it as the nightly does "
            f"(ONCEPROOF_REFRESH_COUNTEREXAMPLES=1 pytest 'tests/test_suites.py::"
            f"test_a_kept_counterexample_still_shows_its_suites_anomaly[{suite.name}]'), "
            f"or with onceproof suites --only {suite.name} --mode "
            f"{kept.get('mode', 'rounds')} --save-counterexamples {Path(path).parent}")


def search_name(suite: Suite, mode: str, client: str | None = None) -> str:
    """The name a suite's search in mode (on `client`, when one is asked for) saves its
    counterexample under."""
    name = suite.name if mode == "rounds" else f"{suite.name}-{mode}"
    return f"{name}-{client.replace(':', '-')}" if client else name


def keep(result: HuntResult, folder: str | Path) -> Path:
    """Write the smallest counterexample of a caught known-bad suite to
    folder/<search name>.json: the plan, what it showed, where and when. `onceproof
    replay` runs the file as it is (a plan file may wrap its plan in "plan")."""
    if result.counterexample is None or result.known_good or result.hunt:
        raise ValueError(f"{result.suite}: only a caught known-bad suite has a counterexample to keep")
    found = Path(result.counterexample)
    verdict = Verdict.from_dict(json.loads((found / "verdict.json").read_text()))
    record = {"suite": result.suite, "mode": result.mode,
              "shown": sorted(verdict.failing),
              "suite_settings": result.settings,
              "kafka_version": result.kafka_version,
              "saved": datetime.date.today().isoformat(),
              "search": {"examples": result.examples,
                         "seconds_to_first": None if result.seconds_to_first is None
                         else round(result.seconds_to_first, 1),
                         "reproduced": result.reproduced},
              "plan": load(found / "plan.json")}
    dest = Path(folder) / f"{found.name}.json"  # the search's name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(record, indent=1) + "\n")
    return dest


# A kept counterexample that shows nothing in all its runs fails CI. Its runs are
# as many as make that rarer than MISS at the rate it reproduced when it was kept
# (its file's "reproduced": k of n), taken as (k+1)/(n+2) rather than k/n, since a
# few replays say little: 3 of 3 gives 6 runs, 2 of 3 gives 11 (the streams plan kept
# at 2 of 3 showed its anomaly in 3 of 6 replays later). A replay stops at the first
# run that shows the anomaly, so the extra runs cost only when runs miss.
MISS = 1e-4
MAX_TRIES = 12


def tries_for(reproduced: str | None, miss: float = MISS) -> int:
    """Runs of a kept counterexample that all miss with probability at most `miss`,
    at the smoothed rate of its record "k/n" (MAX_TRIES without a usable record)."""
    try:
        shown, runs = (int(part) for part in str(reproduced).split("/"))
    except ValueError:
        return MAX_TRIES
    if not 0 <= shown <= runs:
        return MAX_TRIES
    rate = (shown + 1) / (runs + 2)
    return min(MAX_TRIES, max(1, math.ceil(math.log(miss) / math.log(1 - rate))))


def replay_kept(suite: Suite, path: str | Path, cluster: AnyCluster, artifacts: str | Path,
                spark_master: str | None = None, tries: int | None = None,
                deadline: float | None = None) -> HuntResult:
    """Run a kept counterexample (see `keep`) up to `tries` times (default: `tries_for`
    its recorded reproduction), stopping at the first run that shows one of the
    suite's anomalies: `caught` says whether one did."""
    kept = json.loads(Path(path).read_text())
    mode = kept.get("mode", "rounds")
    if tries is None:
        tries = tries_for(kept.get("search", {}).get("reproduced"))
    search = Search(f"{search_name(suite, mode)}-replay", cluster, artifacts, spark_master,
                    budget=float("inf"), deadline=deadline)
    plan = load(path)
    caught = False
    while not caught and search.examples < tries:
        trial = search.run(plan)
        if trial is None:
            break
        caught = shows(suite, trial)
        if caught:
            search.failed(trial)
    return HuntResult(
        suite=suite.name, mode=f"{mode}, kept", expect=", ".join(sorted(suite.expect)),
        known_good=False, caught=caught, examples=search.examples,
        seconds_to_first=search.seconds_to_first, shrunk_size=size(plan),
        reproduced=f"{int(caught)}/{search.examples}",
        counterexample=str(search.counterexample) if search.counterexample else None,
        cut=search.cut, exercised=dict(search.exercised),
        kafka_version=cluster.version if search.examples else "")


def _only_shown(exc: BaseException) -> bool:
    """Whether exc is Shown, or Hypothesis's flaky verdict on Shown failures alone."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_shown(e) for e in exc.exceptions)
    if isinstance(exc, Flaky) and exc.__cause__ is not None:
        return _only_shown(exc.__cause__)
    return isinstance(exc, Shown)


def as_row(result: HuntResult) -> dict:
    return asdict(result)
