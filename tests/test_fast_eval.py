"""What makes a fresh evaluation faster without loosening a rule (docs/harness.md, "Toward 30 s"):
fresh inputs drawn in place (no temporary, no copy, the same values the nonce reproduces), the
reference's mask and NaN passes only where a row needs them, the peers run while the device
computes the references (and on the second trial's layout, where cuDNN builds its plan), and
fewer timed samples per implementation. On the CPU backend, counting torch operations and
recording the order of the evaluator's steps; cuDNN's plans for the next scenario built while
the timing loop drains; and the CLI's worker process started before the CLI imports torch."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import harness.correctness as correctness
import harness.worker as worker
from harness.attention.fresh import DISTRIBUTIONS, AttentionTimedInputs, fresh_qkv, write_fresh_qkv
from harness.attention.fresh_fill import for_device
from harness.attention.problem import AttentionForward
from harness.attention.reference import attention_reference, attention_rows_reference
from harness.device import CpuDevice
from harness.job import KernelSpec
from harness.problem import TimedInputs
from harness.report import PASS
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.timing import TimingSettings, reps_for, time_interleaved
from tests.conftest import ROOT
from tests.cpu_kernels import _exact
from tests.test_executor import FAST

CPU = torch.device("cpu")
GQA = Scenario("gqa", "x", 2, 33, 47, 8, 2, 32, causal=True)


class OpCounter(TorchDispatchMode):
    """Counts the aten operations run inside it, by name ("normal_", "copy_", ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[func.__name__.split(".")[0]] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting() -> Iterator[Counter[str]]:
    mode = OpCounter()
    with mode:
        yield mode.ops


# -- fresh inputs in place ------------------------------------------------------------------


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("seed", [0, 1])  # seed 1: K and V interleaved in one KV-cache buffer
def test_fresh_inputs_written_in_place_are_the_values_the_nonce_reproduces(dist: str, seed: int) -> None:
    problem = AttentionForward()
    q, k, v = problem.make_inputs(GQA, seed, CPU)
    addresses = [x.data_ptr() for x in (q, k, v)]
    fill = for_device(CPU)
    for nonce in (7, 2**61 + 3):
        write_fresh_qkv(GQA, nonce, dist, (q, k, v), fill)
        assert [x.data_ptr() for x in (q, k, v)] == addresses
        again = fresh_qkv(GQA, nonce, dist, CPU)  # what the check of the timed call regenerates
        assert all(torch.equal(a, b) for a, b in zip(again, (q, k, v), strict=True))


def test_a_timed_call_writes_its_inputs_where_they_lie_whatever_their_strides() -> None:
    problem = AttentionForward()
    for seed in (0, 1):  # seed 1: K and V interleaved in one buffer, written there directly
        inputs = problem.make_inputs(GQA, seed, CPU)
        bufs = problem.buffers(GQA, inputs, problem.new_output(GQA, CPU), None, trial=seed)
        timed = AttentionTimedInputs(GQA, 1, inputs, bufs, lambda: None, [0], random.SystemRandom())
        timed.before_call()  # the first call keeps no output yet
        with counting() as ops:
            timed.before_call()
        # One write per tensor into its own storage, and the output of the call before kept.
        assert ops["copy_"] == 3
        assert ops["clone"] == 1
        assert not any(ops[op] for op in ("normal_", "uniform_", "randn", "rand"))



class CountingSource(random.SystemRandom):
    """The OS source, counting the random words it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.words: list[int] = []

    def getrandbits(self, k: int) -> int:
        self.words.append(k)
        return super().getrandbits(k)


def test_a_timed_calls_rows_take_one_seed_from_the_os_source_and_differ_each_draw() -> None:
    """The rows checked after a timed call come from a generator seeded by one 256-bit word of
    the OS source, drawn then (one system call, where each row's word was one before); two draws
    give different rows, and the rows are valid for the scenario."""
    problem = AttentionForward()
    inputs = problem.make_inputs(GQA, 0, CPU)
    bufs = problem.buffers(GQA, inputs, problem.new_output(GQA, CPU), None, trial=0)
    source = CountingSource()
    timed = AttentionTimedInputs(GQA, 1, inputs, bufs, lambda: None, [0], source)
    draws = []
    for _ in range(2):
        source.words.clear()
        draws.append(timed.draw_rows())
        assert source.words == [256]
    assert draws[0] != draws[1]
    for block in draws[0]:
        b, kvh, rest = block[0], block[1], block[2:]
        heads, queries = rest[:len(rest) // 2], rest[len(rest) // 2:]
        assert 0 <= b < GQA.batch and 0 <= kvh < GQA.heads_kv
        assert all(kvh * GQA.group <= h < (kvh + 1) * GQA.group for h in heads)
        assert all(0 <= q < GQA.seqlen_q for q in queries)
        assert len(set(zip(heads, queries, strict=True))) == len(heads)  # rows without repeats


# -- the reference's passes ------------------------------------------------------------------


def _reference_ops(sq: int, sk: int, causal: bool) -> tuple[Counter[str], torch.Tensor]:
    torch.manual_seed(0)
    q = torch.randn(1, sq, 4, 32, dtype=torch.bfloat16)
    k = torch.randn(1, sk, 2, 32, dtype=torch.bfloat16)
    v = torch.randn(1, sk, 2, 32, dtype=torch.bfloat16)
    with counting() as ops:
        out = attention_reference(q, k, v, causal=causal, scale=0.2)
    return ops, out


def test_the_mask_and_the_nan_fix_run_only_where_a_row_needs_them() -> None:
    decode, _ = _reference_ops(1, 300, causal=True)  # one query sees every key
    assert decode["masked_fill_"] == 0 and decode["nan_to_num_"] == 0
    chunked, _ = _reference_ops(40, 300, causal=True)  # rows miss keys, every row sees one
    assert chunked["masked_fill_"] == 1 and chunked["nan_to_num_"] == 0
    blind, out = _reference_ops(50, 20, causal=True)  # the first 30 rows see no key
    assert blind["masked_fill_"] == 1 and blind["nan_to_num_"] == 1
    assert bool((out[:, :30] == 0).all()) and bool(out[:, 30:].abs().sum() > 0)


def test_the_fp32_reference_scales_q_not_the_scores_and_the_bf16_one_its_scores() -> None:
    torch.manual_seed(2)
    q = torch.randn(2, 40, 4, 32, dtype=torch.bfloat16)
    k = torch.randn(2, 300, 2, 32, dtype=torch.bfloat16)
    v = torch.randn(2, 300, 2, 32, dtype=torch.bfloat16)
    for dtype, on_q, on_scores in ((torch.float32, 1, 0), (torch.bfloat16, 0, 1)):
        with counting() as ops:
            attention_reference(q, k, v, causal=True, scale=0.2, compute_dtype=dtype)
        assert (ops["mul"], ops["mul_"]) == (on_q, on_scores)  # one chunk here
    # Scaling before the product moves the fp32 answer by rounding only.
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.repeat_interleave(2, dim=2).double()) * 0.2
    mask = torch.arange(300).view(1, 300) > torch.arange(40).view(40, 1) + 260
    want = torch.einsum("bhqk,bkhd->bqhd", scores.masked_fill(mask, -math.inf).softmax(-1),
                        v.repeat_interleave(2, dim=2).double())
    got = attention_reference(q, k, v, causal=True, scale=0.2)
    assert torch.allclose(got.double(), want, atol=1e-6, rtol=1e-6)


def test_rows_reference_skips_the_same_passes_and_agrees_with_the_full_one() -> None:
    torch.manual_seed(1)
    for sq, sk in ((1, 257), (33, 47)):
        q = torch.randn(1, sq, 4, 32, dtype=torch.bfloat16)
        k = torch.randn(1, sk, 2, 32, dtype=torch.bfloat16)
        v = torch.randn(1, sk, 2, 32, dtype=torch.bfloat16)
        full = attention_reference(q, k, v, causal=True, scale=0.3)
        queries = torch.arange(sq).view(1, sq)
        with counting() as ops:
            rows = attention_rows_reference(q[:, :, 0], k[:, :, 0], v[:, :, 0], queries, causal=True,
                                            scale=0.3, seqlen_q=sq)
        assert ops["masked_fill_"] == (1 if sq > 1 else 0) and ops["nan_to_num_"] == 0
        assert torch.allclose(rows[0], full[0, :, 0], atol=1e-6)


# -- peers beside the references, on both layouts ---------------------------------------------


class Recorder(CpuDevice):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def synchronize(self) -> None:
        self.log.append("sync")


class LoggedProblem(AttentionForward):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def reference(self, s: Scenario, buffers: Any, dtype: torch.dtype) -> torch.Tensor:
        self.log.append("ref")
        return super().reference(s, buffers, dtype)


def _peer(log: list[str], name: str, wrong_on_strided: bool) -> Callable[[Any], torch.Tensor]:
    def run(bufs: Any) -> torch.Tensor:
        strided = not bufs.k.is_contiguous()
        log.append(f"peer {name} {'strided' if strided else 'contiguous'}")
        out = _exact(bufs)
        return out * 1.5 if (strided and wrong_on_strided) else out
    return run


def test_peers_run_before_the_references_are_awaited_and_again_on_the_second_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[str] = []
    real_check = correctness.check_against

    def logged_check(*args: Any) -> Any:
        log.append("check")
        return real_check(*args)

    monkeypatch.setattr(correctness, "check_against", logged_check)
    problem = LoggedProblem(log)
    peers = {"honest": _peer(log, "honest", False), "strided": _peer(log, "strided", True)}

    class WithPeers(worker.ScenarioEvaluator):
        def _wanted_peers(self, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
            return peers

    settings = EvalSettings(device="cpu", peers=tuple(peers), timing=FAST)
    candidate = problem.load_kernel(KernelSpec("correct", "python", "tests.cpu_kernels:correct"))
    ev = WithPeers(problem, Recorder(log), candidate, None, settings, None)
    r = ev.evaluate(GQA)
    assert r.status == PASS, r.reason
    refs = [i for i, e in enumerate(log) if e == "ref"]
    assert len(refs) == 4  # fp32 and bf16, two trials
    first, second = log[refs[0]:refs[2]], log[refs[2]:]
    # Trial 1: both references asked for, then both peers, and nothing waited for the device
    # in between; then the candidate's check and each peer's.
    assert first[:7] == ["ref", "ref", "peer honest contiguous", "peer strided contiguous",
                         "check", "check", "check"]
    # Trial 2 (K and V interleaved): the same, before the timing loop.
    assert second[:7] == ["ref", "ref", "peer honest strided", "peer strided strided",
                          "check", "check", "check"]
    assert r.peers["honest"].status == "ok" and r.peers["honest"].time_ms
    assert r.peers["strided"].status == "incorrect"
    assert r.peers["strided"].reason.startswith("trial 2: ")
    assert r.peers["strided"].time_ms is None and "strided" not in r.speedup_vs_peers
    # The peer wrong on the second layout is never timed: its only calls are the two checks.
    assert sum(e.startswith("peer strided") for e in log) == 2
    assert sum(e.startswith("peer honest") for e in log) > 2  # timed, on both layouts
    assert r.phases.get("peers", 0) > 0


def test_a_correctness_only_evaluation_checks_the_peers_on_the_first_trial_only() -> None:
    log: list[str] = []
    problem = LoggedProblem(log)
    peers = {"honest": _peer(log, "honest", False)}

    class WithPeers(worker.ScenarioEvaluator):
        def _wanted_peers(self, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
            return peers

    settings = EvalSettings(device="cpu", peers=("honest",), timing=FAST, measure=False)
    candidate = problem.load_kernel(KernelSpec("correct", "python", "tests.cpu_kernels:correct"))
    r = WithPeers(problem, Recorder(log), candidate, None, settings, None).evaluate(GQA)
    assert r.status == PASS and r.peers["honest"].status == "ok"
    assert [e for e in log if e.startswith("peer")] == ["peer honest contiguous"]


# -- fewer samples -----------------------------------------------------------------------------


def test_timed_calls_per_implementation_are_10_to_25_in_a_5_ms_budget() -> None:
    s = TimingSettings()
    assert (s.budget_ms, s.min_reps, s.max_reps) == (5.0, 10, 25)
    assert reps_for(0.01, s) == 25  # a fast call: the cap, not 500
    assert reps_for(0.25, s) == 20
    assert reps_for(1.0, s) == 10  # the floor
    assert reps_for(8.0, s) == 3  # slow calls: fewer still


# -- the CLI's worker starts before the CLI imports torch --------------------------------------


def test_the_executor_module_imports_without_torch() -> None:
    code = ("import sys; from harness.executor import LocalExecutor, gpu_device_nodes; "
            "import harness.cli; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_eval_starts_its_worker_before_it_asks_torch_for_a_gpu_and_ends_it_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import harness.evaluate
    import harness.executor
    from harness.cli import build_parser

    steps: list[str] = []
    monkeypatch.setattr(harness.executor, "gpu_device_nodes", lambda: True)
    monkeypatch.setattr(harness.executor.LocalExecutor, "prestart", lambda self: steps.append("prestart"))
    monkeypatch.setattr(harness.executor.LocalExecutor, "close", lambda self: steps.append("close"))

    def no_gpu() -> bool:
        steps.append("torch asked")
        return False

    monkeypatch.setattr(harness.evaluate, "gpu_available", no_gpu)
    args = build_parser().parse_args(["eval", str(ROOT / "kernels" / "attention" / "baseline.cu")])
    assert args.func(args) == 3
    assert steps == ["prestart", "torch asked", "close"]


# -- cuDNN's plans for the next scenario, built while the timing loop drains --------------------


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


class NamedPeer:
    def __init__(self, log: list[str], name: str, s: Scenario, plans: bool) -> None:
        self.log, self.name, self.s, self.plans_per_shape = log, name, s, plans
        self.inputs: list[list[torch.Tensor]] = []

    def __call__(self, bufs: Any) -> torch.Tensor:
        layout = "strided" if not bufs.k.is_contiguous() else "contiguous"
        self.log.append(f"{self.name} {self.s.name} {layout}")
        self.inputs.append([bufs.q.clone(), bufs.k.clone(), bufs.v.clone()])
        return _exact(bufs)


def _planned_only(problem: AttentionForward, log: list[str]) -> worker.ScenarioEvaluator:
    """An evaluator of the correct CPU kernel whose one peer builds plans per layout (NamedPeer)."""

    class WithPeers(worker.ScenarioEvaluator):
        def _wanted_peers(self, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
            return {"planned": NamedPeer(log, "planned", s, True)}

    settings = EvalSettings(device="cpu", peers=("planned",), timing=FAST)
    candidate = problem.load_kernel(KernelSpec("correct", "python", "tests.cpu_kernels:correct"))
    return WithPeers(problem, Recorder(log), candidate, None, settings, None)


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
    ev = _planned_only(AttentionForward(), log)
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

    base = _planned_only(AttentionForward(), log)
    ev = Nothing(base.problem, base.device, base.candidate, None, base.settings, None)
    for i in range(len(later)):
        ev.upcoming = later[i:]
        ev._prepare_upcoming_peers(lambda ms: True)
    assert asked == [s.name for s in later] and not log


class HugeDoesNotFit(AttentionForward):
    """A problem whose inputs for the scenario named "huge" do not fit beside what the device
    holds (a large decode shape on a small GPU)."""

    def make_inputs(self, s: Scenario, seed: int, device: torch.device) -> list[torch.Tensor]:
        if s.name == "huge":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return super().make_inputs(s, seed, device)


def test_plans_ahead_stop_at_the_first_scenario_that_does_not_fit() -> None:
    log: list[str] = []
    later = [Scenario(name, "x", 1, 20, 90, 4, 1, 32, causal=True) for name in ("a", "huge", "b")]

    ev = _planned_only(HugeDoesNotFit(), log)
    ev.upcoming = later
    ev._prepare_upcoming_peers(lambda ms: True)
    assert log == ["planned a contiguous"]  # "b" waits: "huge" gets its own turn first
    assert [ev.plans.built(s) for s in later] == [True, False, False]


def test_a_peer_that_plans_per_layout_runs_every_set_contiguous_on_the_candidates_contents() -> None:
    """cuDNN keys its plans on the strides: it gets the interleaved K/V trial as contiguous copies,
    refreshed before each timed call (outside the timed region) with the contents and scale the
    candidate's set holds then, so that one plan serves the scenario and it computes on what the
    other peers do."""
    log: list[str] = []
    made: dict[str, NamedPeer] = {}
    scales: dict[str, list[float]] = {"planned": [], "plain": []}

    class Seeded(AttentionForward):
        """The timed calls' draws from a seeded generator, not the OS source. Each timed call
        keeps head_dim^-0.5 with probability 1/3; from the OS source, every draw of a run kept
        it now and then (a CI run of 26c73df), and then the test could not tell whether the
        peers followed the scale. With this seed three of the draws differ, in every run."""

        def timed_inputs(self, s: Scenario, set_index: int, inputs: list[torch.Tensor],
                         buffers: Any, call: Callable[[], None], counter: list[int]) -> TimedInputs:
            rng = random.Random(7 + set_index)
            return AttentionTimedInputs(s, set_index + 1, inputs, buffers, call, counter, rng)

    problem = Seeded()

    class Scaled(NamedPeer):
        def __call__(self, bufs: Any) -> torch.Tensor:
            scales[self.name].append(float(bufs.scale))
            return super().__call__(bufs)

    class WithPeers(worker.ScenarioEvaluator):
        def _wanted_peers(self, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
            for name, plans in (("planned", True), ("plain", False)):
                made[name] = Scaled(log, name, s, plans)
            return dict(made)

    # Each implementation's repetitions come from its own first timed call (2 ms of budget over
    # 3-5 calls here), so on a loaded machine the two peers' counts could differ by a call; a
    # fixed count keeps the call-by-call comparison below about contents, not timing noise.
    timing = replace(FAST, min_reps=4, min_reps_slow=4, max_reps=4)
    settings = EvalSettings(device="cpu", peers=("planned", "plain"), timing=timing)
    candidate = problem.load_kernel(KernelSpec("correct", "python", "tests.cpu_kernels:correct"))
    r = WithPeers(problem, Recorder(log), candidate, None, settings, None).evaluate(GQA)
    assert r.status == PASS, r.reason
    assert r.peers["planned"].time_ms and r.peers["plain"].time_ms
    planned = [e for e in log if e.startswith("planned")]
    plain = [e for e in log if e.startswith("plain")]
    assert all(e.endswith("contiguous") for e in planned)
    assert any(e.endswith("strided") for e in plain)  # the interleaved trial is still timed
    # Call by call (checks, warm-up and timed calls), both peers saw the same contents and scale.
    a, b = made["planned"].inputs, made["plain"].inputs
    assert len(a) == len(b) > FAST.warmup + FAST.min_reps
    for x, y in zip(a, b, strict=True):
        assert all(torch.equal(p, q) for p, q in zip(x, y, strict=True))
    assert scales["planned"] == scales["plain"] and len(set(scales["plain"])) > 2


def test_a_peer_layout_copy_that_does_not_fit_leaves_the_peer_on_the_candidates_buffers() -> None:
    log: list[str] = []

    class Tight(AttentionForward):
        def peer_layout(self, s: Scenario, buffers: Any) -> Any:
            if not buffers.k.is_contiguous():
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")
            return buffers

    r = _planned_only(Tight(), log).evaluate(GQA)
    assert r.status == PASS, r.reason
    assert r.peers["planned"].status == "ok" and r.peers["planned"].time_ms
    assert any(e == "planned gqa strided" for e in log)  # a second plan, as before the copy


def test_peer_layout_copies_interleaved_k_and_v_and_refreshes_contents_and_scale() -> None:
    problem = AttentionForward()
    inputs = problem.make_inputs(GQA, 1, CPU)  # an odd seed: K and V interleaved
    bufs = problem.buffers(GQA, inputs, problem.new_output(GQA, CPU), None, 1, 1)
    assert not bufs.k.is_contiguous()
    got = problem.peer_layout(GQA, bufs)
    assert got.k.is_contiguous() and got.v.is_contiguous() and got.q is bufs.q and got.o is bufs.o
    assert torch.equal(got.k, bufs.k) and torch.equal(got.v, bufs.v) and got.scale == bufs.scale
    bufs.k.add_(1.0)
    bufs.scale = 0.25
    problem.refresh_peer_layout(bufs, got)
    assert torch.equal(got.k, bufs.k) and got.scale == 0.25
    flat = problem.buffers(GQA, problem.make_inputs(GQA, 0, CPU), problem.new_output(GQA, CPU), None)
    assert problem.peer_layout(GQA, flat) is flat


def test_the_next_scenario_too_large_for_the_device_does_not_fail_the_current_one() -> None:
    """Building the next scenario's plans allocates its inputs beside the current one's: where
    they do not fit (a large decode shape on a small GPU), the current scenario still passes and
    nothing is built ahead."""
    log: list[str] = []
    current, upcoming = GQA, Scenario("huge", "x", 1, 20, 90, 4, 1, 32, causal=True)

    ev = _planned_only(HugeDoesNotFit(), log)
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


def test_the_server_keeps_the_sample_cap_its_re_times_were_measured_under() -> None:
    """The CLI's fresh evaluation takes 10-25 samples; a session's evaluation and the judge's
    re-time keep up to 50, whatever their budget (docs/harness.md, "Toward 30 s")."""
    from app.runner.evaluation import eval_settings

    for budget in (5.0, 20.0):
        s = eval_settings("cuda", trials=2, timing_budget_ms=budget, scenario_timeout_s=60.0,
                          peers=("cudnn",)).timing
        assert (s.budget_ms, s.max_reps, s.min_reps) == (budget, 50, 10)
    assert TimingSettings().max_reps == 25


_FIRST_CUSTOM_OP_CALL = r"""
import sys
import torch
from harness.attention.peers import warm_first_use
warmed = warm_first_use({fa3})
before = set(sys.modules)
@torch.library.custom_op("socratic_probe::f", mutates_args=(), device_types="cpu")
def f(x: torch.Tensor) -> torch.Tensor:
    return x.clone()
f(torch.ones(3))
print(len(warmed), len(set(sys.modules) - before), torch.cuda.is_initialized())
"""


@pytest.mark.parametrize("fa3", [True, False])
def test_a_spare_worker_imports_what_the_first_fa3_call_would(fa3: bool) -> None:
    """FA3's operator is a torch.library custom op; the first call of one imports hundreds of
    modules (torch._dynamo and its dependencies). Warmed ahead (where fa3-fwd is installed),
    that call imports nothing more, and the warm-up touches no CUDA."""
    out = subprocess.run([sys.executable, "-c", _FIRST_CUSTOM_OP_CALL.format(fa3=fa3)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    warmed, imported_by_first_call, cuda = int(out[0]), int(out[1]), out[2]
    assert cuda == "False"
    if fa3:
        assert warmed > 100 and imported_by_first_call == 0
    else:
        assert warmed == 0 and imported_by_first_call > 100



def test_fa3_is_found_installed_without_importing_it(tmp_path: Path) -> None:
    """The warm-up's condition: a module fa3_fwd_interface on the path counts, and finding it
    runs none of its code (the real one loads CUDA libraries)."""
    (tmp_path / "fa3_fwd_interface.py").write_text("raise SystemExit('imported')\n")
    code = "from harness.attention.peers import fa3_installed; print(fa3_installed())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=env, cwd=ROOT).stdout.strip()
    assert found == "True"
    env["PYTHONPATH"] = str(ROOT)
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env, cwd=ROOT).stdout.strip() == "False"
