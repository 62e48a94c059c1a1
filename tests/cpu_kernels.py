"""Kernels written in Python for the CPU backend: they let CI exercise the whole evaluation
pipeline (poisoning, trials, determinism, tolerance, isolation) without a GPU. Each function
takes AttentionBuffers and returns a CUDA-style error code."""

from __future__ import annotations

import itertools
import os
import random
import time
from pathlib import Path

import torch

from harness.attention.abi import CUDA_ERROR_NOT_SUPPORTED, AttentionBuffers
from harness.attention.reference import attention_reference


def _exact(b: AttentionBuffers) -> torch.Tensor:
    return attention_reference(
        b.q, b.k, b.v, causal=b.causal, scale=b.scale, compute_dtype=torch.float32
    ).to(torch.bfloat16)


def correct(b: AttentionBuffers) -> int:
    b.o.copy_(_exact(b))
    return 0


SHM_TAG_ENV = "SOCRATIC_TEST_SHM_TAG"


def leaves_shared_memory(b: AttentionBuffers) -> int:
    """Correct, and leaves a file in /dev/shm named as torch names its shared memory
    (torch_<pid>_...), as a GPU worker leaves its answer-key arena's reference counts. It can
    only without the sandbox (hardening=False): under it, creating a file is refused."""
    path = Path(f"/dev/shm/torch_{os.getpid()}_{os.environ[SHM_TAG_ENV]}")
    if not path.exists():
        path.write_bytes(bytes(64))
    return correct(b)


def correct_slow(b: AttentionBuffers) -> int:
    time.sleep(0.002)
    return correct(b)


def missing_tail(b: AttentionBuffers) -> int:
    """Writes only the first 64 query rows: ragged shapes expose it."""
    out = _exact(b)
    b.o[:, :64].copy_(out[:, :64])
    return 0


def wrong_causal_offset(b: AttentionBuffers) -> int:
    """Top-left causal alignment instead of bottom-right: wrong only when seqlen_q != seqlen_k."""
    if b.causal and b.q.shape[1] != b.k.shape[1]:
        sq, sk = b.q.shape[1], b.k.shape[1]
        n = min(sq, sk)
        ref = attention_reference(
            b.q[:, :n], b.k[:, :n], b.v[:, :n], causal=True, scale=b.scale,
            compute_dtype=torch.float32,
        )
        b.o.zero_()
        b.o[:, :n].copy_(ref.to(torch.bfloat16))
        return 0
    return correct(b)


def low_precision(b: AttentionBuffers) -> int:
    """Rounds the scores to fp8-like precision: close, but past the 2x bf16 rule."""
    q = (b.q.float() * 8).round() / 8
    k = (b.k.float() * 8).round() / 8
    ref = attention_reference(q, k, b.v.float(), causal=b.causal, scale=b.scale,
                              compute_dtype=torch.float32)
    b.o.copy_(ref.to(torch.bfloat16))
    return 0


_CALLS = itertools.count()


def nondeterministic(b: AttentionBuffers) -> int:
    # A random row, pushed up on one call and down on the next: two calls in a row always differ
    # (a random sign alone matched the call before it one time in 2 x rows, and the scenario then
    # failed on its error instead of on the determinism check).
    correct(b)
    i = random.randrange(b.o.shape[1])
    b.o[0, i, 0, 0] += 0.0625 * (1 if next(_CALLS) % 2 else -1)
    return 0


def mutates_input(b: AttentionBuffers) -> int:
    correct(b)
    b.q[0, 0, 0, 0] += 1.0
    return 0


def not_supported_d64(b: AttentionBuffers) -> int:
    if b.q.shape[3] == 64:
        return CUDA_ERROR_NOT_SUPPORTED
    return correct(b)


def launch_error(b: AttentionBuffers) -> int:
    return 9  # cudaErrorInvalidConfiguration


def crash_on_causal(b: AttentionBuffers) -> int:
    if b.causal:
        os._exit(77)
    return correct(b)


# A folder where hang_on_causal leaves a file named after its process as it starts to hang,
# so that a test can wait until an evaluation process is inside the kernel.
HANG_MARKS_ENV = "SOCRATIC_TEST_HANG_MARKS"


def hang_on_causal(b: AttentionBuffers) -> int:
    if b.causal:
        marks = os.environ.get(HANG_MARKS_ENV)
        if marks:
            (Path(marks) / str(os.getpid())).touch()
        time.sleep(3600)
    return correct(b)


def drifts_after_calls(b: AttentionBuffers) -> int:
    """Correct for the first calls, then wrong: caught by the checks after timing. The offset is
    the same for every element and over twice any tolerance the timed calls' checks computed in
    6,000 draws (0.81 at most); a drift of 1% stayed within the tolerance of about 4 calls in 10
    (most on large logits), so now and then every timed call passed, and another check caught
    the kernel under another name."""
    drifts_after_calls.calls = getattr(drifts_after_calls, "calls", 0) + 1  # type: ignore[attr-defined]
    correct(b)
    if drifts_after_calls.calls > 6:  # type: ignore[attr-defined]
        b.o.add_(2.0)
    return 0


_UNPOISONED_CALLS: dict[int, int] = {}


def uses_workspace(b: AttentionBuffers) -> int:
    """The workspace arrives poisoned before every call, except once per buffer: the workspace
    probe leaves it as the previous call wrote it (here: zeros)."""
    assert b.workspace is not None and b.workspace.numel() == 4096
    if not bool((b.workspace == 0xFF).all()):
        assert bool((b.workspace == 0).all()), "workspace must be poisoned or as the kernel left it"
        key = hash((b.workspace.data_ptr(), b.o.data_ptr(), tuple(b.o.shape)))  # one buffer
        seen = _UNPOISONED_CALLS.get(key, 0) + 1
        _UNPOISONED_CALLS[key] = seen
        assert seen == 1, "only the workspace probe may skip the poison"
    b.workspace.zero_()
    return correct(b)


def uses_workspace_workspace(b: AttentionBuffers) -> int:
    return 4096


# Kernels of known speed for the server's scripted sessions (tests/test_server_*.py and the
# CPU demo script): each sleeps a fixed time, then writes the exact answer, so the judge's
# verdicts and the steering triggers they cause are predictable. The sleeps are long enough
# that a busy 2-core machine does not blur a 2x difference.


def correct_10ms(b: AttentionBuffers) -> int:
    time.sleep(0.010)
    return correct(b)


def correct_5ms(b: AttentionBuffers) -> int:
    time.sleep(0.005)
    return correct(b)


def correct_5ms_retiled(b: AttentionBuffers) -> int:
    """Same speed as correct_5ms under another name: a variant that gains nothing."""
    time.sleep(0.005)
    return correct(b)


def correct_2ms(b: AttentionBuffers) -> int:
    time.sleep(0.002)
    return correct(b)


def correct_30ms(b: AttentionBuffers) -> int:
    """A slow but correct baseline: 30 ms dwarfs the timing noise of a loaded CI machine."""
    time.sleep(0.030)
    return correct(b)
