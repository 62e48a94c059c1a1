"""Verifier rule 2 without a GPU: the static checks refuse the cheats they can see, with line
numbers, and pass every other kernel of kernels/cheats/; `socratic check` adds the ptxas
resource report and, where cuobjdump exists, the instruction mix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.resources import parse_ptxas, parse_sass, short_name
from harness.static_checks import check_source
from tests.conftest import HAS_NVCC, ROOT

CHEATS = ROOT / "kernels" / "cheats"
# Cheats the static checks refuse, and a phrase of the reason each must carry.
STATIC_CHEATS = {
    "cheat_banned_library.cu": "includes cublas_v2.h: cuBLAS is not allowed",
    "cheat_host_thread.cu": "calls std::thread: starts host threads",
    "cheat_harness_names.cu": "harness's own kernel marks",  # issue 47, class 1
    "cheat_raw_opcodes.cu": "uses .byte in asm: emits raw bytes",  # issue 47, class 4
}


def socratic(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT,
        timeout=300,
    )


def test_there_are_twelve_cheats_and_three_honest_kernels_each_naming_its_class() -> None:
    cheats = sorted(CHEATS.glob("cheat_*.cu"))
    honest = sorted(CHEATS.glob("honest_*.cu"))
    assert len(cheats) >= 12 and len(honest) >= 3
    for path in cheats:
        head = path.read_text().splitlines()[:12]
        assert head[0].startswith("// cheat: ")
        assert any(line.startswith("// Hack class: ") for line in head), path.name
        assert any(line.startswith("// Caught by: ") for line in head), path.name
    for path in honest:
        assert path.read_text().startswith("// honest: ")


@pytest.mark.parametrize("name", sorted(STATIC_CHEATS))
def test_statically_visible_cheat_is_refused_with_its_reason_and_line(name: str) -> None:
    text = (CHEATS / name).read_text()
    findings = [f for f in check_source(text) if f.blocking]
    assert any(STATIC_CHEATS[name] in f.message for f in findings), findings
    for f in findings:
        assert f.line >= 1 and str(f).startswith(f"line {f.line}: ")


def test_every_other_kernel_passes_the_static_checks() -> None:
    for path in sorted(CHEATS.glob("*.cu")):
        if path.name in STATIC_CHEATS:
            continue
        blocking = [str(f) for f in check_source(path.read_text()) if f.blocking]
        assert blocking == [], path.name


def test_launches_on_a_default_stream_are_refused() -> None:
    text = (
        "void f(cudaStream_t s) {\n"
        "  k<<<grid, block>>>(x);\n"
        "  k<<<dim3(1, 2), block, 0>>>(x);\n"
        "  k<<<grid, block, 0, s>>>(x);\n"
        "  k<<<grid, block, 0, cudaStreamPerThread>>>(x);\n"
        "}\n"
    )
    lines = sorted({f.line for f in check_source(text) if f.rule == "default-stream"})
    assert lines == [2, 3, 5]


def test_looking_up_driver_functions_by_name_is_refused() -> None:
    found = check_source('void* p; cudaGetDriverEntryPoint("cuCtxSetLimit", &p, 0);\nsyscall(1);\n')
    assert [f.line for f in found] == [1, 2]
    assert "a way around these checks" in found[0].message


PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z4attnILi64EEv4Args' for 'sm_90a'
ptxas info    : Function properties for _Z4attnILi64EEv4Args
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 33280 bytes smem, 448 bytes cmem[0]
ptxas info    : Compile time = 12.0 ms
"""

SASS = """\
\t\tFunction : _Z4attnILi64EEv4Args
\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ ;
        /*0020*/              @!P0 FFMA R2, R3, R4, R5 ;
        /*0030*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0040*/                   STL [R1], R2 ;
        /*0050*/                   EXIT ;
"""


def test_ptxas_report_is_parsed_per_kernel() -> None:
    (k,) = parse_ptxas(PTXAS_LOG)
    assert (k.registers, k.shared_bytes, k.stack_bytes) == (168, 33280, 16)
    assert (k.spill_store_bytes, k.spill_load_bytes, k.barriers, k.arch) == (8, 12, 1, "sm_90a")
    assert k.spills


def test_instruction_mix_counts_matrix_and_fma_instructions() -> None:
    mix = parse_sass(SASS)["_Z4attnILi64EEv4Args"]
    assert mix["HGMMA"] == 1 and mix["HMMA"] == 1 and mix["FFMA"] == 1 and mix["STL"] == 1
    assert mix["total"] == 6
    assert short_name("void (anonymous namespace)::attn<64, 16>(Args)") == "attn<64, 16>"


def test_check_command_names_the_cheat_and_exits_nonzero() -> None:
    out = socratic("check", str(CHEATS / "cheat_host_thread.cu"))
    assert out.returncode == 1
    assert "calls std::thread: starts host threads [banned-call]" in out.stdout
    assert "includes thread: only CUDA toolkit headers" in out.stdout


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")
def test_check_command_reports_resources_of_an_honest_kernel(tmp_path: Path) -> None:
    report = tmp_path / "check.json"
    out = socratic("check", str(CHEATS / "honest_wmma_tiles.cu"), "--json", str(report))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "static checks passed" in out.stdout
    assert "attention_wmma" in out.stdout and "regs" in out.stdout
    data = json.loads(report.read_text())
    kernels = data["resources"]["kernels"]
    assert len(kernels) == 3 and all("attention_wmma" in k["name"] for k in kernels)
    assert all(k["registers"] > 0 and k["spill_store_bytes"] == 0 for k in kernels)


@pytest.mark.parametrize("text", [
    "%:include <dlfcn.h>\n",                      # digraph
    "#inc\\\nlude <dlfcn.h>\n",                  # a directive spliced over two lines
    "# /**/ include <dlfcn.h>\n",                 # a comment inside the directive
    "#define H <dlfcn.h>\n#include H\n",          # a computed include
    "#import <dlfcn.h>\n",                        # GCC's #import
    "#include_next <stdio.h>\n",                  # the next stdio.h on the path, whatever it is
])
def test_a_header_is_read_as_the_preprocessor_reads_it(text: str) -> None:
    found = check_source(text)
    assert found and all(f.rule == "banned-header" for f in found), found


@pytest.mark.parametrize(("text", "name"), [
    ("auto f = fopen;\nvoid g() { f(\"x\", \"w\"); }\n", "fopen"),
    ("int (*go)(const char*) = &system;\n", "system"),
    ("using T = decltype(&pthread_create);\n", "pthread_create"),
])
def test_a_refused_function_is_refused_named_as_well_as_called(text: str, name: str) -> None:
    assert any(f"names {name}" in f.message for f in check_source(text))


# In a re-time the contender and the leader share one process. Each of these would let a kernel
# run code at load, bind a name the checks cannot read, or find and rewrite the other library.
@pytest.mark.parametrize(("text", "what"), [
    ("__attribute__((constructor)) static void f() {}\n", "uses constructor"),
    ("[[gnu::destructor]] static void f() {}\n", "uses destructor"),
    ('extern "C" int f() __attribute__((ifunc("pick")));\n', "uses ifunc"),
    ('static void* g(void*, const char*) __attribute__((weakref("dl" "sym")));\n', "uses weakref"),
    ('static void (*p)() __attribute__((section(".init_array"))) = 0;\n', "uses section"),
    ('#pragma redefine_extname mine other\nextern "C" int mine();\n', "uses redefine_extname"),
    ("#pragma weak helper\n", "uses weak"),
    ('struct r_debug; extern "C" struct r_debug _r_debug;\n', "names _r_debug"),
    ("struct link_map* first;\n", "names link_map"),
    ("extern \"C\" int mprotect(void*, unsigned long, int);\n", "calls mprotect"),
    ('__asm__(".section .init_array,\\"aw\\"\\n.quad f\\n.text");\n', "names .init_array in asm"),
    ('__asm__(".section .in" "it,\\"ax\\"\\ncall f\\n.text");\n', "names .section .init in asm"),
    ('__asm__(".type x, @gnu_unique_" "object");\n', "names gnu_unique_object in asm"),
])
def test_code_at_load_time_and_the_loader_s_state_are_refused(text: str, what: str) -> None:
    found = [f.message for f in check_source(text) if f.blocking]
    assert any(what in m for m in found), found


# Issue 47, class 4: raw opcodes in host inline assembly, in every form a text check can read.
RAW_OPCODES = {
    "plain": 'void f() {\n  asm volatile(".byte 0x0f, 0x05");\n}\n',
    "split_literals": 'void f() {\n  asm volatile(".by" "te 0x0f, 0x05");\n}\n',
    "escaped": 'void f() {\n  __asm__ __volatile__("\\x2e\\x62yte 0x0f, 0x05");\n}\n',
    "macro_string": '#define OP ".by" "te 0x0f, 0x05"\nvoid f() {\n  asm volatile(OP);\n}\n',
    "macro_statement": '#define SYS asm volatile(".quad 0x050f")\nvoid f() {\n  SYS;\n}\n',
    "continued_line": 'void f() {\n  asm volatile(".wo\\\nrd 0x050f");\n}\n',
}


@pytest.mark.parametrize("form", sorted(RAW_OPCODES))
def test_host_asm_with_raw_opcode_directive_is_refused_with_its_line(form: str) -> None:
    text = RAW_OPCODES[form]
    found = [f for f in check_source(text) if f.rule == "raw-opcode"]
    assert found and all(f.blocking for f in found)
    want = next(no for no, line in enumerate(text.splitlines(), 1) if "asm" in line and "define" not in line) \
        if form != "macro_statement" else 1
    assert any(f.line == want for f in found), found
    assert "emits raw bytes" in str(found[0])


@pytest.mark.parametrize("directive", [".long 1", ".inst 0xd4000001", ".fill 2, 1, 0x90", '.incbin \\"x.bin\\"',
                                       ".quad 5", ".word 3"])
def test_every_raw_data_directive_of_the_issue_is_refused(directive: str) -> None:
    text = f'void f() {{ asm("{directive}"); }}\n'
    assert [f for f in check_source(text) if f.rule == "raw-opcode"], directive


def test_a_bare_hex_escape_is_left_to_nvcc_and_a_real_one_still_decoded() -> None:
    """`\\x` with no hex digit once raised ValueError inside the checks (a candidate crashed the
    harness's reader instead of getting nvcc's message)."""
    assert [f for f in check_source('void f() { asm("nop \\x;"); }\n') if f.blocking] == []
    assert [f for f in check_source('void f() { asm("\\x2e" "byte 1"); }\n') if f.rule == "raw-opcode"]


def test_device_ptx_with_dotted_instructions_is_not_a_raw_opcode() -> None:
    text = ('__device__ void f(float x, unsigned a) {\n'
            '  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0}, {%0};" : "+f"(x));\n'
            '  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0];"'
            ' :: "r"(a));\n}\n')
    assert [f for f in check_source(text) if f.blocking] == []


HARNESS_MARKS = {
    "namespace": "namespace socratic_harness {\n__global__ void fill() {}\n}\n",
    "at_native": "namespace at {\nnamespace native {\n__global__ void k() {}\n}\n}\n",
    "qualified": "__global__ void k();\nvoid f() { at::native::k<<<1, 1, 0, s>>>(); }\n",
    "spin": "__global__ void spin_kernel(long long c) {}\n",
    "detail": "__global__ void at_cuda_detail_k() {}\n",
    "asm_label": 'void f() {\n  asm(".globl _ZN16socr" "atic_harness4fillEv");\n}\n',
}


@pytest.mark.parametrize("form", sorted(HARNESS_MARKS))
def test_a_candidate_naming_its_kernels_like_the_harness_is_refused(form: str) -> None:
    found = [f for f in check_source(HARNESS_MARKS[form]) if f.rule == "harness-mark"]
    assert found and all(f.blocking for f in found), form
    assert "harness's own kernel marks" in found[0].message
    assert found[0].line >= 1


def test_the_harness_marks_the_static_check_knows_cover_the_profilers_marks() -> None:
    from harness.device import HARNESS_KERNEL_MARKS

    for mark in HARNESS_KERNEL_MARKS:
        name = mark.rstrip(":").replace("::", "::")
        assert [f for f in check_source(f"void f() {{ {name}::g(); }}\n") if f.rule == "harness-mark"] \
            or [f for f in check_source(f"void {name}() {{}}\n") if f.rule == "harness-mark"], mark
