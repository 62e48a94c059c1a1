"""fp32 and bf16 references for attention forward, chunked over batches and queries so that
memory stays bounded at 16k x 16k and beyond while small shapes take few matrix products.
GQA is handled by grouping query heads per kv head (no copy of K/V per query head)."""

from __future__ import annotations

import torch

DEFAULT_CHUNK_BYTES = 512 << 20
# On a GPU the chunk follows the free device memory: a chunk's scores take 1/CHUNK_SHARE of it
# (the softmax and the casts hold about three such buffers at once), within these bounds.
CHUNK_SHARE = 12
MAX_GPU_CHUNK_BYTES = 4 << 30
# Causal shapes with this many queries or more are cut into at least CAUSAL_BLOCKS blocks of
# queries, each computing only the scores its rows can see.
CAUSAL_BLOCKS_FROM = 1024
CAUSAL_BLOCKS = 4


def chunk_bytes_for(device: torch.device) -> int:
    """Bytes of fp32 scores one chunk of the reference may hold on this device."""
    if device.type != "cuda":
        return DEFAULT_CHUNK_BYTES
    free, _ = torch.cuda.mem_get_info(device)
    return int(min(MAX_GPU_CHUNK_BYTES, max(DEFAULT_CHUNK_BYTES, free // CHUNK_SHARE)))


def products_exact_in_fp32(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether the fp32 reference may form q k^T on the tensor cores: on a GPU, with bf16 or
    fp16 inputs, whose products are exact in fp32 (8 or 11 significant bits each, 24 in fp32),
    summed in fp32 and written as fp32 (torch's `bmm` with `out_dtype`). The same sums as the
    upcast product, in another order; the scale then multiplies the fp32 scores (Q times the
    scale would not be exact in bf16). Measured on the H200 over the suite's two trials: as
    close to fp64 as the upcast product, and the fp32 reference 13% faster (its scores' memory
    traffic, not the product, is most of its time: docs/lab/2026-12-03-harness-pass-7-holds-tensor-cores.md)."""
    return (q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and k.dtype == q.dtype
            and hasattr(torch.ops.aten.bmm, "dtype"))


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    compute_dtype: torch.dtype = torch.float32,
    chunk_bytes: int | None = None,
    exact_products: bool | None = None,
) -> torch.Tensor:
    """softmax(scale * q k^T [+ bottom-right causal mask]) v, layout [b, s, h, d].

    compute_dtype=float32: the exact answer's stand-in (fp32 matmuls, no TF32; on a GPU with
    bf16 or fp16 inputs q k^T sums the exact products in fp32 on the tensor cores and the scale
    multiplies the scores, products_exact_in_fp32; elsewhere the inputs are upcast and the scale
    multiplies Q before the product, a pass over Q rather than over the scores; `exact_products`
    False asks for the upcast product where the tensor cores would serve, for comparisons).
    compute_dtype=bfloat16: the same math with bf16 matmul operands and outputs, as a bf16
    kernel would do it; its error against the fp32 reference sets the tolerance.
    Rows that see no key (possible only with custom shapes) are defined as zeros.
    Work is chunked over batches and queries so that one chunk's fp32 scores (and, when several
    batches go together, their converted K and V) stay under `chunk_bytes` (default: sized to
    the device, chunk_bytes_for): several small batches go in one matrix product, a long
    sequence is cut into blocks of queries. A causal block computes the scores of the keys its
    rows can see only, and a long causal sequence is cut into CAUSAL_BLOCKS blocks at least.
    """
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    if hq % hkv:
        raise ValueError("heads_q must be a multiple of heads_kv")
    g = hq // hkv
    out_dtype = torch.float32 if compute_dtype == torch.float32 else torch.bfloat16
    out = torch.empty((b, sq, hq, d), dtype=out_dtype, device=q.device)
    budget = chunk_bytes if chunk_bytes is not None else chunk_bytes_for(q.device)
    row_bytes = max(1, hq * sk * 4)  # fp32 scores of one query over every head
    kv_bytes = 4 * hkv * sk * d * 4  # one batch's K and V, converted and regrouped
    if sq * row_bytes + kv_bytes <= budget:
        batches, rows = max(1, budget // (sq * row_bytes + kv_bytes)), sq
    else:
        batches, rows = 1, max(1, budget // row_bytes)
    if causal and sq >= CAUSAL_BLOCKS_FROM:
        # A block of queries needs no score past its last query's last key: in CAUSAL_BLOCKS
        # blocks or more, a square causal shape computes ~5/8 of the scores (1 + 2 + 3 + 4
        # sixteenths), not all of them.
        rows = min(rows, -(-sq // CAUSAL_BLOCKS))
    offset = sk - sq
    key_idx = torch.arange(sk, device=q.device).view(1, sk)
    if exact_products is None:
        exact_products = products_exact_in_fp32(q, k)
    elif exact_products and not products_exact_in_fp32(q, k):
        raise ValueError("q k^T on the tensor cores needs bf16 or fp16 inputs on a GPU")
    exact_products = exact_products and compute_dtype == torch.float32
    score_dtype = q.dtype if exact_products else compute_dtype  # of q and k in the product
    for b0 in range(0, b, batches):
        b1 = min(b, b0 + batches)
        n = b1 - b0
        kb = k[b0:b1].to(score_dtype).permute(0, 2, 1, 3).reshape(n * hkv, sk, d)
        vb = v[b0:b1].to(compute_dtype).permute(0, 2, 1, 3).reshape(n * hkv, sk, d)
        qb = q[b0:b1].to(score_dtype)
        if compute_dtype == torch.float32 and not exact_products:
            qb = qb * scale  # scaled here, a pass over Q instead of the scores
        qb = qb.view(n, sq, hkv, g, d).permute(0, 2, 3, 1, 4)  # [n, hkv, g, sq, d]
        for c0 in range(0, sq, rows):
            c1 = min(sq, c0 + rows)
            c = c1 - c0
            qc = qb[:, :, :, c0:c1, :].reshape(n * hkv, g * c, d)
            # Keys past the chunk's last query's last key are hidden from every row: left out
            # (their probabilities are exactly 0). A chunk whose rows see no key is all zeros.
            ke = min(sk, c1 + offset) if causal else sk
            if ke <= 0:
                out[b0:b1, c0:c1] = 0
                continue
            if exact_products:  # fp32 sums of exact products, then scaled in fp32
                scores = torch.bmm(qc, kb[:, :ke].transpose(1, 2), out_dtype=torch.float32).mul_(scale)
            else:
                scores = torch.bmm(qc, kb[:, :ke].transpose(1, 2))  # [n*hkv, g*c, ke]
            if compute_dtype != torch.float32:  # bf16 scores, scaled in fp32 as a kernel would
                scores = scores.float().mul_(scale)
            # The mask only where a row of the chunk misses a key (query c0 sees keys up to
            # c0 + offset; decode's single query sees all), and the fix of rows that see no key
            # (NaN from a row of -inf) only where one exists: each is a pass over the scores.
            if causal and c0 + offset < ke - 1:
                qi = torch.arange(c0, c1, device=q.device).view(c, 1)
                hidden = key_idx[:, :ke] > qi + offset  # [c, ke]
                scores.view(n * hkv, g, c, ke).masked_fill_(hidden, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            del scores
            if causal and c0 + offset < 0:
                probs = torch.nan_to_num_(probs, nan=0.0)
            oc = torch.bmm(probs.to(compute_dtype), vb[:, :ke])  # [n*hkv, g*c, d]
            del probs
            out[b0:b1, c0:c1] = oc.view(n, hkv, g, c, d).permute(0, 3, 1, 2, 4).reshape(
                n, c, hq, d).to(out_dtype)
            del oc
    return out


def attention_rows_reference(
    q_rows: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    queries: torch.Tensor,
    *,
    causal: bool,
    scale: float | torch.Tensor,
    seqlen_q: int,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The same math as attention_reference for chosen rows only: q_rows [n, r, d] are query
    rows of n (batch, kv head) blocks whose keys and values are k, v [n, seqlen_k, d], and
    queries [n, r] their positions (for the bottom-right causal mask). Returns [n, r, d].
    `scale` is one number or an fp32 tensor [n, 1, 1]: each block's own softmax_scale."""
    sk = k.shape[1]
    out_dtype = torch.float32 if compute_dtype == torch.float32 else torch.bfloat16
    scores = torch.bmm(q_rows.to(compute_dtype), k.to(compute_dtype).transpose(1, 2)).float() * scale
    if causal and seqlen_q > 1:  # one query, bottom-right: it sees every key
        key_idx = torch.arange(sk, device=k.device).view(1, 1, sk)
        hidden = key_idx > (queries + (sk - seqlen_q)).unsqueeze(-1)
        scores.masked_fill_(hidden, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if causal and seqlen_q > sk:  # only then can a row see no key
        probs = torch.nan_to_num_(probs, nan=0.0)
    return torch.bmm(probs.to(compute_dtype), v.to(compute_dtype)).to(out_dtype)
