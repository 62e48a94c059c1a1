"""One scenario's attention forward, three calls, for Nsight Compute to profile one launch.

    python3 scripts/ncu_drive.py KERNEL.cu|fa3 SCENARIO

KERNEL.cu is built through the harness (compile cache included) and called through the ABI with
the scenario's shapes (contiguous Q/K/V/O, the default softmax scale, a workspace of the size the
kernel asks for); `fa3` calls FlashAttention-3 on the same tensors through the harness's FA3 peer
(`harness/attention/peers.py: Fa3Peer`, split-KV left to FA3's own choice as in every report). Nothing is
checked or timed: `scripts/ncu_pair_gpu.sh` runs this under `ncu --launch-skip 2 --launch-count 1`.
`scenario_call` is the same call for other drivers (`scripts/clock_pair_gpu.py`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def scenario_call(which: str, name: str) -> Callable[[], None]:
    """A zero-argument call of KERNEL.cu (or `fa3`) on fresh random inputs of scenario `name`,
    on the current stream; raises ValueError for an unknown scenario, RuntimeError for a kernel
    that returns an error."""
    import torch

    from harness.attention.abi import AttentionBuffers, LibraryKernel
    from harness.attention.suite import default_suite
    from harness.compile import compile_kernel

    found = [s for s in default_suite() if s.name == name]
    if not found:
        raise ValueError(f"no scenario named {name!r} in the suite")
    s = found[0]
    dev = torch.device("cuda")
    q = torch.randn(s.batch, s.seqlen_q, s.heads_q, s.head_dim, device=dev, dtype=torch.bfloat16)
    k = torch.randn(s.batch, s.seqlen_k, s.heads_kv, s.head_dim, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    buffers = AttentionBuffers(q, k, v, torch.empty_like(q), None, s.causal, s.head_dim**-0.5)
    if which == "fa3":  # the harness's own FA3 peer: the same arguments (num_splits=0) as a report's
        from harness.attention.peers import Fa3Peer, load_fa3

        fn, why = load_fa3()
        if fn is None:
            raise RuntimeError(why)
        peer = Fa3Peer(fn, s)
        return lambda: peer(buffers)
    lib = LibraryKernel("kernel", str(compile_kernel(Path(which), arch="sm_90a").library))
    buffers.workspace = torch.empty(max(lib.workspace_bytes(buffers), 1), dtype=torch.uint8, device=dev)

    def call() -> None:
        status = lib(buffers, torch.cuda.current_stream().cuda_stream)
        if status != 0:
            raise RuntimeError(f"the kernel returned {status} on {name}")

    return call


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    import torch

    try:
        call = scenario_call(*argv)
    except ValueError as exc:  # an unknown scenario, named before the GPU is touched
        print(exc, file=sys.stderr)
        return 2
    try:
        for _ in range(3):
            call()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
