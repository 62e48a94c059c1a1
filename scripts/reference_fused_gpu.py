"""A fused fp32 reference (torch's memory-efficient attention on fp32 copies) against the
harness's chunked one (attention/reference.py), on the GPU (not a test): every scenario of
the suite, the harness's own trial inputs (distribution, layout and softmax_scale per trial),
each reference timed alone with the device synchronized around it. Prints, per category, the
seconds each reference took and how far the fused answer is from the chunked fp32 one in units
of the tolerance; on the small shapes both fp32 answers are also compared with an fp64 one.

    python3 scripts/reference_fused_gpu.py [--trials 2] [--filter SUBSTRING] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from harness.attention.forward import AttentionForward
from harness.attention.reference import attention_reference
from harness.attention.suite import default_suite
from harness.correctness import tolerance
from harness.scenario import Scenario

FP64_MAX_SCORES = 1 << 27  # score elements of an fp64 check (materialized, b * hq * sq * sk)


def fused_fp32_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float,
) -> torch.Tensor | None:
    """The candidate: the fp32 answer from torch's memory-efficient attention kernel (3xTF32
    products on sm80+, fused: no score matrix in memory), on fp32 copies of the inputs, layout
    [b, s, h, d]; None where it does not apply (not on a CUDA device; a causal shape with more
    queries than keys, whose rows that see no key attention_reference defines as zeros). GQA
    runs on K and V copied per query head."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    if q.device.type != "cuda" or (causal and sq > sk) or hq % hkv:
        return None
    g = hq // hkv
    q32 = q.float().transpose(1, 2)  # [b, hq, sq, d], a view of the fp32 copy

    def per_query_head(x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        if g > 1:
            x32 = x32.unsqueeze(3).expand(b, sk, hkv, g, d).reshape(b, sk, hq, d)
        return x32.transpose(1, 2)

    k32, v32 = per_query_head(k), per_query_head(v)
    mask = causal_lower_right(sq, sk) if causal else None
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        out = F.scaled_dot_product_attention(q32, k32, v32, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).contiguous()


def timed(fn: Any) -> tuple[Any, float]:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def fp64_answer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    sq, hq = q.shape[1], q.shape[2]
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    q64 = q.double().permute(0, 2, 1, 3)
    k64 = k.double().repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
    v64 = v.double().repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
    s = torch.matmul(q64, k64.transpose(-1, -2)) * scale
    if causal:
        hidden = torch.arange(sk, device=q.device).view(1, sk) > (
            torch.arange(sq, device=q.device).view(sq, 1) + (sk - sq))
        s.masked_fill_(hidden, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v64).permute(0, 2, 1, 3)


def measure(problem: AttentionForward, s: Scenario, trial: int) -> dict[str, Any]:
    dev = torch.device("cuda")
    seed = trial  # EvalSettings.seed 0: the harness's seeds
    bufs = problem.buffers(s, problem.make_inputs(s, seed, dev), problem.new_output(s, dev), None, trial, seed)
    scale = float(bufs.scale)
    ref32, t32 = timed(partial(attention_reference, bufs.q, bufs.k, bufs.v, causal=s.causal, scale=scale))
    ref16, t16 = timed(partial(problem.reference, s, bufs, torch.bfloat16))
    fused, tf = timed(partial(fused_fp32_reference, bufs.q, bufs.k, bufs.v, causal=s.causal, scale=scale))
    assert fused is not None, s.name
    tol = tolerance(ref32, ref16)
    row: dict[str, Any] = {
        "scenario": s.name, "category": s.category, "trial": trial,
        "t_ref32": t32, "t_ref16": t16, "t_fused": tf, "tolerance": tol,
        "fused_vs_ref32": float((fused - ref32).abs().max().item()),
        "tolerance_fused": tolerance(fused, ref16),
    }
    if s.batch * s.heads_q * s.seqlen_q * s.seqlen_k <= FP64_MAX_SCORES:
        ref64 = fp64_answer(bufs.q, bufs.k, bufs.v, s.causal, scale)
        row["ref32_vs_fp64"] = float((ref32.double() - ref64).abs().max().item())
        row["fused_vs_fp64"] = float((fused.double() - ref64).abs().max().item())
    return row


def tol_units(row: dict[str, Any], key: str) -> float:
    """A distance in units of the row's tolerance (zero where the answer is exact: one key)."""
    value = abs(row["tolerance_fused"] - row["tolerance"]) if key == "tolerance_shift" else row[key]
    return float(value) / max(row["tolerance"], 1e-30)


def rows_by_category(
    measure_one: Callable[[AttentionForward, Scenario, int], dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """The command line's scenarios (--filter) and trials, each measured by `measure_one` and the
    device's cache emptied after it; the rows written to --json; grouped by category and "all"."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--filter", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    problem = AttentionForward()
    rows: list[dict[str, Any]] = []
    for s in default_suite():
        if args.filter in s.name:
            for trial in range(args.trials):
                rows.append(measure_one(problem, s, trial))
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["category"]].append(r)
        by["all"].append(r)
    return by


def main() -> None:
    by = rows_by_category(measure)
    print(f"{'category':10} {'calls':>5} {'ref32 s':>8} {'ref16 s':>8} {'fused s':>8} "
          f"{'max fused-ref32 / tol':>22} {'max |tol_f/tol-1|':>18} {'fp64 n':>6} "
          f"{'max ref32-fp64 / tol':>21} {'max fused-fp64 / tol':>21}")
    for cat, rs in by.items():
        small = [r for r in rs if "fused_vs_fp64" in r]
        print(f"{cat:10} {len(rs):5d} {sum(r['t_ref32'] for r in rs):8.2f} "
              f"{sum(r['t_ref16'] for r in rs):8.2f} {sum(r['t_fused'] for r in rs):8.2f} "
              f"{max(tol_units(r, 'fused_vs_ref32') for r in rs):22.2e} "
              f"{max(tol_units(r, 'tolerance_shift') for r in rs):18.2e} {len(small):6d} "
              f"{max((tol_units(r, 'ref32_vs_fp64') for r in small), default=0):21.2e} "
              f"{max((tol_units(r, 'fused_vs_fp64') for r in small), default=0):21.2e}")


if __name__ == "__main__":
    main()
