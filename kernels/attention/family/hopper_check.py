"""GPU checks of the family's Hopper layer (mma=wgmma), for one device call.

    python3 -m kernels.attention.family.hopper_check probe KERNEL.cu
        builds KERNEL.cu's own wgmma wrappers and descriptors into a small test program and runs
        one warpgroup's S = Q K^T (m64n64k16 x 8, K-major A and B, two 64-column panels) and
        O = P V (m64n128k16 x 4, P from registers, V MN-major over two panels) against a CPU
        result, with the V descriptor's offsets as written and swapped;
    python3 -m kernels.attention.family.hopper_check fa3
        times FlashAttention-3 (fa3_fwd wheel) and torch SDPA cuDNN side by side on a few
        prefill shapes and prints TFLOP/s (the harness has no FA3 peer yet);
    python3 -m kernels.attention.family.hopper_check fa3 --report REPORT.json [--out FA3.json]
        times FA3 on every scenario of a harness report (contiguous [b, s, h, d] inputs, four
        input sets in rotation) and prints per-category geomeans of x cuDNN and x FA3 of the
        report's kernel; FA3's times come from this process, not the harness's timer.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PROBE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

__global__ void probe_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* p,
                             const __nv_bfloat16* v, float* s_out, float* o_out) {
  // Q: 64 x 128, K: 64 x 128 (K-major, ROWS = 64); P: 64 x 64 (row-major in global memory);
  // V: 64 keys x 128 (MN-major for P V, ROWS = 64).
  __shared__ __align__(1024) __nv_bfloat16 qs[64 * 128];
  __shared__ __align__(1024) __nv_bfloat16 ks[64 * 128];
  __shared__ __align__(1024) __nv_bfloat16 vs[64 * 128];
  const int tid = threadIdx.x;
  for (int idx = tid; idx < 64 * 16; idx += 128) {
    const int row = idx / 16, ch = idx % 16;
    for (int e = 0; e < 8; ++e) {
      qs[fam::sw_off<64>(row, ch) + e] = q[row * 128 + ch * 8 + e];
      ks[fam::sw_off<64>(row, ch) + e] = k[row * 128 + ch * 8 + e];
      vs[fam::sw_off<64>(row, ch) + e] = v[row * 128 + ch * 8 + e];
    }
  }
  fam::fence_async_smem();
  __syncthreads();
  const int lane = tid & 31, w = tid >> 5, g = lane >> 2, t4 = lane & 3;
  float s[32];
  fam::wg_fence();
  for (int kk = 0; kk < 8; ++kk)
    fam::wgmma_ss<64>(s, fam::desc_kmajor<64>(fam::smem_u32(qs), 0, kk),
                      fam::desc_kmajor<64>(fam::smem_u32(ks), 0, kk), kk > 0);
  fam::wg_commit();
  fam::wg_wait0();
  fam::wg_fence_regs(s);
  for (int nt = 0; nt < 8; ++nt)
    for (int e = 0; e < 4; ++e)
      s_out[(w * 16 + g + 8 * (e >> 1)) * 64 + nt * 8 + 2 * t4 + (e & 1)] = s[nt * 4 + e];
  float o[64];
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  fam::wg_fence_regs(o);
  fam::wg_fence();
  for (int kk = 0; kk < 4; ++kk) {
    const int r0 = w * 16 + g, c0 = kk * 16 + 2 * t4;
    uint32_t a[4];
    auto ld = [&](int r, int c) {
      __nv_bfloat162 x;
      x.x = p[r * 64 + c];
      x.y = p[r * 64 + c + 1];
      return *reinterpret_cast<uint32_t*>(&x);
    };
    a[0] = ld(r0, c0);
    a[1] = ld(r0 + 8, c0);
    a[2] = ld(r0, c0 + 8);
    a[3] = ld(r0 + 8, c0 + 8);
    fam::wgmma_rs<128>(o, a, fam::desc_mnmajor<64>(fam::smem_u32(vs), kk));
  }
  fam::wg_commit();
  fam::wg_wait0();
  fam::wg_fence_regs(o);
  for (int nt = 0; nt < 16; ++nt)
    for (int e = 0; e < 4; ++e)
      o_out[(w * 16 + g + 8 * (e >> 1)) * 128 + nt * 8 + 2 * t4 + (e & 1)] = o[nt * 4 + e];
}

int main() {
  srand(1);
  const int nq = 64 * 128, np = 64 * 64;
  __nv_bfloat16 *hq = (__nv_bfloat16*)calloc(nq, 2), *hk = (__nv_bfloat16*)calloc(nq, 2),
                *hv = (__nv_bfloat16*)calloc(nq, 2), *hp = (__nv_bfloat16*)calloc(np, 2);
  float *fq = (float*)calloc(nq, 4), *fk = (float*)calloc(nq, 4), *fv = (float*)calloc(nq, 4),
        *fp = (float*)calloc(np, 4);
  auto rnd = [](float* f, __nv_bfloat16* h, int n) {
    for (int i = 0; i < n; ++i) {
      h[i] = __float2bfloat16(float(rand() % 17 - 8) / 8.f);
      f[i] = __bfloat162float(h[i]);
    }
  };
  rnd(fq, hq, nq); rnd(fk, hk, nq); rnd(fv, hv, nq); rnd(fp, hp, np);
  __nv_bfloat16 *dq, *dk, *dv, *dp;
  float *ds, *dout;
  cudaMalloc(&dq, nq * 2); cudaMalloc(&dk, nq * 2); cudaMalloc(&dv, nq * 2); cudaMalloc(&dp, np * 2);
  cudaMalloc(&ds, 64 * 64 * 4); cudaMalloc(&dout, 64 * 128 * 4);
  cudaMemcpy(dq, hq, nq * 2, cudaMemcpyHostToDevice); cudaMemcpy(dk, hk, nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, hv, nq * 2, cudaMemcpyHostToDevice); cudaMemcpy(dp, hp, np * 2, cudaMemcpyHostToDevice);
  probe_kernel<<<1, 128>>>(dq, dk, dp, dv, ds, dout);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) { printf("probe: CUDA error %s\n", cudaGetErrorString(e)); return 2; }
  float* hs = (float*)calloc(64 * 64, 4); float* ho = (float*)calloc(64 * 128, 4);
  cudaMemcpy(hs, ds, 64 * 64 * 4, cudaMemcpyDeviceToHost); cudaMemcpy(ho, dout, 64 * 128 * 4, cudaMemcpyDeviceToHost);
  double es = 0, eo = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double ref = 0;
      for (int d = 0; d < 128; ++d) ref += double(fq[i * 128 + d]) * fk[j * 128 + d];
      es = fmax(es, fabs(ref - hs[i * 64 + j]));
    }
  for (int i = 0; i < 64; ++i)
    for (int d = 0; d < 128; ++d) {
      double ref = 0;
      for (int j = 0; j < 64; ++j) ref += double(fp[i * 64 + j]) * fv[j * 128 + d];
      eo = fmax(eo, fabs(ref - ho[i * 128 + d]));
    }
  printf("probe: QK^T (K-major A and B, 2 panels) max|err| = %.3g; "
         "PV (P regs, V MN-major, 2 panels) max|err| = %.3g -> %s\n",
         es, eo, (es < 1e-3 && eo < 1e-3) ? "OK" : "WRONG");
  return (es < 1e-3 && eo < 1e-3) ? 0 : 1;
}
"""


def probe(kernel: Path, include: Path) -> int:
    """Build and run the probe with the V descriptor as written (0) and swapped (1)."""
    worst = 0
    src_text = kernel.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        for swap in (0, 1):
            src = Path(tmp) / f"probe{swap}.cu"
            src.write_text(f"#define SOCRATIC_SM90_VDESC_SWAP {swap}\n" + src_text + PROBE)
            exe = Path(tmp) / f"probe{swap}"
            build = subprocess.run(
                ["nvcc", "-O2", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", f"-I{include}",
                 "-o", str(exe), str(src)], capture_output=True, text=True)
            if build.returncode != 0:
                print(f"probe (V descriptor swap={swap}): build failed\n{build.stderr[-3000:]}")
                worst = max(worst, 2)
                continue
            run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
            print(f"V descriptor swap={swap}: {run.stdout.strip()} {run.stderr.strip()[-500:]}", flush=True)
            if swap == 0:
                worst = max(worst, run.returncode)
    return worst


PREFILL_SHAPES = [  # (batch, seqlen, heads_q, heads_kv, head_dim, causal)
    (8, 2048, 32, 32, 64, False), (2, 8192, 32, 32, 64, True),
    (4, 4096, 16, 16, 128, False), (1, 16384, 16, 16, 128, True), (32, 512, 16, 16, 128, True),
    (8, 2048, 8, 8, 256, False), (2, 8192, 8, 8, 256, True),
    (1, 8192, 64, 8, 128, True),
]


def fa3_table(shapes: list[tuple[int, int, int, int, int, bool]]) -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        from fa3_fwd_interface import flash_attn_func
    except ImportError as exc:
        print(f"fa3: not importable ({exc})")
        flash_attn_func = None

    def timed(fn: object, reps: int = 20) -> float:
        for _ in range(3):
            fn()  # type: ignore[operator]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()  # type: ignore[operator]
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps

    print(f"{'shape':<34} {'cuDNN':>8} {'FA3':>8}  (TFLOP/s)")
    for b, s, hq, hkv, d, causal in shapes:
        q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        flops = 4.0 * b * hq * s * s * d * (0.5 if causal else 1.0)
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

        def cud(qt: Any = qt, kt: Any = kt, vt: Any = vt, causal: bool = causal, gqa: bool = hq != hkv) -> object:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(
                    qt, kt, vt, is_causal=causal, enable_gqa=gqa)

        def fa3(q: Any = q, k: Any = k, v: Any = v, causal: bool = causal) -> object:
            return flash_attn_func(q, k, v, causal=causal)

        t_c = timed(cud)
        t_f = timed(fa3) if flash_attn_func else float("nan")
        name = f"b{b}-s{s}-h{hq}/{hkv}-d{d}-{'causal' if causal else 'full'}"
        print(f"{name:<34} {flops / t_c / 1e9:>8.1f} {flops / t_f / 1e9:>8.1f}", flush=True)
    return 0


def fa3_vs_report(report_path: Path, out: Path | None) -> int:
    import json
    import math

    import torch
    from fa3_fwd_interface import flash_attn_func

    from harness.attention.suite import default_suite

    report = json.loads(report_path.read_text())
    suite = {s.name: s for s in default_suite()}
    rows: dict[str, list[tuple[float | None, float | None]]] = {}
    per: dict[str, float] = {}
    for r in report["scenarios"]:
        sc = suite[r["scenario"]]
        sets = []
        for _ in range(4):
            q = torch.randn(sc.batch, sc.seqlen_q, sc.heads_q, sc.head_dim, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(sc.batch, sc.seqlen_k, sc.heads_kv, sc.head_dim, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            sets.append((q, k, v))
        for q, k, v in sets:
            flash_attn_func(q, k, v, causal=sc.causal)
        reps = 40
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for i in range(reps):
            q, k, v = sets[i % 4]
            flash_attn_func(q, k, v, causal=sc.causal)
        end.record()
        torch.cuda.synchronize()
        fa3_ms = start.elapsed_time(end) / reps
        per[sc.name] = fa3_ms
        ours = r.get("time_ms") if r["status"] == "pass" else None
        x_fa3 = fa3_ms / ours if ours else None
        x_cud = r.get("speedup_vs_peers", {}).get("cudnn")
        for cat in (r["category"], "all"):
            rows.setdefault(cat, []).append((x_cud, x_fa3))
        del sets

    def gm(vals: list[float | None]) -> float:
        v = [x for x in vals if x]
        return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")

    print(f"{'category':<10} {'n':>4} {'x cuDNN':>8} {'x FA3':>8}")
    for cat in ("prefill", "gqa", "chunked", "decode", "ragged", "all"):
        if cat in rows:
            got = rows[cat]
            print(f"{cat:<10} {len(got):>4} {gm([a for a, _ in got]):>8.3f} {gm([b for _, b in got]):>8.3f}")
    if out is not None:
        out.write_text(json.dumps({"fa3_ms": per}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m kernels.attention.family.hopper_check")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("probe")
    pr.add_argument("kernel", type=Path)
    fa = sub.add_parser("fa3")
    fa.add_argument("--report", type=Path, help="a harness JSON report: time FA3 on its scenarios")
    fa.add_argument("--out", type=Path, help="write FA3's times (ms per scenario) here")
    args = p.parse_args(argv)
    random.seed(0)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.cmd == "probe":
        include = Path(__file__).resolve().parents[1]
        return probe(args.kernel, include)
    if args.report is not None:
        return fa3_vs_report(args.report, args.out)
    return fa3_table(PREFILL_SHAPES)


if __name__ == "__main__":
    sys.exit(main())
