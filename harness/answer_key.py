"""The answer key: every trial's reference computed while nvcc compiles, in a process the
candidate never runs in, and each trial's outputs judged there once.

Why. The fp32 and bf16 references of two trials of 182 scenarios are ~7 s of device time. In
the worker they can only start after the candidate's runs of each trial: a reference that
exists in the candidate's process before its runs could be found in memory by its host code
and copied. A process of their own moves them off the critical path (the GPU is otherwise
idle while nvcc compiles) and keeps them out of the candidate's process entirely: the worker
sends its outputs to be judged and gets back the verdicts, never a reference.

The pieces, in the order an evaluation meets them:
- `AnswerKeyProcess` (the executor's side, no torch): started beside the worker by
  `LocalExecutor.prestart`, told the job's problem, scenarios and settings by
  `LocalExecutor.warm` (only a caller that owns the GPU for the evaluation warms), handed to the
  job's worker (`run`), ended with the executor.
- `serve` (the key's process): makes each trial's inputs from the trial's seed exactly as the
  worker will (`AnswerKey.compute`), keeps the fp32 reference and the tolerance, then accepts
  the worker's connection (a restarted worker connects again) and answers.
- `RemoteAnswers` (the worker's side): waits for the key, shares an arena of output slots with
  it (CUDA IPC on a GPU, shared memory on the CPU), and after a trial's runs copies the outputs
  into the slots and asks for their checks, with a digest of the trial's inputs and call fields
  so that a key computed for other inputs is caught. Each trial is answered once, then dropped.
- `Answers` (what the evaluator calls): the key where it answers; otherwise references computed
  in the worker after the candidate's runs, as without a key (the server, the cluster, a trial
  the key cannot answer, a key that died).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Client, Listener
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from harness.correctness import Check
    from harness.problem_interface import Problem
    from harness.scenario import Scenario
    from harness.settings import EvalSettings

# The key stops computing after this share of the setup timeout, and the worker waits for it
# for half of it (RemoteAnswers.connect): a key still computing never shares the GPU with a
# worker that measures.
KEY_SHARE_OF_SETUP = 0.4
WORKER_SHARE_OF_SETUP = 0.5
# The key's process listens from its first moment; a worker that finds no one listening for this
# long after it first tried knows the process has ended (it would otherwise wait its whole share).
NOBODY_LISTENS_S = 5.0
# Slots of the arena start at multiples of this (any dtype's alignment).
SLOT_ALIGN = 512
# On a GPU the key keeps references in device memory up to this share of it, in host memory
# beyond (each is copied in for its one check).
DEVICE_SHARE = 0.25


# -- the executor's side --------------------------------------------------------------------

class AnswerKeyProcess:
    """The key's process as its executor sees it: started early (it imports torch while the
    caller compiles), told what to compute (`warm`), its address given to one job's workers."""

    def __init__(self, ctx: Any) -> None:
        self._folder = tempfile.mkdtemp(prefix="socratic-key-")
        self.address = os.path.join(self._folder, "key.sock")
        self.authkey = secrets.token_bytes(32)
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=serve, args=(child, os.getpid(), self.address, self.authkey),
                                 daemon=True)
        self._proc.start()
        child.close()
        self.warmed = False

    def warm(self, problem: str, scenarios: Sequence[Scenario], settings: EvalSettings) -> bool:
        spec = {"problem": problem, "scenarios": [s.to_dict() for s in scenarios],
                "settings": settings.to_dict()}
        try:
            self._conn.send(("key", spec))
        except (OSError, ValueError):
            return False
        self.warmed = True
        return True

    def handle(self) -> dict[str, str]:
        """What a worker needs to reach the key (goes in its job's payload)."""
        return {"address": self.address, "authkey": self.authkey.hex()}

    def alive(self) -> bool:
        return bool(self._proc.is_alive())

    def close(self) -> None:
        # Nothing to save: the key's references belong to one evaluation.
        with contextlib.suppress(OSError, ValueError):
            self._conn.close()
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(timeout=10)
        shutil.rmtree(self._folder, ignore_errors=True)


# -- the key's process ----------------------------------------------------------------------

def call_digest(problem: Problem, inputs: Sequence[torch.Tensor], buffers: Any) -> list[Any]:
    """What identifies a trial's call: the sum of each input's stored bits (as integers, so
    exact on any device) and the problem's call fields (softmax_scale, causal)."""
    import torch

    sums = torch.stack([_bits(x).sum(dtype=torch.int64) for x in inputs]).tolist()
    return [*sums, *problem.call_fields(buffers)]


def _bits(t: torch.Tensor) -> torch.Tensor:
    import torch

    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@dataclass
class _Answer:
    ref32: torch.Tensor
    tolerance: float
    digest: list[Any]


class AnswerKey:
    """Each trial's fp32 reference and tolerance, computed from the trial's seed; `answer`
    judges that trial's outputs once."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._answers: dict[tuple[str, int], _Answer | str] = {}
        self.seconds = 0.0
        self.on_host = 0

    @classmethod
    def compute(cls, problem: Problem, scenarios: Sequence[Scenario], settings: EvalSettings,
                device: torch.device, seconds: float = float("inf")) -> AnswerKey:
        """In the worker's order. A trial that cannot be computed (out of memory), or not within
        `seconds` (the key must be idle before the worker stops waiting for it and measures), is
        recorded with the reason; the worker computes that one itself."""
        import torch

        from harness.correctness import tolerance_tensor

        key = cls(device)
        started = time.monotonic()
        budget = (DEVICE_SHARE * torch.cuda.get_device_properties(device).total_memory
                  if device.type == "cuda" else float("inf"))
        held = 0
        for s in scenarios:
            for trial in range(settings.trials):
                seed = settings.trial_seed(trial)
                if time.monotonic() - started > seconds:
                    key._answers[(s.name, trial)] = f"the key ran out of its {seconds:g} s"
                    continue
                try:
                    inputs = problem.make_inputs(s, seed, device)
                    bufs = problem.buffers(s, inputs, problem.new_output(s, device), None, trial,
                                           settings.seed)
                    ref32 = problem.reference(s, bufs, torch.float32)
                    tol = tolerance_tensor(ref32, problem.reference(s, bufs, torch.bfloat16))
                    digest = call_digest(problem, inputs, bufs)
                    if held + ref32.nbytes > budget:
                        ref32 = ref32.cpu()
                        key.on_host += 1
                    else:
                        held += ref32.nbytes
                    key._answers[(s.name, trial)] = _Answer(ref32, float(tol.item()), digest)
                except Exception as exc:  # the worker computes this trial itself
                    key._answers[(s.name, trial)] = f"the key could not compute it: {type(exc).__name__}: {exc}"[:300]
                    inputs = bufs = None  # type: ignore[assignment]
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
        key.seconds = time.monotonic() - started
        return key

    def stats(self) -> dict[str, Any]:
        failed = sum(isinstance(a, str) for a in self._answers.values())
        return {"seconds": round(self.seconds, 2), "trials": len(self._answers),
                "not_computed": failed, "on_host": self.on_host}

    def answer(self, scenario: str, trial: int, digest: list[Any],
               outputs: Sequence[torch.Tensor]) -> list[Check] | str:
        """The checks of `outputs` against the trial's reference; a reason instead when the key
        has no answer for it (asked before, not computed, or computed for other inputs)."""
        from harness.correctness import check_against

        got = self._answers.pop((scenario, trial), None)
        if got is None:
            return f"no answer for {scenario} trial {trial + 1} (not in the key, or already given)"
        if isinstance(got, str):
            return got
        if got.digest != digest:
            return (f"the key's inputs for {scenario} trial {trial + 1} differ from the worker's "
                    f"(digest {got.digest} against {digest})")
        ref32 = got.ref32.to(self.device)
        return [check_against(out, ref32, got.tolerance) for out in outputs]


def slot_view(arena: torch.Tensor, slot_bytes: int, i: int, dtype: torch.dtype,
              shape: Sequence[int]) -> torch.Tensor:
    """Slot `i` of the arena as a contiguous tensor of `dtype` and `shape`."""
    import math

    n = math.prod(shape) * dtype.itemsize
    start = i * slot_bytes
    return arena[start:start + n].view(dtype).view(tuple(shape))


def serve(conn: Any, parent: int, address: str, authkey: bytes) -> None:
    """The key's process: listens at once (a worker that connects waits in the handshake until
    the key accepts), waits for what to compute, computes it, then answers the job's workers
    one connection at a time (a restarted worker connects again)."""
    from harness.lifeline import follow_parent

    follow_parent(parent)  # an evaluation that died takes its key with it
    listener = Listener(address, family="AF_UNIX", authkey=authkey)
    warnings.filterwarnings("ignore", category=UserWarning)
    import torch
    import torch.multiprocessing

    import harness.attention.forward  # noqa: F401  (the import is the point: before the spec)

    try:
        msg = conn.recv()
    except (EOFError, OSError):
        return
    if msg[0] != "key":
        return
    from harness.problem_registry import get_problem
    from harness.scenario import Scenario
    from harness.settings import EvalSettings

    try:  # a malformed spec is a failure every worker is told about
        spec = msg[1]
        settings = EvalSettings.from_dict(spec["settings"])
        # Done before the worker's wait for it ends (setup_timeout_s / 2 from its connection).
        key = AnswerKey.compute(get_problem(spec["problem"]),
                                [Scenario.from_dict(s) for s in spec["scenarios"]], settings,
                                torch.device(settings.device),
                                KEY_SHARE_OF_SETUP * settings.setup_timeout_s)
        failure = None
    except Exception:  # every worker is told, and computes its references itself
        key, failure = None, traceback.format_exc(limit=3)
    while True:
        try:
            worker = listener.accept()
        except Exception:  # a client with another key, or one that went away mid-handshake
            continue
        with worker:
            try:
                if key is None:
                    worker.send(("failed", failure))
                    continue
                _answer_worker(key, worker)
            except (EOFError, OSError):
                continue  # the worker ended (or crashed): the next one connects again


def _answer_worker(key: AnswerKey, worker: Any) -> None:
    worker.send(("ready", key.stats()))
    _, arena, slot_bytes = worker.recv()
    while True:
        _, scenario, trial, digest, layouts = worker.recv()
        outputs = [slot_view(arena, slot_bytes, i, dtype, shape)
                   for i, (dtype, shape) in enumerate(layouts)]
        worker.send(key.answer(scenario, trial, digest, outputs))
        del outputs


# -- the worker's side ----------------------------------------------------------------------

class AnswerKeyLost(Exception):
    """The connection to the key broke: the rest of the job is judged in the worker."""


class RemoteAnswers:
    """The worker's connection to the key and the arena it shares with it."""

    def __init__(self, conn: Any, arena: torch.Tensor, slot_bytes: int, slots: int,
                 info: dict[str, Any], synchronize: Callable[[], None]) -> None:
        self._conn = conn
        self._arena = arena
        self.slot_bytes = slot_bytes
        self.slots = slots
        self.info = info
        self._synchronize = synchronize

    @classmethod
    def connect(cls, handle: dict[str, str], device: torch.device, slots: int, slot_bytes: int,
                timeout_s: float, synchronize: Callable[[], None],
                meanwhile: Callable[[], bool] | None = None) -> RemoteAnswers:
        """Wait (up to `timeout_s`) until the key has computed every answer, then share the
        arena; `meanwhile` is called again and again while the wait lasts, until it returns
        False (the worker's remaining plan builds). Raises AnswerKeyLost when the key cannot be
        reached, failed, or is not ready in time."""
        import torch
        import torch.multiprocessing

        started = time.monotonic()
        deadline = started + timeout_s
        box: dict[str, Any] = {}

        def reach() -> None:  # blocks in the handshake until the key accepts: when it is done
            while time.monotonic() < deadline:
                try:
                    box["conn"] = Client(handle["address"], family="AF_UNIX",
                                         authkey=bytes.fromhex(handle["authkey"]))
                    box["first"] = box["conn"].recv()
                    return
                except (FileNotFoundError, ConnectionRefusedError):
                    if time.monotonic() - started > NOBODY_LISTENS_S:
                        box["error"] = ("could not be reached: nothing listens at its address "
                                        "(its process has ended)")
                        return
                    time.sleep(0.02)
                except Exception as exc:
                    box["error"] = f"could not be reached ({type(exc).__name__}: {exc})"
                    return

        t = threading.Thread(target=reach, name="socratic-answer-key", daemon=True)
        t.start()
        while meanwhile is not None and t.is_alive() and time.monotonic() < deadline:
            if not meanwhile():
                break
        t.join(max(0.0, deadline - time.monotonic()))
        if "first" not in box:
            why = box.get("error") or f"was not ready within {timeout_s:g} s"
            raise AnswerKeyLost(f"the answer key {why}")
        conn, first = box["conn"], box["first"]
        if first[0] != "ready":
            conn.close()
            raise AnswerKeyLost(f"the answer key failed: {str(first[1]).strip().splitlines()[-1]}")
        arena = torch.zeros(slots * slot_bytes, dtype=torch.uint8, device=device)
        if device.type == "cpu":
            arena.share_memory_()
        try:
            conn.send(("arena", arena, slot_bytes))
        except (OSError, ValueError) as exc:
            raise AnswerKeyLost(f"the answer key went away: {exc}") from exc
        info = {**first[1], "wait_s": round(time.monotonic() - started, 2)}
        return cls(conn, arena, slot_bytes, slots, info, synchronize)

    def check(self, scenario: str, trial: int, digest: list[Any],
              outputs: Sequence[torch.Tensor]) -> list[Check] | str:
        """The key's checks of `outputs` (the candidate's first), or why it gave none (the
        worker then judges them itself). Raises AnswerKeyLost when the key is gone."""
        if len(outputs) > self.slots or any(o.nbytes > self.slot_bytes for o in outputs):
            return "the outputs do not fit the arena shared with the key"
        for i, out in enumerate(outputs):
            slot_view(self._arena, self.slot_bytes, i, out.dtype, out.shape).copy_(out)
        self._synchronize()  # the key reads the slots once this process's copies are done
        layouts = [(o.dtype, tuple(o.shape)) for o in outputs]
        try:
            self._conn.send(("check", scenario, trial, digest, layouts))
            got = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise AnswerKeyLost(f"the answer key went away: {type(exc).__name__}") from exc
        finally:
            # Nothing of this trial's outputs (the peers' are right answers) stays for the
            # candidate's next runs.
            self._arena[:len(outputs) * self.slot_bytes].zero_()
        return got

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.close()


def arena_layout(problem: Problem, scenarios: Sequence[Scenario], peers: int) -> tuple[int, int]:
    """(slots, bytes per slot): one slot for the candidate's output and one per peer, each as
    large as the largest output of the job (measured on the meta device: nothing allocated)."""
    import torch

    meta = torch.device("meta")
    largest = max((problem.new_output(s, meta).nbytes for s in scenarios), default=0)
    return 1 + peers, max(SLOT_ALIGN, -(-largest // SLOT_ALIGN) * SLOT_ALIGN)


class Answers:
    """Where the evaluator's trials are judged: the key where it answers, references computed
    here otherwise (only after the candidate's runs of the trial, as the verifier's rules ask
    of anything computed in the candidate's process)."""

    def __init__(self, problem: Problem, remote: RemoteAnswers | None = None,
                 note: str = "") -> None:
        self.problem = problem
        self.remote = remote
        self.keyed = remote is not None
        self.in_worker = 0  # trials a key existed for but the worker judged
        self.why = note  # the last reason the key gave none
        self._refs: tuple[torch.Tensor, torch.Tensor] | None = None

    def begin(self, s: Scenario, buffers: Any) -> None:
        """After the candidate's runs of a trial. Without a key the references are enqueued now,
        so that work the caller does before `judge` (the peers' runs) overlaps their device time."""
        self._refs = None if self.remote is not None else self._references(s, buffers)

    def judge(self, s: Scenario, trial: int, inputs: Sequence[torch.Tensor], buffers: Any,
              outputs: Sequence[torch.Tensor]) -> list[Check]:
        """One check per output, the candidate's first."""
        from harness.correctness import check_against, tolerance

        if self._refs is None and self.remote is not None:
            try:
                got = self.remote.check(s.name, trial, call_digest(self.problem, inputs, buffers),
                                        outputs)
            except AnswerKeyLost as exc:
                self.remote.close()
                self.remote, got = None, str(exc)
            if not isinstance(got, str):
                return got
            self.why = got
        refs, self._refs = self._refs or self._references(s, buffers), None
        if self.keyed:
            self.in_worker += 1
        ref32, low = refs
        tol = tolerance(ref32, low)
        return [check_against(out, ref32, tol) for out in outputs]

    def _references(self, s: Scenario, buffers: Any) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        return (self.problem.reference(s, buffers, torch.float32),
                self.problem.reference(s, buffers, torch.bfloat16))

    def summary(self) -> dict[str, Any]:
        """For the report's device info: how many trials a key existed for but the worker judged,
        and why the last of them was."""
        return {"trials_judged_in_worker": self.in_worker, **({"why": self.why} if self.why else {})}
