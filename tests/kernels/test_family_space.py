"""The family's knob space: layers, validation, parsing, neighbours and the covering sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.compile import compile_kernel
from harness.static_checks import check_source
from kernels.attention.family import (
    KNOB_LAYER,
    KNOB_SPACE,
    LAYERS,
    KnobError,
    Knobs,
    default_knobs,
    neighbours,
    parse_knobs,
    render,
)
from kernels.attention.family.space import covering_sample
from tests.conftest import HAS_NVCC, ROOT

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")


def test_space_is_grouped_by_the_five_layers() -> None:
    assert LAYERS == ("tiling", "memory", "math", "scheduling", "masking")
    for layer, knobs in KNOB_SPACE.items():
        assert knobs, layer
        for name, values in knobs.items():
            assert len(values) >= 2, name
            assert KNOB_LAYER[name] == layer
    assert set(KNOB_LAYER) == set(Knobs.__dataclass_fields__)


def test_default_is_valid_and_renders_an_abi_v1_file() -> None:
    k = default_knobs()
    src = render(k)
    assert 'extern "C" int socratic_attention_forward' in src
    assert "socratic_attention_workspace" in src
    assert "mma.sync.aligned.m16n8k16" in src and "ldmatrix" in src
    assert '#include "contract.h"' in src
    assert not [f for f in check_source(src) if f.blocking]
    # The knob setting is recorded in the file.
    assert '"tile_d128": "' + k.tile_d128 + '"' in src


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("loader=bulk", "use smem_layout=pad"),
        ("stages=3", "over the sm_90 limit"),
        ("q_fragments=registers", "registers per thread"),
        ("tile_d64=64x32x8", "not one of"),
        ("decode_tile=8x64x1", "not one of"),
        ("stages=4", "not one of"),
        ("persistent=maybe", "true or false"),
        ("warps=4", "unknown knob"),
        ("loader", "not key=value"),
        ("{not json", "not valid JSON"),
    ],
)
def test_invalid_settings_are_refused_with_a_reason(spec: str, needle: str) -> None:
    with pytest.raises(KnobError, match=needle):
        parse_knobs(spec)


def test_parse_forms_agree(tmp_path: Path) -> None:
    a = parse_knobs("tile_d128=128x64x8, rescale=lazy,persistent=true")
    b = parse_knobs(json.dumps({"tile_d128": "128x64x8", "rescale": "lazy", "persistent": True}))
    f = tmp_path / "k.json"
    f.write_text(json.dumps({"knobs": {"tile_d128": "128x64x8", "rescale": "lazy", "persistent": "1"}}))
    c = parse_knobs(str(f))
    assert a == b == c
    assert a.persistent is True and a.rescale == "lazy"
    assert parse_knobs("") == default_knobs()


def test_a_spec_longer_than_a_file_name_parses_and_the_last_value_wins() -> None:
    """Every knob named (as the offline agent's first port plus one change) is longer than a
    file name may be; it is a spec, never looked up as a path."""
    spec = ",".join(f"{name}={value}".lower() for name, value in default_knobs().recorded().items())
    spec += ",tile_d128=64x128x4"
    assert len(spec) > 255
    assert parse_knobs(spec).tile_d128 == "64x128x4"
    with pytest.raises(KnobError, match="not key=value"):  # too long to be a path, and no "="
        parse_knobs("x" * 300)


def test_neighbours_stay_in_their_layer_and_are_valid() -> None:
    base = default_knobs()
    for layer in LAYERS:
        found = neighbours(base, layer)
        assert found, layer
        for n in found:
            changed = [k for k, v in n.to_dict().items() if v != getattr(base, k)]
            assert len(changed) == 1 and KNOB_LAYER[changed[0]] == layer
            assert n.is_valid()
    with pytest.raises(KnobError):
        neighbours(base, "nope")


def test_covering_sample_uses_every_value() -> None:
    sample = covering_sample()
    assert all(k.is_valid() for k in sample)
    for layer in KNOB_SPACE.values():
        for name, values in layer.items():
            seen = {getattr(k, name) for k in sample}
            assert seen == set(values), name
    # Every knob changes the rendered source.
    base = default_knobs()
    src = render(base)
    for layer in LAYERS:
        for n in neighbours(base, layer):
            assert render(n) != src


# -- the Hopper layer (mma=wgmma) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("wg_stages=3", "belongs to the Hopper layer: it needs mma=wgmma"),
        ("wg_block_n_d128=64", "needs mma=wgmma"),
        ("wg_pingpong=false", "needs mma=wgmma"),
        ("mma=wgmma,wg_consumers=1", "wg_pingpong=True alternates two consumer warpgroups"),
        ("mma=wgmma,wg_stages=3",
         "wg_block_n_d256=64 with wg_stages=3, wg_consumers=2: 263280 bytes of shared memory at head_dim 256"),
        ("mma=wgmma,wg_block_n_d256=96", "not one of"),
        ("mma=tcgen05", "not one of"),
    ],
)
def test_hopper_settings_are_refused_with_a_reason(spec: str, needle: str) -> None:
    with pytest.raises(KnobError, match=needle):
        parse_knobs(spec)


def test_hopper_layer_is_reachable_from_the_default_inside_the_math_layer() -> None:
    base = default_knobs()
    assert base.mma == "mma_sync"
    (wg,) = [n for n in neighbours(base, "math") if n.mma == "wgmma"]
    # Once there, the tiling, memory, math and scheduling layers offer the Hopper knobs.
    offered = {k for layer in LAYERS for n in neighbours(wg, layer)
               for k, v in n.to_dict().items() if v != getattr(wg, k)}
    assert {"wg_block_n_d64", "wg_block_n_d128", "wg_block_n_d256", "wg_stages", "wg_overlap",
            "wg_pingpong", "mma"} <= offered
    # Smallest valid shared-memory footprint rule: 3 stages fit when d256 takes 32-key blocks.
    assert parse_knobs("mma=wgmma,wg_stages=3,wg_block_n_d256=32").wg_smem_bytes(128) == (
        (128 + 2 * 3 * 128) * 128 * 2 + 8 * (2 + 4 * 3) + 1024)


def test_wgmma_render_has_the_warp_specialized_kernel_and_keeps_the_record_readable() -> None:
    k = parse_knobs("mma=wgmma,persistent=true,wg_block_n_d64=192,wg_overlap=false")
    src = render(k)
    assert not [f for f in check_source(src) if f.blocking]
    for needle in ("wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16",   # S = Q K^T at d64
                   "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",   # O += P V at d256
                   "setmaxnreg.dec.sync.aligned.u32", "setmaxnreg.inc.sync.aligned.u32",
                   "cp.async.mbarrier.arrive.noinc", "constexpr bool kWgOverlap = false;",
                   "return fam::launch_any<128>(a, stream);", "return fam::workspace_any<64>(a);"):
        assert needle in src, needle
    # The mma.sync kernel stays in the file: decode shapes fall back to it.
    assert "mma.sync.aligned.m16n8k16" in src and "return launch<D>(a, stream);" in src
    # The knob record in the header parses back to the same setting, Hopper knobs included.
    header = src.split("Knob setting:", 1)[1].split("#include", 1)[0]
    record = json.loads("\n".join(line[5:] for line in header.splitlines() if line.startswith("//   ")))
    assert record["wg_block_n_d64"] == 192 and parse_knobs(json.dumps(record)) == k
    # With mma=mma_sync the record leaves the Hopper knobs out (older files keep their bytes).
    assert "wg_stages" not in render(default_knobs()) and '"mma"' not in render(default_knobs())


def test_offline_agent_hears_hopper_words_as_the_math_layer() -> None:
    from app.engine.agents.offline import layer_mentions

    assert set(layer_mentions("Could wgmma with warp-specialized warpgroups help on Hopper?")) == {"math"}


@needs_nvcc
def test_wgmma_gallery_kernel_compiles_without_spills(tmp_path: Path) -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    built = compile_kernel(gallery / "wgmma-ws-a.cu", arch="sm_90a")
    assert built.info.ok, built.info.log[-2000:]
    log = built.info.log
    # ptxas reports each kernel's registers and spills; the three warp-specialized instances
    # (d64/128/256) must not spill and must keep wgmma asynchronous (no C7510 serialization).
    blocks = log.split("Compiling entry function '")[1:]
    sm90 = [b for b in blocks if b.startswith("_ZN3fam13attn_fwd_sm90")]
    assert len(sm90) == 3, log[-3000:]
    for b in sm90:
        assert " 0 bytes spill stores, 0 bytes spill loads" in b, b[:600]
    assert "C7510" not in log and "C7508" not in log
