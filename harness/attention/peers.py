"""Peers: torch SDPA's cuDNN and flash backends, run on the same buffers and timed by the same
code as the candidate. A backend that refuses a shape is recorded as unsupported."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from harness.problem import Peer
from harness.scenario import Scenario


class SdpaPeer:
    def __init__(self, backend: Any, s: Scenario) -> None:
        self.backend = backend
        self.s = s
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
                    )
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
            return F.scaled_dot_product_attention(q, k, v, scale=buffers.scale, **mask)

    def reset(self) -> None:
        self._expanded.clear()


def sdpa_peers(s: Scenario) -> dict[str, Peer]:
    from torch.nn.attention import SDPBackend

    return {
        "cudnn": SdpaPeer(SDPBackend.CUDNN_ATTENTION, s),
        "flash": SdpaPeer(SDPBackend.FLASH_ATTENTION, s),
    }
