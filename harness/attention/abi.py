"""ABI v1 of attention forward, seen from Python: the argument struct and the library loader."""

from __future__ import annotations

import ctypes
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness.problem_interface import LoadedKernel

ABI_VERSION = 1
CUDA_ERROR_NOT_SUPPORTED = 801


class SocraticAttentionArgs(ctypes.Structure):
    """Mirror of kernels/attention/contract.h; field order and types must match exactly."""

    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("q_batch_stride", ctypes.c_longlong),
        ("q_row_stride", ctypes.c_longlong),
        ("q_head_stride", ctypes.c_longlong),
        ("k_batch_stride", ctypes.c_longlong),
        ("k_row_stride", ctypes.c_longlong),
        ("k_head_stride", ctypes.c_longlong),
        ("v_batch_stride", ctypes.c_longlong),
        ("v_row_stride", ctypes.c_longlong),
        ("v_head_stride", ctypes.c_longlong),
        ("o_batch_stride", ctypes.c_longlong),
        ("o_row_stride", ctypes.c_longlong),
        ("o_head_stride", ctypes.c_longlong),
        ("batch", ctypes.c_int),
        ("seqlen_q", ctypes.c_int),
        ("seqlen_k", ctypes.c_int),
        ("heads_q", ctypes.c_int),
        ("heads_kv", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("causal", ctypes.c_int),
        ("softmax_scale", ctypes.c_float),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_ulonglong),
    ]


@dataclass
class AttentionBuffers:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    workspace: torch.Tensor | None
    causal: bool
    scale: float

    def to_args(self) -> SocraticAttentionArgs:
        q, k, v, o = self.q, self.k, self.v, self.o
        ws = self.workspace
        return SocraticAttentionArgs(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
            q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3],
            int(self.causal), self.scale,
            ws.data_ptr() if ws is not None and ws.numel() else None,
            ws.numel() * ws.element_size() if ws is not None else 0,
        )


class LibraryKernel(LoadedKernel):
    """A compiled candidate: socratic_attention_forward from a shared library."""

    def __init__(self, label: str, path: str) -> None:
        self.label = label
        self.lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        try:
            self._forward = self.lib.socratic_attention_forward
        except AttributeError as exc:
            raise RuntimeError(
                f"{label}: the library does not export socratic_attention_forward "
                "(declare it extern \"C\" as in contract.h)"
            ) from exc
        self._forward.restype = ctypes.c_int
        self._forward.argtypes = [ctypes.POINTER(SocraticAttentionArgs), ctypes.c_void_p]
        self._workspace = getattr(self.lib, "socratic_attention_workspace", None)
        if self._workspace is not None:
            self._workspace.restype = ctypes.c_ulonglong
            self._workspace.argtypes = [ctypes.POINTER(SocraticAttentionArgs)]
        self._last_error = getattr(self.lib, "socratic_harness_last_error", None)
        if self._last_error is not None:
            self._last_error.restype = ctypes.c_int
        self._reset_l2 = getattr(self.lib, "socratic_harness_reset_persisting_l2", None)
        if self._reset_l2 is not None:
            self._reset_l2.restype = ctypes.c_longlong
        self._error_name = getattr(self.lib, "socratic_harness_error_name", None)
        if self._error_name is not None:
            self._error_name.restype = ctypes.c_char_p
            self._error_name.argtypes = [ctypes.c_int]

    def workspace_bytes(self, buffers: AttentionBuffers) -> int:
        if self._workspace is None:
            return 0
        args = buffers.to_args()
        return int(self._workspace(ctypes.byref(args)))

    def __call__(self, buffers: AttentionBuffers, stream: int) -> int:
        args = buffers.to_args()
        return int(self._forward(ctypes.byref(args), ctypes.c_void_p(stream)))

    def last_error(self) -> int:
        return int(self._last_error()) if self._last_error is not None else 0

    def reset_persisting_l2(self) -> int:
        return int(self._reset_l2()) if self._reset_l2 is not None else -1

    def error_name(self, code: int) -> str:
        if self._error_name is not None:
            name = self._error_name(code)
            if name:
                return str(name.decode())
        return super().error_name(code)


class PythonKernel(LoadedKernel):
    """A kernel written in Python (`module:function`), for CPU tests of the harness itself.
    The function takes AttentionBuffers and returns an error code."""

    def __init__(self, label: str, target: str) -> None:
        self.label = label
        module, _, func = target.partition(":")
        fn: Callable[..., Any] = getattr(importlib.import_module(module), func)
        self._fn = fn
        self._ws = getattr(importlib.import_module(module), func + "_workspace", None)

    def workspace_bytes(self, buffers: AttentionBuffers) -> int:
        return int(self._ws(buffers)) if self._ws is not None else 0

    def __call__(self, buffers: AttentionBuffers, stream: int) -> int:
        return int(self._fn(buffers))
