"""fp32 and bf16 references for attention forward, chunked over queries so that memory stays
bounded at 16k x 16k and beyond. GQA is handled by grouping query heads per kv head (no copy
of K/V per query head)."""

from __future__ import annotations

import torch

DEFAULT_CHUNK_BYTES = 512 << 20


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    compute_dtype: torch.dtype = torch.float32,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> torch.Tensor:
    """softmax(scale * q k^T [+ bottom-right causal mask]) v, layout [b, s, h, d].

    compute_dtype=float32: the exact answer's stand-in (inputs upcast, fp32 matmuls, no TF32).
    compute_dtype=bfloat16: the same math with bf16 matmul operands and outputs, as a bf16
    kernel would do it; its error against the fp32 reference sets the tolerance.
    Rows that see no key (possible only with custom shapes) are defined as zeros.
    """
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    if hq % hkv:
        raise ValueError("heads_q must be a multiple of heads_kv")
    g = hq // hkv
    out_dtype = torch.float32 if compute_dtype == torch.float32 else torch.bfloat16
    out = torch.empty((b, sq, hq, d), dtype=out_dtype, device=q.device)
    rows = max(1, chunk_bytes // max(1, hkv * g * sk * 4))
    offset = sk - sq
    for bi in range(b):
        kb = k[bi].to(compute_dtype).permute(1, 0, 2)  # [hkv, sk, d]
        vb = v[bi].to(compute_dtype).permute(1, 0, 2)  # [hkv, sk, d]
        qb = q[bi].to(compute_dtype).view(sq, hkv, g, d).permute(1, 2, 0, 3)  # [hkv, g, sq, d]
        key_idx = torch.arange(sk, device=q.device).view(1, sk)
        for c0 in range(0, sq, rows):
            c1 = min(sq, c0 + rows)
            c = c1 - c0
            qc = qb[:, :, c0:c1, :].reshape(hkv, g * c, d)
            scores = torch.bmm(qc, kb.transpose(1, 2)).float() * scale  # [hkv, g*c, sk]
            if causal:
                qi = torch.arange(c0, c1, device=q.device).view(c, 1)
                hidden = key_idx > qi + offset  # [c, sk]
                scores.view(hkv, g, c, sk).masked_fill_(hidden, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            if causal:
                probs = torch.nan_to_num_(probs, nan=0.0)
            oc = torch.bmm(probs.to(compute_dtype), vb)  # [hkv, g*c, d]
            out[bi, c0:c1] = oc.view(hkv, g, c, d).permute(2, 0, 1, 3).reshape(c, hq, d).to(
                out_dtype
            )
            del scores, probs, oc
    return out


def attention_rows_reference(
    q_rows: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    queries: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    seqlen_q: int,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The same math as attention_reference for chosen rows only: q_rows [n, r, d] are query
    rows of n (batch, kv head) blocks whose keys and values are k, v [n, seqlen_k, d], and
    queries [n, r] their positions (for the bottom-right causal mask). Returns [n, r, d]."""
    sk = k.shape[1]
    out_dtype = torch.float32 if compute_dtype == torch.float32 else torch.bfloat16
    scores = torch.bmm(q_rows.to(compute_dtype), k.to(compute_dtype).transpose(1, 2)).float() * scale
    if causal:
        key_idx = torch.arange(sk, device=k.device).view(1, 1, sk)
        hidden = key_idx > (queries + (sk - seqlen_q)).unsqueeze(-1)
        scores.masked_fill_(hidden, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if causal:
        probs = torch.nan_to_num_(probs, nan=0.0)
    return torch.bmm(probs.to(compute_dtype), v.to(compute_dtype)).to(out_dtype)
