"""Static checks before compiling (verifier rule 2): headers outside the contract's allowance
and calls that break the contract, each reported with its line number."""

from __future__ import annotations

import re
from dataclasses import dataclass

# CUDA toolkit headers a candidate may include, plus side-effect-free standard headers.
ALLOWED_HEADERS = frozenset({
    "contract.h",
    "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "cuda_bf16.h", "cuda_fp16.h",
    "cuda_fp8.h", "mma.h", "cuda_pipeline.h", "cuda_pipeline_primitives.h",
    "cuda_awbarrier.h", "cuda_awbarrier_primitives.h", "cooperative_groups.h",
    "vector_types.h", "vector_functions.h", "device_functions.h", "math_constants.h",
    "cuda/pipeline", "cuda/barrier", "cuda/ptx", "cuda/annotated_ptr",
    "stdint.h", "cstdint", "stddef.h", "cstddef", "math.h", "cmath", "float.h", "cfloat",
    "limits.h", "climits", "limits", "type_traits", "utility", "assert.h", "cassert",
    "stdio.h", "cstdio", "algorithm", "array",
})
ALLOWED_PREFIXES = ("cooperative_groups/", "cuda/std/")

# Named so a person sees which rule a library include breaks.
BANNED_LIBRARIES = (
    ("cublas", "cuBLAS"), ("cudnn", "cuDNN"), ("cutlass", "CUTLASS"), ("cute/", "CuTe"),
    ("thrust/", "Thrust"), ("cub/", "CUB"), ("cublaslt", "cuBLASLt"), ("curand", "cuRAND"),
)

BANNED_CALLS: tuple[tuple[str, str], ...] = (
    (r"cu(da)?StreamCreate\w*", "creates a stream (launch only on the harness's stream)"),
    (r"cu(da)?EventCreate\w*", "creates an event"),
    (r"cu(da)?Graph\w*", "uses CUDA graphs"),
    (r"cu(da)?StreamBeginCapture\w*", "captures a graph"),
    (r"cudaLaunchHostFunc|cuLaunchHostFunc|cudaStreamAddCallback", "runs host work from a stream"),
    (r"cudaDeviceSynchronize|cudaThreadSynchronize|cuCtxSynchronize",
     "synchronizes the device"),
    (r"cu(da)?StreamSynchronize|cu(da)?EventSynchronize|cu(da)?StreamWaitEvent",
     "synchronizes with the host or another stream"),
    (r"cudaDeviceReset|cudaDeviceSetLimit|cudaCtxResetPersistingL2Cache|"
     r"cu(da)?StreamSetAttribute|cudaDeviceSetCacheConfig",
     "changes device state beyond the call (persisting L2, limits, reset)"),
    (r"cu(da)?Malloc\w*|cu(da)?Free\w*|cuMemAlloc\w*|cudaHostAlloc|cuMemCreate",
     "allocates memory (use the harness's workspace)"),
    (r"cudaMemcpy(ToSymbol|FromSymbol|2D|3D|Peer)?|cudaMemset(2D|3D)?",
     "makes a synchronous copy (use the Async form on the stream)"),
    (r"cu(da)?SetDevice|cuCtxCreate\w*|cuCtxSetCurrent|cuDevicePrimaryCtx\w*",
     "switches device or context"),
    (r"pthread_\w+|std::thread|std::async|std::jthread", "starts host threads"),
    (r"fork|vfork|exec[lv]p?e?|posix_spawn\w*|system|popen", "starts processes"),
    (r"fopen|freopen|open|openat|creat|std::[io]?fstream|mmap|unlink|remove|rename",
     "touches files"),
    (r"socket|connect|bind|listen|accept|gethostbyname|getaddrinfo", "uses the network"),
    (r"getenv|setenv|putenv|unsetenv|secure_getenv", "reads or writes the environment"),
    (r"dlopen|dlsym|dlmopen|LoadLibrary\w*", "loads code dynamically"),
    (r"asm\s*volatile\s*\(\s*\"\s*(syscall|int\s+\$0x80)", "makes system calls"),
    (r"syscall|ptrace|prctl|kill", "makes system calls"),
    (r"cudaGetDriverEntryPoint\w*|cuGetProcAddress\w*",
     "looks up driver functions by name (a way around these checks)"),
    (r"cuCtxSetLimit|cuCtxResetPersistingL2Cache",
     "changes device state beyond the call (persisting L2, limits, reset)"),
)

# The contract: launch only on the stream the harness passes. Launches with no stream
# (<<<grid, block>>> or <<<grid, block, smem>>>) and the named default streams go to a stream
# the harness's events do not time.
DEFAULT_STREAM_NAMES = re.compile(
    r"(?<![\w.>:])(cudaStreamLegacy|cudaStreamPerThread|CU_STREAM_LEGACY|CU_STREAM_PER_THREAD)\b"
)
_LAUNCH_RE = re.compile(r"<<<(.*?)>>>")

_CALL_RES = [
    (re.compile(r"(?<![\w.>:])(?:::)?(" + pat + r")\s*\("), why) for pat, why in BANNED_CALLS
]
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


@dataclass(frozen=True)
class Finding:
    line: int
    rule: str
    message: str
    blocking: bool = True

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def strip_comments_and_strings(text: str) -> str:
    """Blank out comments and string/char literals, keeping line breaks (line numbers hold)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and nxt == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * max(0, min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_source(text: str) -> list[Finding]:
    findings: list[Finding] = []
    for no, raw in enumerate(text.splitlines(), 1):
        m = _INCLUDE_RE.match(raw)
        if not m:
            continue
        header = m.group(1).strip()
        lowered = header.lower()
        lib = next((name for key, name in BANNED_LIBRARIES if key in lowered), None)
        if lib:
            findings.append(Finding(no, "banned-library", f"includes {header}: {lib} is not allowed"))
        elif header not in ALLOWED_HEADERS and not header.startswith(ALLOWED_PREFIXES):
            findings.append(Finding(
                no, "banned-header",
                f"includes {header}: only CUDA toolkit headers and the contract header are allowed",
            ))
    code = strip_comments_and_strings(text)
    for no, line in enumerate(code.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for regex, why in _CALL_RES:
            for m in regex.finditer(line):
                findings.append(Finding(no, "banned-call", f"calls {m.group(1)}: {why}"))
        for m in DEFAULT_STREAM_NAMES.finditer(line):
            findings.append(Finding(
                no, "default-stream",
                f"uses {m.group(1)}: launch only on the stream the harness passes, which its "
                "timers see",
            ))
        for m in _LAUNCH_RE.finditer(line):
            if _launch_arity(m.group(1)) < 4:
                findings.append(Finding(
                    no, "default-stream",
                    "launches a kernel without a stream (<<<grid, block[, smem]>>> runs on the "
                    "default stream): pass the harness's stream as the fourth launch argument",
                ))
    return sorted(findings, key=lambda f: f.line)


def _launch_arity(config: str) -> int:
    """Number of top-level comma-separated arguments of a <<<...>>> launch configuration."""
    depth, count = 0, 1
    for ch in config:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            count += 1
    return count
