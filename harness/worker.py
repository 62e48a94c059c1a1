"""The evaluation worker: runs inside a fresh spawned process with its own CUDA context and
evaluates scenarios one by one, sending each result to the executor as soon as it exists.

Order per scenario (DESIGN verifier rules 3-5): the candidate runs on fresh inputs into a
NaN-poisoned output before any reference exists in device memory; it runs twice on the same
inputs (bitwise determinism); the inputs must be unchanged; only then are the fp32 and bf16
references computed and the output judged; a second trial repeats this with other inputs at
other addresses and another softmax_scale. Timing then interleaves candidate, baseline and
peers over the trial input sets, whose contents are rewritten with fresh random ones before
every candidate call; sampled rows of every timed output are checked afterwards, then a
workspace probe, a re-run on the validated inputs, hidden-work and persisting-L2 checks
(docs/verifier.md lists each check and its reason)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from harness.answer_key import (
    WORKER_SHARE_OF_SETUP,
    AnswerKeyLost,
    Answers,
    RemoteAnswers,
    arena_layout,
)
from harness.correctness import Check
from harness.device import Device, FatalDeviceError, make_device
from harness.integrity import (
    CANDIDATE_RANGE,
    PROFILE_CALLS,
    SUSPICIOUS_VS_BASELINE,
    SUSPICIOUS_VS_PEER,
    TAIL_CALLS,
    TAIL_RECHECK_CALLS,
    default_stream_reason,
    persisting_l2_reason,
    profile_reason,
    reverified_flags,
    sabotage_reason,
    summarize_activity,
    tail_reason,
    tail_recheck_note,
)
from harness.job import KernelSpec, WorkerJob  # the job a worker is sent (torch-free)
from harness.lifeline import follow_parent
from harness.peer_cache import BaselineCache, PeerCache, kernel_digest, library_digest
from harness.problem_interface import LoadedKernel, Problem, TimedInputs
from harness.problem_registry import get_problem
from harness.report import (
    CRASH,
    ERROR,
    FAIL,
    PASS,
    UNSUPPORTED,
    PeerResult,
    ScenarioResult,
    blocking_flags,
)
from harness.roofline import Rates
from harness.sandbox import Sandbox
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.stats import median
from harness.timing import Busy, stream_guards, time_interleaved

# CUDA errors after which the context is unusable: the process must end.
STICKY_CUDA_ERRORS = frozenset({700, 702, 714, 715, 716, 717, 718, 719, 999})
EXIT_FATAL = 3
# Seeds of the inputs peers are called on ahead of their scenario (plans only): even, and far
# from every trial's seed (settings.seed * 1_000_003 + trial) in the low 32 bits too (the CPU
# generator's Mersenne Twister keeps only those).
PLAN_SEED = 0x9E3779B8


class KernelFailure(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equality of the stored bits (NaN == NaN when their bits match)."""
    return a.shape == b.shape and bool(torch.equal(_bits(a), _bits(b)))


def count_bit_differences(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((_bits(a) != _bits(b)).sum().item())


def wanted_peers(problem: Problem, settings: EvalSettings, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
    """The peers the settings ask for that exist for the scenario (none on the CPU backend)."""
    if settings.device != "cuda":
        return {}
    return {k: v for k, v in problem.peers(s).items() if k in settings.peers}


class PeerPlans:
    """Peers whose first call on a shape and layout builds a plan (cuDNN compiles one at run
    time: ~44 ms of host work per plan on the H200, serialized inside the library whatever the
    number of threads, and kept per thread) are called once on a scenario's shape ahead of it,
    on inputs whose contents no trial uses: no answer for the inputs the candidate will get
    exists before its own runs. They run every input set in one layout (Problem.peer_layout),
    so one plan per shape serves; the other peers given (the warm-up's first scenario:
    libraries loaded) run on every trial layout. Remembers the scenarios done,
    so that the evaluator does not build again what the warm-up built (warm_up)."""

    def __init__(self, problem: Problem, device: Device, settings: EvalSettings) -> None:
        self.problem = problem
        self.device = device
        self.settings = settings
        self._done: set[str] = set()
        self._ms: list[float] = []  # host time of each build that called a peer

    def built(self, s: Scenario) -> bool:
        return s.name in self._done

    def typical_ms(self) -> float:
        """The median host time of the builds so far (50 ms before the first: ~44 ms on the
        H200 once the driver's cache holds cuDNN's compiled kernels, ~150 ms before)."""
        return median(self._ms) if self._ms else 50.0

    def __len__(self) -> int:
        return len(self._done)

    def build(self, s: Scenario, peers: dict[str, Callable[[Any], torch.Tensor]]) -> bool:
        """Call each of `peers` on every trial layout of `s` (two at most: the layouts alternate
        by trial). Best effort: a peer that refuses the shape is judged in its own scenario.
        False, with nothing kept, when the inputs do not fit beside what the device holds.
        A scenario with nothing to build (no such peer, or the peer cache answers for it) is
        done too: the builds ahead do not ask about it again."""
        if not peers:
            self._done.add(s.name)
            return True
        started = time.perf_counter()
        dev = self.device.torch_device
        for trial in range(min(2, self.settings.trials)):
            if trial and all(getattr(p, "plans_per_shape", False) for p in peers.values()):
                break  # their plan serves every input set
            # A seed no trial uses, of the trial's parity (its layout).
            seed = PLAN_SEED + self.settings.trial_seed(trial) % 2
            try:
                inputs = self.problem.make_inputs(s, seed, dev)
                bufs = self.problem.buffers(s, inputs, self.problem.new_output(s, dev), None, trial, seed)
            except torch.OutOfMemoryError:
                self.device.release_memory()
                return False
            for peer in peers.values():
                planned = getattr(peer, "plans_per_shape", False)
                if trial and planned:
                    continue  # it runs every input set in one layout: one plan serves
                try:
                    peer(self.problem.peer_layout(s, bufs) if planned else bufs)
                except FatalDeviceError:
                    raise
                except Exception:
                    continue
            del inputs, bufs
        self._done.add(s.name)
        self._ms.append((time.perf_counter() - started) * 1e3)
        return True


class ScenarioEvaluator:
    def __init__(
        self,
        problem: Problem,
        device: Device,
        candidate: LoadedKernel,
        baseline: LoadedKernel | None,
        settings: EvalSettings,
        rates: Rates | None,
        peer_cache: PeerCache | None = None,
        baseline_cache: BaselineCache | None = None,
        plans: PeerPlans | None = None,
        answers: Answers | None = None,
    ) -> None:
        self.problem = problem
        # Where each trial's outputs are judged: the answer key, or references computed here.
        self.answers = answers if answers is not None else Answers(problem)
        self.device = device
        self.candidate = candidate
        self.baseline = baseline
        self.settings = settings
        self.rates = rates
        self.peer_cache = peer_cache
        self.baseline_cache = baseline_cache
        self._baseline_timed: tuple[float, float, int] | None = None  # median, spread, reps
        # The scenarios evaluated after the current one, in order (run_worker sets them): peers
        # that build a plan per shape and layout (cuDNN) get theirs while a timing loop drains.
        self.upcoming: Sequence[Scenario] = ()
        self.plans = plans if plans is not None else PeerPlans(problem, device, settings)
        self._l2_floor = 0  # persisting-L2 limit a reset leaves (see reset_persisting_l2)
        self._profiled_win = False
        # Informational flags of the current scenario's hidden-work tails that cleared when
        # measured again (_decide_tail); evaluate() adds them to the scenario's flags.
        self.tail_notes: list[str] = []
        # The worker's seccomp filter and its record (harness/sandbox.py); None: not installed.
        self.sandbox: Sandbox | None = None
        self.profiling = False  # the profiler cross-check runs: candidate calls open a range

    def take_proposals(self) -> list[dict[str, Any]]:
        """The cache entries measured in the last scenario, for the executor to judge and keep."""
        out: list[dict[str, Any]] = []
        for cache in (self.peer_cache, self.baseline_cache):
            if cache is not None:
                out.extend(cache.proposed)
                cache.proposed.clear()
        return out

    # -- calling kernels -------------------------------------------------------------------

    def _call(self, kernel: LoadedKernel, buffers: Any, who: str) -> None:
        sandbox = self.sandbox
        if self.profiling:  # the profiler attributes what is launched inside this range to the kernel
            with torch.profiler.record_function(CANDIDATE_RANGE):
                self.profiling = False
                try:
                    return self._call(kernel, buffers, who)
                finally:
                    self.profiling = True
        if sandbox is None:
            rc = kernel(buffers, self.device.stream_handle)
        else:
            sandbox.enter()
            try:
                rc = kernel(buffers, self.device.stream_handle)
            finally:
                refused = sandbox.leave()
                if refused:
                    raise KernelFailure(FAIL, refused)
        late = kernel.last_error()
        if rc == 0 and late != 0:
            rc = late
            who = f"{who} (launch error it did not return)"
        if rc == 0:
            return
        if rc == self.problem.not_supported_code:
            raise KernelFailure(UNSUPPORTED, f"{who} returned cudaErrorNotSupported")
        name = kernel.error_name(rc)
        if rc in STICKY_CUDA_ERRORS:
            raise FatalDeviceError(f"{who} returned {name} ({rc})")
        raise KernelFailure(ERROR, f"{who} returned {name} ({rc})")

    def _workspace(self, kernel: LoadedKernel, s: Scenario, buffers: Any) -> torch.Tensor | None:
        if self.sandbox is None:
            need = int(kernel.workspace_bytes(buffers))
        else:
            self.sandbox.enter()
            try:
                need = int(kernel.workspace_bytes(buffers))
            finally:
                refused = self.sandbox.leave()
                if refused:
                    raise KernelFailure(FAIL, refused)
        if need <= 0:
            return None
        if need > self.settings.max_workspace_bytes:
            raise KernelFailure(
                ERROR,
                f"{kernel.label} asks for {need} bytes of workspace, more than the limit of "
                f"{self.settings.max_workspace_bytes}",
            )
        ws = torch.empty(need, dtype=torch.uint8, device=self.device.torch_device)
        ws.fill_(0xFF)  # NaN in bf16 and fp32: a kernel must not read scratch it did not write
        return ws

    def _prepare(
        self, kernel: LoadedKernel, s: Scenario, inputs: list[torch.Tensor], trial: int = 0
    ) -> Any:
        out = self.problem.new_output(s, self.device.torch_device)
        seed = self.settings.seed
        probe = self.problem.buffers(s, inputs, out, None, trial, seed)
        ws = self._workspace(kernel, s, probe)
        return self.problem.buffers(s, inputs, out, ws, trial, seed)

    def _check_inputs(self, inputs: list[torch.Tensor], originals: list[torch.Tensor]) -> None:
        for name, now, before in zip(("q", "k", "v"), inputs, originals, strict=False):
            if not bitwise_equal(now, before):
                raise KernelFailure(FAIL, f"the kernel modified its input {name}")

    def _repoison(self, buffers: Any) -> None:
        buffers.o.fill_(float("nan"))
        self._poison_workspace(buffers)

    def _poison_workspace(self, buffers: Any) -> None:
        if buffers.workspace is not None:
            buffers.workspace.fill_(0xFF)

    # -- one scenario ----------------------------------------------------------------------

    def evaluate(self, s: Scenario) -> ScenarioResult:
        started = time.monotonic()
        r = ScenarioResult(
            scenario=s.name, category=s.category, hidden=s.hidden, status=PASS,
            flops=self.problem.flops(s), bytes=self.problem.min_bytes(s),
        )
        self.tail_notes = []
        try:
            self._evaluate(s, r)
        except KernelFailure as f:
            r.status, r.reason = f.status, f.reason
        except torch.cuda.OutOfMemoryError as exc:
            r.status, r.reason = ERROR, f"out of device memory: {str(exc).splitlines()[0]}"
        except FatalDeviceError:
            raise
        except Exception as exc:
            # A torch op failing after the kernel ran usually means the kernel broke the
            # context; tell the two cases apart with a probe.
            self.device.check_healthy()
            r.status = ERROR
            r.reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        finally:
            r.flags.extend(self.tail_notes)
            r.seconds = time.monotonic() - started
        return r

    def _lap(self, r: ScenarioResult, phase: str, since: float) -> float:
        """Add the time since `since` to a phase of the scenario; returns now."""
        now = time.monotonic()
        r.phases[phase] = round(r.phases.get(phase, 0.0) + now - since, 4)
        return now

    def _evaluate(self, s: Scenario, r: ScenarioResult) -> None:
        dev = self.device.torch_device
        lap = time.monotonic()
        settings = self.settings
        # Once a scenario, before its first allocation: what the caching allocator kept from the
        # scenario before (its integrity references, its peers' outputs: answers for inputs
        # this scenario never uses) is unmapped. Not per trial: the candidate's output and
        # scratch are poisoned before every call, a trial's inputs are new allocations while
        # the trial before it still holds its own, and the answers a trial's peers leave are
        # for that trial's inputs, on which the candidate only ever runs again to give back its
        # own validated bits. An empty_cache costs ~2.5 ms (each one unmaps and synchronizes);
        # four a scenario were 2.0 s of an evaluation (docs/lab/2026-12-04-harness-pass-9-fresh-fill.md).
        self.device.release_memory()
        trial_sets: list[tuple[list[torch.Tensor], Any]] = []
        peers = self._wanted_peers(s)
        # Peers the cache answers are neither run nor timed here (harness/peer_cache.py).
        cached = self._cached_peers(s, peers) if settings.measure else {}
        peers = {k: v for k, v in peers.items() if k not in cached}
        peer_status: dict[str, PeerResult] = {}
        worst_ratio = -1.0
        for trial in range(settings.trials):
            seed = settings.trial_seed(trial)
            inputs = self.problem.make_inputs(s, seed, dev)
            originals = [x.clone() for x in inputs]
            bufs = self._prepare(self.candidate, s, inputs, trial)
            self._run_candidate(bufs)
            self._check_inputs(inputs, originals)
            if settings.check_determinism:
                first = bufs.o.clone()
                self._repoison(bufs)
                self._run_candidate(bufs)
                self._check_inputs(inputs, originals)
                if not bitwise_equal(first, bufs.o):
                    n = count_bit_differences(first, bufs.o)
                    raise KernelFailure(
                        FAIL,
                        f"non-deterministic: {n} output elements differ between two runs on the "
                        f"same inputs (trial {trial + 1}); a race or a read of uninitialised memory",
                    )
                del first
            del originals
            lap = self._lap(r, "correctness", lap)
            # References exist in this process only from here on, after the candidate's output
            # (the answer key's, computed before, exist only in the key's process).
            self.answers.begin(s, bufs)
            # The peers run now, on this trial's buffers, before anything waits for the
            # references: on a GPU their host work (cuDNN builds a plan per shape and layout,
            # tens of milliseconds, unless the previous scenario's timing loop built it: see
            # _prepare_upcoming_peers) overlaps the references' device time. A peer that builds a
            # plan per layout runs every trial in one layout (contiguous copies where the trial's
            # K and V are interleaved: Problem.peer_layout), as in the timing loop, so one plan
            # serves the scenario; the others run on the trial's own layout. Each is judged
            # below, after the candidate.
            running = self._peers_for_trial(peers, peer_status, trial)
            peer_outs: dict[str, torch.Tensor | PeerResult] = {}
            if running:
                lap = self._lap(r, "reference", lap)
                peer_outs = {pname: self._run_peer(peer, self._peer_buffers(s, peer, bufs))
                             for pname, peer in running.items()}
                lap = self._lap(r, "peers", lap)
            judged = [bufs.o, *(t for t in peer_outs.values() if isinstance(t, torch.Tensor))]
            checks = self.answers.judge(s, trial, inputs, bufs, judged)
            chk = checks[0]
            peer_checks = iter(checks[1:])
            lap = self._lap(r, "reference", lap)
            # Report the trial that came closest to (or past) its tolerance.
            ratio = chk.max_error / chk.tolerance if chk.tolerance > 0 else float("inf")
            if r.max_error is None or ratio > worst_ratio:
                worst_ratio = ratio
                r.max_error, r.tolerance = chk.max_error, chk.tolerance
            if not chk.ok:
                reason = chk.reason
                if chk.max_error != float("inf"):
                    hint = self.problem.explain_failure(s, bufs, chk.tolerance)
                    if hint:
                        reason = (f"{hint} [max error {chk.max_error:.3e} > tolerance "
                                  f"{chk.tolerance:.3e} against the correct answer]")
                raise KernelFailure(FAIL, f"trial {trial + 1}: {reason}")
            if peer_outs:
                for pname, got in peer_outs.items():
                    peer_status[pname] = self._judge_peer(
                        got if isinstance(got, PeerResult) else next(peer_checks), trial)
                del peer_outs
                lap = self._lap(r, "peers", lap)
            del judged, checks, peer_checks
            trial_sets.append((inputs, bufs))
        if settings.measure:
            self._baseline_timed = None
            self._time(s, r, trial_sets, peers, peer_status, cached)
            # Only peer and baseline times from a clean scenario are kept: a candidate that got
            # a flag may have disturbed the device they were timed on.
            # They are proposals: the executor's process, which never loads a candidate, decides
            # and writes (harness/trusted_cache.py); nothing this process writes is trusted later.
            if self.peer_cache is not None and not r.flags and r.status == PASS:
                for pname in peers:
                    if pname in r.peers:
                        self.peer_cache.put(pname, s, r.peers[pname])
            if self.baseline_cache is not None and not r.flags and self._baseline_timed:
                self.baseline_cache.put(s, *self._baseline_timed)
        else:
            r.peers.update(peer_status)

    def _cached_peers(self, s: Scenario, peers: dict[str, Any]) -> dict[str, PeerResult]:
        if self.peer_cache is None:
            return {}
        found = {}
        for pname in peers:
            hit = self.peer_cache.get(pname, s)
            if hit is not None:
                found[pname] = hit
        return found

    def _prepare_upcoming_peers(self, busy: Busy = lambda ms: False) -> None:
        """Plans (PeerPlans) built while the device still runs the current scenario's queued
        timed calls: their work is enqueued after the last of them, so no timed call sees it.
        The next scenario's always (its own peer calls would build them at once otherwise); then
        those of later scenarios still without plans, in order, for as long as the queue is
        expected to keep the device busy for longer than a plan takes to build (`busy`): a long
        scenario's queue hides the plans of short ones, whose own queues hide little. Nothing for
        scenarios a warm-up already built (warm_up, before the job)."""
        if not self.settings.measure:
            return
        for i, s in enumerate(self.upcoming):
            if self.plans.built(s):
                continue
            if i > 0 and not busy(self.plans.typical_ms()):
                return
            wanted = {k: v for k, v in self._wanted_peers(s).items() if getattr(v, "plans_per_shape", False)}
            cached = self._cached_peers(s, wanted)
            if not self.plans.build(s, {k: v for k, v in wanted.items() if k not in cached}):
                return  # it does not fit beside the current scenario: its own turn builds it

    def _peer_buffers(self, s: Scenario, peer: Callable[[Any], torch.Tensor], bufs: Any) -> Any:
        """What `peer` runs on: a peer that builds a plan per layout gets the buffers in one
        layout (Problem.peer_layout), every other peer the candidate's own. Where the copy does
        not fit beside what the device holds, the candidate's own (a second plan, as before)."""
        if not getattr(peer, "plans_per_shape", False):
            return bufs
        try:
            return self.problem.peer_layout(s, bufs)
        except torch.OutOfMemoryError:
            self.device.release_memory()
            return bufs

    def _refresh_peer_set(self, cand_bufs: list[Any], sets: list[Any], i: int) -> None:
        self.problem.refresh_peer_layout(cand_bufs[i], sets[i])

    def _wanted_peers(self, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
        return wanted_peers(self.problem, self.settings, s)

    def _peers_for_trial(
        self, peers: dict[str, Callable[[Any], torch.Tensor]], status: dict[str, PeerResult],
        trial: int,
    ) -> dict[str, Callable[[Any], torch.Tensor]]:
        """Every peer in the first trial; in later ones, when the scenario will be timed, the
        peers still correct (the timing loop runs them on every trial's layout)."""
        if trial == 0:
            return dict(peers)
        if not self.settings.measure:
            return {}
        return {k: v for k, v in peers.items() if k in status and status[k].status == "ok"}

    def _run_peer(self, peer: Callable[[Any], torch.Tensor], bufs: Any) -> torch.Tensor | PeerResult:
        """A peer's output, enqueued without waiting for the device (errors that show only
        later surface at the next synchronization, as a broken context); a peer that refuses
        the shape or layout is unsupported."""
        try:
            return peer(bufs)
        except FatalDeviceError:
            raise
        except Exception as exc:
            text = str(exc).strip()
            return PeerResult(status="unsupported",
                              reason=(text.splitlines()[0] if text else type(exc).__name__)[:200])

    def _judge_peer(self, got: Check | PeerResult, trial: int) -> PeerResult:
        """A peer's standing after a trial: its own refusal, or its output's check."""
        where = f"trial {trial + 1}: " if trial else ""
        if isinstance(got, PeerResult):
            return PeerResult(status=got.status, reason=(where + got.reason)[:200])
        chk = got
        if not chk.ok:
            return PeerResult(status="incorrect", reason=(where + chk.reason)[:200])
        return PeerResult(status="ok")

    def _time(
        self, s: Scenario, r: ScenarioResult, trial_sets: list[tuple[list[torch.Tensor], Any]],
        peers: dict[str, Callable[[Any], torch.Tensor]], peer_status: dict[str, PeerResult],
        cached: dict[str, PeerResult] | None = None,
    ) -> None:
        lap = time.monotonic()
        n_sets = len(trial_sets)
        cand_bufs = [b for _, b in trial_sets]
        validated = [b.o.clone() for b in cand_bufs]
        integrity = self.settings.integrity
        counter = [0]
        fresh: list[TimedInputs | None] = [
            self.problem.timed_inputs(s, i, inputs, bufs, self._synced_call(bufs), counter)
            if integrity else None
            for i, (inputs, bufs) in enumerate(trial_sets)
        ]
        if integrity:
            lap = self._lap(r, "integrity", lap)  # the validated contents kept

        def call_candidate(i: int) -> None:
            self._call(self.candidate, cand_bufs[i], "the kernel")

        def prepare_candidate(i: int) -> None:
            # Fresh contents and poisoned scratch before every call, outside the timed region.
            timed = fresh[i]
            if timed is not None:
                timed.before_call()
            self._poison_workspace(cand_bufs[i])

        hardened = integrity and self.settings.hardening

        def keep_output(i: int) -> None:
            # Right after the call's end event, before any other candidate call (issue 47, class 2).
            timed_set = fresh[i]
            if timed_set is not None:
                timed_set.after_call()

        def prepared_call() -> None:
            prepare_candidate(0)
            call_candidate(0)
            if hardened:
                keep_output(0)

        launches: dict[str, Callable[[int], None]] = {"candidate": call_candidate}
        before: dict[str, Callable[[int], None]] = {"candidate": prepare_candidate}
        # A baseline time from the cache (same GPU, software, shape, baseline library, timing
        # settings) is neither run nor timed here (harness/peer_cache.py: BaselineCache).
        cached_base = (self.baseline_cache.get(s)
                       if self.baseline_cache is not None and self.baseline is not None else None)
        if self.baseline is not None and cached_base is None:
            try:
                base_bufs = [self._prepare(self.baseline, s, inp, i) for i, (inp, _) in enumerate(trial_sets)]
                self._call(self.baseline, base_bufs[0], "the baseline")
                self.device.synchronize()
                launches["baseline"] = lambda i: self._call(
                    self.baseline, base_bufs[i], "the baseline"  # type: ignore[arg-type]
                )

                def same_fields(i: int) -> None:  # the call's scale, as the candidate's
                    base_bufs[i].scale = cand_bufs[i].scale

                before["baseline"] = same_fields
            except KernelFailure as f:
                r.flags.append(f"baseline not timed: {f.reason}")
        for pname, peer in peers.items():
            if peer_status.get(pname, PeerResult("unsupported")).status == "ok":
                # Same contents and scale as the candidate's set (a copy of it refreshed before
                # each call, outside the timed region, where the peer runs another layout).
                sets = [self._peer_buffers(s, peer, b) for b in cand_bufs]
                launches[pname] = lambda i, peer=peer, sets=sets: peer(sets[i])  # type: ignore[misc]
                if any(p is not b for p, b in zip(sets, cand_bufs, strict=True)):
                    before[pname] = partial(self._refresh_peer_set, cand_bufs, sets)
        if integrity:
            self._check_persisting_l2("before timing")
        # On the CPU backend the device timer is the wall clock: a cross-check would only
        # measure the noise of a loaded machine.
        cross_check = frozenset({"candidate"}) if self.settings.device == "cuda" else frozenset()
        # The default streams are each call's own time, the fence's cost in every implementation's
        # (harness/timing.py: stream_guards).
        guarded = self.settings.device == "cuda" and self.settings.hardening
        fenced, idle_before = stream_guards(launches) if guarded else (frozenset(), frozenset())
        timed = time_interleaved(
            self.device, launches, n_sets, self.settings.timing, before, cross_check,
            meanwhile=self._prepare_upcoming_peers,
            after={"candidate": keep_output} if hardened else None,
            fenced=fenced, idle_before=idle_before,
        )
        if guarded:
            why = default_stream_reason(timed["candidate"].streams)
            for name in launches:
                if why is None and name != "candidate":
                    why = sabotage_reason(name, timed[name].streams)
            if why:
                raise KernelFailure(FAIL, why)
        lap = self._lap(r, "timing", lap)
        if integrity:
            self._check_persisting_l2("after timing")
            # The device tail's calls (fresh inputs too) are sampled first, so that one batch of
            # references checks their outputs with the timing loop's; the tail is decided after.
            tail = [self.device.stream_tail(prepared_call) for _ in range(TAIL_CALLS)]
            self._check_timed(fresh)
            self._decide_tail(prepared_call, tail)
            self._check_timed(fresh)  # the calls of a tail measured again, if it was
            lap = self._lap(r, "integrity", lap)
        else:
            for b, good in zip(cand_bufs, validated, strict=True):
                if not bitwise_equal(b.o, good):
                    n = count_bit_differences(b.o, good)
                    raise KernelFailure(
                        FAIL,
                        f"output of an input set changed during the timing loop ({n} elements "
                        "differ from the validated result): the kernel drifts or races",
                    )
        cand = timed["candidate"]
        ms = cand.median_ms
        r.time_ms, r.time_spread, r.reps = ms, cand.spread, cand.reps
        if ms > 0:
            r.tflops = r.flops / (ms * 1e-3) / 1e12
            r.gbps = r.bytes / (ms * 1e-3) / 1e9
        r.flags.extend(cand.flags)
        if "baseline" in timed:
            base = timed["baseline"]
            r.baseline_ms = base.median_ms
            self._baseline_timed = (base.median_ms, base.spread, base.reps)
        elif cached_base is not None:
            r.baseline_ms, r.baseline_cached_at = cached_base.median_ms, cached_base.measured_at
        if r.baseline_ms is not None and ms > 0:
            r.speedup_vs_baseline = r.baseline_ms / ms
        for pname, status in peer_status.items():
            if pname in timed:
                pms = timed[pname].median_ms
                status.time_ms = pms
                status.tflops = r.flops / (pms * 1e-3) / 1e12 if pms > 0 else None
                if ms > 0 and pms > 0:
                    r.speedup_vs_peers[pname] = pms / ms
            r.peers[pname] = status
        for pname, status in (cached or {}).items():
            if status.status == "ok" and status.time_ms and ms > 0:
                r.speedup_vs_peers[pname] = status.time_ms / ms
            r.peers[pname] = status
        lap = self._lap(r, "timing", lap)
        if integrity:
            for i, timed_set in enumerate(fresh):
                if timed_set is not None:
                    self._probe(timed_set, cand_bufs[i])
                    self._rerun_validated(i, timed_set, cand_bufs[i], validated[i])
            lap = self._lap(r, "integrity", lap)
        self._sanity(r)
        if integrity and self._wants_profile(r):
            if self._check_profile(r, prepared_call):
                r.flags = reverified_flags(r.flags)
            self._check_timed(fresh)
            self._lap(r, "profile", lap)

    # -- integrity of the timed phase (docs/verifier.md) -----------------------------------

    def _call_synced(self, bufs: Any) -> None:
        self._call(self.candidate, bufs, "the kernel")
        self.device.synchronize()

    def _synced_call(self, bufs: Any) -> Callable[[], None]:
        return lambda: self._call_synced(bufs)

    def _check_timed(self, fresh: list[TimedInputs | None]) -> None:
        """Every output the candidate left on fresh inputs, checked on rows chosen now."""
        sets = [t for t in fresh if t is not None]
        for t in sets:
            t.keep_last()
        for t in sets:  # an output rewritten after its call ended: its own reason, before any other
            tampered = t.tamper_reason()
            if tampered:
                raise KernelFailure(FAIL, tampered)
        why = self.problem.check_timed(sets)
        if why:
            raise KernelFailure(FAIL, why)

    def reset_persisting_l2(self) -> int:
        """Before any candidate call: the limit the device started with (the driver may set
        one) is reset; what a reset leaves is the floor a kernel must not raise."""
        at_start = self.candidate.reset_persisting_l2()
        self._l2_floor = max(0, self.candidate.reset_persisting_l2())
        return at_start

    def _check_persisting_l2(self, when: str) -> None:
        found = self.candidate.reset_persisting_l2()
        why = persisting_l2_reason(found if found > self._l2_floor else 0, when)
        if why:
            raise KernelFailure(FAIL, why)

    def _run_candidate(self, bufs: Any) -> None:
        """A correctness call, synchronized. With the integrity checks on, the device must be
        idle once the harness stream has finished the call: work the kernel put on another
        stream is caught here, before it can race with the harness's own writes."""
        call = lambda: self._call(self.candidate, bufs, "the kernel")  # noqa: E731
        if not self.settings.integrity:
            call()
            self.device.synchronize()
            return
        first = self.device.stream_tail(call)
        if tail_reason([first]) is None:
            return
        # One slow synchronization can be the host's hiccup: decide on three calls.
        self._decide_tail(call, [first, *(self.device.stream_tail(call) for _ in range(2))])

    def _decide_tail(self, call: Callable[[], None], samples: list[tuple[float, float]]) -> None:
        """Hidden work fails the kernel when the tail of `samples` is over the threshold and
        stays over it on TAIL_RECHECK_CALLS more calls; one that clears leaves a note for the
        scenario's flags (self.tail_notes)."""
        if tail_reason(samples) is None:
            return
        again = [self.device.stream_tail(call) for _ in range(TAIL_RECHECK_CALLS)]
        why = tail_reason(again)
        if why:
            raise KernelFailure(FAIL, why)
        self.tail_notes.append(tail_recheck_note(samples, again))

    def _probe(self, timed: TimedInputs, bufs: Any) -> None:
        """One more call with a small random change of K and V and the workspace left as the
        previous call wrote it: a cache in the workspace or in device memory returns the
        previous answer."""
        why = timed.probe()
        if why:
            raise KernelFailure(FAIL, why)

    def _rerun_validated(self, i: int, timed: TimedInputs, bufs: Any, validated: torch.Tensor) -> None:
        """The contents validated before timing, given again after every timed call: a
        deterministic kernel returns the same bits; one that changed its path after some calls
        does not."""
        timed.restore()
        self._repoison(bufs)
        self._call_synced(bufs)
        if not bitwise_equal(bufs.o, validated):
            n = count_bit_differences(bufs.o, validated)
            raise KernelFailure(
                FAIL,
                f"output of input set {i + 1} changed during the timing loop ({n} elements differ "
                "from the validated result when its validated inputs are given again after the "
                "timed calls): the kernel drifts after repeated calls or races",
            )

    def _wants_profile(self, r: ScenarioResult) -> bool:
        """Scenarios with a blocking flag always (an informational one, such as "baseline not
        timed", says nothing about the kernel's own time); a suspiciously large win once per
        process (the profiler's start costs about a second, too much for every fast scenario of
        a good kernel)."""
        mode = self.settings.profile
        if mode == "never" or self.settings.device != "cuda":
            return False
        if mode == "always" or blocking_flags(r):
            return True
        peers = list(r.speedup_vs_peers.values())
        suspicious = (
            (r.speedup_vs_baseline is not None and r.speedup_vs_baseline > SUSPICIOUS_VS_BASELINE)
            or (bool(peers) and min(peers) > SUSPICIOUS_VS_PEER)
        )
        if suspicious and not self._profiled_win:
            self._profiled_win = True
            return True
        return False

    def _check_profile(self, r: ScenarioResult, run_once: Callable[[], None]) -> bool:
        """True when the profiler ran and its kernel durations agree with the timer."""
        try:
            self.profiling = True
            activity = self.device.kernel_activity(run_once, PROFILE_CALLS)
        except FatalDeviceError:
            raise
        except Exception as exc:
            r.flags.append(f"profiler cross-check unavailable: {type(exc).__name__}: {exc}"[:200])
            return False
        finally:
            self.profiling = False
        if activity is None or r.time_ms is None:
            return False
        why = profile_reason(summarize_activity(activity, PROFILE_CALLS), r.time_ms)
        if why:
            raise KernelFailure(FAIL, why)
        return True

    def _sanity(self, r: ScenarioResult) -> None:
        if r.time_ms is None:
            return
        if self.rates is not None:
            floor = self.rates.floor_ms(r.flops, r.bytes)
            if r.time_ms < floor:
                r.flags.append(
                    f"impossible: {r.time_ms:.4f} ms is under the roofline floor {floor:.4f} ms"
                )
        # Physical sanity is a GPU matter: the CPU backend times Python stand-ins whose
        # speeds are set by their sleeps, so a 100x gap there is by construction.
        limit = self.settings.max_speedup_vs_baseline
        if (self.settings.device == "cuda" and r.speedup_vs_baseline is not None
                and r.speedup_vs_baseline > limit):
            r.flags.append(
                f"impossible: {r.speedup_vs_baseline:.0f}x over the baseline (limit {limit:.0f}x)"
            )


def _rates_for(device: Device, settings: EvalSettings,
               known: dict[str, dict[str, float]] | None = None) -> Rates | None:
    """The roofline rates: the settings', those the executor passed for this GPU (from its signed
    cache), or measured here, before the candidate is loaded; the executor keeps what was measured
    (harness/trusted_cache.py). This process writes no cache."""
    if settings.matrix_tflops and settings.copy_gbps:
        return Rates(device.name, settings.matrix_tflops, settings.copy_gbps)
    if settings.device != "cuda":
        return None
    found = (known or {}).get(device.name)
    if found:
        return Rates(device.name, float(found["matrix_tflops"]), float(found["copy_gbps"]))
    from harness.roofline import measure_cuda_rates

    return measure_cuda_rates(device.name, use_cache=False, keep=False)


def verified(spec: KernelSpec) -> KernelSpec:
    """A library whose digest the job carries is loaded only if its bytes still have it: the
    compile cache is a folder an earlier process might have rewritten."""
    if spec.kind == "library" and spec.sha256 and library_digest(Path(spec.target)) != spec.sha256:
        raise RuntimeError(f"the library of {spec.label} changed after it was built (its sha256 differs "
                           "from the one the harness recorded)")
    return spec


def _load_candidate(problem: Problem, spec: KernelSpec, sandbox: Sandbox | None) -> LoadedKernel:
    """The candidate's library (or module) loaded as its own code: what loading it tries that the
    sandbox refuses is the candidate's, and stops the evaluation with the reason."""
    if sandbox is None:
        return problem.load_kernel(verified(spec))
    sandbox.enter()
    try:
        return problem.load_kernel(verified(spec))
    finally:
        refused = sandbox.leave()
        if refused:
            raise RuntimeError(f"while loading the candidate: {refused}")


def _install_sandbox(spec: dict[str, Any] | None, settings: EvalSettings) -> Sandbox | None:
    """The seccomp filter, where the executor asked for it (harness/sandbox.py). On the GPU a
    sandbox that was asked for and cannot be installed stops the evaluation; on the CPU backend
    the evaluation goes on without it and says so."""
    if not spec or not settings.hardening:
        return None
    if spec.get("helper") is None:
        if settings.device == "cuda":
            raise RuntimeError(f"the sandbox is not available: {spec.get('unavailable', 'no helper')}")
        return None
    sys.dont_write_bytecode = True  # imports after this point read; they never write
    if settings.device == "cuda":
        _ready_for_the_profiler()
    return Sandbox.install(spec["helper"], spec["sha256"], allow_rdwr=settings.device == "cuda")


def _ready_for_the_profiler() -> None:
    """What the profiler's cross-check needs from the file system, done before the filter refuses
    it: Python's temporary folder is probed (the probe creates a file) and remembered, and
    torch.profiler is imported. Seen on an H100: under the filter the first profile failed with
    "No usable temporary directory found", and the import's retry with "Artifact of
    type=precompile already registered", so the cross-check was unavailable."""
    import tempfile

    import torch.profiler  # noqa: F401  (the import is the point)

    tempfile.gettempdir()


def _baseline_cache(job: WorkerJob, info: dict[str, Any]) -> BaselineCache | None:
    """On the GPU by default (in the compile cache's folder); on the CPU backend only where the
    settings name a folder."""
    st = job.settings
    if job.baseline is None or not st.baseline_cache or not st.measure:
        return None
    if not st.baseline_cache_dir and st.device != "cuda":
        return None
    try:
        digest = job.baseline.sha256 or kernel_digest(job.baseline)
        alone = job.candidate == job.baseline  # this process evaluates the baseline itself
    except OSError:
        return None
    # The entries the executor verified and passed; this process reads no cache file.
    return BaselineCache(job.baseline_entries, st.baseline_cache_max_age_s, info, st, digest, writable=alone)


@dataclass
class Prepared:
    """What a warm-up left for the job: the device (its CUDA context made), the problem, and
    the peers' plans built so far, with the settings they were built for."""
    problem_name: str
    settings: EvalSettings
    device: Device
    problem: Problem
    plans: PeerPlans
    seconds: float
    rest: Iterator[bool] = field(default_factory=lambda: iter(()))  # builds the job cut short
    stop_s: float = 0.0  # from the job's arrival (seen between two builds) to the warm-up's return
    # The last build before the job was seen: a job that arrives during a build waits for it
    # (a build slowed by the answer key's work on the same GPU is the suspect of stop 43's
    # unexplained second of setup; docs/lab/2026-12-04-harness-pass-9-fresh-fill.md).
    last_build_s: float = 0.0

    def build_next(self) -> bool:
        """One more of the warm-up's plan builds; False when none is left (or one failed)."""
        started = time.monotonic()
        try:
            return next(self.rest, False)
        except Exception:  # best effort, as in the warm-up
            self.rest = iter(())
            return False
        finally:
            self.seconds += time.monotonic() - started

    def fits(self, job: WorkerJob) -> bool:
        """The job runs on the same problem and device kind: it takes the device."""
        return self.problem_name == job.problem and self.settings.device == job.settings.device

    def plans_for(self, job: WorkerJob) -> PeerPlans | None:
        """The plans, where the job's trials have the seeds' parities and count (up to two)
        the warm-up assumed. Conservative since cuDNN runs every set in one layout
        (Problem.peer_layout): another parity would find the same plans, but is rebuilt."""
        st, mine = job.settings, self.settings
        same_layouts = st.seed % 2 == mine.seed % 2 and min(2, st.trials) == min(2, mine.trials)
        return self.plans if same_layouts else None


def _answers_for(job: WorkerJob, problem: Problem, device: Device,
                 meanwhile: Callable[[], bool] | None = None) -> tuple[Answers, dict[str, Any]]:
    """The job's answer key, once it has computed every answer (the wait is the setup phase
    `answer_key`; `meanwhile` runs while it lasts); references computed here when the job has
    none or it cannot be reached. With the key's facts for the report (which and why)."""
    if job.answer_key is None:
        return Answers(problem), {}
    st = job.settings
    slots, slot_bytes = arena_layout(problem, job.scenarios, len(st.peers) if st.device == "cuda" else 0)
    try:
        remote = RemoteAnswers.connect(job.answer_key, device.torch_device, slots, slot_bytes,
                                       WORKER_SHARE_OF_SETUP * st.setup_timeout_s, device.synchronize,
                                       meanwhile)
    except AnswerKeyLost as exc:
        return Answers(problem, note=str(exc)), {"unavailable": str(exc)}
    return Answers(problem, remote), remote.info


def warm_up(spec: dict[str, Any], conn: Any) -> Prepared | None:
    """Before its job arrives, a spare process told that the GPU is its evaluation's (the
    caller compiles meanwhile) makes its CUDA context and calls every peer once on the first
    scenario (libraries loaded, cuDNN's handle made), then builds the plans of every scenario
    in order (PeerPlans), in this thread, the one the job runs in (the plans are kept per
    thread). It stops as soon as anything arrives on `conn`: the job never waits for more
    than one scenario's plans. No candidate is loaded. None when nothing could be prepared."""
    started = time.monotonic()
    try:
        settings = EvalSettings.from_dict(spec["settings"])
        scenarios = [Scenario.from_dict(s) for s in spec["scenarios"]]
        device = make_device(settings.device)
        problem = get_problem(spec["problem"])
    except Exception:
        return None  # the job's own setup reports what is wrong
    plans = PeerPlans(problem, device, settings)
    with contextlib.suppress(Exception):  # best effort: the job's setup starts it again, or reports why
        problem.prepare(device.torch_device)  # the harness's own kernels, built while the caller compiles
    warm = settings.measure and not settings.peer_cache_dir
    rest = _plan_builds(problem, settings, scenarios if warm else [], plans)
    try:
        # One of each mask kind: the causal reference's mask pass has kernels of its own.
        for s in {s.causal: s for s in reversed(scenarios)}.values():
            _first_references(problem, settings, s, device)
    except Exception:
        pass  # best effort: the first check then pays for it, as before
    last_build = 0.0
    try:
        while not conn.poll():
            began = time.monotonic()
            if not next(rest, False):
                break
            last_build = time.monotonic() - began
        arrived = time.monotonic()
        device.synchronize()
    except Exception:
        rest = iter(())  # best effort: the evaluation builds what is missing, and reports a broken device
        arrived = time.monotonic()
    # The builds' buffers stay with the caching allocator: the first scenario releases them.
    done = time.monotonic()
    return Prepared(spec["problem"], settings, device, problem, plans, done - started, rest,
                    stop_s=done - arrived, last_build_s=last_build)


def _first_references(problem: Problem, settings: EvalSettings, s: Scenario, device: Device) -> None:
    """The references' first use in this process (their kernels loaded, the matrix library's
    handle made), on inputs of a seed no trial uses: with an answer key the worker's first
    reference is otherwise the first timed scenario's output check, which would pay for it."""
    dev = device.torch_device
    inputs = problem.make_inputs(s, PLAN_SEED, dev)
    bufs = problem.buffers(s, inputs, problem.new_output(s, dev), None, 0, PLAN_SEED)
    for dtype in (torch.float32, torch.bfloat16):
        problem.reference(s, bufs, dtype)
    device.synchronize()


def _plan_builds(problem: Problem, settings: EvalSettings, scenarios: Sequence[Scenario],
                 plans: PeerPlans) -> Iterator[bool]:
    """The warm-up's builds, one scenario a step: every peer on the first scenario that has
    any, then only those that build a plan per shape, from the last scenario backwards. The
    evaluation builds the plans still missing while each timing queue drains, the next
    scenario's and more while the queue lasts (ScenarioEvaluator._prepare_upcoming_peers): the
    suite's long scenarios come first and their queues hide those builds, its decode and ragged
    ones last, whose short queues hide almost none, so those are the warm-up's to build."""
    first = True
    for s in [*scenarios[:1], *reversed(scenarios[1:])]:
        peers = wanted_peers(problem, settings, s)
        if not first:  # after the first scenario, only what builds a plan per shape
            peers = {k: v for k, v in peers.items() if getattr(v, "plans_per_shape", False)}
        if not peers:
            continue
        plans.build(s, peers)
        first = False
        yield True


def spare_worker(conn: Any, parent: int | None = None) -> None:
    """Entry point of a spare process (LocalExecutor(spare=True)): it pays for the process
    start and the imports ahead of time, then waits for one job. It touches no GPU before the
    job arrives (a context created while another worker times would disturb it), unless the
    caller tells it first that the GPU is its evaluation's ("warm": LocalExecutor.warm): then
    it prepares for the job (warm_up). It has loaded no candidate: each job still gets a
    process no other kernel ever ran in."""
    follow_parent(parent)
    import harness.attention.forward  # noqa: F401  (the import is the point)
    from harness.attention.peers import warm_first_use

    warm_first_use()
    prepared: Prepared | None = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "warm" and prepared is None:
            prepared = warm_up(msg[1], conn)
            continue
        if msg[0] == "job":
            run_worker(msg[1], msg[2], conn, spare=True, prepared=prepared)
        return


def run_worker(job_dict: dict[str, Any], start: int, conn: Any, spare: bool = False,
               parent: int | None = None, prepared: Prepared | None = None) -> None:
    """Entry point of the spawned process. Messages: ("ready", info), ("start", i),
    ("result", i, dict), ("setup_error", text), ("done",)."""
    follow_parent(parent)  # a worker whose executor died stops at once (harness/lifeline.py)
    # torch explains at length why each SDPA backend declines a shape; the report already
    # records a peer as unsupported, so the warnings only bury the progress display.
    warnings.filterwarnings("ignore", category=UserWarning)
    marks: dict[str, float] = {}
    lap = time.monotonic()

    def mark(phase: str) -> None:
        nonlocal lap
        now = time.monotonic()
        marks[phase] = round(now - lap, 3)
        lap = now

    try:
        job = WorkerJob.from_dict(job_dict)
        if prepared is not None and not prepared.fits(job):
            prepared = None
        device = prepared.device if prepared is not None else make_device(job.settings.device)
        mark("device")
        problem = prepared.problem if prepared is not None else get_problem(job.problem)
        fresh = job.harness_libraries.get("fresh_fill")
        if fresh and job.settings.device == "cuda":  # built and signed by the caller (evaluate.py)
            from harness.attention.fresh_fill import use_prebuilt

            use_prebuilt(fresh["path"], fresh["sha256"])
        problem.prepare(device.torch_device)
        # The baseline is the harness's (or, in a re-time, a kernel loaded like the candidate: its
        # calls run under the sandbox all the same). The candidate is loaded last, under it.
        baseline = problem.load_kernel(verified(job.baseline)) if job.baseline else None
        mark("kernels")
        plans = prepared.plans_for(job) if prepared is not None else None
        # While the key computes its last answers, the warm-up's plan builds go on. Nothing is
        # measured before it is done: its work would share the GPU with the measurement.
        meanwhile = prepared.build_next if prepared is not None and plans is not None else None
        answers, key_info = _answers_for(job, problem, device, meanwhile)
        if job.answer_key is not None:
            mark("answer_key")  # the wait for the key's last answers
        harness_kernels = problem.harness_kernels(device.torch_device)
        if fresh and job.settings.device == "cuda":  # a build a warm-up started is done by now
            use_prebuilt(fresh["path"], fresh["sha256"])
        mark("harness_kernels")
        rates = _rates_for(device, job.settings, job.rates)
        mark("rates")
        # From here on the process runs under the sandbox (harness/sandbox.py), and only then is
        # the candidate's code loaded: it never runs in a process that can write a file.
        sandbox = _install_sandbox(job_dict.get("sandbox"), job.settings)
        candidate = _load_candidate(problem, job.candidate, sandbox)
        mark("sandbox_and_candidate")
    except Exception as exc:
        conn.send(("setup_error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        conn.close()
        return
    info = device.describe()
    if key_info:
        info["answer_key"] = key_info
    info["spare"] = spare
    info["pid"] = os.getpid()
    info["sandbox"] = sandbox.describe() if sandbox is not None else {"installed": False}
    st = job.settings
    if (rates is not None and st.device == "cuda" and not (st.matrix_tflops and st.copy_gbps)
            and not (job.rates or {}).get(device.name)):  # measured here, before the candidate loaded
        info["measured_rates"] = {"gpu": device.name, "matrix_tflops": rates.matrix_tflops,
                                  "copy_gbps": rates.copy_gbps}
    info.update(harness_kernels)
    if rates is not None:
        info["matrix_tflops"], info["copy_gbps"] = rates.matrix_tflops, rates.copy_gbps
    if job.settings.device == "cuda" and job.settings.measure:
        info["peers_unavailable"] = problem.unavailable_peers(job.settings.peers)
    cache = None
    if job.settings.peer_cache_dir and job.settings.device == "cuda":
        cache = PeerCache(job.peer_entries, job.settings.peer_cache_max_age_s, info, job.settings)
    if prepared is not None:
        info["warm_up"] = {"seconds": round(prepared.seconds, 2), "stop_s": round(prepared.stop_s, 3),
                           "last_build_s": round(prepared.last_build_s, 3),
                           "scenarios_with_plans": len(plans) if plans is not None else 0}
    evaluator = ScenarioEvaluator(problem, device, candidate, baseline, job.settings, rates, cache,
                                  _baseline_cache(job, info), plans, answers)
    evaluator.sandbox = sandbox
    info["persisting_l2_bytes_at_start"] = evaluator.reset_persisting_l2()
    mark("l2_reset")
    info["setup_phases"] = marks
    conn.send(("ready", info))
    for idx in range(start, len(job.scenarios)):
        s = job.scenarios[idx]
        evaluator.upcoming = job.scenarios[idx + 1:]
        conn.send(("start", idx))
        try:
            result = evaluator.evaluate(s)
            proposed = evaluator.take_proposals()
        except FatalDeviceError as exc:
            result = ScenarioResult(
                scenario=s.name, category=s.category, hidden=s.hidden, status=CRASH,
                reason=f"the CUDA context broke: {exc}",
                flops=problem.flops(s), bytes=problem.min_bytes(s),
            )
            conn.send(("result", idx, result.to_dict()))
            conn.close()
            os._exit(EXIT_FATAL)
        conn.send(("result", idx, result.to_dict(), proposed))
    conn.send(("done", {"answer_key": answers.summary()} if answers.keyed else {}))
    conn.close()
