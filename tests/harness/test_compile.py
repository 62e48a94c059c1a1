"""nvcc compilation into a shared library and its cache (nvcc is on the CI machine)."""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path

import pytest

from harness.compile import CompileError, arch_for_capability, compile_kernel, gencode_flags, unique_symbols
from tests.conftest import HAS_NVCC, ROOT

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")
BASELINE = ROOT / "kernels" / "attention" / "baseline.cu"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path / "cache"))


def test_gencode_keeps_the_arch_specific_target() -> None:
    assert gencode_flags("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert arch_for_capability(9, 0) == "sm_90a"
    assert arch_for_capability(8, 0) == "sm_80"
    with pytest.raises(ValueError):
        gencode_flags("90")


@needs_nvcc
def test_baseline_compiles_exports_the_abi_and_is_cached(tmp_path: Path) -> None:
    first = compile_kernel(BASELINE)
    assert first.info.ok and not first.info.cached
    lib = ctypes.CDLL(str(first.library))
    assert lib.socratic_attention_forward and lib.socratic_attention_workspace
    assert lib.socratic_harness_last_error  # the harness shim is linked in
    again = compile_kernel(BASELINE)
    assert again.info.cached and again.library == first.library
    # A copy elsewhere with the same bytes hits the same cache entry.
    copy = tmp_path / "same.cu"
    copy.write_bytes(BASELINE.read_bytes())
    assert compile_kernel(copy).library == first.library


@needs_nvcc
def test_changed_source_or_flags_miss_the_cache(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(BASELINE.read_text())
    a = compile_kernel(src)
    src.write_text(BASELINE.read_text() + "\n// changed\n")
    b = compile_kernel(src)
    assert a.library != b.library and not b.info.cached
    c = compile_kernel(src, extra_flags=("-DSOCRATIC_TEST=1",))
    assert c.library != b.library


@needs_nvcc
def test_compile_error_carries_nvcc_messages_with_line_numbers(tmp_path: Path) -> None:
    src = tmp_path / "broken.cu"
    src.write_text('#include "contract.h"\nextern "C" int socratic_attention_forward(\n'
                   "  const SocraticAttentionArgs* a, cudaStream_t s) { return undefined_thing; }\n")
    with pytest.raises(CompileError) as err:
        compile_kernel(src)
    assert "undefined_thing" in err.value.log
    assert "kernel.cu(3)" in err.value.log


@needs_nvcc
def test_defining_a_harness_symbol_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "sneaky.cu"
    src.write_text(BASELINE.read_text() + '\nextern "C" int socratic_harness_last_error(void) { return 0; }\n')
    with pytest.raises(CompileError) as err:
        compile_kernel(src)
    assert "socratic_harness_last_error" in err.value.log


# A static local of a function template, as in the family's "prepared once per process" flag.
TEMPLATE_STATIC = """
template <int N> int* prepared_flag() { static int flag = 0; return &flag; }
extern "C" int* probe() { return prepared_flag<1>(); }
"""


@needs_nvcc
def test_two_kernels_in_one_process_never_share_a_template_static(tmp_path: Path) -> None:
    """A contender is re-timed against the leader in one worker process. g++ binds template
    statics STB_GNU_UNIQUE, one object per process even across RTLD_LOCAL libraries: the leader
    then saw the contender's "prepared" flag, skipped its own set-up and failed. Each library
    must keep its own."""
    a, b = tmp_path / "leader.cu", tmp_path / "contender.cu"
    a.write_text(TEMPLATE_STATIC)
    b.write_text(TEMPLATE_STATIC + "// a different kernel\n")
    libs = []
    for src in (a, b):
        built = compile_kernel(src)
        lib = ctypes.CDLL(str(built.library), mode=ctypes.RTLD_LOCAL)
        lib.probe.restype = ctypes.c_void_p
        libs.append(lib)
    assert libs[0].probe() != libs[1].probe()


@needs_nvcc
def test_a_library_with_a_process_wide_symbol_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "shared_state.cu"
    src.write_text('__asm__(".section .bss.shared_flag,\\"aw\\",@nobits\\n.globl shared_flag\\n'
                   '.type shared_flag, @gnu_unique_object\\n.size shared_flag, 4\\nshared_flag:\\n'
                   '.zero 4\\n.text\\n");\n'
                   'extern "C" int probe() { return 1; }\n')
    with pytest.raises(CompileError) as err:
        compile_kernel(src)
    assert "STB_GNU_UNIQUE" in str(err.value) and "shared_flag" in str(err.value)
    assert not list((tmp_path / "cache").rglob("kernel.so"))  # nothing refused stays in the cache


def test_a_library_whose_symbols_cannot_be_read_is_a_compile_error(tmp_path: Path) -> None:
    # e_shnum 0: the section count kept elsewhere, so no dynamic symbol table this reader sees.
    no_sections = b"\x7fELF\x02\x01\x01" + bytes(0x3A - 7) + struct.pack("<HHH", 64, 0, 0) + bytes(4)
    for name, data in (("text.so", b"not a library"), ("cut.so", b"\x7fELF\x02\x01\x01" + b"\0" * 40),
                       ("no-sections.so", no_sections)):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(CompileError):
            unique_symbols(path)


@needs_nvcc
def test_the_shim_is_built_once_beside_the_first_kernel_and_linked_into_every_library(tmp_path: Path) -> None:
    # The first build compiles the shim in a thread while nvcc compiles the kernel; every later
    # build of any kernel links that same object (the slow half of a build is the kernel's own).
    first = compile_kernel(BASELINE)
    shims = sorted((tmp_path / "cache" / "shim").glob("*/shim.o"))
    assert len(shims) == 1
    built_at = shims[0].stat().st_mtime_ns
    other = tmp_path / "other.cu"
    other.write_text(BASELINE.read_text() + "\n// another kernel\n")
    second = compile_kernel(other)
    assert not second.info.cached and second.library != first.library
    assert sorted((tmp_path / "cache" / "shim").glob("*/shim.o")) == shims
    assert shims[0].stat().st_mtime_ns == built_at
    for built in (first, second):
        lib = ctypes.CDLL(str(built.library))
        assert lib.socratic_harness_last_error and lib.cuTensorMapEncodeTiled  # the shim's symbols
        # the build names both steps: the kernel's own compile, then the link with the shim
        compile_step, link_step = built.info.command.split(" && ")
        assert "--split-compile=0" in compile_step and " -c kernel.cu -o kernel.o" in compile_step
        assert link_step.endswith(f"-o {built.library} kernel.o shim.o") and "-z -Xlinker defs" in link_step
        assert "ptxas info" in built.info.log  # the kernel's resource report is the log's
    # nothing of the builds is left behind but the libraries, their logs and the shim
    assert not list((tmp_path / "cache").rglob("kernel.o"))
    assert not [p for p in (tmp_path / "cache").rglob("build-*") if any(p.iterdir())]


@needs_nvcc
def test_a_kernel_that_fails_to_compile_leaves_the_shim_usable(tmp_path: Path) -> None:
    broken = tmp_path / "broken.cu"
    broken.write_text('#include "contract.h"\nint broken() { return not_declared_here; }\n')
    with pytest.raises(CompileError) as err:
        compile_kernel(broken)
    assert "kernel.cu(2)" in err.value.log and "not_declared_here" in err.value.log
    assert "shim" not in str(err.value) and "link" not in str(err.value)
    assert compile_kernel(BASELINE).info.ok
    assert len(list((tmp_path / "cache" / "shim").glob("*/shim.o"))) == 1


# The cheats of verifier v3 (issue 47) are real kernels: each builds as the harness builds a
# candidate (the GPU proof runs the three that pass the static checks; the two that do not must
# still be what they claim, a working kernel with the trick in it).
V3_CHEATS = ["cheat_harness_names.cu", "cheat_late_repair.cu", "cheat_peer_sabotage.cu",
             "cheat_raw_opcodes.cu", "cheat_early_start.cu"]


@needs_nvcc
@pytest.mark.parametrize("name", V3_CHEATS)
def test_each_verifier_v3_cheat_compiles_into_a_library(name: str) -> None:
    built = compile_kernel(ROOT / "kernels" / "cheats" / name)
    assert built.library.exists()


@needs_nvcc
def test_a_cached_library_rewritten_after_it_was_built_is_built_again(tmp_path: Path) -> None:
    """Issue 47: the compile cache is a folder an evaluation process could reach; each library is
    signed by the process that built it (never a worker), and one whose bytes changed is rebuilt."""
    from harness.compile import library_signed

    first = compile_kernel(BASELINE)
    assert library_signed(first.library)
    good = first.library.read_bytes()
    tampered = good[:-16] + b"\0" * 16
    first.library.write_bytes(tampered)  # a rewritten library
    assert not library_signed(first.library)
    again = compile_kernel(BASELINE)  # nvcc's output differs from build to build: not byte-equal
    assert again.info.cached is False and again.library.read_bytes() != tampered
    assert library_signed(again.library)
    assert compile_kernel(BASELINE).info.cached is True


@needs_nvcc
def test_a_shim_object_rewritten_after_it_was_built_is_built_again_before_any_link(tmp_path: Path) -> None:
    """The shim is linked into every library: a worker that rewrote the kept object (existing files
    open read-write on the GPU) would put its code into every kernel built after it. The object is
    signed when built; one whose bytes changed is built again, and the next library links that."""
    from harness.compile import library_signed

    compile_kernel(BASELINE)
    [shim] = sorted((tmp_path / "cache" / "shim").glob("*/shim.o"))
    assert library_signed(shim)
    good = shim.read_bytes()
    shim.write_bytes(good.replace(b"socratic_harness_last_error", b"socratic_harness_last_ERROR"))
    assert not library_signed(shim)
    other = tmp_path / "other.cu"
    other.write_text(BASELINE.read_text() + "\n// built after the rewrite\n")
    built = compile_kernel(other)
    [again] = sorted((tmp_path / "cache" / "shim").glob("*/shim.o"))
    assert again == shim and library_signed(again)
    assert b"socratic_harness_last_ERROR" not in again.read_bytes()
    lib = ctypes.CDLL(str(built.library))
    assert lib.socratic_harness_last_error  # the harness's own shim, not the rewritten one


@needs_nvcc
def test_a_cuda_job_evaluated_from_built_kernels_gets_the_fresh_input_library_with_its_digest(
        tmp_path: Path) -> None:
    """evaluate_job's callers build their own kernels; the harness's fresh-input library is still
    built (or found and verified) by the caller's process and passed with its digest, so a worker
    never loads a copy of it that a candidate could have rewritten (issue 47)."""
    import hashlib
    import threading

    from harness.evaluate import evaluate_job
    from harness.executor import ExecutionResult, Executor, ProgressFn
    from harness.job import KernelSpec, WorkerJob
    from harness.scenario import Scenario
    from harness.settings import EvalSettings

    seen: list[dict[str, dict[str, str]]] = []

    class Recording(Executor):  # the job as a worker would receive it; nothing runs
        def run(self, job: WorkerJob, progress: ProgressFn | None = None,
                cancel: threading.Event | None = None) -> ExecutionResult:
            seen.append(dict(job.harness_libraries))
            return ExecutionResult([], {"name": "recorded"})

    base = compile_kernel(BASELINE)
    spec = KernelSpec("baseline", "library", str(base.library))
    scenario = Scenario("x", "prefill", 1, 64, 64, 2, 2, 64, causal=False)
    job = WorkerJob("attention-forward", spec, spec, [scenario], EvalSettings(device="cuda"))
    evaluate_job(job, kernel="baseline", executor=Recording())
    [given] = seen
    lib = Path(given["fresh_fill"]["path"])
    assert lib.is_file() and given["fresh_fill"]["sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()
    # on the CPU backend there is no such library to give
    cpu = WorkerJob("attention-forward", spec, spec, [scenario], EvalSettings(device="cpu"))
    evaluate_job(cpu, kernel="baseline", executor=Recording())
    assert "fresh_fill" not in seen[-1]
