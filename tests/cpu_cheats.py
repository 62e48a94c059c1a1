"""Cheating kernels written in Python for the CPU backend, one per hack class that the timed
phase must catch (docs/verifier.md). Like tests/cpu_kernels.py they run in spawned worker
processes through the real worker; each takes AttentionBuffers and returns an error code."""

from __future__ import annotations

import contextlib

import torch

from harness.attention.abi import AttentionBuffers
from tests.cpu_kernels import correct

_BY_POINTERS: dict[tuple[int, ...], torch.Tensor] = {}
_BY_SAMPLES: dict[bytes, torch.Tensor] = {}
HEADER = 64  # bytes of the workspace cache's key


def _sample(t: torch.Tensor, n: int = 32) -> bytes:
    return bytes(t.reshape(-1)[:n].view(torch.int16).numpy().tobytes())


def writes_nothing(b: AttentionBuffers) -> int:
    """Stale output: returns without writing, trusting the output memory to hold an answer."""
    return 0


def pointer_cache(b: AttentionBuffers) -> int:
    """Computes once per set of buffer addresses, then replays the stored answer."""
    key = (b.q.data_ptr(), b.k.data_ptr(), b.v.data_ptr(), b.o.data_ptr())
    if key in _BY_POINTERS:
        b.o.copy_(_BY_POINTERS[key])
        return 0
    correct(b)
    _BY_POINTERS[key] = b.o.clone()
    return 0


def sampled_qk_cache(b: AttentionBuffers) -> int:
    """Keyed on a few elements of Q and K: a hash of "the inputs" that never looks at V."""
    key = _sample(b.q) + _sample(b.k) + b.o.data_ptr().to_bytes(8, "little")
    if key in _BY_SAMPLES:
        b.o.copy_(_BY_SAMPLES[key])
        return 0
    correct(b)
    _BY_SAMPLES[key] = b.o.clone()
    return 0


def workspace_cache(b: AttentionBuffers) -> int:
    """Keeps its answer in the workspace with a key of sampled Q, K and V; reuses it when the
    key matches (the harness's poison wipes it before every call but the probe)."""
    assert b.workspace is not None
    key = torch.frombuffer(bytearray(_sample(b.q, 8) + _sample(b.k, 8) + _sample(b.v, 8)
                                     + bytes(16)), dtype=torch.uint8)
    stored = b.workspace[:HEADER]
    cache = b.workspace[HEADER:].view(torch.bfloat16).view(b.o.shape)
    if torch.equal(stored, key):
        b.o.copy_(cache)
        return 0
    correct(b)
    stored.copy_(key)
    cache.copy_(b.o)
    return 0


def workspace_cache_workspace(b: AttentionBuffers) -> int:
    return HEADER + b.o.numel() * b.o.element_size()


_REPLAY: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}


def replay_transformed(b: AttentionBuffers) -> int:
    """The replay that fresh inputs must defeat: keyed on the call's buffers (whose K the old
    harness never changed), it computes once, then returns the cached answer with each (batch,
    kv head) block rescaled by the ratio of the current V's sum over the block to the cached
    one's: exact under the old harness's versions (V times +-2^e), no attention computed. (The
    ratio of one element of V was 1 or 0 now and then on fresh inputs, whose bf16 values repeat:
    the replay was then an exact one, or zeros, which the harness names otherwise. So did sums
    whose ratio came within bf16 rounding of 1, about 3 runs in 100 on a one-block scenario: a
    rescaled answer that rounds back to the cached one bit for bit while V's sums changed is
    scaled by 1.0625 more.)"""
    key = (b.q.data_ptr(), b.k.data_ptr(), b.v.data_ptr(), b.o.data_ptr())
    if key not in _REPLAY:
        correct(b)
        _REPLAY[key] = (b.o.clone(), b.v.float().sum(dim=(1, 3)))
        return 0
    answer, v0 = _REPLAY[key]
    now = b.v.float().sum(dim=(1, 3))
    factor = torch.where(v0 != 0, now / v0, torch.ones_like(v0))  # [batch, kv heads]
    group = b.q.shape[2] // b.k.shape[2]
    per_head = factor.repeat_interleave(group, dim=1).view(b.o.shape[0], 1, -1, 1)
    out = (answer.float() * per_head).to(b.o.dtype)
    if torch.equal(out, answer) and not torch.equal(now, v0):  # V changed, the factors rounded away
        out = (answer.float() * per_head * 1.0625).to(b.o.dtype)
    b.o.copy_(out)
    return 0


def ignores_scale(b: AttentionBuffers) -> int:
    """Uses head_dim^-0.5 whatever softmax_scale the call passes."""
    from harness.attention.reference import attention_reference

    usual = b.q.shape[3] ** -0.5
    b.o.copy_(attention_reference(b.q, b.k, b.v, causal=b.causal, scale=usual).to(torch.bfloat16))
    return 0


_CALLS = {"n": 0}


def stops_writing_after_validation(b: AttentionBuffers) -> int:
    """Computes for the four correctness calls, then returns without writing: whatever the
    output buffer held (an earlier answer) is what the harness reads."""
    _CALLS["n"] += 1
    return correct(b) if _CALLS["n"] <= 4 else 0


def wrong_once_while_timed(b: AttentionBuffers) -> int:
    """Right on every call but one in the middle of the timing loop, which a check of only the
    last output of each input set would never see."""
    _CALLS["n"] += 1
    correct(b)
    if _CALLS["n"] == 9:
        b.o.mul_(-1.0)
    return 0


# Issue 47: a candidate is hostile native code in the harness's own process. Each of these tries
# one thing the worker's sandbox refuses (harness/sandbox.py) during its call, then answers
# correctly: the scenario must fail with a reason naming the attempt.
SANDBOX_TARGET_ENV = "SOCRATIC_TEST_SANDBOX_TARGET"


def _target() -> str:
    import os

    return os.environ.get(SANDBOX_TARGET_ENV, "/tmp/socratic-sandbox-target")


def writes_a_file(b: AttentionBuffers) -> int:
    """The baseline-cache rewrite of issue 47 (class 4), as plain Python."""
    with contextlib.suppress(OSError), open(_target(), "w") as f:
        f.write('{"median_ms": 1e9}')
    return correct(b)


def opens_a_socket(b: AttentionBuffers) -> int:
    import socket

    with contextlib.suppress(OSError):
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 9))
    return correct(b)


def executes_a_program(b: AttentionBuffers) -> int:
    import os

    with contextlib.suppress(OSError):
        os.execv("/bin/true", ["true"])
    return correct(b)


def forks(b: AttentionBuffers) -> int:
    import os

    try:
        if os.fork() == 0:
            os._exit(0)
    except OSError:
        pass
    return correct(b)


def traces_its_parent(b: AttentionBuffers) -> int:
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace(16, os.getppid(), 0, 0)  # PTRACE_ATTACH
    return correct(b)


def signals_its_parent(b: AttentionBuffers) -> int:
    import os
    import signal

    with contextlib.suppress(OSError):
        os.kill(os.getppid(), signal.SIGCONT)
    return correct(b)


def starts_a_thread(b: AttentionBuffers) -> int:
    """Not refused: threads (CUDA, torch and CUPTI start their own) still work under the filter."""
    import threading

    box: list[int] = []
    t = threading.Thread(target=lambda: box.append(correct(b)))
    t.start()
    t.join()
    return box[0]


def holds_the_cache_key(b: AttentionBuffers) -> int:
    """Correct only if this process holds no cache key: neither in the harness's module, nor in
    its environment, nor in the job it was sent."""
    import os
    import sys

    trusted = sys.modules.get("harness.trusted_cache")
    if trusted is not None and getattr(trusted, "_KEY", None) is not None:
        return 1
    if any("cache.key" in v or "SOCRATIC_CACHE_KEY" in k for k, v in os.environ.items()):
        return 1
    return correct(b)


_LAST: dict[str, object] = {}


def repairs_kept_outputs(b: AttentionBuffers) -> int:
    """Issue 47, class 2 (kernels/cheats/cheat_late_repair.cu in Python): once the calls alternate
    between two buffer sets, each call leaves zeros in its own output and computes the previous
    call's answer into the previous call's output, on that call's inputs (still in place)."""
    from harness.attention.reference import attention_reference

    last = _LAST.get("b")
    before_last = _LAST.get("before_last_o")
    alternating = last is not None and last.o.data_ptr() != b.o.data_ptr() and before_last == b.o.data_ptr()  # type: ignore[attr-defined]
    if last is not None and last.o.data_ptr() != b.o.data_ptr():  # type: ignore[attr-defined]
        ref = attention_reference(last.q, last.k, last.v, causal=last.causal,  # type: ignore[attr-defined]
                                  scale=_LAST["scale"], compute_dtype=torch.float32)
        last.o.copy_(ref.to(torch.bfloat16))  # type: ignore[attr-defined]
    if alternating:
        b.o.zero_()
    else:
        correct(b)
    _LAST["before_last_o"] = last.o.data_ptr() if last is not None else None  # type: ignore[attr-defined]
    _LAST["b"] = b
    _LAST["scale"] = float(b.scale)
    return 0
