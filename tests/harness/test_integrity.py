"""The timed phase's integrity checks on the CPU backend: fresh random contents before every
timed call and sampled rows of every timed output checked afterwards, the workspace probe,
softmax_scale rotation, failure diagnoses that name the cheat, and the decisions of the
hidden-work and persisting-L2 checks (whose measurements need a GPU) from given numbers."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from harness.activity import KernelActivity
from harness.attention.fields import timed_scale, trial_scale
from harness.attention.forward import AttentionForward
from harness.attention.fresh import AttentionTimedInputs, changed_keys, fresh_qkv, timed_reason
from harness.executor import LocalExecutor
from harness.integrity import (
    persisting_l2_reason,
    profile_reason,
    summarize_activity,
    tail_reason,
)
from harness.job import KernelSpec, WorkerJob
from harness.report import FAIL, PASS, ScenarioResult
from harness.scenario import Scenario
from harness.settings import EvalSettings
from tests.cpu_kernels import _exact
from tests.harness.support import FAST, SCENARIOS

CPU = torch.device("cpu")
GQA = Scenario("gqa", "x", 2, 33, 47, 8, 2, 32, causal=True)


def run(
    fn: str, scenarios: list[Scenario] = SCENARIOS, module: str = "tests.cpu_kernels",
    **settings: object,
) -> list[ScenarioResult]:
    opts: dict[str, object] = {"device": "cpu", "peers": (), "timing": FAST}
    opts.update(settings)
    job = WorkerJob(
        "attention-forward", KernelSpec(fn, "python", f"{module}:{fn}"),
        KernelSpec("baseline", "python", "tests.cpu_kernels:correct_slow"), scenarios,
        EvalSettings(**opts),  # type: ignore[arg-type]
    )
    return LocalExecutor().run(job).results


def _timed_set(s: Scenario, seed: int) -> tuple[list[torch.Tensor], Any, AttentionTimedInputs]:
    problem = AttentionForward()
    inputs = problem.make_inputs(s, seed, CPU)
    bufs = problem.buffers(s, inputs, problem.new_output(s, CPU), None, trial=seed)
    bufs.o.copy_(_exact(bufs))

    def call() -> None:
        bufs.o.copy_(_exact(bufs))

    # A seeded generator, not the OS source the harness uses, so that every run draws the same
    # nonces, distributions and rows: a call computed with three times its scale stayed within
    # the tolerance of large logits once in about 5,000 draws.
    rng = random.Random(1000 + seed)
    return inputs, bufs, AttentionTimedInputs(s, 1, inputs, bufs, call, [0], rng)


def test_every_timed_call_gets_new_q_k_and_v_that_its_nonce_reproduces() -> None:
    for seed in (0, 1):  # seed 1 stores K and V interleaved in one buffer
        inputs, bufs, timed = _timed_set(GQA, seed)
        addresses = [x.data_ptr() for x in inputs]
        before = [x.clone() for x in inputs]
        for _ in range(3):
            timed.before_call()
            assert [x.data_ptr() for x in inputs] == addresses  # the addresses the kernel saw
            for now, old in zip(inputs, before, strict=True):
                assert float((now != old).float().mean()) > 0.9  # Q, K and V all new
            c = timed.pending
            assert c is not None
            again = fresh_qkv(GQA, c.nonce, c.dist, CPU)
            assert all(torch.equal(a, b) for a, b in zip(again, inputs, strict=True))
            assert bufs.scale == c.scale
            before = [x.clone() for x in inputs]
        timed.keep_last()
        assert [c.number for c in timed.calls] == [1, 2, 3]
        assert len({c.nonce for c in timed.calls}) == 3


@pytest.mark.parametrize("s", [GQA, Scenario("ragged", "k1", 3, 9, 1, 4, 2, 64, causal=False)],
                         ids=["gqa", "one-key"])  # one key: its K and V blocks are a single row
def test_sampled_rows_of_every_kept_output_are_checked_after_the_calls(s: Scenario) -> None:
    _, bufs, timed = _timed_set(s, 0)
    for _ in range(3):
        timed.before_call()
        bufs.o.copy_(_exact(bufs))
    timed.keep_last()
    assert timed_reason([timed]) is None
    assert all(c.verdict == "ok" for c in timed.calls)
    timed.before_call()
    bufs.o.copy_(_exact(bufs) * 1.5)  # call 4 is wrong
    timed.keep_last()
    why = timed_reason([timed])
    assert why is not None and why.startswith("output of timed call 4 (input set 1) changed during the timing loop")


@pytest.mark.parametrize("chunk_bytes", [1, 1 << 30])  # one call per batch, or all at once
def test_calls_judged_in_one_batch_each_use_their_own_scale_and_rows(
    chunk_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The references of many timed calls are computed in one batch: each call must still be
    judged on its own inputs, rows and softmax_scale, and a wrong one named by its number."""
    import harness.attention.fresh as fresh

    monkeypatch.setattr(fresh, "chunk_bytes_for", lambda device: chunk_bytes)
    _, bufs, timed = _timed_set(GQA, 1)
    scales = []
    for n in range(6):
        timed.before_call()
        scales.append(bufs.scale)
        bufs.o.copy_(_exact(bufs))
        if n == 3:  # call 4 computes with another softmax_scale than the one it was passed
            bufs.scale = scales[3] * 3.0
            bufs.o.copy_(_exact(bufs))
            bufs.scale = scales[3]
    timed.keep_last()
    why = timed_reason([timed])
    assert why is not None and "timed call 4 (input set 1)" in why
    assert [c.verdict for c in timed.calls] == ["ok", "ok", "ok", "wrong", "ok", "ok"]
    rows, values = fresh.measure_calls({1: timed}, timed.calls)
    assert len(rows) == len(values) == 6
    assert {int(x.batch.numel()) for x in rows} == {min(fresh.BLOCKS, GQA.batch * GQA.heads_kv)}
    assert [err <= tol for err, tol, _ in values] == [True, True, True, False, True, True]


def test_the_probe_changes_half_the_keys_of_one_block_that_is_not_the_first() -> None:
    inputs, _, timed = _timed_set(GQA, 0)
    k_before, v_before = inputs[1].clone(), inputs[2].clone()
    assert timed.probe() is None  # the honest call computes the new answer
    for now, old in ((inputs[1], k_before), (inputs[2], v_before)):
        rows = (now != old).any(dim=-1)  # [batch, key, kv head]
        blocks = rows.any(dim=1)
        assert int(blocks.sum()) == 1 and not bool(blocks[0, 0])
        assert not bool(rows[:, 0].any())  # never the first key
        assert int(rows.sum()) == (GQA.seqlen_k - 1) // 2


def test_the_probe_key_rows_are_a_fresh_half_of_rows_one_on() -> None:
    picks = []
    for seed in (1, 2):
        gen = torch.Generator()
        gen.manual_seed(seed)
        got = changed_keys(32768, gen, CPU)
        assert got.numel() == 32767 // 2 and got.unique().numel() == got.numel()
        assert int(got.min()) >= 1 and int(got.max()) <= 32767
        picks.append(set(got.tolist()))
    assert picks[0] != picks[1]  # drawn from the seed, not fixed
    gen = torch.Generator()
    assert changed_keys(1, gen, CPU).tolist() == [0]  # no other row: the only one
    assert changed_keys(2, gen, CPU).tolist() == [1]


def test_softmax_scale_rotates_by_trial_and_by_timed_call() -> None:
    d128 = Scenario("d128", "x", 1, 8, 8, 4, 2, 128, causal=True)
    assert trial_scale(d128, 0, 0) == pytest.approx(128 ** -0.5)
    assert trial_scale(d128, 1, 0) == pytest.approx(1 / 12)  # Gemma 2 27B: 1/sqrt(144)
    d64 = Scenario("d64", "x", 1, 8, 8, 4, 2, 64, causal=True)
    ratio = trial_scale(d64, 1, 0) / 64 ** -0.5
    assert 0.5 <= ratio <= 0.8 or 1.25 <= ratio <= 2.0
    pinned = Scenario("p", "x", 1, 8, 8, 4, 2, 64, causal=False, softmax_scale=0.3)
    assert trial_scale(pinned, 0, 0) == 0.3
    rng = random.Random(5)
    seen = {round(timed_scale(d128, rng) * 1e6) for _ in range(60)}
    assert {round(128 ** -0.5 * 1e6), round(1e6 / 12)} < seen and len(seen) > 10


def test_a_transformed_replay_of_the_validated_answer_is_named() -> None:
    results = run("replay_transformed", module="tests.cpu_cheats")
    assert all(r.status == FAIL for r in results)
    assert all("is a transformed copy of the answer for" in r.reason for r in results), results[0].reason
    assert "the kernel replays a cached answer" in results[0].reason


def test_a_kernel_that_ignores_softmax_scale_is_named() -> None:
    results = run("ignores_scale", module="tests.cpu_cheats")
    assert all(r.status == FAIL for r in results)
    assert all(r.reason.startswith("trial 2: ignores softmax_scale: the call passed") for r in results)


def test_outputs_left_from_earlier_calls_are_called_replays_not_races() -> None:
    results = run("stops_writing_after_validation", [SCENARIOS[0]], module="tests.cpu_cheats")
    assert results[0].status == FAIL
    assert results[0].reason.startswith(
        "output was stale: after the timing loop, timed call 1 (input set 1) holds the answer for "
        "the contents validated before timing (input set 1)"
    )
    assert "non-deterministic" not in results[0].reason


def test_one_wrong_timed_call_in_the_middle_of_the_loop_is_caught() -> None:
    results = run("wrong_once_while_timed", [SCENARIOS[0]], module="tests.cpu_cheats")
    assert results[0].status == FAIL
    assert results[0].reason.startswith("output of timed call 5 (input set 1) changed during the timing loop")


def test_pointer_keyed_cache_is_rejected_as_stale() -> None:
    results = run("pointer_cache", module="tests.cpu_cheats")
    assert all(r.status == FAIL for r in results)
    assert results[0].reason.startswith("output was stale: after the timing loop")
    assert "the contents validated before timing" in results[0].reason


def test_cache_keyed_on_sampled_q_and_k_is_rejected_as_stale() -> None:
    results = run("sampled_qk_cache", module="tests.cpu_cheats")
    assert all(r.status == FAIL and r.reason.startswith("output was stale") for r in results)


def test_cache_kept_in_the_workspace_is_caught_by_the_workspace_probe() -> None:
    results = run("workspace_cache", module="tests.cpu_cheats")
    # The probe changes half the key rows of a block, never the first row the cache samples.
    assert [r.status for r in results] == [FAIL, FAIL, FAIL]
    assert "its workspace was left as that call wrote it" in results[0].reason


def test_without_the_integrity_checks_a_pointer_cache_would_pass() -> None:
    """What the checks buy: the old loop (unchanged contents) cannot see the cache."""
    results = run("pointer_cache", module="tests.cpu_cheats", integrity=False)
    assert all(r.status == PASS for r in results)


def test_output_that_was_never_written_is_called_stale() -> None:
    results = run("writes_nothing", module="tests.cpu_cheats")
    assert all(r.status == FAIL for r in results)
    assert "output was stale: none of the" in results[0].reason


def test_low_precision_is_named_as_such() -> None:
    results = run("low_precision")
    assert all("not precise enough" in r.reason or "wrong result" in r.reason for r in results)
    assert any("not precise enough" in r.reason for r in results)


def test_top_left_causal_alignment_is_named_as_such() -> None:
    results = run("wrong_causal_offset", [SCENARIOS[1]])
    assert results[0].reason.startswith("trial 1: wrong causal alignment")
    assert "tolerance" in results[0].reason


def test_device_synchronized_tail_decides_hidden_work() -> None:
    assert tail_reason([(1.0, 0.01), (1.1, 0.02), (0.9, 0.0)]) is None
    why = tail_reason([(0.02, 3.0), (0.02, 2.9), (0.03, 3.1)])
    assert why is not None and why.startswith("hidden work: the device stayed busy 3.000 ms")


def _kernel(name: str, stream: int, ms: float, harness: bool = False) -> KernelActivity:
    return KernelActivity(name=name, stream=stream, ms=ms, harness=harness)


def test_profiler_names_kernels_on_another_stream() -> None:
    fill = _kernel("void at::native::vectorized_elementwise_kernel<FillFunctor>", 7, 0.01, True)
    honest = [fill, _kernel("attn", 7, 1.0), fill, _kernel("attn", 7, 1.0)]
    assert profile_reason(summarize_activity(honest, 2), event_ms=1.0) is None
    side = [fill, _kernel("attn", 13, 1.0), fill, _kernel("attn", 13, 1.0)]
    why = profile_reason(summarize_activity(side, 2), event_ms=0.01)
    assert why is not None and "2 kernel(s)" in why and "another stream" in why


def test_profiler_compares_kernel_time_with_the_events() -> None:
    many = [_kernel("attn", 7, 2.0, False), _kernel("fill", 7, 0.0, True)]
    why = profile_reason(summarize_activity(many, 1), event_ms=0.5)
    assert why is not None and "2.000 ms" in why and "0.500 ms" in why


def test_persisting_l2_left_set_aside_is_a_failure() -> None:
    assert persisting_l2_reason(0, "before timing") is None
    assert persisting_l2_reason(-1, "before timing") is None
    why = persisting_l2_reason(4 << 20, "after timing")
    assert why is not None and "4194304 bytes" in why and "survive the harness's cache flush" in why


def test_profiler_runs_for_every_blocking_flag_and_for_one_large_win_per_process() -> None:
    from harness.device import CpuDevice
    from harness.worker import ScenarioEvaluator

    ev = ScenarioEvaluator(
        AttentionForward(), CpuDevice(), None, None, EvalSettings(device="cuda"), None,  # type: ignore[arg-type]
    )
    flagged = ScenarioResult("f", "x", False, PASS, flags=["impossible: 9x"])
    assert ev._wants_profile(flagged) and ev._wants_profile(flagged)
    informed = ScenarioResult("i", "x", False, PASS, flags=["baseline not timed: it returned an error"],
                              speedup_vs_peers={"cudnn": 0.9})
    assert not ev._wants_profile(informed)  # says nothing about the kernel's own time
    modest = ScenarioResult("m", "x", False, PASS, speedup_vs_peers={"cudnn": 0.8, "flash": 3.0})
    assert not ev._wants_profile(modest)
    win = ScenarioResult("w", "x", False, PASS, speedup_vs_peers={"cudnn": 2.5, "flash": 4.0})
    assert ev._wants_profile(win) and not ev._wants_profile(win)


def test_a_100x_flag_confirmed_by_the_profiler_becomes_a_non_blocking_note() -> None:
    from harness.integrity import reverified_flags
    from harness.report import BLOCKING_FLAG_PREFIXES

    flags = ["impossible: 150x over the baseline (limit 100x)"]
    out = reverified_flags(flags)
    assert out == [
        "re-verified: 150x over the baseline (limit 100x) held: the profiler's kernel durations "
        "match the timer and the time is above the roofline floor"
    ]
    assert not any(f.startswith(BLOCKING_FLAG_PREFIXES) for f in out)


def test_a_roofline_flag_keeps_every_flag_blocking() -> None:
    from harness.integrity import reverified_flags

    flags = [
        "impossible: 0.0010 ms is under the roofline floor 0.0200 ms",
        "impossible: 900x over the baseline (limit 100x)",
    ]
    assert reverified_flags(flags) == flags


class _TailDevice:
    """The CPU device with a scripted device-synchronized tail: each stream_tail runs the call and
    reads the next tail of the script (the last one repeats)."""

    def __new__(cls, tails: list[float]) -> Any:
        from harness.device import CpuDevice

        class Scripted(CpuDevice):
            def stream_tail(self, fn: Any) -> tuple[float, float]:
                fn()
                self.tails_read += 1
                return 0.5, tails[min(self.tails_read, len(tails)) - 1]

        dev = Scripted()
        dev.tails_read = 0  # type: ignore[attr-defined]
        return dev


@pytest.mark.parametrize(("tails", "calls", "outcome"), [
    ([0.0], 3, "clean"),
    # 2 of the first 3 calls slow (a host hiccup), the 6 calls measured again clean: passes, noted
    ([0.8, 0.8, 0.0, 0.0], 3 + 6, "noted"),
    # work hidden on another stream shows on every call: fails after the re-measurement too
    ([3.0], 3 + 6, "fails"),
])
def test_a_slow_device_tail_is_measured_again_before_it_fails_the_kernel(
    tails: list[float], calls: int, outcome: str
) -> None:
    from harness.integrity import TAIL_CALLS, TAIL_RECHECK_CALLS
    from harness.worker import ScenarioEvaluator

    assert (TAIL_CALLS, TAIL_RECHECK_CALLS) == (3, 6)
    problem = AttentionForward()
    dev = _TailDevice(tails)
    ev = ScenarioEvaluator(
        problem, dev, problem.load_kernel(KernelSpec("correct", "python", "tests.cpu_kernels:correct")),
        None, EvalSettings(device="cpu", peers=(), timing=FAST), None,
    )

    def sampled_and_decided() -> None:  # as the worker does after the timing loop
        call = lambda: None  # noqa: E731
        ev._decide_tail(call, [dev.stream_tail(call) for _ in range(TAIL_CALLS)])

    if outcome == "fails":
        from harness.worker import KernelFailure

        with pytest.raises(KernelFailure, match=r"hidden work: the device stayed busy 3.000 ms"):
            sampled_and_decided()
    else:
        sampled_and_decided()
        assert ev.tail_notes == ([] if outcome == "clean" else [
            "re-measured device tail: 0.800 ms after the harness stream on 3 call(s), 0.000 ms on 6 more"])
    assert dev.tails_read == calls


def test_a_cleared_tail_reaches_the_scenario_flags_without_blocking_it() -> None:
    from harness.report import BLOCKING_FLAG_PREFIXES
    from harness.worker import ScenarioEvaluator

    problem = AttentionForward()
    dev = _TailDevice([0.9, 0.9, 0.0])  # the first correctness call and its two re-reads, then clean
    ev = ScenarioEvaluator(
        problem, dev, problem.load_kernel(KernelSpec("correct", "python", "tests.cpu_kernels:correct")),
        None, EvalSettings(device="cpu", peers=(), timing=FAST), None,
    )
    r = ev.evaluate(SCENARIOS[0])
    assert r.status == PASS, r.reason
    assert r.flags == ["re-measured device tail: 0.900 ms after the harness stream on 3 call(s), 0.000 ms on 6 more"]
    assert not any(f.startswith(BLOCKING_FLAG_PREFIXES) for f in r.flags)
    again = ev.evaluate(SCENARIOS[0])  # the notes are per scenario
    assert again.status == PASS and again.flags == []


def test_outputs_repaired_after_their_call_ended_are_tampering() -> None:
    """Issue 47, class 2: each timed output is copied the moment its call ends, before any other
    candidate call, and compared with its buffer before that set's next call."""
    results = run("repairs_kept_outputs", [SCENARIOS[0]], module="tests.cpu_cheats")
    assert results[0].status == FAIL
    assert "changed after its call ended" in results[0].reason and results[0].reason.startswith("tampering: ")
