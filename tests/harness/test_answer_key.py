"""The answer key (harness/answer_key.py), on the CPU backend: references computed in a process
of their own before the candidate runs, each trial's outputs judged there once, and the worker
judging for itself whenever the key cannot answer. Real processes, real sockets, real shared
memory; kernels from tests/cpu_kernels.py."""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import replace
from typing import Any

import pytest
import torch

from harness.answer_key import (
    AnswerKey,
    AnswerKeyLost,
    AnswerKeyProcess,
    Answers,
    RemoteAnswers,
    arena_layout,
    call_digest,
)
from harness.attention.forward import AttentionForward
from harness.correctness import check_output
from harness.device import CpuDevice
from harness.executor import LocalExecutor, Progress
from harness.job import KernelSpec, WorkerJob
from harness.report import CRASH, FAIL, PASS
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.worker import ScenarioEvaluator
from tests.harness.support import FAST, SCENARIOS
from tests.waiting import wait_until

CPU = torch.device("cpu")
SETTINGS = EvalSettings(device="cpu", peers=(), timing=FAST, seed=5)


def _job(fn: str, settings: EvalSettings = SETTINGS) -> WorkerJob:
    return WorkerJob(
        "attention-forward", KernelSpec(fn, "python", f"tests.cpu_kernels:{fn}"),
        KernelSpec("baseline", "python", "tests.cpu_kernels:correct_slow"), SCENARIOS, settings,
    )


def _worker_trial(problem: AttentionForward, s: Scenario, trial: int, fn: str) -> tuple[Any, Any]:
    """A trial as the worker makes it: the trial's inputs and call, the kernel's output."""
    import tests.cpu_kernels as kernels

    inputs = problem.make_inputs(s, SETTINGS.trial_seed(trial), CPU)
    bufs = problem.buffers(s, inputs, problem.new_output(s, CPU), None, trial, SETTINGS.seed)
    getattr(kernels, fn)(bufs)
    return inputs, bufs


def test_the_key_judges_each_trial_exactly_as_references_in_the_worker_would() -> None:
    problem = AttentionForward()
    key = AnswerKey.compute(problem, SCENARIOS, SETTINGS, CPU)
    assert key.stats()["trials"] == len(SCENARIOS) * SETTINGS.trials
    for s in SCENARIOS:
        for trial in range(SETTINGS.trials):
            inputs, bufs = _worker_trial(problem, s, trial, "wrong_causal_offset")
            wrong = bufs.o.clone()
            bufs.o.copy_(problem.reference(s, bufs, torch.float32).to(torch.bfloat16))
            want = [check_output(out, problem.reference(s, bufs, torch.float32),
                                 problem.reference(s, bufs, torch.bfloat16))
                    for out in (wrong, bufs.o)]
            got = key.answer(s.name, trial, call_digest(problem, inputs, bufs), [wrong, bufs.o])
            assert got == want
            # Once: a second request (a candidate asking the key for itself) gets no verdict.
            again = key.answer(s.name, trial, call_digest(problem, inputs, bufs), [bufs.o])
            assert isinstance(again, str) and "already given" in again
    # The non-square causal scenario is the one the wrong offset fails.
    assert [c.ok for c in want] == [True, True]


def test_the_key_refuses_a_trial_whose_inputs_or_fields_differ_from_its_own() -> None:
    problem = AttentionForward()
    key = AnswerKey.compute(problem, SCENARIOS[:1], SETTINGS, CPU)
    s = SCENARIOS[0]
    inputs, bufs = _worker_trial(problem, s, 0, "correct")
    other_scale = replace(bufs, scale=bufs.scale * 1.01)
    got = key.answer(s.name, 0, call_digest(problem, inputs, other_scale), [bufs.o])
    assert isinstance(got, str) and "differ from the worker's" in got
    inputs[0][0, 0, 0, 0] += 1  # one element of q
    _, bufs1 = _worker_trial(problem, s, 1, "correct")
    got = key.answer(s.name, 1, call_digest(problem, inputs, bufs1), [bufs1.o])
    assert isinstance(got, str) and "differ" in got


def test_no_reference_exists_in_the_candidates_process_when_the_key_answers() -> None:
    """The worker's side against a real key process: the evaluator passes, and the problem's
    reference is never computed in this (the candidate's) process; a second evaluation of the
    same scenario finds no answers left and computes its own."""
    calls: list[str] = []

    class Watched(AttentionForward):
        def reference(self, s: Scenario, buffers: Any, dtype: torch.dtype) -> torch.Tensor:
            calls.append(s.name)
            return super().reference(s, buffers, dtype)

    problem = Watched()
    key = AnswerKeyProcess(mp.get_context("spawn"))
    try:
        assert key.warm(problem.name, SCENARIOS, SETTINGS)
        slots, slot_bytes = arena_layout(problem, SCENARIOS, 0)
        remote = RemoteAnswers.connect(key.handle(), CPU, slots, slot_bytes, 120, lambda: None)
        assert remote.info["trials"] == 6 and remote.info["not_computed"] == 0
        answers = Answers(problem, remote)
        candidate = problem.load_kernel(KernelSpec("c", "python", "tests.cpu_kernels:correct"))
        ev = ScenarioEvaluator(problem, CpuDevice(), candidate, None,
                               replace(SETTINGS, measure=False), None, answers=answers)
        results = [ev.evaluate(s) for s in SCENARIOS]
        assert [r.status for r in results] == [PASS, PASS, PASS]
        assert calls == [] and answers.in_worker == 0
        again = ev.evaluate(SCENARIOS[0])
        assert again.status == PASS
        assert calls == [SCENARIOS[0].name] * 4  # fp32 and bf16, two trials, computed here
        assert answers.in_worker == 2 and "already given" in answers.why
        remote.close()
    finally:
        key.close()


def test_an_unreachable_key_is_reported_and_the_worker_judges() -> None:
    with pytest.raises(AnswerKeyLost, match=r"the answer key was not ready within 0\.3 s"):
        RemoteAnswers.connect({"address": "/nonexistent/key.sock", "authkey": "00"}, CPU, 1, 512,
                              0.3, lambda: None)


def _keyed_run(fn: str, on_result: Any = None) -> Any:
    executor = LocalExecutor()
    executor.prestart()
    try:
        assert executor.warm("attention-forward", SCENARIOS, SETTINGS)
        key = executor._key
        assert key is not None and key.alive()
        result = executor.run(_job(fn), (lambda p: on_result(p, key)) if on_result else None)
        # The run ends its key (its references leave the device) before anything else runs.
        assert not key.alive() and executor._key is None
        return result
    finally:
        executor.close()


def _plain_run(fn: str) -> Any:
    return LocalExecutor().run(_job(fn))


def test_a_warmed_evaluation_is_judged_by_its_key_with_the_verdicts_of_one_without() -> None:
    keyed, plain = _keyed_run("wrong_causal_offset"), _plain_run("wrong_causal_offset")
    assert [r.status for r in keyed.results] == [PASS, FAIL, PASS]
    for a, b in zip(keyed.results, plain.results, strict=True):
        assert (a.status, a.reason, a.max_error, a.tolerance) == (b.status, b.reason, b.max_error, b.tolerance)
    info = keyed.device["answer_key"]
    assert info["trials"] == 6 and info["trials_judged_in_worker"] == 0 and info["wait_s"] >= 0
    assert "answer_key" in keyed.device["setup_phases"]
    assert "answer_key" not in plain.device


def test_a_restarted_worker_connects_to_the_key_again() -> None:
    result = _keyed_run("crash_on_causal")
    assert [r.status for r in result.results] == [CRASH, CRASH, PASS]
    # The last process judged the scenario it ran through the key.
    assert result.device["answer_key"]["trials_judged_in_worker"] == 0


def test_a_key_that_dies_mid_evaluation_leaves_the_rest_to_the_worker() -> None:
    def kill_after_first(p: Progress, key: AnswerKeyProcess) -> None:
        if p.result is not None and p.done == 1:
            key.close()

    result = _keyed_run("correct", kill_after_first)
    assert [r.status for r in result.results] == [PASS, PASS, PASS]
    info = result.device["answer_key"]
    assert info["trials_judged_in_worker"] == 4  # two scenarios, two trials each
    assert "went away" in info["why"]


def test_a_key_out_of_time_leaves_the_rest_to_the_worker() -> None:
    """The key stops computing within its share of the setup timeout, so that it is idle
    before the worker stops waiting and measures; what it did not compute, the worker does."""
    problem = AttentionForward()
    key = AnswerKey.compute(problem, SCENARIOS, SETTINGS, CPU, seconds=0.0)
    assert key.stats()["not_computed"] == len(SCENARIOS) * SETTINGS.trials
    inputs, bufs = _worker_trial(problem, SCENARIOS[0], 0, "correct")
    got = key.answer(SCENARIOS[0].name, 0, call_digest(problem, inputs, bufs), [bufs.o])
    assert isinstance(got, str) and "ran out of its 0 s" in got


def test_the_worker_goes_on_building_while_it_waits_for_the_key(tmp_path: Any) -> None:
    """RemoteAnswers.connect calls `meanwhile` (the warm-up's remaining plan builds) until the
    key accepts, or until it has nothing left."""
    import threading
    from multiprocessing.connection import Listener

    address, authkey = str(tmp_path / "key.sock"), b"k" * 32
    listener = Listener(address, family="AF_UNIX", authkey=authkey)

    def slow_key() -> None:
        import time

        time.sleep(0.5)  # computing
        with listener.accept() as c:
            c.send(("ready", {"seconds": 0.5}))
            c.recv()  # the arena

    t = threading.Thread(target=slow_key)
    t.start()
    builds: list[int] = []

    def build() -> bool:
        import time

        time.sleep(0.05)
        builds.append(1)
        return len(builds) < 1000

    remote = RemoteAnswers.connect({"address": address, "authkey": authkey.hex()}, CPU, 1, 512,
                                   30, lambda: None, build)
    t.join()
    remote.close()
    listener.close()
    assert 4 <= len(builds) <= 20 and remote.info["wait_s"] >= 0.45


def test_the_warm_up_pays_for_the_references_first_use_on_inputs_no_trial_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a key the worker's first references are the integrity check's: the warm-up computes
    one of each mask kind before the job (the first scenario of each), on inputs of PLAN_SEED,
    a seed no trial uses."""
    import harness.worker as worker

    seen: list[tuple[str, torch.dtype, int]] = []

    def bits_sum(t: torch.Tensor) -> int:
        return int(t.view(torch.int16).sum(dtype=torch.int64))

    class Watched(AttentionForward):
        def reference(self, s: Scenario, buffers: Any, dtype: torch.dtype) -> torch.Tensor:
            seen.append((s.name, dtype, bits_sum(buffers.q)))
            return super().reference(s, buffers, dtype)

    class JobArrived:  # the warm-up's plan builds stop at once
        def poll(self) -> bool:
            return True

    monkeypatch.setattr(worker, "get_problem", lambda name: Watched())
    spec = {"problem": "attention-forward", "scenarios": [s.to_dict() for s in SCENARIOS],
            "settings": SETTINGS.to_dict()}
    assert worker.warm_up(spec, JobArrived()) is not None
    first_causal, first_full = SCENARIOS[0], SCENARIOS[2]  # SCENARIOS[1] is causal too
    assert sorted((n, str(d)) for n, d, _ in seen) == sorted(
        (s.name, str(d)) for s in (first_causal, first_full) for d in (torch.float32, torch.bfloat16))
    problem = AttentionForward()
    for name, _, q_bits in seen:
        s = next(x for x in SCENARIOS if x.name == name)
        assert q_bits == bits_sum(problem.make_inputs(s, worker.PLAN_SEED, CPU)[0])
        assert all(q_bits != bits_sum(problem.make_inputs(s, SETTINGS.trial_seed(t), CPU)[0])
                   for t in range(SETTINGS.trials))


def test_a_dead_key_is_known_within_seconds_not_after_the_whole_wait() -> None:
    """The key's process listens from its first moment: once nothing listens at its address, the
    worker stops waiting after NOBODY_LISTENS_S (5 s), not after its share of the setup timeout."""
    import time

    key = AnswerKeyProcess(mp.get_context("spawn"))
    try:
        handle = key.handle()
        wait_until(lambda: os.path.exists(handle["address"]), 30, "the key's process to listen")
        key._proc.kill()
        key._proc.join(10)
        started = time.monotonic()
        with pytest.raises(AnswerKeyLost, match=r"nothing listens at its address \(its process has ended\)"):
            RemoteAnswers.connect(handle, CPU, 1, 512, 120, lambda: None)
        assert time.monotonic() - started < 15
    finally:
        key.close()


def test_a_key_told_a_malformed_job_says_why_to_the_worker() -> None:
    key = AnswerKeyProcess(mp.get_context("spawn"))
    try:
        assert key.warm("no-such-problem", SCENARIOS, SETTINGS)
        why = r"the answer key failed: ValueError: unknown problem 'no-such-problem'"
        with pytest.raises(AnswerKeyLost, match=why):
            RemoteAnswers.connect(key.handle(), CPU, 1, 512, 120, lambda: None)
    finally:
        key.close()
