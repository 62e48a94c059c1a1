"""Cheating kernels written in Python for the CPU backend, one per hack class that the timed
phase must catch (docs/verifier.md). Like tests/cpu_kernels.py they run in spawned worker
processes through the real worker; each takes AttentionBuffers and returns an error code."""

from __future__ import annotations

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
