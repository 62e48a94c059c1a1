"""The fp32 reference on the GPU (harness/attention/reference.py): with bf16 inputs it sums the
exact products on the tensor cores (products_exact_in_fp32). It must stay the exact answer's
stand-in: as close to an fp64 answer as the upcast fp32 products are, on every layout the suite
has (GQA, causal bottom-right with more keys than queries, decode, the harness's chunking and
causal blocks), measured in units of the tolerance it sets."""

from __future__ import annotations

import pytest
import torch

from harness.attention.reference import attention_reference, products_exact_in_fp32
from harness.correctness import tolerance
from scripts.reference_fused_gpu import fp64_answer

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal)
SHAPES = [
    (2, 1024, 1024, 8, 8, 128, True),   # square causal, four query blocks
    (1, 333, 1500, 16, 2, 64, True),    # GQA, bottom-right mask with more keys than queries
    (8, 1, 4096, 32, 8, 128, False),    # decode
    (3, 257, 257, 4, 4, 256, False),    # head dim 256, odd lengths
    (1, 2048, 2048, 4, 1, 128, True),   # MQA, long causal
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(str(x) for x in s))
def test_the_tensor_core_fp32_reference_is_as_close_to_fp64_as_the_upcast_one(shape: tuple) -> None:  # type: ignore[type-arg]
    torch.backends.cuda.matmul.allow_tf32 = False
    b, sq, sk, hq, hkv, d, causal = shape
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    q, k, v = (torch.randn((b, n, h, d), generator=gen, device="cuda").mul_(3).to(torch.bfloat16)
               for n, h in ((sq, hq), (sk, hkv), (sk, hkv)))
    scale = 0.7 / d**0.5
    assert products_exact_in_fp32(q, k)
    ref32 = attention_reference(q, k, v, causal=causal, scale=scale)  # the tensor cores' sums
    upcast = attention_reference(q, k, v, causal=causal, scale=scale, exact_products=False)
    ref_bf16 = attention_reference(q, k, v, causal=causal, scale=scale, compute_dtype=torch.bfloat16)
    exact = fp64_answer(q, k, v, causal, scale)
    tol = tolerance(ref32, ref_bf16)
    assert tol > 0 and tolerance(upcast, ref_bf16) == pytest.approx(tol, rel=1e-3)
    ours = float((ref32.double() - exact).abs().max()) / tol
    theirs = float((upcast.double() - exact).abs().max()) / tol
    # Both are fp32 answers: a few fp32 roundings from fp64, far below the tolerance, and the
    # tensor cores' sums no further from fp64 than 4x the upcast ones.
    assert ours < 1e-3, ours
    assert ours <= 4 * theirs + 1e-6, (ours, theirs)


def test_the_tensor_cores_serve_only_bf16_and_fp16_on_a_gpu() -> None:
    q = torch.zeros((1, 4, 2, 64), device="cuda", dtype=torch.bfloat16)
    assert products_exact_in_fp32(q, q) and products_exact_in_fp32(q.half(), q.half())
    assert not products_exact_in_fp32(q.float(), q.float())
    assert not products_exact_in_fp32(q.cpu(), q.cpu())
    with pytest.raises(ValueError, match="bf16 or fp16 inputs on a GPU"):
        attention_reference(q.float(), q.float(), q.float(), causal=False, scale=1.0, exact_products=True)
