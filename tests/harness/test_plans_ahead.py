"""cuDNN's plans for later scenarios, built while the timing loop drains and in the worker's
warm-up before the job arrives (harness/worker.py: PeerPlans, warm_up), never twice and never
at the cost of the current scenario."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

import harness.worker as worker
from harness.attention.forward import AttentionForward
from harness.job import KernelSpec
from harness.report import PASS
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.timing import time_interleaved
from tests.harness.recording import CPU, GQA, HugeDoesNotFit, NamedPeer, Recorder, planned_only
from tests.harness.support import FAST


def test_meanwhile_runs_once_every_timed_call_is_enqueued_and_before_the_wait() -> None:
    log: list[str] = []
    dev = Recorder(log)
    launches = {name: (lambda i, name=name: log.append(f"call {name}")) for name in ("a", "b")}
    # The count of timed calls fixed: from FAST it follows the first call's time, and a collection
    # or a preemption there on a loaded machine would drop a repetition.
    fixed = replace(FAST, min_reps=FAST.max_reps, min_reps_slow=FAST.max_reps)
    time_interleaved(dev, launches, 2, fixed, cross_check=frozenset(),
                     meanwhile=lambda busy: log.append("meanwhile"))
    at = log.index("meanwhile")
    assert log.count("meanwhile") == 1
    assert log[at + 1] == "sync" and not any(e.startswith("call") for e in log[at:])
    assert sum(e.startswith("call") for e in log[:at]) == 2 * (FAST.warmup + FAST.max_reps)


def test_the_next_scenarios_plan_peers_are_called_after_the_timed_calls_on_other_contents() -> None:
    log: list[str] = []
    problem = AttentionForward()
    current, upcoming = GQA, Scenario("next", "x", 1, 20, 90, 4, 1, 32, causal=True)
    made: dict[str, NamedPeer] = {}

    class WithPeers(worker.ScenarioEvaluator):
        def _wanted_peers(self, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
            for name, plans in (("planned", True), ("plain", False)):
                made[f"{name} {s.name}"] = NamedPeer(log, name, s, plans)
            return {"planned": made[f"planned {s.name}"], "plain": made[f"plain {s.name}"]}

    settings = EvalSettings(device="cpu", peers=("planned", "plain"), timing=FAST)
    candidate = problem.load_kernel(KernelSpec("correct", "python", "tests.cpu_kernels:correct"))
    ev = WithPeers(problem, Recorder(log), candidate, None, settings, None)
    ev.upcoming = [upcoming]
    assert ev.evaluate(current).status == PASS
    ahead = [i for i, e in enumerate(log) if e.endswith(("next contiguous", "next strided"))]
    # Only the peer that builds plans, once (it runs every input set in one layout), after the
    # current scenario's last peer call, and the device waited for right after.
    assert [log[i] for i in ahead] == ["planned next contiguous"]
    assert max(i for i, e in enumerate(log) if e.startswith(("planned gqa", "plain gqa"))) < ahead[0]
    assert log[ahead[-1] + 1] == "sync"
    # Inputs of the next scenario's shape and layouts, but not the contents its trials will get.
    seen = made["planned next"].inputs
    for trial, got in enumerate(seen):
        real = problem.make_inputs(upcoming, settings.seed * 1_000_003 + trial, CPU)
        assert [x.shape for x in got] == [x.shape for x in real]
        assert not any(torch.equal(a, b) for a, b in zip(got, real, strict=True))
    # Nothing ahead for the last scenario, or without timing.
    log.clear()
    ev.upcoming = ()
    assert ev.evaluate(current).status == PASS
    assert not any("next" in e for e in log)
    quiet = WithPeers(problem, Recorder(log), candidate, None, replace(settings, measure=False), None)
    quiet.upcoming = [upcoming]
    assert quiet.evaluate(current).status == PASS
    assert not any("next" in e for e in log)



def test_a_long_queue_builds_the_plans_of_later_scenarios_for_as_long_as_it_lasts() -> None:
    """The next scenario's plans always; then, in order, those of later scenarios still without
    plans, each only while the queued calls are expected to outlast a build (a long scenario's
    queue hides the plans of the short ones after it); a scenario whose plans exist is skipped."""
    log: list[str] = []
    later = [Scenario(f"s{i}", "x", 1, 20 + i, 90, 4, 1, 32, causal=True) for i in range(5)]
    ev = planned_only(AttentionForward(), log)
    ev.plans.build(later[2], {"planned": NamedPeer(log, "planned", later[2], True)})  # a warm-up's
    log.clear()
    asked: list[float] = []

    def busy_for_two(ms: float) -> bool:  # the queue outlasts two more builds, then not
        asked.append(ms)
        return len(asked) <= 2

    ev.upcoming = later
    ev._prepare_upcoming_peers(busy_for_two)
    assert log == ["planned s0 contiguous", "planned s1 contiguous", "planned s3 contiguous"]
    assert [ev.plans.built(s) for s in later] == [True, True, True, True, False]
    # each question names the typical build's host time so far (a median of real builds)
    assert len(asked) == 3 and all(0 < ms < 5_000 for ms in asked)
    # Without a queue to hide them, only the next scenario's plans are built, if missing.
    log.clear()
    ev.upcoming = later[3:]
    ev._prepare_upcoming_peers(lambda ms: False)
    assert log == []
    ev.upcoming = later[4:]
    ev._prepare_upcoming_peers(lambda ms: False)
    assert log == ["planned s4 contiguous"]


def test_scenarios_with_nothing_to_build_are_asked_about_once() -> None:
    """Where the peer cache answers for every peer (or no peer builds plans), each later
    scenario is looked up once in an evaluation, not once per scenario before it (the cache is
    files on disk)."""
    log: list[str] = []
    asked: list[str] = []
    later = [Scenario(f"s{i}", "x", 1, 20, 90, 4, 1, 32, causal=True) for i in range(6)]

    class Nothing(worker.ScenarioEvaluator):
        def _wanted_peers(self, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
            asked.append(s.name)
            return {}

    base = planned_only(AttentionForward(), log)
    ev = Nothing(base.problem, base.device, base.candidate, None, base.settings, None)
    for i in range(len(later)):
        ev.upcoming = later[i:]
        ev._prepare_upcoming_peers(lambda ms: True)
    assert asked == [s.name for s in later] and not log


def test_plans_ahead_stop_at_the_first_scenario_that_does_not_fit() -> None:
    log: list[str] = []
    later = [Scenario(name, "x", 1, 20, 90, 4, 1, 32, causal=True) for name in ("a", "huge", "b")]

    ev = planned_only(HugeDoesNotFit(), log)
    ev.upcoming = later
    ev._prepare_upcoming_peers(lambda ms: True)
    assert log == ["planned a contiguous"]  # "b" waits: "huge" gets its own turn first
    assert [ev.plans.built(s) for s in later] == [True, False, False]


def test_the_next_scenario_too_large_for_the_device_does_not_fail_the_current_one() -> None:
    """Building the next scenario's plans allocates its inputs beside the current one's: where
    they do not fit (a large decode shape on a small GPU), the current scenario still passes and
    nothing is built ahead."""
    log: list[str] = []
    current, upcoming = GQA, Scenario("huge", "x", 1, 20, 90, 4, 1, 32, causal=True)

    ev = planned_only(HugeDoesNotFit(), log)
    ev.upcoming = [upcoming]
    r = ev.evaluate(current)
    assert r.status == PASS, r.reason
    assert r.peers["planned"].status == "ok"
    assert not any("huge" in e for e in log)


class PollAfter:
    """A worker's end of the pipe on which a message arrives after `n` polls (the job)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def poll(self, timeout: float = 0.0) -> bool:
        self.n -= 1
        return self.n < 0


def _warm(monkeypatch: pytest.MonkeyPatch, log: list[str], scenarios: list[Scenario],
          conn: Any, **settings: Any) -> worker.Prepared | None:
    def peers(problem: Any, st: EvalSettings, s: Scenario) -> dict[str, Any]:
        return {name: NamedPeer(log, name, s, plans) for name, plans in
                (("planned", True), ("plain", False))}

    monkeypatch.setattr(worker, "wanted_peers", peers)
    st = EvalSettings(device="cpu", peers=("planned", "plain"), timing=FAST, **settings)
    spec = {"problem": "attention-forward", "scenarios": [s.to_dict() for s in scenarios],
            "settings": st.to_dict()}
    return worker.warm_up(spec, conn)


def test_a_warm_up_calls_every_peer_once_then_builds_plans_from_the_end_until_the_job_arrives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[str] = []
    suite = [Scenario(f"s{i}", "x", 1, 20 + i, 40, 4, 2, 32, causal=True) for i in range(5)]
    prepared = _warm(monkeypatch, log, suite, PollAfter(3))
    assert prepared is not None and prepared.seconds >= 0 and 0 <= prepared.stop_s <= prepared.seconds
    assert 0 < prepared.last_build_s <= prepared.seconds  # the build the job may have waited for
    # First use of every peer on the first scenario, the plain one on both layouts, the one that
    # builds a plan on the layout it runs every input set in; then only that peer, from the last
    # scenario backwards (the suite's short scenarios, whose queues hide no builds, are last);
    # nothing once the job is there (the fourth poll).
    assert log == ["planned s0 contiguous", "plain s0 contiguous", "plain s0 strided",
                   "planned s4 contiguous", "planned s3 contiguous"]
    assert [prepared.plans.built(s) for s in suite] == [True, False, False, True, True]
    # A job with the same problem and device kind takes the device; the plans only where its
    # trials have the layouts they were built for.
    job = worker.WorkerJob("attention-forward", KernelSpec("c", "python", "x:y"), None, suite,
                           prepared.settings)
    assert prepared.fits(job) and prepared.plans_for(job) is prepared.plans
    other = replace(prepared.settings, seed=prepared.settings.seed + 1)
    assert prepared.plans_for(replace(job, settings=other)) is None
    assert not prepared.fits(replace(job, settings=replace(other, device="cuda")))


def test_no_warm_up_builds_for_a_peer_cache_or_without_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    suite = [GQA]
    for st in ({"peer_cache_dir": "/tmp/peers"}, {"measure": False}):
        prepared = _warm(monkeypatch, log, suite, PollAfter(99), **st)
        assert prepared is not None and len(prepared.plans) == 0
    assert log == []


def test_the_evaluation_does_not_build_again_what_the_warm_up_built(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    later = Scenario("later", "x", 1, 21, 40, 4, 2, 32, causal=True)
    prepared = _warm(monkeypatch, log, [GQA, later], PollAfter(99))
    assert prepared is not None and prepared.plans.built(later)
    log.clear()
    problem = AttentionForward()
    settings = prepared.settings
    candidate = problem.load_kernel(KernelSpec("correct", "python", "tests.cpu_kernels:correct"))

    class WithPeers(worker.ScenarioEvaluator):
        def _wanted_peers(self, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
            return {"planned": NamedPeer(log, "planned", s, True)}

    ev = WithPeers(problem, Recorder(log), candidate, None, settings, None, plans=prepared.plans)
    ev.upcoming = [later]
    assert ev.evaluate(GQA).status == PASS
    assert not any("later" in e for e in log)  # its plans exist: nothing ahead
    fresh = WithPeers(problem, Recorder(log), candidate, None, settings, None)
    fresh.upcoming = [later]
    assert fresh.evaluate(GQA).status == PASS
    assert [e for e in log if "later" in e] == ["planned later contiguous"]
