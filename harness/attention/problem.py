"""Attention forward as a harness problem: ABI v1, the default suite, inputs, references,
the FLOP and byte model, and torch SDPA peers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch

from harness.attention.abi import (
    CUDA_ERROR_NOT_SUPPORTED,
    AttentionBuffers,
    LibraryKernel,
    PythonKernel,
)
from harness.attention.fresh import AttentionVersions
from harness.attention.peers import sdpa_peers
from harness.attention.reference import attention_reference
from harness.attention.suite import default_suite
from harness.compile import KERNELS_DIR
from harness.problem import InputVersions, KernelSpec, LoadedKernel, Peer, Problem
from harness.scenario import Scenario

BF16_BYTES = 2
INPUT_DISTRIBUTIONS = ("normal", "large-logits", "uniform-shifted")


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

        def draw(shape: tuple[int, ...], kind: str) -> torch.Tensor:
            if dist == "uniform-shifted":
                t = torch.rand(shape, generator=gen, device=device, dtype=torch.float32)
                t = t * 2.0 - 0.75 if kind != "v" else t * 2.0
            else:
                t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
                if dist == "large-logits" and kind in ("q", "k"):
                    t = t * 4.0  # logits with std ~16: a kernel without max subtraction overflows
                if kind == "v":
                    t = t + 0.5
            return t.to(torch.bfloat16)

        q = draw((b, sq, hq, d), "q")
        if seed % 2:
            kv = draw((b, sk, 2, hkv, d), "k")
            kv[:, :, 1] = draw((b, sk, hkv, d), "v")
            k, v = kv[:, :, 0], kv[:, :, 1]
        else:
            k = draw((b, sk, hkv, d), "k")
            v = draw((b, sk, hkv, d), "v")
        return [q, k, v]

    def new_output(self, s: Scenario, device: torch.device) -> torch.Tensor:
        return torch.full(
            (s.batch, s.seqlen_q, s.heads_q, s.head_dim), float("nan"),
            dtype=torch.bfloat16, device=device,
        )

    def buffers(
        self, s: Scenario, inputs: Sequence[torch.Tensor], out: torch.Tensor,
        workspace: torch.Tensor | None,
    ) -> AttentionBuffers:
        q, k, v = inputs
        return AttentionBuffers(
            q=q, k=k, v=v, o=out, workspace=workspace, causal=s.causal,
            scale=1.0 / math.sqrt(s.head_dim),
        )

    def reference(
        self, s: Scenario, inputs: Sequence[torch.Tensor], dtype: torch.dtype
    ) -> torch.Tensor:
        q, k, v = inputs
        return attention_reference(
            q, k, v, causal=s.causal, scale=1.0 / math.sqrt(s.head_dim), compute_dtype=dtype
        )

    def peers(self, s: Scenario) -> dict[str, Peer]:
        return sdpa_peers(s)

    def input_versions(
        self, s: Scenario, inputs: list[torch.Tensor], validated: torch.Tensor, seed: int,
        count: int,
    ) -> InputVersions:
        return AttentionVersions(s, inputs, validated, seed, count)

    def explain_failure(
        self, s: Scenario, inputs: Sequence[torch.Tensor], out: torch.Tensor, tolerance: float
    ) -> str | None:
        """Top-left instead of bottom-right causal alignment, the classic bug of non-square
        shapes: the output then matches attention over the first seqlen_q keys."""
        if not s.causal or s.seqlen_k <= s.seqlen_q:
            return None
        q, k, v = inputs
        n = s.seqlen_q
        top_left = attention_reference(
            q, k[:, :n], v[:, :n], causal=True, scale=1.0 / math.sqrt(s.head_dim),
            compute_dtype=torch.float32,
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
