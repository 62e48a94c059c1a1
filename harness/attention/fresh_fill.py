"""The timed calls' fresh Q, K and V, from a counter-based generator: each element is a function
of the call's nonce, the tensor (q, k or v), the distribution and the element's place in the
logical [batch, seq, heads, head_dim] order, so any rows of a call's inputs can be made again
alone. The check of the timed outputs (fresh.py) regenerates the few query rows and (batch, kv
head) blocks of K and V it reads, where a sequential generator (torch's) made all of Q, K and V
of every call a second time (decode: ~775 MB a call).

Two implementations of one function (`values` below is its definition):
- `fresh_fill.cu`, the harness's own kernels, built by nvcc into a library of their own (never
  linked with a candidate) and loaded here: one launch per tensor for a call's inputs, one per
  tensor for a batch of calls' checked rows. The GPU test compares it with `values`.
- torch operations (`values`): the CPU backend's, and the GPU's where the library cannot be
  built (no nvcc beside the worker): the same rows, slower; the report says which ran.

Elements come in pairs (d even, d + 1) sharing one 64-bit SplitMix64 hash of the pair's counter:
two normals by Box-Muller (the distributions "normal" and "large-logits"), or two uniforms
("uniform-shifted"); the transforms are fresh.py's distributions."""

from __future__ import annotations

import ctypes
import hashlib
import math
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.compile import arch_for_capability, compile_kernel

SOURCE = Path(__file__).with_name("fresh_fill.cu")
KINDS = {"q": 0, "k": 1, "v": 2}
DISTS = {"normal": 0, "large-logits": 1, "uniform-shifted": 2}
GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
TWO_POW_M24 = 2.0 ** -24


def _signed(x: int) -> int:
    """A 64-bit pattern as the int64 torch holds it (multiplication wraps the same way)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def _lsr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finalizer on int64 bit patterns (wrapping, as in fresh_fill.cu)."""
    z = z ^ _lsr(z, 30)
    z = z * _signed(MIX1)
    z = z ^ _lsr(z, 27)
    z = z * _signed(MIX2)
    return z ^ _lsr(z, 31)


def stream_key(nonce: int | torch.Tensor, kind: int) -> torch.Tensor:
    """The key of one tensor of a call (or of each call, for a tensor of nonces)."""
    n = nonce if isinstance(nonce, torch.Tensor) else torch.tensor(_signed(nonce), dtype=torch.int64)
    return mix64(n ^ _signed((kind + 1) * GOLDEN))


def values(key: torch.Tensor, pairs: torch.Tensor, kind: int, dist: torch.Tensor | int) -> torch.Tensor:
    """The definition: bf16 values [..., 2 P] of pair counters `pairs` [..., P] (int64) under
    `key` (broadcast against them), of tensor `kind` and distribution `dist` (a code of DISTS,
    or a tensor of codes broadcast like `key`)."""
    h = mix64(key + pairs * _signed(GOLDEN))
    a = _lsr(h, 40).to(torch.float32)
    b = (_lsr(h, 16) & 0xFFFFFF).to(torch.float32)
    # uniform-shifted: [0, 2) for v, [-0.75, 1.25) for q and k
    ua, ub = a * TWO_POW_M24 * 2.0, b * TWO_POW_M24 * 2.0
    if kind != KINDS["v"]:
        ua, ub = ua - 0.75, ub - 0.75
    # normal and large-logits: Box-Muller. The arithmetic steps are the kernel's, rounded in fp32
    # as its are; the radius, sine and cosine are computed in fp64 and rounded to fp32 once (the
    # kernel's logf, sqrtf and sincospif are within an ulp of that; torch's fp32 functions take
    # other code paths for other shapes, so rows made again could differ from the whole tensor).
    u1 = (a + 0.5) * TWO_POW_M24
    angle = (b * TWO_POW_M24 * 2.0).double() * math.pi
    r = torch.sqrt(-2.0 * torch.log(u1.double())).to(torch.float32)
    x = r * torch.cos(angle).to(torch.float32)
    y = r * torch.sin(angle).to(torch.float32)
    codes = torch.as_tensor(dist, device=pairs.device).unsqueeze(-1)  # against the pairs' last dimension
    if kind == KINDS["v"]:
        x, y = x + 0.5, y + 0.5
    else:
        wide = codes == DISTS["large-logits"]
        x, y = torch.where(wide, x * 4.0, x), torch.where(wide, y * 4.0, y)
    uniform = codes == DISTS["uniform-shifted"]
    x, y = torch.where(uniform, ua, x), torch.where(uniform, ub, y)
    return torch.stack([x, y], dim=-1).flatten(-2).to(torch.bfloat16)


@dataclass(frozen=True)
class Logical:
    """A tensor's logical [B, S, H, D] shape (the counters' order)."""

    B: int
    S: int
    H: int
    D: int


class FreshFill:
    """Fresh inputs written in place, and rows of earlier calls' inputs made again, on one
    device: by the harness's kernels where `lib` is loaded, else by torch operations."""

    def __init__(self, lib: ctypes.CDLL | None, why: str) -> None:
        self.lib = lib
        self.why = why  # which implementation, and why, for the report

    # -- one call's inputs ---------------------------------------------------------------------

    def fill(self, dst: torch.Tensor, shape: Logical, nonce: int, kind: str, dist: str) -> None:
        """Write the call's `kind` tensor into `dst` ([B, S, H, D] with unit stride in D, any
        other strides: K and V interleaved in one buffer included)."""
        if tuple(dst.shape) != (shape.B, shape.S, shape.H, shape.D) or dst.dtype != torch.bfloat16:
            raise ValueError(f"fresh inputs go into a bf16 tensor of shape {shape}, not "
                             f"{dst.dtype} {tuple(dst.shape)}")  # the kernel writes B*S*H rows
        if dst.stride(-1) != 1 or shape.D % 2:
            raise ValueError("fresh inputs need an even head_dim stored contiguously")
        if self.lib is not None and dst.is_cuda:
            sb, ss, sh, _ = dst.stride()
            rc = self.lib.socratic_fresh_fill(
                dst.data_ptr(), shape.B, shape.S, shape.H, shape.D, sb, ss, sh,
                ctypes.c_ulonglong(nonce & ((1 << 64) - 1)), KINDS[kind], DISTS[dist], _stream(dst))
            _raise_for(rc, "socratic_fresh_fill")
            return
        pairs = torch.arange(shape.B * shape.S * shape.H * shape.D // 2, device=dst.device,
                             dtype=torch.int64).view(shape.B, shape.S, shape.H, shape.D // 2)
        dst.copy_(values(stream_key(nonce, KINDS[kind]).to(dst.device), pairs, KINDS[kind], DISTS[dist]))

    def full(self, shape: Logical, nonce: int, kind: str, dist: str, device: torch.device) -> torch.Tensor:
        t = torch.empty((shape.B, shape.S, shape.H, shape.D), dtype=torch.bfloat16, device=device)
        self.fill(t, shape, nonce, kind, dist)
        return t

    # -- rows of many calls, for the check -----------------------------------------------------

    def rows(self, desc: torch.Tensor, calls: CallTable, shape: Logical, kind: str) -> torch.Tensor:
        """Rows of the calls' `kind` tensors: desc [R, 4] int64 on the device, each (call index
        in `calls`, b, s, h); [R, D]."""
        return self._rows(desc, calls, shape, kind, blocks=False).view(desc.shape[0], shape.D)

    def blocks(self, desc: torch.Tensor, calls: CallTable, shape: Logical, kind: str) -> torch.Tensor:
        """Whole (b, h) blocks of the calls' `kind` tensors: desc as in rows() with s ignored;
        [R, S, D]."""
        return self._rows(desc, calls, shape, kind, blocks=True)

    def _rows(self, desc: torch.Tensor, calls: CallTable, shape: Logical, kind: str, blocks: bool) -> torch.Tensor:
        count = desc.shape[0]
        span = shape.S if blocks else 1
        out = torch.empty((count, span, shape.D), dtype=torch.bfloat16, device=desc.device)
        if self.lib is not None and desc.is_cuda:
            rc = self.lib.socratic_fresh_rows(
                out.data_ptr(), desc.data_ptr(), count, int(blocks), calls.nonces.data_ptr(),
                calls.dists.data_ptr(), shape.S, shape.H, shape.D, KINDS[kind], _stream(desc))
            _raise_for(rc, "socratic_fresh_rows")
        elif count:
            call, b, s, h = desc.unbind(1)
            s = torch.arange(span, device=desc.device).expand(count, span) if blocks else s.unsqueeze(1)
            row = (b.unsqueeze(1) * shape.S + s) * shape.H + h.unsqueeze(1)  # [R, span]
            pairs = row.unsqueeze(-1) * (shape.D // 2) + torch.arange(shape.D // 2, device=desc.device)
            key = stream_key(calls.nonces[call], KINDS[kind]).view(count, 1, 1)
            out.copy_(values(key, pairs, KINDS[kind], calls.dists[call].long().view(count, 1)))
        return out

    def take(self, desc: torch.Tensor, calls: CallTable, outs: Sequence[torch.Tensor], shape: Logical) -> torch.Tensor:
        """Rows of the calls' kept outputs (contiguous [B, S, H, D] each): desc as in rows();
        [R, D]."""
        count = desc.shape[0]
        if self.lib is not None and desc.is_cuda:
            out = torch.empty((count, shape.D), dtype=torch.bfloat16, device=desc.device)
            rc = self.lib.socratic_take_rows(out.data_ptr(), desc.data_ptr(), count,
                                             calls.sources.data_ptr(), shape.S, shape.H, shape.D,
                                             _stream(desc))
            _raise_for(rc, "socratic_take_rows")
            return out
        call, b, s, h = desc.unbind(1)
        out = torch.empty((count, shape.D), dtype=torch.bfloat16, device=desc.device)
        for i, o in enumerate(outs):
            mine = call == i
            out[mine] = o[b[mine], s[mine], h[mine]]
        return out


@dataclass(frozen=True)
class CallTable:
    """Per call of a batch, on the device: its nonce (int64 bits), distribution code and the
    address of its kept output."""

    nonces: torch.Tensor
    dists: torch.Tensor  # int32
    sources: torch.Tensor  # int64 addresses

    @staticmethod
    def columns(nonce: int, dist: str, out: torch.Tensor) -> list[int]:
        """The three int64 columns of one call, for a table uploaded with other integers."""
        if not out.is_contiguous():
            raise ValueError("a kept output must be contiguous")
        return [_signed(nonce), DISTS[dist], out.data_ptr()]

    @classmethod
    def from_columns(cls, table: torch.Tensor) -> CallTable:
        """table [C, 3] int64 (columns())."""
        return cls(table[:, 0].contiguous(), table[:, 1].to(torch.int32), table[:, 2].contiguous())


def _stream(t: torch.Tensor) -> int:
    return int(torch.cuda.current_stream(t.device).cuda_stream)


def _raise_for(rc: int, name: str) -> None:
    if rc != 0:
        raise RuntimeError(f"the harness's fresh-input kernel {name} failed: CUDA error {rc}")


# -- the library: built once per machine (compile cache), loaded once per process ----------------

_LOCK = threading.Lock()
_BUILD: Future[Path] | None = None
# (path, sha256) of the library the evaluation's caller built and signed (WorkerJob.harness_libraries).
PREBUILT: tuple[str, str] | None = None
_LOADED: dict[str, FreshFill] = {}


def start_build(arch: str) -> None:
    """Start nvcc on fresh_fill.cu in a thread (a cache hit returns at once); the worker calls
    this as soon as it knows its job is on a GPU, so that the build runs beside the candidate's."""
    global _BUILD
    with _LOCK:
        if _BUILD is not None:
            return
        _BUILD = Future()
        build = _BUILD

    def run() -> None:
        try:
            if PREBUILT is not None:  # built and digest-recorded by the caller's process
                path, sha = PREBUILT
                if hashlib.sha256(Path(path).read_bytes()).hexdigest() != sha:
                    raise RuntimeError("the fresh-input library changed after it was built")
                build.set_result(Path(path))
                return
            # No key here (an evaluation worker): the compile cache's copy, unsigned.
            build.set_result(compile_kernel(SOURCE, arch=arch, signed=False).library)
        except BaseException as exc:  # reported by for_device, never raised in this thread
            build.set_exception(exc)

    threading.Thread(target=run, name="socratic-fresh-fill", daemon=True).start()


def use_prebuilt(path: str, sha256: str) -> None:
    """The library the evaluation's caller built and signed: used from here on where nothing was
    built yet, and the one this process already loaded must have its digest (a warmed worker
    builds before its job arrives)."""
    global PREBUILT
    PREBUILT = (path, sha256)
    with _LOCK:
        build = _BUILD
    if build is None or not build.done() or build.exception() is not None:
        return
    if hashlib.sha256(Path(build.result()).read_bytes()).hexdigest() != sha256:
        raise RuntimeError("the harness's fresh-input library in the compile cache differs from the one "
                           "the evaluation's caller built (rewritten since it was built)")


def for_device(device: torch.device, wait_s: float = 300.0) -> FreshFill:
    """The implementation for `device`: the kernels on a GPU (built now if start_build was not
    called), torch operations on the CPU or where the kernels cannot be had."""
    if device.type != "cuda":
        return FreshFill(None, "torch operations (CPU backend)")
    key = str(device)
    if key in _LOADED:
        return _LOADED[key]
    start_build(arch_for_capability(*torch.cuda.get_device_capability(device)))
    assert _BUILD is not None
    try:
        lib = ctypes.CDLL(str(_BUILD.result(timeout=wait_s)), mode=ctypes.RTLD_LOCAL)
        for name, args in (
            ("socratic_fresh_fill", [ctypes.c_void_p, *[ctypes.c_longlong] * 7, ctypes.c_ulonglong,
                                     ctypes.c_int, ctypes.c_int, ctypes.c_void_p]),
            ("socratic_fresh_rows", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong,
                                     ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                     *[ctypes.c_longlong] * 3, ctypes.c_int, ctypes.c_void_p]),
            ("socratic_take_rows", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong,
                                    ctypes.c_void_p, *[ctypes.c_longlong] * 3, ctypes.c_void_p]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, args
        fill = FreshFill(lib, "the harness's kernels (fresh_fill.cu)")
    except Exception as exc:
        text = str(exc).strip().splitlines()
        fill = FreshFill(None, f"torch operations: the harness's kernels are unavailable "
                               f"({type(exc).__name__}: {text[0] if text else ''})"[:300])
    _LOADED[key] = fill
    return fill
