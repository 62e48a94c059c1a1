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
    (r"LoadLibrary\w*|cudaLibraryLoad\w*", "loads code dynamically"),
    (r"asm\s*volatile\s*\(\s*\"\s*(syscall|int\s+\$0x80)", "makes system calls"),
    (r"syscall|ptrace|prctl|kill", "makes system calls"),
    (r"cuCtxSetLimit|cuCtxResetPersistingL2Cache",
     "changes device state beyond the call (persisting L2, limits, reset)"),
    # Two kernels share one worker in a re-time: with the loader's list of libraries or the
    # right to change page protections, one could find and rewrite the other's code or data.
    (r"mprotect|pkey_\w+|madvise|mremap|munmap|process_vm_\w+|_r_debug|r_debug|link_map|getauxval"
     r"|_DYNAMIC|_GLOBAL_OFFSET_TABLE_|__ehdr_start|__executable_start",
     "reaches into the process's memory map or the loader's list of libraries"),
)
# Code that runs when the library is loaded, outside any timed call, and attributes or pragmas
# that bind a declaration to another symbol by a name written in a string (weakref("dlsym"))
# or a pragma (redefine_extname), which the name rules cannot read. `[[gnu::constructor]]`
# too, hence no `:` in the look-behind.
_LOAD_TIME_RE = re.compile(
    r"(?<![\w$])(constructor|destructor|ifunc|init_priority|weakref|alias|section|symver"
    r"|redefine_extname)(?![\w$])|#\s*pragma\s+(weak)(?![\w$])"
)
_LOAD_TIME_WHY = ("runs code when the library loads or binds a name to another symbol (attributes "
                  "constructor, destructor, ifunc, init_priority, weakref, alias, section, symver; "
                  "#pragma weak, redefine_extname)")
# The same in an asm statement: sections run at load, and symbol types the loader treats
# specially (process-wide unique objects, resolvers).
_ASM_LOAD_TIME_RE = re.compile(
    r"\.(init_array|fini_array|preinit_array|ctors|dtors)(?![\w$])|\.section\s+\.(init|fini)(?![\w$.])"
    r"|(gnu_unique_object|gnu_indirect_function)|\.(symver|weakref)(?![\w$])"
)

# The one driver function a kernel may name: it builds a tensor map on the host (no device
# state, no launch). The harness's shim defines it and forwards it to the driver, so the
# kernel's library links no libcuda (docs/decisions.md, "Tensor maps ...").
ALLOWED_DRIVER_CALLS = frozenset({"cuTensorMapEncodeTiled"})
# Any other driver-API name (cuLaunchKernel, cuGetProcAddress, ...), and every way to fetch a
# function by its name at run time, is refused wherever it appears -- called, taken as a
# pointer, aliased by a macro or named inside an asm statement -- not only when called.
_DRIVER_NAME_RE = re.compile(r"(?<![\w$])(cu[A-Z]\w*)")
_LOOKUP_RE = re.compile(
    r"(?<![\w$])(cudaGetDriverEntryPoint\w*|cudaGetExportTable|dlopen|dlsym|dlvsym|dlmopen|dladdr\w*|dlinfo"
    r"|dl_iterate_phdr|__libc_dl\w*|_dl_\w+)(?![\w$])"
)
_LOOKUP_WHY = "looks up driver functions by name (a way around these checks)"
# Token pasting (## or its digraph %:%:) and universal-character names build an identifier the
# checks above cannot read; a kernel has no need for either.
_PASTE_RE = re.compile(r"##|%:%:|%:\s*define|\\[uU][0-9A-Fa-f]{4}")
_ASM_RE = re.compile(r"(?<![\w$])(?:asm|__asm__|__asm)(?![\w$])")
# Assembler directives that emit raw bytes: `.byte 0x0f, 0x05` is a system call with no name in
# it, and the same holds for every directive that writes data into the code (issue 47, class 4).
# Device PTX has none of them, so a kernel loses nothing.
_RAW_OPCODE_RE = re.compile(
    r"(?<![\w$])\.(byte|2byte|4byte|8byte|word|hword|short|long|int|quad|octa|inst|inst\.[nw]|fill"
    r"|incbin|ascii|asciz|string|skip|space|zero|dc(?:\.\w)?|ds(?:\.\w)?|value|sleb128|uleb128)(?![\w$])"
)
_RAW_OPCODE_WHY = ("emits raw bytes with an assembler directive (machine code with no name in it, "
                   "such as a system call, which these checks cannot read)")
# The marks by which the harness's tools know its own kernels (harness/device.py:
# HARNESS_KERNEL_MARKS), and the namespaces they come from: a candidate's kernel named so could
# pass for the harness's (issue 47, class 1). The profiler counts by origin now; the name is
# refused as well.
_HARNESS_MARK_RE = re.compile(
    r"(socratic_harness|at_cuda_detail|spin_kernel|at\s*::\s*native|c10\s*::|at\s*::\s*cuda"
    r"|(?<![\w$])namespace\s+(?:at|c10|native|torch|socratic_harness)(?![\w$]))"
)
_HARNESS_MARK_WHY = ("uses the harness's own kernel marks or namespaces (socratic_harness, at::native, "
                     "at_cuda_detail, spin_kernel, c10): a kernel of the candidate must not be named "
                     "like the harness's")

# The contract: launch only on the stream the harness passes. Launches with no stream
# (<<<grid, block>>> or <<<grid, block, smem>>>) and the named default streams go to a stream
# the harness's events do not time.
DEFAULT_STREAM_NAMES = re.compile(
    r"(?<![\w.>:])(cudaStreamLegacy|cudaStreamPerThread|CU_STREAM_LEGACY|CU_STREAM_PER_THREAD)\b"
)
_LAUNCH_RE = re.compile(r"<<<(.*?)>>>")

# Named anywhere, not only called: `auto f = fopen; f(...)` calls it all the same.
_CALL_RES = [
    (re.compile(r"(?<![\w$.>:])(?:::)?(" + pat + r")(?![\w$])(\s*\()?"), why) for pat, why in BANNED_CALLS
]
_CALL_NAMES = [re.compile(pat) for pat, _why in BANNED_CALLS]
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
# Any inclusion directive, literal or computed (`#include MACRO`), and GCC's #import/#include_next.
_ANY_INCLUDE_RE = re.compile(r"^\s*#\s*(include_next|include|import)(?![\w$])(.*)")


@dataclass(frozen=True)
class Finding:
    line: int
    rule: str
    message: str
    blocking: bool = True

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def splice_lines(text: str) -> str:
    """Join backslash-continued lines as the compiler does (a name split over two lines is one
    identifier), keeping the line count: the joined line sits on its first line's number."""
    out: list[str] = []
    pending = 0
    for line in text.split("\n"):
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + line
            pending += 1
            continue
        out.extend([""] * pending)
        pending = 0
        out.append(line)
    out.extend([""] * pending)
    return "\n".join(out)


def strip_comments_and_strings(text: str, *, strings: bool = True) -> str:
    """Blank out comments and string/char literals (only comments with strings=False), keeping
    every character's position (line numbers hold)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        # Everything up to the next `/`, `"` or `'` is kept as it is, in one piece.
        special = _COMMENT_OR_QUOTE_RE.search(text, i)
        if special is None:
            out.append(text[i:])
            break
        if special.start() > i:
            out.append(text[i:special.start()])
            i = special.start()
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
            out.append(_NOT_NEWLINE_RE.sub(" ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j, n)
            if strings:
                out.append(c + " " * max(0, j - i - 1) + (c if j < n else ""))
            else:
                out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


_COMMENT_OR_QUOTE_RE = re.compile(r"[/\"']")
_NOT_NEWLINE_RE = re.compile(r"[^\n]")


def _directive(line: str) -> str:
    """A preprocessor line as the compiler reads it: `%:` is `#`."""
    stripped = line.lstrip()
    return "#" + stripped[2:] if stripped.startswith("%:") else line


def check_source(text: str) -> list[Finding]:
    findings: list[Finding] = []
    spliced = splice_lines(text)
    with_strings = strip_comments_and_strings(spliced, strings=False)
    # Headers are read as the preprocessor reads them: continued lines joined, comments blanked
    # (`# /**/ include`), digraphs (`%:include`) normalised.
    for no, raw in enumerate(with_strings.splitlines(), 1):
        line = _directive(raw)
        any_include = _ANY_INCLUDE_RE.match(line)
        if not any_include:
            continue
        m = _INCLUDE_RE.match(line) if any_include.group(1) == "include" else None
        if not m:
            findings.append(Finding(
                no, "banned-header",
                f"#{any_include.group(1)}{any_include.group(2).rstrip()}: only a literal #include of an "
                "allowed header is accepted (no computed includes, #import or #include_next)",
            ))
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
    code = strip_comments_and_strings(spliced)
    # Only the rules that match somewhere in the whole text can match one of its lines (a line's
    # edges read as the newline around it does): the others are not tried line by line. The bare
    # name, searched first, is found wherever the rule is (and fast: a literal start).
    calls = [(regex, why) for (regex, why), name in zip(_CALL_RES, _CALL_NAMES, strict=True)
             if name.search(code) and regex.search(code)]
    for no, line in enumerate(with_strings.splitlines(), 1):
        for m in _HARNESS_MARK_RE.finditer(line):
            findings.append(Finding(no, "harness-mark", f"names {' '.join(m.group(1).split())}: "
                                                        f"{_HARNESS_MARK_WHY}"))
    for no, line in enumerate(code.splitlines(), 1):
        directive = line.lstrip().startswith(("#", "%:"))
        if directive and _ANY_INCLUDE_RE.match(_directive(line)):
            continue
        seen: set[int] = set()
        for regex, why in calls:
            for m in regex.finditer(line):
                seen.add(m.start(1))
                verb = "calls" if m.group(2) else "names"
                findings.append(Finding(no, "banned-call", f"{verb} {m.group(1)}: {why}"))
        findings.extend(_name_findings(no, line, seen))
        for m in _LOAD_TIME_RE.finditer(line):
            findings.append(Finding(no, "banned-call", f"uses {m.group(1) or m.group(2)}: {_LOAD_TIME_WHY}"))
        for m in _PASTE_RE.finditer(line):
            findings.append(Finding(
                no, "banned-call",
                f"uses {m.group(0).strip()}: token pasting, digraph directives and universal "
                "character names build names these checks cannot read",
            ))
        if directive:
            continue
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
    findings.extend(_asm_findings(code, with_strings, _macros(with_strings)))
    return sorted(_unique(findings), key=lambda f: f.line)


def _name_findings(no: int, text: str, seen: set[int] | None = None) -> list[Finding]:
    """Driver-API names other than the allowed one, and run-time function look-ups, wherever
    they appear in `text` (a call, a pointer, a macro body, an asm string)."""
    found: list[Finding] = []
    for m in _LOOKUP_RE.finditer(text):
        found.append(Finding(no, "banned-call", f"names {m.group(1)}: {_LOOKUP_WHY}"))
    for m in _DRIVER_NAME_RE.finditer(text):
        name = m.group(1)
        if name in ALLOWED_DRIVER_CALLS or (seen is not None and m.start(1) in seen):
            continue
        found.append(Finding(
            no, "banned-call",
            f"names {name}: the only driver function a kernel may use is "
            f"{', '.join(sorted(ALLOWED_DRIVER_CALLS))} (the harness provides it)",
        ))
    return found


_DEFINE_RE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*define[ \t]+([A-Za-z_]\w*)(?:\([^)]*\))?(.*)$", re.M)
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


def _macros(with_strings: str) -> dict[str, str]:
    """Object- and function-like macros and their bodies (continued lines already joined), so
    that an asm statement's string built from macros (`#define OP ".by" "te"`) is read expanded."""
    return {m.group(1): m.group(2) for m in _DEFINE_RE.finditer(with_strings)}


def _expand(body: str, macros: dict[str, str], depth: int = 8) -> str:
    """Macro names in `body` replaced by their bodies, as far as a text check can (no arguments
    substituted; stringizing `#x` gives the argument's text, which stays a literal here)."""
    for _ in range(depth):
        changed = False

        def one(m: re.Match[str]) -> str:
            nonlocal changed
            if m.group(0) in macros:
                changed = True
                return " " + macros[m.group(0)] + " "
            return m.group(0)

        # Only outside literals: a name inside a string is text, not a macro.
        parts = re.split(r'("(?:[^"\\\n]|\\.)*")', body)
        body = "".join(p if i % 2 else _IDENT_RE.sub(one, p) for i, p in enumerate(parts))
        if not changed:
            break
    return body


def _asm_findings(code: str, with_strings: str, macros: dict[str, str] | None = None) -> list[Finding]:
    """asm statements keep their text in strings, which the other rules blank out: a host asm
    `call cuLaunchKernel` or `call dlsym@PLT` is read here, and so are raw-byte directives
    (`.byte 0x0f, 0x05`), with adjacent literals joined and macros expanded."""
    found: list[Finding] = []
    macros = macros or {}
    for m in _ASM_RE.finditer(code):
        start = code.find("(", m.end())
        if start < 0:
            continue
        depth, end = 0, start
        for end in range(start, len(code)):
            if code[end] == "(":
                depth += 1
            elif code[end] == ")":
                depth -= 1
                if depth == 0:
                    break
        no = code.count("\n", 0, m.start()) + 1
        body = _expand(with_strings[start:end + 1], macros)
        found.extend(_name_findings(no, body))
        # What the assembler and linker read: adjacent literals joined ("dl" "open") and escapes
        # decoded ("\x63uLaunchKernel"), so an asm label cannot spell a refused name in pieces.
        for joined in _joined_literals(body):
            found.extend(_name_findings(no, joined))
            for c in _RAW_OPCODE_RE.finditer(joined):
                found.append(Finding(no, "raw-opcode", f"uses .{c.group(1)} in asm: {_RAW_OPCODE_WHY}"))
            for c in _HARNESS_MARK_RE.finditer(joined):
                found.append(Finding(no, "harness-mark", f"names {' '.join(c.group(1).split())} in asm: "
                                                         f"{_HARNESS_MARK_WHY}"))
            for c in _ASM_LOAD_TIME_RE.finditer(joined):
                found.append(Finding(no, "banned-call", f"names {c.group(0)} in asm: code or symbols the "
                                                        "loader runs or shares at load time"))
            for regex, why in _CALL_RES:
                for c in regex.finditer(joined):
                    found.append(Finding(no, "banned-call", f"names {c.group(1)} in asm: {why}"))
    return _unique(found)


_LITERAL_RE = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_ESCAPE_RE = re.compile(r"\\(x[0-9A-Fa-f]+|[0-7]{1,3}|.)")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def _decode(literal: str) -> str:
    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if e[0] == "x" and len(e) > 1:  # a bare \x (no hex digit) is nvcc's error to report
            return chr(int(e[1:], 16) % 0x110000)
        if e[0] in "01234567":
            return chr(int(e, 8))
        return _SIMPLE_ESCAPES.get(e, e)
    return _ESCAPE_RE.sub(one, literal)


def _joined_literals(body: str) -> list[str]:
    """The string literals of an asm statement, each run of adjacent ones (only whitespace
    between them) joined into one, escapes decoded."""
    runs: list[str] = []
    last_end = -1
    for m in _LITERAL_RE.finditer(body):
        text = _decode(m.group(1))
        if runs and body[last_end:m.start()].strip() == "":
            runs[-1] += text
        else:
            runs.append(text)
        last_end = m.end()
    return runs


def _unique(found: list[Finding]) -> list[Finding]:
    seen: set[tuple[int, str]] = set()
    out = []
    for f in found:
        if (f.line, f.message) not in seen:
            seen.add((f.line, f.message))
            out.append(f)
    return out


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
