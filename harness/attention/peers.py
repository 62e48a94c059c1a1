"""Peers: torch SDPA's cuDNN and flash (FA2) backends and FlashAttention-3 (PyPI's `fa3-fwd`,
the optional extra `fa3`), run on the same buffers and timed by the same code as the candidate.
Each honours the call's softmax_scale, strides (views of the candidate's own tensors) and GQA.
A backend that refuses a shape is recorded as unsupported; FA3 where it cannot load (no wheel,
not a Hopper GPU) is left out with the reason in the report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F

from harness.problem_interface import Peer
from harness.scenario import Scenario

SDPA_PEERS = ("cudnn", "flash")
FA3 = "fa3"


class SdpaPeer:
    def __init__(self, backend: Any, s: Scenario) -> None:
        self.backend = backend
        self.s = s
        # cuDNN builds an execution plan on the first call per shape and strides (torch keeps
        # it per thread): the worker calls such a peer ahead, while the device is busy.
        from torch.nn.attention import SDPBackend

        self.plans_per_shape = backend == SDPBackend.CUDNN_ATTENTION
        # K/V expanded to every query head, per input set (keyed by the K/V addresses).
        self._expanded: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self._use_gqa_flag = s.heads_q != s.heads_kv

    def _mask_args(self, q_len: int, k_len: int, device: torch.device) -> dict[str, Any]:
        if not self.s.causal or (q_len == 1 and k_len >= 1):
            return {"is_causal": False}  # one query, bottom-right: it sees every key
        if q_len == k_len:
            return {"is_causal": True}
        from torch.nn.attention.bias import causal_lower_right

        return {"attn_mask": causal_lower_right(q_len, k_len)}

    def __call__(self, buffers: Any) -> torch.Tensor:
        """The output as [b, s, h, d] (a view of SDPA's [b, h, s, d])."""
        from torch.nn.attention import sdpa_kernel

        q = buffers.q.transpose(1, 2)
        k = buffers.k.transpose(1, 2)
        v = buffers.v.transpose(1, 2)
        mask = self._mask_args(q.shape[2], k.shape[2], q.device)
        with sdpa_kernel(self.backend):
            if self._use_gqa_flag:
                try:
                    return F.scaled_dot_product_attention(
                        q, k, v, scale=buffers.scale, enable_gqa=True, **mask
                    ).transpose(1, 2)
                except RuntimeError:
                    # This backend has no native GQA: give it K/V expanded once, outside timing.
                    self._use_gqa_flag = False
            if self.s.heads_q != self.s.heads_kv:
                key = (k.data_ptr(), v.data_ptr())
                if key not in self._expanded:
                    g = self.s.heads_q // self.s.heads_kv
                    self._expanded[key] = (
                        k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
                    )
                k, v = self._expanded[key]
            return F.scaled_dot_product_attention(q, k, v, scale=buffers.scale, **mask).transpose(1, 2)

    def reset(self) -> None:
        self._expanded.clear()


class Fa3Peer:
    """FlashAttention-3's forward on the candidate's own [b, s, h, d] views: GQA and the
    bottom-right causal mask are native, the scale is passed, strides are taken as they are
    (the last dimension is contiguous). num_splits=0 lets FA3 choose split-KV itself, as its
    KV-cache entry point does by default: without it decode shapes would run on b x h CTAs."""

    def __init__(self, fn: Callable[..., Any], s: Scenario) -> None:
        self.fn = fn
        self.s = s
        self.extra: dict[str, Any] = {"num_splits": 0}

    def __call__(self, buffers: Any) -> torch.Tensor:
        args = (buffers.q, buffers.k, buffers.v)
        try:
            out = self.fn(*args, softmax_scale=buffers.scale, causal=self.s.causal, **self.extra)
        except (TypeError, RuntimeError):
            if not self.extra:
                raise
            self.extra = {}  # a build without the automatic choice: FA3's own default
            out = self.fn(*args, softmax_scale=buffers.scale, causal=self.s.causal)
        return out[0] if isinstance(out, tuple) else out  # (out, lse) or out, by version


def fa3_installed() -> bool:
    """Whether fa3-fwd is installed, found without importing it (no CUDA library is loaded)."""
    import importlib.util

    return importlib.util.find_spec("fa3_fwd_interface") is not None


def warm_first_use(fa3: bool | None = None) -> list[str]:
    """Import ahead what the first FA3 call would: fa3-fwd's operator is a `torch.library`
    custom op, and the first call of one imports torch._dynamo and its dependencies (seconds
    in a fresh process, much of the first scenario's 4.8 s of `peers` on the H200:
    docs/lab/2026-12-01-harness-passes-1-4.md). A
    spare worker does it before its job arrives; pure imports, no GPU touched, no CUDA queried.
    Nothing when fa3-fwd is not installed. Returns the modules imported."""
    if not (fa3_installed() if fa3 is None else fa3):
        return []
    import importlib
    import sys

    before = set(sys.modules)
    for name in ("torch._dynamo", "torch._higher_order_ops.triton_kernel_wrap"):
        importlib.import_module(name)
    return sorted(set(sys.modules) - before)


@lru_cache(maxsize=1)
def load_fa3() -> tuple[Callable[..., Any] | None, str]:
    """fa3-fwd's flash_attn_func, or None and why it cannot run here."""
    if not torch.cuda.is_available():
        return None, "FA3 needs a CUDA GPU"
    major, _ = torch.cuda.get_device_capability()
    if major != 9:
        return None, f"FA3 runs on Hopper (sm_90) only; this GPU is sm_{major}x"
    try:
        from fa3_fwd_interface import flash_attn_func
    except Exception as exc:  # not installed, or built for another torch
        return None, (f"fa3-fwd could not be loaded ({type(exc).__name__}: {str(exc)[:120]}); "
                      "install the optional extra: pip install 'socratic[fa3]'")
    return flash_attn_func, ""


def peers_for(s: Scenario) -> dict[str, Peer]:
    from torch.nn.attention import SDPBackend

    found: dict[str, Peer] = {
        "cudnn": SdpaPeer(SDPBackend.CUDNN_ATTENTION, s),
        "flash": SdpaPeer(SDPBackend.FLASH_ATTENTION, s),
    }
    fn, _ = load_fa3()
    if fn is not None:
        found[FA3] = Fa3Peer(fn, s)
    return found


def unavailable_peers(wanted: Sequence[str]) -> dict[str, str]:
    if FA3 not in wanted:
        return {}
    fn, why = load_fa3()
    return {} if fn is not None else {FA3: why}
