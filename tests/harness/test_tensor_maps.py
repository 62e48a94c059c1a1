"""Tensor maps without a GPU: a kernel may call exactly one driver function,
cuTensorMapEncodeTiled, which the harness's shim provides; every other driver name and every
run-time look-up of a function by name stays refused, however the kernel spells it, and the
library links no other driver symbol."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.compile import CompileError, compile_kernel
from harness.static_checks import check_source
from tests.conftest import HAS_NVCC

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")

HEAD = '#include <cuda.h>\n#include "contract.h"\n'
ENCODE = (
    "static int encode(const SocraticAttentionArgs* a, CUtensorMap* m) {\n"
    "  cuuint64_t dim[2] = {64, (cuuint64_t)a->seqlen_k};\n"
    "  cuuint64_t stride[1] = {(cuuint64_t)a->k_row_stride * 2};\n"
    "  cuuint32_t box[2] = {64, 64}, step[2] = {1, 1};\n"
    "  return (int)cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,\n"
    "      const_cast<void*>(a->k), dim, stride, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,\n"
    "      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,\n"
    "      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);\n"
    "}\n"
)
ENTRY = (
    'extern "C" int socratic_attention_forward(const SocraticAttentionArgs* a,'
    " cudaStream_t s) {\n  CUtensorMap m;\n  return encode(a, &m);\n}\n"
    'extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs*)'
    " { return 0; }\n"
)
HONEST = HEAD + ENCODE + ENTRY

# Ways a hostile kernel reaches another driver function, each with its line and a phrase of
# the reason it is refused.
HOSTILE = {
    "direct call": ("  cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);\n", 1, "names cuLaunchKernel"),
    "pointer": ("  auto f = &cuCtxSetLimit;\n", 1, "names cuCtxSetLimit"),
    "pointer without &": ("  CUresult (*f)(CUdeviceptr*, size_t) = cuMemAlloc;\n", 1,
                          "names cuMemAlloc"),
    "decltype": ("  decltype(&cuGetProcAddress) f = nullptr;\n", 1, "names cuGetProcAddress"),
    "macro alias": ("#define GO cuLaunchKernel\n  GO(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);\n", 1,
                    "names cuLaunchKernel"),
    "macro around a call": ("#define ALLOC(p, n) cuMemAlloc(p, n)\n", 1, "cuMemAlloc"),
    "token pasting": ("#define CAT(x, y) x##y\n  CAT(c, uLaunchKernel)(0);\n", 1, "token pasting"),
    "digraph pasting": ("%:define CAT(x, y) x%:%:y\n", 1, "token pasting"),
    "line splice": ('  void* p; cudaGetDriver\\\nEntryPoint("cuLaunchKernel", &p, 0);\n', 1,
                    "looks up driver functions by name"),
    "entry point by version": (
        '  void* p; cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, 0,'
        " 0);\n", 1, "looks up driver functions by name"),
    "entry point as a pointer": ("  auto look = cudaGetDriverEntryPoint;\n", 1,
                                 "names cudaGetDriverEntryPoint"),
    "dlsym": ('  void* f = dlsym((void*)0, "cuLaunchKernel");\n', 1, "names dlsym"),
    "dlsym as a pointer": ("  auto d = &dlvsym;\n", 1, "names dlvsym"),
    "dlopen": ('  dlopen("libcuda.so.1", 2);\n', 1, "names dlopen"),
    "host asm call": ('  asm volatile("call dlsym@PLT");\n', 1, "names dlsym"),
    "host asm driver": ('  __asm__("call cuLaunchKernel");\n', 1, "names cuLaunchKernel"),
    "universal character name": ("  cu\\u004caunchKernel(0);\n", 1, "universal character"),
    "qualified": ("  ::cuStreamSynchronize(0);\n", 1, "cuStreamSynchronize"),
    # An asm label binds a declaration to any symbol: the name may be spelled in pieces or escapes.
    "asm label in pieces": ('  extern "C" void* o(const char*, int) __asm__("dl" "open");\n', 1, "names dlopen"),
    "asm label for dlsym": ('  extern "C" void* s(void*, const char*) __asm__("dl"  "sym");\n', 1, "names dlsym"),
    "asm label with escapes": ('  extern "C" int l() __asm__("\\x63uLaunchKernel");\n', 1, "names cuLaunchKernel"),
    "asm label, octal": ('  extern "C" int l() asm("\\143uLaunchKernel");\n', 1, "names cuLaunchKernel"),
    "asm label for the entry point": ('  extern "C" int e() __asm__("cudaGetDriver" "EntryPoint");\n', 1,
                                      "names cudaGetDriverEntryPoint"),
    "export table": ("  cudaGetExportTable(0, 0);\n", 1, "names cudaGetExportTable"),
    "loaded objects": ("  dl_iterate_phdr(0, 0);\n", 1, "names dl_iterate_phdr"),
}


def _body(snippet: str) -> str:
    return "void hostile() {\n" + snippet + "}\n"


def test_the_encoder_is_the_one_driver_call_a_kernel_may_make() -> None:
    assert [str(f) for f in check_source(HONEST) if f.blocking] == []
    # Its name in a string (an error message) or a comment is not a use of another function.
    quiet = 'const char* w = "cuLaunchKernel failed"; // cuMemAlloc\n'
    assert [f for f in check_source(quiet) if f.blocking] == []


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_every_other_driver_name_and_lookup_is_refused(name: str) -> None:
    snippet, line, phrase = HOSTILE[name]
    found = [f for f in check_source(_body(snippet)) if f.blocking]
    assert any(phrase in f.message for f in found), (name, [str(f) for f in found])
    assert line + 1 in {f.line for f in found}, (name, [str(f) for f in found])


def test_device_asm_that_names_no_function_passes() -> None:
    ptx = (
        "__device__ void load(unsigned dst, const void* map, unsigned bar, int x, int y) {\n"
        '  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx'
        '::bytes [%0], [%1, {%2, %3}], [%4];" :: "r"(dst), "l"(map), "r"(x), "r"(y),'
        ' "r"(bar) : "memory");\n}\n'
    )
    assert [f for f in check_source(ptx) if f.blocking] == []


@pytest.fixture()
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path / "cache"))


@needs_nvcc
@pytest.mark.usefixtures("_own_cache")
def test_the_shim_defines_the_encoder_and_no_driver_symbol_is_imported(tmp_path: Path) -> None:
    src = tmp_path / "tma.cu"
    src.write_text(HONEST)
    built = compile_kernel(src)
    lib = ctypes.CDLL(str(built.library))
    assert lib.cuTensorMapEncodeTiled  # defined in the library itself, by the shim
    nm = shutil.which("nm")
    if nm is not None:
        listing = subprocess.run([nm, "-D", str(built.library)], capture_output=True, text=True)
        defined = re.findall(r" T (cu[A-Z]\w*)", listing.stdout)
        imported = re.findall(r" U (cu[A-Z]\w*)", listing.stdout)
        assert defined == ["cuTensorMapEncodeTiled"] and imported == []


@needs_nvcc
@pytest.mark.usefixtures("_own_cache")
def test_a_driver_call_past_the_static_checks_does_not_link(tmp_path: Path) -> None:
    # compile_kernel runs no static checks: the linker's -z defs is the second wall.
    src = tmp_path / "launch.cu"
    src.write_text(HONEST.replace(
        "return encode(a, &m);", "return (int)cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, s, 0, 0);"
    ))
    with pytest.raises(CompileError) as err:
        compile_kernel(src)
    assert "cuLaunchKernel" in err.value.log
