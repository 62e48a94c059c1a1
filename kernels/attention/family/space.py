"""The knob space of the attention kernel family: layers -> knobs -> values, a `Knobs`
setting with `validate()`, parsing (`key=value,...` or JSON) and neighbours within a layer.

The offline search agent imports this module: it moves greedily inside one layer
(`neighbours(k, layer)`) and a question moves it to another layer.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

HEAD_DIMS = (64, 128, 256)
# Largest dynamic shared memory a CTA may opt into on sm_90 (227 KB).
MAX_SMEM_BYTES = 232_448
# Fragment registers a thread may hold (O accumulators, S accumulators, Q fragments) before
# the kernel would spill: 255 registers minus room for addresses, masks and softmax state.
MAX_FRAGMENT_REGS = 208
# The Hopper layer (mma=wgmma): a consumer thread holds S (block_n / 2 fp32), O (head_dim / 2)
# and P (block_n / 4 packed bf16) across a key block, out of the 232 registers setmaxnreg gives
# it; the rest is addresses, masks and softmax state. d128 with FA3's 176-key blocks (88 + 64 + 44)
# builds without spills (nvcc 13, the gallery's wgmma-tma-d setting, stop 26).
WG_MAX_FRAGMENT_REGS = 196
# Three consumer warpgroups (wg_wide_d64) get 160 registers each; at d64 block_n 128 (128 of
# fragments) builds without spills, so that is the cap.
WG_WIDE_MAX_FRAGMENT_REGS = 128

# Tile shapes "BMxBNxW": query rows, keys per block, warps. Rows per warp must be 16 or 32.
TILES = ("64x32x4", "64x64x4", "64x128x4", "128x32x4", "128x64x4", "128x128x4",
         "128x32x8", "128x64x8", "128x128x8")



def _tile_fits(tile: str, d: int) -> bool:
    """Whether a tile can be valid at head_dim d at all (Q in shared memory, one stage)."""
    bm, bn, w = (int(x) for x in tile.split("x"))
    rpw = bm // w
    regs = rpw * d // 32 + rpw * bn // 32
    smem = (bm * d + 2 * bn * d) * 2
    return rpw in (16, 32) and regs <= MAX_FRAGMENT_REGS and smem <= MAX_SMEM_BYTES


def tiles_for(d: int) -> tuple[str, ...]:
    return tuple(t for t in TILES if _tile_fits(t, d))


# layer -> knob -> allowed values (the first value of each knob is not the default; see
# default_knobs()). Every value is rendered into a genuinely different kernel.
KNOB_SPACE: dict[str, dict[str, tuple[Any, ...]]] = {
    "tiling": {
        "tile_d64": tiles_for(64),
        "tile_d128": tiles_for(128),
        "tile_d256": tiles_for(256),
        "decode_tile": ("off", "16x32x1", "16x64x1", "32x32x2", "32x64x2"),  # few-row (decode) groups
        # warps per row warp of the decode tile, splitting every block's keys (merged at the end)
        "decode_kv_warps": (1, 2, 4),
        # Hopper layer (mma=wgmma only): keys per block per head_dim, and consumer warpgroups of
        # 64 query rows each (the CTA's query tile is 64 x consumers).
        "wg_block_n_d64": (128, 64, 192),
        "wg_block_n_d128": (128, 64, 96, 176),  # 176: FA3's non-causal d128 block (one Q buffer then)
        "wg_block_n_d256": (64, 32, 80),       # 80: FA3's d256 block (2 stages + one Q: 225 KB)
        "wg_consumers": (2, 1),
        # mma=wgmma, wg_load=tma: head_dim 64 with three consumer warpgroups (192 query rows)
        "wg_wide_d64": (False, True),
        # mma=wgmma: decode shapes (at most 64 packed query rows) on the mma.sync decode tile, or on
        # the Hopper kernel (copy-engine loads and split-KV; most of its query tile is empty rows)
        "wg_decode": ("mma_sync", "wgmma"),
        # mma=wgmma: a consumer warpgroup none of whose 64 query rows is in its tile (decode tiles,
        # a ragged call's last tile) computes them anyway, or skips its products and softmax and
        # only takes its turns and releases each K/V block after its full barrier
        "wg_idle_rows": ("compute", "skip"),
        # mma=wgmma, wg_load=tma, wg_decode=wgmma: a call whose packed query rows fit one consumer
        # warpgroup (at most 64: decode) runs on the same CTA as every other call, or (True) on an
        # instantiation of one producer and one consumer warpgroup, with no turns to take and no
        # second warpgroup computing empty rows (FA3's one-MMA-warpgroup decode)
        "wg_solo_decode": (False, True),
    },
    "memory": {
        "loader": ("cp_async", "bulk"),          # cp.async 16 B per thread, or the bulk copy engine
        "stages": (1, 2, 3),                     # K/V shared-memory buffers in flight
        "smem_layout": ("swizzle", "pad"),       # XOR-swizzled 128 B panels, or rows padded by 16 B
        "wg_stages": (2, 3, 1),                  # mma=wgmma: K/V stages of the producer's ring
        "wg_stages_d64": (0, 3, 4),              # mma=wgmma: K/V stages at head_dim 64 (0: wg_stages)
        "wg_stages_d128": (0, 3),                # mma=wgmma: K/V stages at head_dim 128 (0: wg_stages;
                                                 # 3 leaves room for one Q buffer only)
        "wg_v_ring": ("same", "deeper"),         # mma=wgmma, wg_load=tma, wg_kv_order=k_ahead: V's ring as
                                                 # deep as K's, or one stage deeper at d128/d256 where
                                                 # shared memory holds it beside the Q buffers
        "wg_load": ("cp_async", "tma"),          # mma=wgmma: producer warpgroup's 16 B cp.async, or
                                                 # one thread's tensor-map copies (copy engine)
        "wg_q_stages": (1, 2),                   # mma=wgmma, wg_load=tma: Q buffers; with 2 the next
                                                 # tile's Q loads while this tile runs (at the head
                                                 # dims whose shared memory holds a second Q tile)
        "wg_epilogue": ("direct", "smem", "tma"),  # mma=wgmma, wg_q_stages=2: each thread stores its O
                                                 # pairs to global memory, or the warpgroup stages O in
                                                 # the tile's Q buffer and writes whole 16-byte chunks,
                                                 # or one thread hands the staged rows to the copy engine
        "wg_epilogue_one_q": (False, True),      # mma=wgmma, wg_epilogue=tma: a head dim with one Q buffer
                                                 # (d256) stages there too, and its next Q waits for it
        "wg_cluster": (1, 2),                    # mma=wgmma, wg_load=tma, wg_full_order=m_fastest: calls
                                                 # without the causal mask at d128/d256 run clusters of
                                                 # two CTAs on tile pairs that share each K/V block's
                                                 # copy (multicast, half the panels each)
        "wg_kv_fence": ("every_block", "cp_async"),  # mma=wgmma, wg_load=tma: the consumers fence the async
                                                 # proxy after each K/V block's full barrier, or only in
                                                 # the cp.async build (copy-engine writes need no fence)
        "wg_kv_wait": ("each", "first"),         # mma=wgmma, wg_load=tma, wg_pingpong: every consumer
                                                 # warpgroup waits for a K/V block's full barrier, or only
                                                 # the first in the turn order (the rest issue after it)
        "wg_kv_order": ("kv", "k_ahead"),        # mma=wgmma, wg_load=tma: the producer copies each block's
                                                 # K then its V, or block j + 1's K before block j's V
                                                 # (the order the overlapped consumers use them in)
        "wg_k_wait": ("in_turn", "before_turn"),  # mma=wgmma, wg_kv_wait=each: a consumer warpgroup waits
                                                 # for block j's K inside its turn to issue wgmmas, or
                                                 # before it (FA3's order)
        "wg_v_release": ("after_softmax", "mid_softmax", "before_softmax"),  # mma=wgmma, wg_overlap: the
                                                 # consumers wait for block j - 1's P V and release its
                                                 # V stage after block j's softmax, after its rows'
                                                 # maxima, or before it
        "wg_l2_promotion": (256, 128, 0),        # mma=wgmma, wg_load=tma: the tensor maps' L2 promotion
                                                 # (bytes L2 fetches for a copy's 128-byte request; 0 none)
        "wg_l2_hint": ("none", "kv_last", "kv_last_q_first"),  # mma=wgmma, wg_load=tma: the copy engine's
                                                 # loads carry no L2 policy, or K/V's ask L2 to evict them
                                                 # last (every query tile of a head rereads them), and Q's
                                                 # (read once) to evict first
    },
    "math": {
        "mma": ("mma_sync", "wgmma"),            # mma.sync everywhere, or the Hopper layer (sm_90a wgmma,
                                                 # producer/consumer warpgroups) for non-decode shapes
        "wg_overlap": (True, False),             # mma=wgmma: softmax of block j under P V of block j-1
        "wg_p_buffers": (1, 2),                  # mma=wgmma, wg_overlap, wg_load=tma: P's bf16 fragments
                                                 # in one register set, packed once P V of block j - 1
                                                 # is done, or in two (the loop unrolled by two), packed
                                                 # beside the exponentials (d128, d256)
        "wg_p_long_blocks": (0, 32, 64, 128),    # mma=wgmma, wg_p_buffers=2: 0 = every call on the two
                                                 # sets; N = only calls of at least N key blocks per SM
                                                 # (~N x 1.6 us at d128), on their own instantiation; the
                                                 # rest on the one-set kernel (short calls lost ~2 us)
        "q_fragments": ("smem", "registers"),    # Q A-fragments re-read by ldmatrix, or kept in registers
        "softmax_exp": ("exp2_folded", "expf"),  # ex2.approx with scale*log2e folded into one FFMA, or expf
        "rescale": ("always", "lazy"),           # rescale O on every new max, or only past 2^8 growth
        "wg_desc": ("fields", "offset", "hoist"),  # mma=wgmma: each wgmma's shared-memory descriptor packed
                                                 # from its fields, or the tile's descriptor plus the
                                                 # step's offset (one add; warpgroup index warp-uniform),
                                                 # or that with Q's formed once per tile (d64, d128)
    },
    "scheduling": {
        "grid_order": ("m_fastest", "head_fastest", "heavy_first"),
        "persistent": (False, True),             # one wave of CTAs striding over the tiles
        "split_kv": ("off", "1wave", "2wave"),   # split the keys until the grid fills 1 or 2 waves
        # the combine reads the splits' (max, sum) one by one, or all lanes at once before the
        # outputs; wide: as parallel, and a CTA of four warps per row when rows are few; burst: as
        # parallel, and a CTA of sixteen warps per row when rows are few, every partial loaded at once
        "split_combine": ("serial", "parallel", "wide", "burst"),
        "pack_gqa": ("off", "decode", "on"),     # a GQA group's query heads share one tile
        "wg_pingpong": (True, False),            # mma=wgmma: the two consumer warpgroups take turns
                                                 # issuing wgmma (named barriers)
        "wg_l2_sections": (0, 32, 16),           # mma=wgmma, grid_order=heavy_first: 0 = one grid-wide
                                                 # heavy-first order; N = heavy first inside sections of
                                                 # (head, batch, split) units whose K/V fit in N MB of L2
        "wg_full_order": ("sections", "m_fastest"),  # mma=wgmma, wg_l2_sections: a call without the causal
                                                 # mask keeps the sections, or runs each K/V head's m
                                                 # blocks side by side (its tiles all weigh the same)
        "wg_scheduler": ("static", "dynamic"),   # mma=wgmma, persistent, wg_q_stages=2: causal tiles past
                                                 # the first wave go round robin, or to whichever CTA is
                                                 # free first (a counter in the workspace, heavy first)
        "wg_split_rule": ("fill", "balanced"),   # mma=wgmma, split_kv: split the keys until the grid
                                                 # fills its waves, or into the count whose estimated
                                                 # makespan (rounds, heaviest tile, work per SM) is least
        "wg_split_cost": (0, 2, 4, 8),             # mma=wgmma, wg_split_rule=balanced: key blocks charged to
                                                 # a split plan for its partials and combine kernel
        "wg_combine_pdl": (False, True),         # mma=wgmma, split_kv: the combine kernel behind a split
                                                 # call waits on the stream, or is launched as a
                                                 # programmatic dependent of the attention kernel (its
                                                 # CTAs start as SMs free up and wait in griddepcontrol)
        "wg_tile_decode": ("consumers", "producer"),  # mma=wgmma, wg_scheduler=dynamic: every consumer
                                                 # decodes each tile (integer divisions), or the producer
                                                 # decodes it once and leaves it beside the tile's Q
    },
    "masking": {
        "causal_skip": (True, False),            # skip key blocks wholly past the diagonal
        "mask_split": (True, False),             # mask only boundary blocks (two code paths)
    },
}

LAYERS = tuple(KNOB_SPACE)
# Knobs that only the Hopper layer reads (mma=wgmma).
HOPPER_KNOBS = ("wg_block_n_d64", "wg_block_n_d128", "wg_block_n_d256", "wg_consumers", "wg_stages",
                "wg_stages_d64", "wg_stages_d128", "wg_full_order", "wg_cluster", "wg_kv_fence", "wg_kv_wait",
                "wg_overlap", "wg_pingpong", "wg_load", "wg_q_stages", "wg_wide_d64", "wg_l2_sections",
                "wg_scheduler", "wg_split_rule", "wg_split_cost", "wg_epilogue", "wg_desc", "wg_decode",
                "wg_tile_decode", "wg_epilogue_one_q", "wg_kv_order", "wg_l2_hint", "wg_idle_rows", "wg_combine_pdl",
                "wg_v_release", "wg_k_wait", "wg_p_buffers", "wg_v_ring", "wg_solo_decode",
                "wg_p_long_blocks", "wg_l2_promotion")
KNOB_LAYER = {knob: layer for layer, knobs in KNOB_SPACE.items() for knob in knobs}
# Knobs a rendered file records only when they differ from their defaults (each was added after
# files existed whose bytes their measured reports hash; Knobs.recorded).
RECORDED_WHEN_SET = ("decode_kv_warps", "split_combine", "wg_load", "wg_q_stages", "wg_wide_d64",
                     "wg_l2_sections", "wg_scheduler", "wg_split_rule", "wg_split_cost", "wg_epilogue",
                     "wg_desc", "wg_decode", "wg_tile_decode", "wg_epilogue_one_q", "wg_kv_order",
                     "wg_full_order", "wg_cluster", "wg_kv_fence", "wg_kv_wait", "wg_stages_d64",
                     "wg_stages_d128", "wg_l2_hint", "wg_idle_rows", "wg_combine_pdl",
                     "wg_v_release", "wg_k_wait", "wg_p_buffers", "wg_v_ring", "wg_solo_decode",
                     "wg_p_long_blocks", "wg_l2_promotion")


class KnobError(ValueError):
    """A knob setting the family refuses, with the reason in words."""


def parse_tile(tile: str) -> tuple[int, int, int]:
    try:
        bm, bn, w = (int(x) for x in tile.split("x"))
    except ValueError as exc:
        raise KnobError(f"tile {tile!r} is not of the form BMxBNxW (e.g. 128x64x4)") from exc
    return bm, bn, w


@dataclass(frozen=True)
class Knobs:
    tile_d64: str = "128x64x4"
    tile_d128: str = "128x32x4"
    tile_d256: str = "128x64x8"
    decode_tile: str = "16x64x1"
    decode_kv_warps: int = 1
    loader: str = "cp_async"
    stages: int = 2
    smem_layout: str = "swizzle"
    q_fragments: str = "smem"
    softmax_exp: str = "exp2_folded"
    rescale: str = "always"
    grid_order: str = "heavy_first"
    persistent: bool = False
    split_kv: str = "1wave"
    split_combine: str = "serial"
    pack_gqa: str = "decode"
    causal_skip: bool = True
    mask_split: bool = True
    # The Hopper layer. Settings with mma=mma_sync keep these at their defaults (validate()).
    mma: str = "mma_sync"
    wg_block_n_d64: int = 128
    wg_block_n_d128: int = 128
    wg_block_n_d256: int = 64
    wg_consumers: int = 2
    wg_stages: int = 2
    wg_stages_d64: int = 0
    wg_stages_d128: int = 0
    wg_overlap: bool = True
    wg_pingpong: bool = True
    wg_load: str = "cp_async"
    wg_q_stages: int = 1
    wg_wide_d64: bool = False
    wg_l2_sections: int = 0
    wg_scheduler: str = "static"
    wg_split_rule: str = "fill"
    wg_split_cost: int = 0
    wg_epilogue: str = "direct"
    wg_desc: str = "fields"
    wg_decode: str = "mma_sync"
    wg_tile_decode: str = "consumers"
    wg_epilogue_one_q: bool = False
    wg_kv_order: str = "kv"
    wg_full_order: str = "sections"
    wg_cluster: int = 1
    wg_kv_fence: str = "every_block"
    wg_kv_wait: str = "each"
    wg_l2_hint: str = "none"
    wg_idle_rows: str = "compute"
    wg_combine_pdl: bool = False
    wg_v_release: str = "after_softmax"
    wg_k_wait: str = "in_turn"
    wg_p_buffers: int = 1
    wg_v_ring: str = "same"
    wg_solo_decode: bool = False
    wg_p_long_blocks: int = 0
    wg_l2_promotion: int = 256

    # -- views -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def tile(self, head_dim: int, decode: bool = False) -> tuple[int, int, int]:
        if decode and self.decode_tile != "off":
            return parse_tile(self.decode_tile)
        return parse_tile(getattr(self, f"tile_d{head_dim}"))

    def kv_warps(self, decode: bool) -> int:
        """Key warps per row warp: decode_kv_warps for the decode tile, one for the main tile."""
        return self.decode_kv_warps if decode and self.decode_tile != "off" else 1

    def smem_bytes(self, head_dim: int, decode: bool = False) -> int:
        bm, bn, _ = self.tile(head_dim, decode)
        row = head_dim if self.smem_layout == "swizzle" else head_dim + 8
        extra = 8 * self.stages if self.loader == "bulk" else 0
        kw = self.kv_warps(decode)
        merge = (kw - 1) * bm * head_dim * 4 + kw * bm * 8 if kw > 1 else 0  # reuses the K/V stages
        return bm * row * 2 + max(2 * self.stages * bn * row * 2, merge) + extra

    def fragment_regs(self, head_dim: int, decode: bool = False) -> int:
        """32-bit registers per thread held by fragments across the key loop."""
        bm, bn, w = self.tile(head_dim, decode)
        rpw = bm // w
        regs = rpw * head_dim // 32 + rpw * (bn // self.kv_warps(decode)) // 32
        if self.q_fragments == "registers":
            regs += rpw * head_dim // 64
        return regs

    def recorded(self) -> dict[str, Any]:
        """The setting as a rendered file records it: with mma=mma_sync, `mma` and the Hopper
        knobs (all at their defaults then) are left out, so files rendered before the layer existed keep their
        bytes; parsing the record back gives the same setting either way."""
        d = self.to_dict()
        # Knobs added after files were rendered: at their defaults they are left out, so those
        # files keep their bytes.
        for name in RECORDED_WHEN_SET:
            if getattr(self, name) == _DEFAULTS[name]:
                d.pop(name)
        if self.mma == "mma_sync":
            for name in ("mma", *HOPPER_KNOBS):
                d.pop(name, None)
        return d

    def wg_block_n(self, head_dim: int) -> int:
        return int(getattr(self, f"wg_block_n_d{head_dim}"))

    def wg_stages_at(self, head_dim: int) -> int:
        """K/V stages of the wgmma kernel at head_dim: wg_stages_d64/d128 where set, else wg_stages."""
        return int(getattr(self, f"wg_stages_d{head_dim}", 0) or self.wg_stages)

    def wg_v_stages_at(self, head_dim: int) -> int:
        """V stages of the wgmma kernel at head_dim: K's (wg_stages_at), one more with
        wg_v_ring=deeper at d128 and d256 where shared memory holds it beside the Q buffers
        (the deeper ring never takes a Q buffer away)."""
        st = self.wg_stages_at(head_dim)
        if self.wg_v_ring != "deeper" or head_dim < 128:
            return st
        qs = self.wg_q_buffers(head_dim)
        return st + 1 if self._smem_bytes(head_dim, qs, st, st + 1) <= MAX_SMEM_BYTES else st

    def wg_smem_bytes(self, head_dim: int, q_stages: int | None = None) -> int:
        """Shared memory of the wgmma kernel: Q tile(s), K and V stages, mbarriers, the two
        tile slots of wg_scheduler=dynamic (16 bytes; 96 with wg_tile_decode=producer), 1 KB of
        slack to align the tiles for the 128-byte swizzle."""
        if q_stages is not None:  # the Q buffers' question: asked with V's ring as deep as K's
            st = self.wg_stages_at(head_dim)
            return self._smem_bytes(head_dim, q_stages, st, st)
        return self._smem_bytes(head_dim, self.wg_q_buffers(head_dim), self.wg_stages_at(head_dim),
                                self.wg_v_stages_at(head_dim))

    def _smem_bytes(self, head_dim: int, qs: int, k_stages: int, v_stages: int) -> int:
        """The layout's bytes: Q buffers, K's and V's stages, the barriers (each kind spaced by
        the deeper ring), the tile slots, the alignment slack."""
        bm, bn = 64 * self.wg_consumers_at(head_dim), self.wg_block_n(head_dim)
        slots = 0 if self.wg_scheduler != "dynamic" else 96 if self.wg_tile_decode == "producer" else 16
        ring = max(k_stages, v_stages)
        return (qs * bm + (k_stages + v_stages) * bn) * head_dim * 2 + 8 * (2 * qs + 4 * ring) + slots + 1024

    def wg_consumers_at(self, head_dim: int) -> int:
        """Consumer warpgroups of the wgmma kernel at head_dim (three at d64 with wg_wide_d64)."""
        return 3 if self.wg_wide_d64 and head_dim == 64 else self.wg_consumers

    def wg_q_buffers(self, head_dim: int) -> int:
        """Q buffers of the wgmma kernel at head_dim: wg_q_stages where they fit in shared
        memory beside the K/V stages, else one (d256 at the default 64-key blocks)."""
        if self.wg_q_stages == 2 and self.wg_smem_bytes(head_dim, 2) <= MAX_SMEM_BYTES:
            return 2
        return 1

    def wg_fragment_regs(self, head_dim: int) -> int:
        bn = self.wg_block_n(head_dim)
        return bn // 2 + head_dim // 2 + bn // 4

    def slug(self) -> str:
        """A short file-name-safe name of the setting."""
        parts = [
            f"d64-{self.tile_d64}", f"d128-{self.tile_d128}", f"d256-{self.tile_d256}",
            f"dec-{self.decode_tile}" + (f"-kw{self.decode_kv_warps}" if self.decode_kv_warps != 1 else ""),
            self.loader, f"s{self.stages}", self.smem_layout, f"q{self.q_fragments[:4]}",
            self.softmax_exp.split("_")[0], self.rescale, self.grid_order,
            "persist" if self.persistent else "grid",
            f"split-{self.split_kv}"
            + {"serial": "", "parallel": "-pcomb", "wide": "-wcomb", "burst": "-bcomb"}[self.split_combine],
            f"pack-{self.pack_gqa}", "skip" if self.causal_skip else "noskip",
            "msplit" if self.mask_split else "mall",
        ]
        if self.mma == "wgmma":
            parts += [f"wgmma-c{self.wg_consumers}-s{self.wg_stages}"
                      + "".join(f"-s{d}x{self.wg_stages_at(d)}" for d in (64, 128)
                                if getattr(self, f"wg_stages_d{d}"))
                      + f"-n{self.wg_block_n_d64}"
                      f"-{self.wg_block_n_d128}-{self.wg_block_n_d256}"
                      + ("-overlap" if self.wg_overlap else "") + ("-pingpong" if self.wg_pingpong else "")
                      + ("-tma" if self.wg_load == "tma" else "")
                      + (f"-q{self.wg_q_stages}" if self.wg_q_stages != 1 else "")
                      + ("-wide64" if self.wg_wide_d64 else "")
                      + (f"-l2s{self.wg_l2_sections}" if self.wg_l2_sections else "")
                      + ("-dyn" if self.wg_scheduler == "dynamic" else "")
                      + ("-balsplit" if self.wg_split_rule == "balanced" else "")
                      + (f"-splitcost{self.wg_split_cost}" if self.wg_split_cost else "")
                      + {"direct": "", "smem": "-smemepi", "tma": "-tmaepi"}[self.wg_epilogue]
                      + {"fields": "", "offset": "-descoff", "hoist": "-deschoist"}[self.wg_desc]
                      + ("-wgdec" if self.wg_decode == "wgmma" else "")
                      + ("-pubtile" if self.wg_tile_decode == "producer" else "")
                      + ("-oneq" if self.wg_epilogue_one_q else "")
                      + ("-kahead" if self.wg_kv_order == "k_ahead" else "")
                      + ("-fullm" if self.wg_full_order == "m_fastest" else "")
                      + (f"-cl{self.wg_cluster}" if self.wg_cluster != 1 else "")
                      + ("-nofence" if self.wg_kv_fence == "cp_async" else "")
                      + ("-waitfirst" if self.wg_kv_wait == "first" else "")
                      + {"none": "", "kv_last": "-kvlast", "kv_last_q_first": "-kvlqf"}[self.wg_l2_hint]
                      + ("-idleskip" if self.wg_idle_rows == "skip" else "")
                      + ("-pdl" if self.wg_combine_pdl else "")
                      + {"after_softmax": "", "mid_softmax": "-vmid", "before_softmax": "-vbefore"}[self.wg_v_release]
                      + ("-kwait" if self.wg_k_wait == "before_turn" else "")
                      + ("-p2" if self.wg_p_buffers == 2 else "")
                      + ("-vdeep" if self.wg_v_ring == "deeper" else "")
                      + ("-solo" if self.wg_solo_decode else "")
                      + (f"-plong{self.wg_p_long_blocks}" if self.wg_p_long_blocks else "")
                      + (f"-prom{self.wg_l2_promotion}" if self.wg_l2_promotion != 256 else "")]
        return "_".join(parts)

    # -- validation ------------------------------------------------------------------------

    def validate(self) -> Knobs:
        """Raise KnobError naming the first rule the setting breaks; return self if valid."""
        for f in fields(self):
            allowed = KNOB_SPACE[KNOB_LAYER[f.name]][f.name]
            value = getattr(self, f.name)
            if value not in allowed or type(value) is not type(allowed[0]):
                raise KnobError(
                    f"{f.name}={value!r} is not one of {', '.join(repr(v) for v in allowed)}"
                )
        if self.loader == "bulk" and self.smem_layout != "pad":
            raise KnobError(
                "loader=bulk copies whole rows with the bulk copy engine, which cannot apply the "
                "XOR swizzle: use smem_layout=pad with it"
            )
        if self.split_combine != "serial" and self.split_kv == "off":
            raise KnobError(
                f"split_combine={self.split_combine} changes how split-KV partials merge: it needs split_kv"
            )
        if self.decode_kv_warps != 1 and self.decode_tile == "off":
            raise KnobError(
                f"decode_kv_warps={self.decode_kv_warps} splits the decode tile's keys among warps: it "
                "needs a decode_tile"
            )
        for d in HEAD_DIMS:
            for decode in (False, True) if self.decode_tile != "off" else (False,):
                self._check_tile(d, decode)
        if self.mma == "mma_sync":
            changed = [n for n in HOPPER_KNOBS if getattr(self, n) != getattr(Knobs, n)]
            if changed:
                raise KnobError(
                    f"{changed[0]}={getattr(self, changed[0])!r} belongs to the Hopper layer: it needs "
                    "mma=wgmma"
                )
        else:
            for d in HEAD_DIMS:
                self._check_wg(d)
        return self

    def _check_wg(self, d: int) -> None:
        if self.wg_q_stages != 1 and self.wg_load != "tma":
            raise KnobError(
                f"wg_q_stages={self.wg_q_stages} double-buffers Q for the copy-engine producer: it needs "
                "wg_load=tma"
            )
        if self.wg_l2_sections and self.grid_order != "heavy_first":
            raise KnobError(
                f"wg_l2_sections={self.wg_l2_sections} orders the tiles heavy first inside L2-sized sections: "
                f"it needs grid_order=heavy_first, not {self.grid_order}"
            )
        if self.wg_cluster != 1 and (self.wg_load != "tma" or self.wg_full_order != "m_fastest"):
            raise KnobError(
                f"wg_cluster={self.wg_cluster} pairs the tiles of one K/V group for the copy engine's multicast: "
                "it needs wg_load=tma and wg_full_order=m_fastest"
            )
        if self.wg_full_order != "sections" and not self.wg_l2_sections:
            raise KnobError(
                f"wg_full_order={self.wg_full_order} sizes the L2 sections of a call without the causal mask: "
                "it needs wg_l2_sections"
            )
        if self.wg_scheduler == "dynamic" and (self.wg_q_stages != 2 or not self.persistent):
            raise KnobError(
                "wg_scheduler=dynamic hands a persistent CTA's next tile to it through the Q ring, "
                "beside the next tile's Q: it needs persistent=True and wg_q_stages=2"
            )
        if self.wg_epilogue != "direct" and self.wg_q_stages != 2:
            raise KnobError(
                f"wg_epilogue={self.wg_epilogue} stages the output in the tile's Q buffer, which the "
                "producer refills only two tiles later: it needs wg_q_stages=2"
            )
        if self.wg_epilogue_one_q and self.wg_epilogue != "tma":
            raise KnobError(
                f"wg_epilogue_one_q=True stages a one-Q-buffer head dim's output for the copy engine: it "
                f"needs wg_epilogue=tma, not {self.wg_epilogue}"
            )
        if self.wg_kv_fence != "every_block" and self.wg_load != "tma":
            raise KnobError(
                f"wg_kv_fence={self.wg_kv_fence} drops the proxy fence of the copy engine's K/V blocks: it "
                "needs wg_load=tma (the cp.async producer's writes always need it)"
            )
        if self.wg_kv_wait != "each" and (self.wg_load != "tma" or not self.wg_pingpong):
            raise KnobError(
                f"wg_kv_wait={self.wg_kv_wait} lets the warpgroups after the first in the turn order skip the "
                "K/V waits: it needs wg_load=tma and wg_pingpong=True"
            )
        if self.wg_kv_order != "kv" and self.wg_load != "tma":
            raise KnobError(
                f"wg_kv_order={self.wg_kv_order} orders the copy engine's K and V copies: it needs "
                "wg_load=tma (the cp.async producer warpgroup copies each block's K and V together)"
            )
        if self.wg_k_wait != "in_turn" and self.wg_kv_wait != "each":
            raise KnobError(
                f"wg_k_wait={self.wg_k_wait} moves every consumer's wait for K before its turn: it needs "
                f"wg_kv_wait=each, not {self.wg_kv_wait}"
            )
        if self.wg_v_release != "after_softmax" and not self.wg_overlap:
            raise KnobError(
                f"wg_v_release={self.wg_v_release} moves the wait for the previous block's P V into or before "
                "the softmax: it needs wg_overlap=True (without it no P V is in flight during the softmax)"
            )
        if self.wg_p_buffers != 1 and (not self.wg_overlap or self.wg_load != "tma"):
            raise KnobError(
                f"wg_p_buffers={self.wg_p_buffers} packs block j's P while block j - 1's P V is in flight: "
                "it needs wg_overlap=True and wg_load=tma (the second register set is the copy-engine "
                "build's; the cp.async build of d128 spills with it)"
            )
        if self.wg_p_buffers != 1 and (self.wg_v_release != "after_softmax" or self.wg_k_wait != "in_turn"):
            raise KnobError(
                f"wg_p_buffers={self.wg_p_buffers} rewrites the overlapped loop: it is written for "
                "wg_v_release=after_softmax and wg_k_wait=in_turn (both measured as no gain, stop 33)"
            )
        if self.wg_p_long_blocks and (self.wg_p_buffers != 2 or self.wg_cluster != 1):
            raise KnobError(
                f"wg_p_long_blocks={self.wg_p_long_blocks} sends only long calls to the two-register-set "
                "kernel: it needs wg_p_buffers=2 (with one set there is nothing to choose between) and is "
                "written for wg_cluster=1 (the cluster kernel has its own template arguments)"
            )
        if self.wg_v_ring != "same" and (self.wg_load != "tma" or self.wg_kv_order != "k_ahead"
                                         or self.wg_cluster != 1 or self.wg_idle_rows != "compute"):
            raise KnobError(
                f"wg_v_ring={self.wg_v_ring} gives V's ring its own depth in the copy-engine producer's "
                "k_ahead order: it needs wg_load=tma and wg_kv_order=k_ahead, and is written for "
                "wg_cluster=1 and wg_idle_rows=compute (their loops index K and V with one stage)"
            )
        if self.wg_solo_decode and (self.wg_load != "tma" or self.wg_decode != "wgmma" or self.wg_cluster != 1
                                    or self.wg_consumers != 2):
            raise KnobError(
                "wg_solo_decode=True gives a call whose rows fit one warpgroup a one-consumer instantiation of "
                "the copy-engine kernel: it needs wg_load=tma and wg_decode=wgmma (otherwise such calls take "
                "the mma.sync decode tile) and wg_consumers=2 (with one, every call runs on one), and is "
                "written for wg_cluster=1 (the cluster kernel has its own template arguments; a decode call "
                "is causal and never clustered)"
            )
        if self.wg_combine_pdl and self.split_combine == "burst":
            raise KnobError(
                "wg_combine_pdl=True launches the combine kernels as programmatic dependents of four warps: "
                "split_combine=burst's few-rows kernel runs sixteen (use split_combine=wide with it)"
            )
        if self.wg_combine_pdl and self.split_kv == "off":
            raise KnobError(
                "wg_combine_pdl=True launches the split-KV combine kernel as a programmatic dependent: "
                "it needs split_kv (with split_kv=off there is no combine kernel)"
            )
        if self.wg_l2_promotion != 256 and self.wg_load != "tma":
            raise KnobError(
                f"wg_l2_promotion={self.wg_l2_promotion} sets the L2 promotion of the copy engine's tensor maps: "
                "it needs wg_load=tma (the cp.async producer has no tensor map)"
            )
        if self.wg_l2_hint != "none" and self.wg_load != "tma":
            raise KnobError(
                f"wg_l2_hint={self.wg_l2_hint} is an L2 policy on the copy engine's tensor copies: it needs "
                "wg_load=tma (the cp.async producer's 16-byte copies carry none)"
            )
        if self.wg_tile_decode == "producer" and self.wg_scheduler != "dynamic":
            raise KnobError(
                "wg_tile_decode=producer leaves each tile's decode in the dynamic scheduler's slots beside "
                "the tile's Q: it needs wg_scheduler=dynamic"
            )
        if self.wg_split_rule != "fill" and self.split_kv == "off":
            raise KnobError(
                f"wg_split_rule={self.wg_split_rule} chooses how many pieces split-KV cuts the keys into: "
                "it needs split_kv"
            )
        if self.wg_split_cost and self.wg_split_rule != "balanced":
            raise KnobError(
                f"wg_split_cost={self.wg_split_cost} charges a split plan for its combine in the balanced "
                f"rule's estimate: it needs wg_split_rule=balanced, not {self.wg_split_rule}"
            )
        if self.wg_pingpong and self.wg_consumers != 2:
            raise KnobError("wg_pingpong=True alternates two consumer warpgroups: it needs wg_consumers=2")
        if self.wg_wide_d64 and (self.wg_load != "tma" or self.wg_consumers != 2):
            raise KnobError(
                "wg_wide_d64=True gives head_dim 64 a third consumer warpgroup beside two: it needs "
                "wg_consumers=2 and wg_load=tma (a one-thread producer leaves the consumers 160 registers)"
            )
        label = f"wg_block_n_d{d}={self.wg_block_n(d)}"
        regs = self.wg_fragment_regs(d)
        limit = WG_WIDE_MAX_FRAGMENT_REGS if self.wg_consumers_at(d) == 3 else WG_MAX_FRAGMENT_REGS
        if regs > limit:
            raise KnobError(
                f"{label}: S, O and P need {regs} registers per consumer thread at head_dim {d}, "
                f"over the {limit} that fit beside the kernel's state"
            )
        smem = self.wg_smem_bytes(d)
        if smem > MAX_SMEM_BYTES:
            raise KnobError(
                f"{label} with wg_stages={self.wg_stages}, wg_consumers={self.wg_consumers}: {smem} "
                f"bytes of shared memory at head_dim {d}, over the sm_90 limit of {MAX_SMEM_BYTES}"
            )

    def _check_tile(self, d: int, decode: bool) -> None:
        name = "decode_tile" if decode else f"tile_d{d}"
        label = f"{name}={getattr(self, name)}" + (f" at head_dim {d}" if decode else "")
        bm, bn, w = self.tile(d, decode)
        if bm % w or bm // w not in (16, 32):
            raise KnobError(f"{label}: each warp must own 16 or 32 query rows, this gives {bm / w:g}")
        if bn % 16:
            raise KnobError(f"{label}: block_n {bn} must be a multiple of 16")
        kw = self.kv_warps(decode)
        if (bn // kw) % 16:
            raise KnobError(
                f"{label} with decode_kv_warps={kw}: each key warp takes {bn / kw:g} keys of a block, "
                "which must be a multiple of 16"
            )
        regs = self.fragment_regs(d, decode)
        if regs > MAX_FRAGMENT_REGS:
            hint = " (try q_fragments=smem)" if self.q_fragments == "registers" else ""
            raise KnobError(
                f"{label}: fragments need {regs} registers per thread at head_dim {d}, over the "
                f"{MAX_FRAGMENT_REGS} that avoid spills{hint}"
            )
        smem = self.smem_bytes(d, decode)
        if smem > MAX_SMEM_BYTES:
            raise KnobError(
                f"{label} with stages={self.stages}: {smem} bytes of shared memory at head_dim {d}, "
                f"over the sm_90 limit of {MAX_SMEM_BYTES}"
            )

    def is_valid(self) -> bool:
        try:
            self.validate()
        except KnobError:
            return False
        return True

    def replace(self, **changes: Any) -> Knobs:
        return dataclasses.replace(self, **changes)


# Each knob's default, for Knobs.recorded.
_DEFAULTS = {f.name: f.default for f in fields(Knobs)}


def default_knobs() -> Knobs:
    return Knobs().validate()


def _coerce(name: str, raw: Any) -> Any:
    if name not in KNOB_LAYER:
        known = ", ".join(KNOB_LAYER)
        raise KnobError(f"unknown knob {name!r}; knobs are: {known}")
    allowed = KNOB_SPACE[KNOB_LAYER[name]][name]
    if isinstance(raw, str):
        text = raw.strip()
        if isinstance(allowed[0], bool):
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise KnobError(f"{name} takes true or false, not {raw!r}")
        if isinstance(allowed[0], int):
            try:
                return int(text)
            except ValueError as exc:
                raise KnobError(f"{name} takes an integer, not {raw!r}") from exc
        return text
    return raw


def knobs_from_mapping(values: Mapping[str, Any], base: Knobs | None = None) -> Knobs:
    changes = {name: _coerce(name, raw) for name, raw in values.items()}
    return dataclasses.replace(base or Knobs(), **changes).validate()


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for a path, say: not a file
        return False


def parse_knobs(spec: str, base: Knobs | None = None, *, files: bool = True) -> Knobs:
    """`key=value,key=value` (unnamed knobs keep their defaults), a JSON object, a path to a
    JSON file (only with `files`: the CLI's; a spec from a request or an agent's configuration
    never names a file of the server), or empty for the defaults."""
    text = spec.strip()
    if not text:
        return (base or Knobs()).validate()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise KnobError(f"knobs are not valid JSON: {exc}") from exc
        return knobs_from_mapping(data, base)
    path = Path(text)
    if files and (text.endswith(".json") or ("=" not in text and _is_file(path))):
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise KnobError(f"cannot read knob file {text}: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise KnobError(f"knob file {text} is not valid JSON: {exc}") from exc
        if isinstance(data, dict) and isinstance(data.get("knobs"), dict):
            data = data["knobs"]
        if not isinstance(data, dict):
            raise KnobError(f"knob file {text} must hold a JSON object")
        return knobs_from_mapping(data, base)
    values: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        if not sep:
            raise KnobError(f"{part!r} is not key=value")
        values[key.strip()] = val
    return knobs_from_mapping(values, base)


def neighbours(knobs: Knobs, layer: str) -> list[Knobs]:
    """Valid settings that differ from `knobs` in exactly one knob of `layer`."""
    if layer not in KNOB_SPACE:
        raise KnobError(f"unknown layer {layer!r}; layers are: {', '.join(LAYERS)}")
    out: list[Knobs] = []
    for name, values in KNOB_SPACE[layer].items():
        for v in values:
            if v == getattr(knobs, name):
                continue
            cand = knobs.replace(**{name: v})
            if cand.is_valid():
                out.append(cand)
    return out


def iter_valid(limit: int | None = None) -> Iterator[Knobs]:
    """Valid settings one knob away from the defaults, for sampling and tests."""
    base = default_knobs()
    yield base
    n = 1
    for layer in LAYERS:
        for cand in neighbours(base, layer):
            if limit is not None and n >= limit:
                return
            yield cand
            n += 1


def covering_sample() -> list[Knobs]:
    """A small list of valid settings in which every value of every knob appears at least once
    (greedy: start from the defaults, give each still-uncovered value to a knob while the
    setting stays valid)."""
    uncovered = [(name, v) for layer in KNOB_SPACE.values() for name, vals in layer.items() for v in vals]
    base = default_knobs()
    uncovered = [(n, v) for n, v in uncovered if getattr(base, n) != v]
    sample = [base]
    while uncovered:
        cur = base
        taken: set[str] = set()
        left = []
        for name, v in uncovered:
            if name in taken:
                left.append((name, v))
                continue
            cand = cur.replace(**{name: v})
            if not cand.is_valid():
                # A value that needs a companion change (bulk needs pad; deep pipelines and Q in
                # registers need smaller tiles; Hopper knobs need mma=wgmma): try the smallest
                # companions.
                for fix in ({"mma": "wgmma"}, {"mma": "wgmma", "wg_block_n_d256": 32},
                            {"mma": "wgmma", "wg_pingpong": False}, {"mma": "wgmma", "wg_load": "tma"},
                            {"mma": "wgmma", "wg_load": "tma", "wg_q_stages": 2, "persistent": True},
                            {"mma": "wgmma", "wg_load": "tma", "grid_order": "heavy_first", "wg_l2_sections": 32,
                             "wg_full_order": "m_fastest"},
                            {"mma": "wgmma", "wg_split_rule": "balanced"},
                            {"mma": "wgmma", "wg_load": "tma", "wg_kv_order": "k_ahead"},
                            {"mma": "wgmma", "wg_load": "tma", "wg_decode": "wgmma"},
                            {"mma": "wgmma", "wg_load": "tma", "wg_p_buffers": 2},
                            {"smem_layout": "pad"}, {"stages": 2},
                            {"stages": 1}, {"tile_d256": "64x32x4"}, {"tile_d256": "64x32x4", "stages": 2},
                            {"q_fragments": "smem"}):
                    if name in fix:
                        continue
                    alt = cand.replace(**fix)
                    if alt.is_valid():
                        cand = alt
                        taken.update(fix)
                        break
            if cand.is_valid():
                cur = cand
                taken.add(name)
            else:
                left.append((name, v))
        if cur == base or len(left) == len(uncovered):
            raise KnobError(f"no valid setting covers {left[:3]}")
        sample.append(cur)
        uncovered = [(n, v) for n, v in left if all(getattr(k, n) != v for k in sample)]
    return sample
