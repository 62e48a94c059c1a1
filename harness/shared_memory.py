"""Dynamic shared memory, which `ptxas -v` does not report: a TMA kernel that keeps its tiles in
`extern __shared__` memory shows "0 bytes smem" there while it runs with ~200 KB.

`requests(source)` finds, in the source, where each kernel's dynamic shared memory is set:

  opt-in   cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, BYTES)
  launch   kernel<<<grid, block, BYTES, stream>>>, or `cfg.dynamicSmemBytes = BYTES` before
           cudaLaunchKernelEx(&cfg, kernel, ...)

`attach(kernels, source, ...)` gives each kernel ptxas built the bytes of the requests that
name it, with that instance's template arguments: a literal is read here; any other expression
(`Sm90Cfg<D>::kSmem`) is evaluated by the compiler's front end. A copy of the source gets, for
each (request, instance), a function that declares an object of an incomplete class template
whose argument is the value, and nvcc's error message names the value. Nothing is linked or
run. What cannot be evaluated (a value known only at run time) is reported as written, with
its line: "set at launch", never 0."""

from __future__ import annotations

import ast
import operator
import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.static_checks import splice_lines, strip_comments_and_strings

OPT_IN, LAUNCH = "opt-in", "launch"
STATIC_LIMIT = 48 * 1024  # a launch above this needs the opt-in, else cudaErrorInvalidValue
# The most dynamic shared memory one CTA may opt in to (CUDA C++ Programming Guide, the table of
# compute capabilities: 227 KB on 9.0 and 10.0, 163 KB on 8.0 and 8.7, 99 KB on 8.6, 8.9, 12.0).
OPT_IN_LIMIT = {"sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_87": 163 * 1024, "sm_89": 99 * 1024,
                "sm_90": 227 * 1024, "sm_100": 227 * 1024, "sm_120": 99 * 1024}
PROBE_TIMEOUT_S = 120
MAX_PROBES = 90  # the front end stops after 100 errors
_PROBE_TYPE = "socratic_smem_value"
_PROBE_ERROR = re.compile(r"\((\d+)\): error: incomplete type \"" + _PROBE_TYPE + r"<(-?\d+)[A-Za-z]*>\"")
_IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Request:
    """One place the source sets a kernel's dynamic shared memory."""

    kernel: str  # the kernel's name as written, without namespaces or template arguments
    args: tuple[str, ...]  # its template arguments as written there: ("D", "true")
    expression: str  # the bytes as written: "Sm90Cfg<D>::kSmem"
    how: str  # OPT_IN or LAUNCH
    line: int
    # The function around it: its template parameters (declaration, name, default), the
    # namespaces around it ("" for an anonymous one) and the aliases and constants it declared
    # before this line (a probe needs them to read the expression as the compiler does).
    params: tuple[tuple[str, str, str], ...] = ()
    namespaces: tuple[str, ...] = ()
    local_decls: tuple[str, ...] = ()

    def written(self) -> str:
        args = f"<{', '.join(self.args)}>" if self.args else ""
        return f"{self.kernel}{args}"

    def describe(self) -> str:
        """Where and how, with the kernel as written: "attn<D>: launch Cfg<D>::kSmem (line 40)"."""
        where = "opt-in (cudaFuncSetAttribute)" if self.how == OPT_IN else "launch"
        return f"{self.written()}: {where} {self.expression} (line {self.line})"


# -- reading the source ---------------------------------------------------------------------


def _match_close(code: str, start: int, pairs: str = "()") -> int:
    """Index of the bracket closing the one at `start`, or -1."""
    depth = 0
    for i in range(start, len(code)):
        if code[i] == pairs[0]:
            depth += 1
        elif code[i] == pairs[1]:
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments; `<` opens a template argument list when it follows
    a name with no space (`Cfg<D, Dec>::kSmem`), never a comparison written `a < b`."""
    out, depth, angle, start = [], 0, 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "<" and i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_") and text[i + 1:i + 2] != "<":
            angle += 1
        elif ch == ">" and angle > 0 and text[i - 1:i] != "-":
            angle -= 1
        elif ch == "," and depth == 0 and angle == 0:
            out.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    if last or out:
        out.append(last)
    return out


def kernel_ref(expr: str) -> tuple[str, tuple[str, ...]] | None:
    """`&fam::attn_fwd<D, true>`, `(const void*)k`, `reinterpret_cast<void*>(k<D>)` -> the
    kernel's last name and its template arguments as written."""
    text = expr.strip()
    while text.endswith(")"):
        text = text[:-1].rstrip()
    args: tuple[str, ...] = ()
    if text.endswith(">"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(text[i], 0)
            if depth == 0:
                args = tuple(split_args(text[i + 1:-1]))
                text = text[:i].rstrip()
                break
        else:
            return None
    m = re.search(r"([A-Za-z_]\w*)$", text)
    return (m.group(1), args) if m else None


@dataclass
class _Block:
    open: int
    close: int
    header: str
    kind: str  # namespace | function | lambda | transparent | other
    name: str = ""
    params: tuple[tuple[str, str, str], ...] = ()


_CONTROL = re.compile(r"^(if|for|while|switch|catch|do|else|return|case)\b")
_TYPE_HEAD = re.compile(r"\b(struct|class|union|enum)\b")


def _template_params(header: str) -> tuple[tuple[tuple[str, str, str], ...], str] | None:
    """The parameters of a leading `template <...>` and the rest of the header; None when the
    header has no template or a parameter this reader does not take (packs, template templates)."""
    m = re.match(r"\s*template\s*<", header)
    if not m:
        return None
    depth, i = 0, m.end() - 1
    for j in range(i, len(header)):
        depth += {"<": 1, ">": -1}.get(header[j], 0)
        if depth == 0:
            inner, rest = header[i + 1:j], header[j + 1:]
            break
    else:
        return None
    params = []
    for part in split_args(inner):
        if not part:
            continue
        decl, _, default = part.partition("=")
        decl = decl.strip()
        if "..." in decl or decl.startswith("template"):
            return (), rest
        name = _IDENT.findall(decl)
        if not name:
            return (), rest
        params.append((decl[: decl.rfind(name[-1])].strip(), name[-1], default.strip()))
    return tuple(params), rest


def _blocks(code: str) -> list[_Block]:
    blocks: list[_Block] = []
    stack: list[int] = []
    for i, ch in enumerate(code):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            start = stack.pop()
            head_start = max(code.rfind(";", 0, start), code.rfind("{", 0, start), code.rfind("}", 0, start)) + 1
            header = "\n".join(line for line in code[head_start:start].split("\n")
                               if not line.lstrip().startswith("#")).strip()
            blocks.append(_classify(_Block(start, i, header, "other")))
    return sorted(blocks, key=lambda b: b.open)


def _classify(b: _Block) -> _Block:
    h = b.header
    ns = re.fullmatch(r"(?:inline\s+)?namespace\s*([\w:]*)", h)
    if ns:
        b.kind, b.name = "namespace", ns.group(1)
        return b
    if re.fullmatch(r"extern\s*\"\s*\"", h):
        b.kind = "transparent"
        return b
    tp = _template_params(h)
    rest = tp[1] if tp else h
    if "](" in rest.replace(" ", "") or rest.endswith("]"):
        b.kind = "lambda"
    elif "(" in rest and not _CONTROL.match(rest) and not _TYPE_HEAD.search(rest.split("(")[0]):
        b.kind = "function"
        b.params = tp[0] if tp else ()
    return b


def _line(code: str, pos: int) -> int:
    return code.count("\n", 0, pos) + 1


def _context(blocks: Sequence[_Block], code: str, pos: int) -> tuple[tuple[tuple[str, str, str], ...],
                                                                     tuple[str, ...], tuple[str, ...]]:
    """The template parameters of the outermost function around `pos`, the namespaces around
    it, and the `using X = ...;` / `constexpr T X = ...;` in scope before `pos` in that function."""
    around = [b for b in blocks if b.open < pos < b.close]
    namespaces = tuple(part for b in around if b.kind == "namespace" for part in (b.name.split("::") or [""]))
    function = next((b for b in around if b.kind == "function"), None)
    if function is None:
        return (), namespaces, ()
    in_scope = [b for b in around if b.open >= function.open]
    decls = []
    decl_re = re.compile(r"(?<=[;{}])\s*((?:using\s+\w+\s*=|(?:static\s+)?constexpr\s+[\w:<>,\s]+?\b\w+\s*=)[^;{}]*;)")
    for m in decl_re.finditer(code, function.open, pos):
        start = m.start(1)
        inner = max((b for b in blocks if b.open < start < b.close), key=lambda b: b.open, default=None)
        if inner is not None and inner in in_scope:
            decls.append(" ".join(m.group(1).split()))
    return function.params, namespaces, tuple(decls)


def requests(source: str) -> list[Request]:
    """Every place the source sets a kernel's dynamic shared memory, in source order."""
    code = strip_comments_and_strings(splice_lines(source))
    blocks = _blocks(code)
    found: list[tuple[int, str, str, str]] = []  # (position, kernel expression, bytes, how)
    for m in re.finditer(r"\bcudaFuncSetAttribute\s*\(", code):
        close = _match_close(code, m.end() - 1)
        args = split_args(code[m.end():close]) if close > 0 else []
        if len(args) == 3 and args[1].endswith("cudaFuncAttributeMaxDynamicSharedMemorySize"):
            found.append((m.start(), args[0], args[2], OPT_IN))
    for m in re.finditer(r"<<<", code):
        end = code.find(">>>", m.end())
        config = split_args(code[m.end():end]) if end > 0 else []
        before = code[max(0, m.start() - 400):m.start()]
        name = re.search(r"([A-Za-z_][\w:]*\s*(?:<[^;{}()]*?>)?)\s*$", before)
        if name and len(config) >= 3:
            found.append((m.start(), name.group(1), config[2], LAUNCH))
    for m in re.finditer(r"\bcudaLaunchKernelEx(?:C)?\s*\(", code):
        close = _match_close(code, m.end() - 1)
        args = split_args(code[m.end():close]) if close > 0 else []
        cfg = re.fullmatch(r"&\s*(\w+)", args[0]) if len(args) >= 2 else None
        if cfg is None:
            continue
        # The config set before this launch in the same function, never another function's `cfg`.
        function = next((b for b in blocks if b.open < m.start() < b.close and b.kind == "function"), None)
        since = function.open if function is not None else 0
        sets = list(re.finditer(rf"\b{cfg.group(1)}\s*\.\s*dynamicSmemBytes\s*=\s*([^;]+);",
                                code[since:m.start()]))
        if sets:
            found.append((m.start(), args[1], sets[-1].group(1), LAUNCH))
    out = []
    for pos, kernel, value, how in sorted(found):
        ref = kernel_ref(kernel)
        if ref is None:
            continue
        params, namespaces, decls = _context(blocks, code, pos)
        out.append(Request(ref[0], ref[1], " ".join(value.split()), how, _line(code, pos), params, namespaces, decls))
    return out


# -- values -------------------------------------------------------------------------------------

_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}


def literal_value(expression: str) -> int | None:
    """An integer expression of literals (`48 * 1024`, `(1 << 16) + 512u`), else None."""
    text = re.sub(r"(?<=\d)[uUlL]+\b", "", expression.strip())
    text = re.sub(r"^static_cast\s*<[^>]*>\s*", "", text)
    text = re.sub(r"\(\s*(?:unsigned\s+)?(?:int|long|size_t|unsigned)\s*\)", "", text)
    if not re.fullmatch(r"[\d\s+\-*/%()<>]+", text or "x"):
        return None
    try:
        tree = ast.parse(text.replace("/", "//"), mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError("not a literal")

    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError):
        return None


def instance(name: str) -> tuple[str, tuple[str, ...]]:
    """A demangled kernel name (`fam::attn_fwd<256, false>`) -> ("attn_fwd", ("256", "false"))."""
    ref = kernel_ref(name)
    return ref if ref is not None else (name, ())


def _norm(v: str) -> str:
    return re.sub(r"(?<=\d)[uUlL]+$", "", v.replace(" ", ""))


def bindings(req: Request, args: tuple[str, ...]) -> dict[str, str] | None:
    """The values of the request's template parameters for this instance, or None when the
    request does not name this instance (another literal argument, another count)."""
    if len(req.args) != len(args):
        return None
    names = {p[1] for p in req.params}
    bound: dict[str, str] = {}
    for written, value in zip(req.args, args, strict=True):
        if written in names:
            if bound.setdefault(written, value) != value:
                return None
        elif re.fullmatch(r"-?\d+[uUlL]*|true|false", written) and _norm(written) != _norm(value):
            return None  # kernel<D, true> does not name kernel<256, false>
    return bound


def _probe(req: Request, bound: dict[str, str]) -> str | None:
    """The body of one probe function, or None when a parameter has no value."""
    # Only the declarations the bytes depend on (last first: a later one may use an earlier one).
    used = set(_IDENT.findall(req.expression))
    decls: list[str] = []
    for decl_text in reversed(req.local_decls):
        declared = re.search(r"(\w+)\s*=", decl_text)
        if declared and declared.group(1) in used:
            decls.insert(0, decl_text)
            used |= set(_IDENT.findall(decl_text.split("=", 1)[1]))
    lines = []
    for decl, name, default in req.params:
        value = bound.get(name, default)
        if not value and name not in used:
            continue  # a parameter of the function that the bytes do not depend on
        if not value:
            return None
        if decl in ("typename", "class"):
            lines.append(f"using {name} = {value};")
        else:
            lines.append(f"constexpr {decl} {name} = {value};")
    lines.extend(decls)
    lines.append(f"::{_PROBE_TYPE}<(long long)({req.expression})> socratic_smem_v;")
    return "\n".join(lines)


class Compiler(Protocol):
    def __call__(self, source: Path) -> str: ...


def nvcc_front_end(nvcc: str, flags: Sequence[str]) -> Compiler:
    """Runs nvcc's front end only (`-cuda`: no device code, no object, no link) and returns its
    messages."""
    def run(source: Path) -> str:
        try:
            out = subprocess.run([nvcc, "-x", "cu", *flags, "-cuda", "-o", "/dev/null", str(source)],
                                 capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, cwd=source.parent)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"probe failed: {exc}"
        return out.stdout + out.stderr
    return run


def evaluate(source: str, probes: dict[str, tuple[tuple[str, ...], str]], compiler: Compiler) -> dict[str, int]:
    """The value of each probe (key -> namespaces and body) the front end evaluated."""
    if not probes:
        return {}
    text = source.rstrip("\n") + f"\n\ntemplate <long long N> struct {_PROBE_TYPE};\n"
    line_of: dict[int, str] = {}
    for n, (key, (namespaces, body)) in enumerate(probes.items()):
        text += "".join(f"namespace {part} {{ " for part in namespaces)
        text += f"\ninline void socratic_smem_probe_{n}() {{\n"
        for line in body.split("\n"):
            text += line + "\n"
            if line.startswith(f"::{_PROBE_TYPE}<"):
                line_of[text.count("\n")] = key
        text += "}\n" + "}" * len(namespaces) + "\n"
    with tempfile.TemporaryDirectory(prefix="socratic-smem-") as tmp:
        path = Path(tmp) / "probe.cu"
        path.write_text(text)
        messages = compiler(path)
    values: dict[str, int] = {}
    for m in _PROBE_ERROR.finditer(messages):
        probe = line_of.get(int(m.group(1)))
        if probe is not None:
            values[probe] = int(m.group(2))
    return values


@dataclass
class KernelSmem:
    """What one kernel instance asks for: each request that names it, with its value."""

    found: list[tuple[Request, int | None]] = field(default_factory=list)

    def most(self, how: str) -> int | None:
        values = [v for r, v in self.found if r.how == how and v is not None]
        return max(values) if values else None

    def words(self) -> str:
        """"opt-in 197808 bytes (static_cast<int>(Sm90Cfg<D>::kSmem), line 2171); launch ..."."""
        out = []
        for r, v in self.found:
            value = f"{v} bytes" if v is not None else "set at run time"
            out.append(f"{r.how} {value} ({r.expression}, line {r.line})")
        return "; ".join(out)

    def worth_a_note(self) -> bool:
        return any(v != 0 for _, v in self.found)


def attach(kernels: Sequence[Any], source: str, compiler: Compiler | None = None) -> list[str]:
    """Fills each kernel's dynamic_shared_bytes (the launch's bytes, else the opt-in's),
    dynamic_shared_optin and dynamic_shared (each request, where it is, its value); returns
    notes for people. Without a compiler only literal values are known."""
    reqs = requests(source)
    if not reqs:
        return []
    probes: dict[str, tuple[tuple[str, ...], str]] = {}
    wanted: list[tuple[int, Request, str | None, int | None]] = []
    for i, k in enumerate(kernels):
        base, args = instance(k.name)
        for req in reqs:
            bound = bindings(req, args) if req.kernel == base else None
            if bound is None:
                continue
            value = literal_value(req.expression)
            key = None
            if value is None and (body := _probe(req, bound)) is not None:
                key = "::".join(req.namespaces) + "\0" + body
                if key not in probes and len(probes) < MAX_PROBES:
                    probes[key] = (req.namespaces, body)
            wanted.append((i, req, key, value))
    values = evaluate(source, probes, compiler) if compiler is not None else {}
    per_kernel: dict[int, KernelSmem] = {}
    for i, req, key, value in wanted:
        got = value if value is not None else values.get(key or "")
        per_kernel.setdefault(i, KernelSmem()).found.append((req, got))
    for i, smem in per_kernel.items():
        k = kernels[i]
        k.dynamic_shared_optin = smem.most(OPT_IN)
        launch = smem.most(LAUNCH)
        k.dynamic_shared_bytes = launch if launch is not None else k.dynamic_shared_optin
        k.dynamic_shared = smem.words() if smem.worth_a_note() else ""
    named = {r for smem in per_kernel.values() for r, _ in smem.found}
    return [f"dynamic shared memory: {r.describe()} names no kernel ptxas built" for r in reqs
            if r not in named and literal_value(r.expression) != 0]


def warnings(kernels: Sequence[Any], arch: str) -> list[str]:
    """Launches that will fail: above 48 KB without the opt-in, or above what the GPU allows."""
    out = []
    limit = OPT_IN_LIMIT.get(arch.rstrip("af"))
    for k in kernels:
        launch, optin = getattr(k, "dynamic_shared_bytes", None), getattr(k, "dynamic_shared_optin", None)
        opted = (getattr(k, "dynamic_shared", "") or "").startswith(OPT_IN) or f"; {OPT_IN} " in \
            (getattr(k, "dynamic_shared", "") or "")
        if launch is not None and launch > STATIC_LIMIT and (not opted or (optin is not None and optin < launch)):
            out.append(f"{k.name} launches with {launch} bytes of dynamic shared memory but opts in to "
                       f"{optin if opted and optin is not None else 'none'}: above {STATIC_LIMIT} bytes the launch "
                       "fails (cudaErrorInvalidValue) without cudaFuncSetAttribute(kernel, "
                       "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)")
        total = (launch or 0) + int(getattr(k, "shared_bytes", 0) or 0)
        if limit is not None and total > limit:
            out.append(f"{k.name} needs {total} bytes of shared memory per CTA (static + dynamic), above "
                       f"{arch}'s {limit}")
    return out
