"""One scenario's attention forward, three calls, for Nsight Compute to profile one launch.

    python3 scripts/ncu_drive.py KERNEL.cu|fa3 SCENARIO

KERNEL.cu is built through the harness (compile cache included) and called through the ABI with
the scenario's shapes (contiguous Q/K/V/O, the default softmax scale, a workspace of the size the
kernel asks for); `fa3` calls FlashAttention-3's `flash_attn_func` on the same tensors. Nothing is
checked or timed: `scripts/ncu_pair_gpu.sh` runs this under `ncu --launch-skip 2 --launch-count 1`.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    which, name = argv
    import torch

    from harness.attention.abi import AttentionBuffers, LibraryKernel
    from harness.attention.suite import default_suite
    from harness.compile import compile_kernel

    found = [s for s in default_suite() if s.name == name]
    if not found:
        print(f"no scenario named {name!r} in the suite", file=sys.stderr)
        return 2
    s = found[0]
    dev = torch.device("cuda")
    q = torch.randn(s.batch, s.seqlen_q, s.heads_q, s.head_dim, device=dev, dtype=torch.bfloat16)
    k = torch.randn(s.batch, s.seqlen_k, s.heads_kv, s.head_dim, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    if which == "fa3":
        from fa3_fwd_interface import flash_attn_func

        for _ in range(3):
            flash_attn_func(q, k, v, causal=s.causal)
    else:
        lib = LibraryKernel("kernel", str(compile_kernel(Path(which), arch="sm_90a").library))
        buffers = AttentionBuffers(q, k, v, torch.empty_like(q), None, s.causal, s.head_dim**-0.5)
        buffers.workspace = torch.empty(max(lib.workspace_bytes(buffers), 1), dtype=torch.uint8, device=dev)
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(3):
            status = lib(buffers, stream)
            if status != 0:
                print(f"the kernel returned {status} on {name}", file=sys.stderr)
                return 1
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
