"""Dynamic shared memory in `socratic check` (harness/shared_memory.py): a TMA kernel's tiles live
in `extern __shared__` memory that ptxas reports as 0 bytes; the check reads where the source
sets it (the opt-in, the launch, a launch config) and has nvcc's front end evaluate each value
for each instance ptxas built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.compile import DEFAULT_INCLUDE, gencode_flags, nvcc_path
from harness.resources import KernelResources, ResourceReport, render_resources
from harness.shared_memory import (
    LAUNCH,
    OPT_IN,
    attach,
    bindings,
    literal_value,
    nvcc_front_end,
    requests,
    split_args,
    warnings,
)
from tests.conftest import HAS_NVCC, ROOT

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")

# A TMA-style kernel: its tiles in dynamic shared memory, sized by a template's constant, opted
# in once and passed at launch; a second kernel launched through a launch config; a third whose
# bytes are known only at run time.
TMA_LIKE = """\
#include <cuda_runtime.h>
#include "contract.h"

namespace tiny {
template <int D, bool kCausal> struct Cfg { static constexpr int kSmem = D * 1024 + (kCausal ? 512 : 0); };

template <int D, bool kCausal>
__global__ void tile_kernel(float* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  smem[threadIdx.x] = 1;
  __syncthreads();
  out[threadIdx.x] = smem[(threadIdx.x + 1) % 128];
}

__global__ void combine(float* out) {
  extern __shared__ float part[];
  part[threadIdx.x] = out[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = part[(threadIdx.x + 1) % 32];
}

__global__ void sized_at_run_time(float* out) {
  extern __shared__ float rows[];
  rows[threadIdx.x] = 0.f;
  out[threadIdx.x] = rows[threadIdx.x];
}

template <int D, bool kCausal>
int launch(float* out, int rows, cudaStream_t stream) {
  using C = Cfg<D, kCausal>;
  // the opt-in: without it a launch above 48 KB fails with cudaErrorInvalidValue
  cudaError_t e = cudaFuncSetAttribute(tile_kernel<D, kCausal>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       C::kSmem);
  if (e != cudaSuccess) return e;
  tile_kernel<D, kCausal><<<1, 128, C::kSmem, stream>>>(out);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1u);
  cfg.blockDim = dim3(32u);
  cfg.dynamicSmemBytes = 32 * sizeof(float);
  cfg.stream = stream;
  e = cudaLaunchKernelEx(&cfg, combine, out);
  if (e != cudaSuccess) return e;
  sized_at_run_time<<<1, 32, rows * 4, stream>>>(out);
  return cudaGetLastError();
}
template int launch<64, false>(float*, int, cudaStream_t);
template int launch<128, true>(float*, int, cudaStream_t);
}  // namespace tiny
"""


def test_the_source_says_where_each_kernel_sets_its_dynamic_shared_memory() -> None:
    found = requests(TMA_LIKE)
    assert [(r.kernel, r.args, r.expression, r.how) for r in found] == [
        ("tile_kernel", ("D", "kCausal"), "C::kSmem", OPT_IN),
        ("tile_kernel", ("D", "kCausal"), "C::kSmem", LAUNCH),
        ("combine", (), "32 * sizeof(float)", LAUNCH),
        ("sized_at_run_time", (), "rows * 4", LAUNCH),
    ]
    opt_in = found[0]
    assert opt_in.line == 32 and opt_in.namespaces == ("tiny",)
    assert [p[:2] for p in opt_in.params] == [("int", "D"), ("bool", "kCausal")]
    assert opt_in.local_decls == ("using C = Cfg<D, kCausal>;",)  # the probe needs the local alias
    assert opt_in.describe() == "tile_kernel<D, kCausal>: opt-in (cudaFuncSetAttribute) C::kSmem (line 32)"


def test_template_arguments_and_literals_are_read_as_the_compiler_reads_them() -> None:
    assert split_args("grid, Cfg<D, Dec>::kSmem, stream") == ["grid", "Cfg<D, Dec>::kSmem", "stream"]
    assert split_args("a < b, c") == ["a < b", "c"]  # a comparison is not a template
    assert literal_value("48 * 1024") == 49152
    assert literal_value("(1 << 16) + 512u") == 66048
    assert literal_value("Cfg<D>::kSmem") is None and literal_value("rows * 4") is None
    opt_in = requests(TMA_LIKE)[0]
    assert bindings(opt_in, ("128", "true")) == {"D": "128", "kCausal": "true"}
    launch_true = opt_in.__class__(**{**opt_in.__dict__, "args": ("D", "true")})
    assert bindings(launch_true, ("64", "false")) is None  # kernel<D, true> is not kernel<64, false>
    assert bindings(opt_in, ("64",)) is None


def kernels() -> list[KernelResources]:
    return [KernelResources("tiny::tile_kernel<64, false>"), KernelResources("tiny::tile_kernel<128, true>"),
            KernelResources("tiny::combine", shared_bytes=0), KernelResources("tiny::sized_at_run_time")]


def test_without_a_compiler_only_literals_are_known_and_the_rest_is_never_zero() -> None:
    ks = kernels()
    attach(ks, TMA_LIKE, compiler=None)
    tile, _, combine, run_time = ks
    assert tile.dynamic_shared_bytes is None and "set at run time (C::kSmem, line 32)" in tile.dynamic_shared
    assert combine.dynamic_shared_bytes is None  # sizeof needs the compiler too
    assert run_time.dynamic_shared_bytes is None and "launch set at run time (rows * 4" in run_time.dynamic_shared
    table = render_resources(ResourceReport(kernels=ks))
    row = next(line for line in table.splitlines() if line.startswith("tiny::tile_kernel<64, false>"))
    assert row.split()[-5:-3] == ["run", "time"]  # the dyn smem column: never 0


def test_a_probe_answer_is_read_back_per_instance() -> None:
    """The front end's error names the value; a fake one answers like nvcc 13 does."""
    def front_end(path: Path) -> str:
        lines = path.read_text().split("\n")
        out = []
        for no, line in enumerate(lines, 1):
            if line.startswith("::socratic_smem_value<"):
                body = "\n".join(lines[max(0, no - 8):no])
                d = int(body.split("constexpr int D = ")[1].split(";")[0]) if "constexpr int D" in body else 0
                causal = "kCausal = true" in body
                if "rows" in line:  # not a constant: the front end says so, with no value
                    out.append(f'probe.cu({no}): error: expression must have a constant value')
                    continue
                value = d * 1024 + (512 if causal else 0) if "C::kSmem" in line else 128
                out.append(f'probe.cu({no}): error: incomplete type "socratic_smem_value<{value}LL>" is not allowed')
        return "\n".join(out)

    ks = kernels()
    attach(ks, TMA_LIKE, compiler=front_end)
    tile64, tile128, combine, run_time = ks
    assert (tile64.dynamic_shared_bytes, tile64.dynamic_shared_optin) == (65536, 65536)
    assert (tile128.dynamic_shared_bytes, tile128.dynamic_shared_optin) == (131584, 131584)
    assert combine.dynamic_shared_bytes == 128
    assert run_time.dynamic_shared_bytes is None
    assert warnings(ks, "sm_90a") == []
    assert any("above sm_89's" in w for w in warnings(ks, "sm_89"))  # 131584 > 99 KB


def test_a_launch_above_48_kb_without_the_opt_in_is_named() -> None:
    source = TMA_LIKE.replace("cudaFuncSetAttribute(", "cudaFuncGetAttributes(")
    ks = kernels()[:2]
    attach(ks, source, compiler=lambda path: "\n".join(
        f'probe.cu({no}): error: incomplete type "socratic_smem_value<65536LL>" is not allowed'
        for no, line in enumerate(path.read_text().split("\n"), 1) if line.startswith("::socratic_smem_value<")))
    assert ks[0].dynamic_shared_bytes == 65536 and ks[0].dynamic_shared_optin is None
    (warning, *_) = warnings(ks, "sm_90a")
    assert "launches with 65536 bytes of dynamic shared memory but opts in to none" in warning


@needs_nvcc
def test_nvcc_front_end_evaluates_each_instance(tmp_path: Path) -> None:
    nvcc = nvcc_path()
    assert nvcc is not None
    ks = kernels()
    attach(ks, TMA_LIKE, nvcc_front_end(nvcc, ["-std=c++17", *gencode_flags("sm_90a"), f"-I{DEFAULT_INCLUDE}"]))
    assert [k.dynamic_shared_bytes for k in ks] == [65536, 131584, 128, None]


@needs_nvcc
def test_check_reports_a_tma_kernels_dynamic_shared_memory_instead_of_zero(tmp_path: Path) -> None:
    kernel = tmp_path / "tma_like.cu"
    kernel.write_text(TMA_LIKE)
    out_json = tmp_path / "check.json"
    out = subprocess.run([sys.executable, "-m", "harness", "check", str(kernel), "--arch", "sm_90a",
                          "--json", str(out_json)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "SOCRATIC_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.startswith("tiny::")}
    # kernel, regs, smem (static, ptxas), dyn smem
    assert rows["tiny::tile_kernel<64,"][3:5] == ["0", "65536"]
    assert rows["tiny::tile_kernel<128,"][3:5] == ["0", "131584"]
    assert rows["tiny::sized_at_run_time"][2:5] == ["0", "run", "time"]
    assert "launch 131584 bytes (C::kSmem, line 35)" in out.stdout
    resources = json.loads(out_json.read_text())["resources"]["kernels"]
    tile = next(k for k in resources if k["name"] == "tiny::tile_kernel<64, false>")
    assert tile["shared_bytes"] == 0 and tile["dynamic_shared_bytes"] == 65536
    assert tile["dynamic_shared_optin"] == 65536


@needs_nvcc
def test_an_evaluation_s_resources_carry_each_kernels_dynamic_shared_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluation path (harness/evaluate.py: SmemReader, beside the worker) fills the report's
    resources as `check` does, so profiles and pages read 64 KB, never the 0 ptxas says."""
    from dataclasses import asdict

    from harness.compile import compile_kernel
    from harness.evaluate import SmemReader
    from harness.resources import parse_ptxas

    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path / "cache"))
    kernel = tmp_path / "tma_like.cu"
    kernel.write_text(TMA_LIKE)
    built = compile_kernel(kernel, arch="sm_90a")
    resources = [asdict(k) for k in parse_ptxas(built.info.log)]
    assert all(r["dynamic_shared_bytes"] is None for r in resources)  # what ptxas alone knows
    SmemReader(TMA_LIKE, built.info.log, "sm_90a").attach(resources)
    tiles = sorted(r["dynamic_shared_bytes"] for r in resources if "tile_kernel" in r["name"])
    assert tiles == [65536, 131584] and all(r["shared_bytes"] == 0 for r in resources if "tile_kernel" in r["name"])
    run_time = next(r for r in resources if "sized_at_run_time" in r["name"])
    assert run_time["dynamic_shared_bytes"] is None and "rows * 4" in str(run_time["dynamic_shared"])
    # a source that sets none: the resources stay as ptxas gave them
    plain = [asdict(k) for k in parse_ptxas(built.info.log)]
    SmemReader("__global__ void k() {}\n", built.info.log, "sm_90a").attach(plain)
    assert all(r["dynamic_shared_bytes"] is None and r["dynamic_shared"] == "" for r in plain)
