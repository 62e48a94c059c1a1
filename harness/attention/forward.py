"""Attention forward as a harness problem: ABI v1, the default suite, inputs, references,
the FLOP and byte model, and torch SDPA peers."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from harness.attention.abi import (
    CUDA_ERROR_NOT_SUPPORTED,
    AttentionBuffers,
    LibraryKernel,
    PythonKernel,
)
from harness.attention.fields import default_scale, trial_scale
from harness.attention.fresh import DISTRIBUTIONS, AttentionTimedInputs, draw, timed_reason
from harness.attention.fresh_fill import for_device, start_build
from harness.attention.peers import peers_for, unavailable_peers
from harness.attention.reference import attention_reference
from harness.attention.suite import default_suite
from harness.compile import KERNELS_DIR, arch_for_capability
from harness.job import KernelSpec
from harness.problem_interface import LoadedKernel, Peer, Problem, TimedInputs
from harness.scenario import Scenario

BF16_BYTES = 2
INPUT_DISTRIBUTIONS = DISTRIBUTIONS


def attention_flops(s: Scenario) -> int:
    """4 * b * hq * (visible pairs) * d: two matmuls of 2 FLOPs per multiply-add."""
    return 4 * s.batch * s.heads_q * s.visible_pairs() * s.head_dim


def attention_min_bytes(s: Scenario) -> int:
    """Q and O once, K and V once, in bf16."""
    qo = 2 * s.batch * s.seqlen_q * s.heads_q * s.head_dim
    kv = 2 * s.batch * s.seqlen_k * s.heads_kv * s.head_dim
    return (qo + kv) * BF16_BYTES


class AttentionForward(Problem):
    name = "attention-forward"
    contract_header = KERNELS_DIR / "attention" / "contract.h"
    baseline_source = KERNELS_DIR / "attention" / "baseline.cu"
    not_supported_code = CUDA_ERROR_NOT_SUPPORTED

    def suite(self) -> list[Scenario]:
        return default_suite()

    def flops(self, s: Scenario) -> int:
        return attention_flops(s)

    def min_bytes(self, s: Scenario) -> int:
        return attention_min_bytes(s)

    def make_inputs(self, s: Scenario, seed: int, device: torch.device) -> list[torch.Tensor]:
        """Q, K, V for one trial. The distribution rotates with the seed (normal, large logits,
        shifted uniform); odd seeds store K and V interleaved in one KV-cache buffer, so that a
        kernel that ignores the strides fails."""
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        dist = INPUT_DISTRIBUTIONS[seed % len(INPUT_DISTRIBUTIONS)]
        b, sq, sk, hq, hkv, d = (
            s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_kv, s.head_dim
        )

        q = draw((b, sq, hq, d), "q", dist, gen, device)
        if seed % 2:
            kv = draw((b, sk, 2, hkv, d), "k", dist, gen, device)
            kv[:, :, 1] = draw((b, sk, hkv, d), "v", dist, gen, device)
            k, v = kv[:, :, 0], kv[:, :, 1]
        else:
            k = draw((b, sk, hkv, d), "k", dist, gen, device)
            v = draw((b, sk, hkv, d), "v", dist, gen, device)
        return [q, k, v]

    def new_output(self, s: Scenario, device: torch.device) -> torch.Tensor:
        return torch.full(
            (s.batch, s.seqlen_q, s.heads_q, s.head_dim), float("nan"),
            dtype=torch.bfloat16, device=device,
        )

    def buffers(
        self, s: Scenario, inputs: Sequence[torch.Tensor], out: torch.Tensor,
        workspace: torch.Tensor | None, trial: int = 0, seed: int = 0,
    ) -> AttentionBuffers:
        q, k, v = inputs
        return AttentionBuffers(
            q=q, k=k, v=v, o=out, workspace=workspace, causal=s.causal,
            scale=trial_scale(s, trial, seed),
        )

    def reference(self, s: Scenario, buffers: Any, dtype: torch.dtype) -> torch.Tensor:
        b = buffers
        return attention_reference(b.q, b.k, b.v, causal=s.causal, scale=b.scale, compute_dtype=dtype)

    def call_fields(self, buffers: Any) -> tuple[Any, ...]:
        return (float(buffers.scale), bool(buffers.causal))

    def peers(self, s: Scenario) -> dict[str, Peer]:
        return peers_for(s)

    def unavailable_peers(self, wanted: Sequence[str]) -> dict[str, str]:
        return unavailable_peers(wanted)

    def peer_layout(self, s: Scenario, buffers: Any) -> Any:
        """Contiguous Q, K, V: K and V interleaved in one KV-cache buffer (odd trials) become
        contiguous copies; Q, the output and the workspace are the buffers' own. cuDNN keys its
        plans on the strides: without this every scenario costs it a second plan (~45 ms of host
        work each)."""
        if buffers.k.is_contiguous() and buffers.v.is_contiguous():
            return buffers
        return dataclasses.replace(buffers, k=buffers.k.contiguous(), v=buffers.v.contiguous())

    def refresh_peer_layout(self, source: Any, peer_buffers: Any) -> None:
        if peer_buffers is source:
            return
        peer_buffers.k.copy_(source.k)
        peer_buffers.v.copy_(source.v)
        peer_buffers.scale = source.scale

    def prepare(self, device: torch.device) -> None:
        if device.type == "cuda":
            start_build(arch_for_capability(*torch.cuda.get_device_capability(device)))

    def harness_kernels(self, device: torch.device) -> dict[str, Any]:
        return {"fresh_inputs": for_device(device).why}

    def timed_inputs(
        self, s: Scenario, set_index: int, inputs: list[torch.Tensor], buffers: Any,
        call: Callable[[], None], counter: list[int],
    ) -> TimedInputs:
        # The operating system's random source: nothing a kernel can read or replay.
        return AttentionTimedInputs(s, set_index + 1, inputs, buffers, call, counter, random.SystemRandom())

    def check_timed(self, sets: Sequence[TimedInputs]) -> str | None:
        return timed_reason([t for t in sets if isinstance(t, AttentionTimedInputs)])

    def explain_failure(self, s: Scenario, buffers: Any, tolerance: float) -> str | None:
        """The answer for softmax_scale = head_dim^-0.5 where the call passed another scale
        (a kernel that ignores the field); top-left instead of bottom-right causal alignment,
        the classic bug of non-square shapes: the output then matches attention over the first
        seqlen_q keys."""
        q, k, v, out = buffers.q, buffers.k, buffers.v, buffers.o
        usual = default_scale(s)
        if abs(buffers.scale - usual) > 1e-6 * usual:
            plain = attention_reference(q, k, v, causal=s.causal, scale=usual, compute_dtype=torch.float32)
            err = float((out.float() - plain).abs().max().item())
            if err <= max(tolerance, 1e-6):
                return (
                    f"ignores softmax_scale: the call passed softmax_scale = {buffers.scale:.6g} and "
                    f"the output is the answer for head_dim^-0.5 = {usual:.6g} (max error {err:.2e} "
                    "against it): the kernel must use the scale the call passes"
                )
        if not s.causal or s.seqlen_k <= s.seqlen_q:
            return None
        n = s.seqlen_q
        top_left = attention_reference(
            q, k[:, :n], v[:, :n], causal=True, scale=buffers.scale, compute_dtype=torch.float32,
        )
        err = float((out.float() - top_left).abs().max().item())
        if err <= max(tolerance, 1e-6) * 2:
            return (
                "wrong causal alignment: the output matches a top-left mask (query i sees keys "
                f"j <= i, max error {err:.2e} against it); the contract is bottom-right, query i "
                f"sees keys j <= i + seqlen_k - seqlen_q ({s.seqlen_k - s.seqlen_q} here)"
            )
        return None

    def load_kernel(self, spec: KernelSpec) -> LoadedKernel:
        if spec.kind == "library":
            return LibraryKernel(spec.label, spec.target)
        if spec.kind == "python":
            return PythonKernel(spec.label, spec.target)
        raise ValueError(f"unknown kernel kind {spec.kind!r}")


def baseline_path() -> Path:
    return AttentionForward.baseline_source
