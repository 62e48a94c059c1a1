"""GPU checks of the family's Hopper layer (mma=wgmma), for one device call.

    python3 -m kernels.attention.family.hopper_check probe KERNEL.cu
        builds KERNEL.cu's own wgmma wrappers and descriptors into a small test program and runs
        one warpgroup's S = Q K^T (m64n64k16 x 8, K-major A and B, two 64-column panels) and
        O = P V (m64n128k16 x 4, P from registers, V MN-major over two panels) against a CPU
        result, with the V descriptor's offsets as written and swapped;

FlashAttention-3 is timed by the harness itself, as a peer beside cuDNN and FA2 (`docs/harness.md`):
a second timer that lived here (back-to-back calls between two events, without the harness's
device hold, L2 flush and median) put FA3 1.65x slower overall than the harness measures it
side by side, most of it on small shapes, so it was removed.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m kernels.attention.family.hopper_check")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("probe")
    pr.add_argument("kernel", type=Path)
    args = p.parse_args(argv)
    random.seed(0)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    include = Path(__file__).resolve().parents[1]
    return probe(args.kernel, include)


if __name__ == "__main__":
    sys.exit(main())
