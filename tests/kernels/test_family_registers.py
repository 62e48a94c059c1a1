"""The Hopper consumer's register-bound knobs: V release, P buffers, long-call and solo instantiations,
the deeper V ring and the K/V waits."""

from __future__ import annotations

import re

import pytest

from harness.static_checks import check_source
from kernels.attention.family import (
    KNOB_LAYER,
    KNOB_SPACE,
    KnobError,
    parse_knobs,
    render,
)
from tests.conftest import ROOT
from tests.kernels.family_helpers import changed_lines, hopper_knob_on_leader_j


def test_wg_v_release_moves_the_wait_for_the_previous_p_v_and_its_v_release_into_the_softmax() -> None:
    j = hopper_knob_on_leader_j(
        "wg_v_release", ("after_softmax", "mid_softmax", "before_softmax"),
        "mma=wgmma,wg_overlap=false,wg_v_release=before_softmax",
        r"wg_v_release=before_softmax .* it needs wg_overlap=True")
    base = render(j)
    loop_of = lambda src: src.split("          for (int j = 1; j < nb; ++j) {\n")[1].split(  # noqa: E731
        "          turn_wait();\n          issue_pv(nb - 1, pf);\n")[0]
    # every value is in every file: the wait for P V of block j - 1 and its V release run before
    # block j's softmax, inside it (a callback after its first row) or after it, then O's rescale
    loop = loop_of(base)
    order = ["if constexpr (kWgVRelease == 2) {", "softmax_any(j, alpha, any, pf, [&] {",
             "if constexpr (kWgVRelease == 1) {", "if constexpr (kWgVRelease == 0) {", "rescale(alpha, any);"]
    assert [loop.index(x) for x in order] == sorted(loop.index(x) for x in order)
    done = ["wg_wait0();", "wg_fence_regs(o);", "release_kv(v_empty(slot(j - 1)));"]
    for n in (0, 2):
        branch = loop.split(f"if constexpr (kWgVRelease == {n}) {{\n")[1].split("            }\n")[0]
        assert [x.strip() for x in branch.splitlines()] == done
    # mid_softmax: a probe of the V stage's full barrier (passed already) comes first, and the first
    # row's probabilities before it
    callback = loop.split("if constexpr (kWgVRelease == 1) {")[1].split("              }\n")[0]
    order = ["wg_fence_regs(s);", "mbar_wait(v_full(slot(j - 1)), ((gb + uint32_t(j - 1)) / S) & 1u);", *done]
    assert [callback.index(x) for x in order] == sorted(callback.index(x) for x in order)
    softmax = base.split("    auto softmax = [&](int j, float (&alpha)[2], bool& any_rescale, auto masked_tag, "
                         "uint32_t (*pn)[4], auto mid) {\n")[1].split("\n    };\n")[0]
    assert softmax.endswith(
        "        l_run[h] = l_run[h] * al + rs;\n"
        "        if (h == 0) mid();  // wg_v_release=mid_softmax: between the two rows\n      }")
    # every call site passes a callback: the first block's and the plain loop's do nothing
    assert base.count("softmax_any(0, alpha, any, pf, [] {});") == 1
    assert base.count("softmax_any(j, alpha, any, pf, [] {});") == 1
    assert base.count("softmax(j, alpha, any_rescale, TrueTag{}, pn, mid);") == 2
    assert "constexpr int kWgVRelease = 0;  // wg_v_release=after_softmax" in base
    for value, suffix, n in (("mid_softmax", "-vmid", 1), ("before_softmax", "-vbefore", 2)):
        k = j.replace(wg_v_release=value).validate()
        assert k.slug().endswith(suffix) and k.recorded()["wg_v_release"] == value
        src = render(k)
        assert not [str(f) for f in check_source(src) if f.blocking]
        # only the constant changes, past the recorded setting
        constant = f"constexpr int kWgVRelease = {n};  // wg_v_release={value}"
        assert src.split("\n#include", 1)[1] == base.split("\n#include", 1)[1].replace(
            "constexpr int kWgVRelease = 0;  // wg_v_release=after_softmax", constant)
    # with clusters the release reaches the peer CTA's barrier too
    cl = loop_of(render(j.replace(wg_v_release="mid_softmax", wg_cluster=2).validate()))
    assert "release_kv(v_empty(slot(j - 1)));" in cl.split("if constexpr (kWgVRelease == 1) {")[1]


def _fragment_slots(src: str) -> dict[tuple[int, int], tuple[int, int]]:
    """Which two probabilities of s (fp32, the accumulator layout) each P fragment register
    (set index kk, register i) packs, as pack() writes them and as wg_p_buffers=2's softmax does:
    {(kk, i): (first, second)}, the C index expressions evaluated for every kk, nt and h."""
    kn = 8  # d128: BN = 128 keys, eight k16 steps of P V
    slots: dict[tuple[int, int], tuple[int, int]] = {}
    for i, a, b in re.findall(r"pf\[kk\]\[(\d)\] = pack_bf16\(s\[([^]]+)\], s\[([^]]+)\]\);", src):
        for kk in range(kn):
            slots[(kk, int(i))] = (eval(a, {"kk": kk}), eval(b, {"kk": kk}))
    return slots


def test_wg_p_buffers_packs_p_beside_the_exponentials_into_the_set_no_p_v_reads() -> None:
    assert KNOB_LAYER["wg_p_buffers"] == "math" and KNOB_SPACE["math"]["wg_p_buffers"] == (1, 2)
    with pytest.raises(KnobError, match="wg_p_buffers"):
        parse_knobs("wg_p_buffers=2")  # a Hopper knob
    for refused in ("mma=wgmma,wg_load=tma,wg_overlap=false,wg_p_buffers=2", "mma=wgmma,wg_p_buffers=2"):
        with pytest.raises(KnobError, match=r"wg_p_buffers=2 .* it needs wg_overlap=True and wg_load=tma"):
            parse_knobs(refused)
    for other in ("wg_v_release=mid_softmax", "wg_k_wait=before_turn"):
        with pytest.raises(KnobError, match=r"wg_p_buffers=2 rewrites the overlapped loop"):
            parse_knobs(f"mma=wgmma,wg_load=tma,wg_p_buffers=2,{other}")
    j = parse_knobs(str(ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-j.knobs.json"))
    assert "wg_p_buffers" not in j.recorded()
    k = j.replace(wg_p_buffers=2).validate()
    assert k.slug().endswith("-p2") and k.recorded()["wg_p_buffers"] == 2
    base, src = render(j), render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    # only the constant changes: the file past the recorded setting is j's but for kWgTwoP
    assert changed_lines(base, src) == {"constexpr bool kWgTwoP = false;  // wg_p_buffers=1",
                                        "constexpr bool kWgTwoP = true;  // wg_p_buffers=2"}
    # the second set exists where registers allow it: d128 and d256 of the copy-engine build
    assert ("    constexpr bool kTwoP = kWgTwoP && D >= 128 && kTma && (kPLongBlocks == 0 || kLong);\n"
            "    uint32_t pg[kTwoP ? KN : 1][4];\n") in src
    # the softmax packs each row's probabilities after its exponentials, into the fragment
    # registers pack() would have filled: the same layout, register for register
    softmax = src.split("auto masked_tag, uint32_t (*pn)[4], auto mid) {\n")[1].split("\n    };\n")[0]
    inline = softmax.split("if constexpr (kTwoP) {")[1]
    assert softmax.index("rs += pv;") < softmax.index("if constexpr (kTwoP) {") < softmax.index(
        "l_run[h] = l_run[h] * al + rs;")
    lhs, a, b = re.search(r"pn\[(.+?)\] = pack_bf16\(s\[([^]]+)\], s\[([^]]+)\]\);", inline).groups()
    kk_expr, i_expr = lhs.split("][")
    inline_slots = {}
    for nt in range(16):  # NT: BN / 8 column tiles of 8 keys
        for h in range(2):
            env = {"nt": nt, "h": h}
            key = (eval(kk_expr.replace("/", "//"), env), eval(i_expr, env))
            assert key not in inline_slots
            inline_slots[key] = (eval(a, env), eval(b, env))
    assert inline_slots == _fragment_slots(src) and len(inline_slots) == 32
    # the overlapped loop: two steps a turn of the loop, the sets alternating; each step issues P V
    # of block j - 1 from the set block j - 1's softmax filled, then block j's softmax fills the
    # other one, before the wait for that P V
    two = src.split("        if constexpr (kTwoP) {\n")[1].split("        } else {\n          pack();\n")[0]
    step = two.split("auto step = [&](int j, uint32_t (&pn)[KN][4], const uint32_t (&pp)[KN][4]) {\n")[1]
    step = step.split("          };\n")[0]
    order = ["issue_qk(j);", "issue_pv(j - 1, pp);", "turn_pass();", "softmax_any(j, alpha, any, pn, [] {});",
             "wg_wait0();", "release_kv(v_empty(slot(j - 1)));", "rescale(alpha, any);"]
    assert [step.index(x) for x in order] == sorted(step.index(x) for x in order)
    loop = two.split("for (int j = 1; j < nb; j += 2) {")[1].split("          }\n")[0]
    assert [line.strip() for line in loop.strip().splitlines()[1:]] == [
        "step(j, pg, pf);", "if (j + 1 == nb) break;", "step(j + 1, pf, pg);"]
    # block 0 packs into pf, so block nb - 1's P is in pg exactly when nb - 1 is odd
    assert src.count("        softmax_any(0, alpha, any, pf, [] {});  // no P V in flight yet\n") == 1
    tail = two.split("          turn_wait();\n          if ((nb - 1) & 1) {\n")[1]
    assert tail.startswith("            issue_pv(nb - 1, pg);\n          } else {\n            issue_pv(nb - 1, pf);\n")
    # d64 and the cp.async build keep one set, packed once P V of block j - 1 is done
    one = src.split("        } else {\n          pack();\n")[1].split("          issue_pv(nb - 1, pf);\n")[0]
    assert one.index("issue_pv(j - 1, pf);") < one.index("softmax_any(j, alpha, any, pf, [&] {") < one.index(
        "if constexpr (kWgVRelease == 0) {") < one.index("            pack();")
    # the block-by-block loop (no P V in flight in the softmax) packs inside it with two sets
    plain = src.split("    } else {\n      for (int j = 0; j < nb; ++j) {\n")[1]
    assert "        if constexpr (!kTwoP) pack();" in plain.split("issue_pv(j, pf);")[0]


def test_wg_p_long_blocks_sends_only_long_calls_to_the_two_set_instantiation() -> None:
    assert KNOB_LAYER["wg_p_long_blocks"] == "math" and KNOB_SPACE["math"]["wg_p_long_blocks"] == (0, 32, 64, 128)
    with pytest.raises(KnobError, match="wg_p_long_blocks"):
        parse_knobs("wg_p_long_blocks=64")  # a Hopper knob
    for refused in ("mma=wgmma,wg_load=tma,wg_p_long_blocks=64",  # one set: nothing to choose between
                    "mma=wgmma,wg_load=tma,wg_full_order=m_fastest,wg_l2_sections=32,wg_cluster=2,"
                    "wg_p_buffers=2,wg_p_long_blocks=64"):
        with pytest.raises(KnobError, match=r"wg_p_long_blocks=64 .* needs wg_p_buffers=2 .* wg_cluster=1"):
            parse_knobs(refused)
    leader = parse_knobs(str(ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-l.knobs.json"))
    assert "wg_p_long_blocks" not in leader.recorded()
    p2 = leader.replace(wg_p_buffers=2).validate()
    k = p2.replace(wg_p_long_blocks=64).validate()
    assert k.slug().endswith("-p2-solo-plong64") and k.recorded()["wg_p_long_blocks"] == 64
    base, src = render(p2), render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    # the second set only in the kLong instantiation (with a block count); the kernel and its prepare
    # take the argument
    assert "    constexpr bool kTwoP = kWgTwoP && D >= 128 && kTma && (kPLongBlocks == 0 || kLong);" in src
    assert "constexpr long long kPLongBlocks = 0;  // wg_p_long_blocks" in base
    assert src.count("template <int D, bool kTma, bool kSolo = false, bool kLong = false, int kCl = 1>\n") == 2
    assert "cudaFuncSetAttribute(attn_fwd_sm90<D, kTma, kSolo, kLong, kCl>," in src
    assert "constexpr long long kPLongBlocks = 64;  // wg_p_long_blocks" in src
    # the host: a long call (head dims with two sets only) takes the kLong launch; decode's solo
    # launch comes first and stays one-set, every other call takes the ordinary one-set kernel
    launch = src.split("int launch_any(const SocraticAttentionArgs* a, cudaStream_t stream) {")[1].split("\n}\n")[0]
    assert launch.index("if (kWgSoloDecode && tma && s.mtotal <= 64) {") < launch.index(
        "} else if (kPLongBlocks > 0 && tma && long_call<D>(a, s)) {") < launch.index("} else if (tma) {")
    assert ("    if constexpr (kPLongBlocks > 0 && D >= 128) {\n"
            "      const int le = prepare_sm90<D, true, false, true>();\n"
            "      if (le != cudaSuccess) return le;\n"
            "      attn_fwd_sm90<D, true, false, true><<<grid, Sm90Cfg<D>::kThreads, Sm90Cfg<D>::kSmem, stream>>>"
            "(*a, s, maps);\n    }\n") in launch
    # the estimate: every tile's key blocks (as the kernel's tiles count them, causal blocks past
    # the diagonal skipped) over the SMs, against the knob; head dim 64 never
    rule = src.split("bool long_call(const SocraticAttentionArgs* a, const Sched& s) {")[1].split("\n}\n")[0]
    assert "if constexpr (D < 128) {" in rule and "return false;" in rule
    assert "if (kCausalSkip && a->causal) kv_hi = max(0, min(sk, qi_last + offset + 1));" in rule
    assert "return sum * s.heads_grid * a->batch >= (long long)kPLongBlocks * num_sms();" in rule
    # nothing else moves: past the record, the file is the one-set leader's but for the constant
    changed = set(src.splitlines()) - set(base.splitlines())
    assert len(src.splitlines()) - len(base.splitlines()) == 1 and len(_P_LONG_RULE_LINES(src)) > 10
    assert all(line.startswith("//   ") or line == "constexpr long long kPLongBlocks = 64;  // wg_p_long_blocks"
               for line in changed) and "constexpr long long kPLongBlocks = 64;  // wg_p_long_blocks" in changed
    # without the one-consumer decode launch the kernel keeps its kSolo argument (false) before kLong
    plain = render(parse_knobs("mma=wgmma,wg_load=tma,wg_p_buffers=2,wg_p_long_blocks=32"))
    assert plain.count("template <int D, bool kTma, bool kSolo = false, bool kLong = false, int kCl = 1>\n") == 2
    assert "attn_fwd_sm90<D, true, false, true><<<grid, Sm90Cfg<D>::kThreads," in plain
    assert "cudaFuncSetAttribute(attn_fwd_sm90<D, kTma, kSolo, kLong, kCl>," in plain


def _P_LONG_RULE_LINES(src: str) -> list[str]:
    """The lines of long_call and its comment (in the copy-engine build's host part)."""
    head = "// wg_p_long_blocks: whether a call is long enough"
    body = src.split(head)[1].split("\n}\n")[0] + "\n}"
    return (head + body).splitlines()


def test_wg_solo_decode_launches_calls_of_one_warpgroup_of_rows_on_a_one_consumer_instantiation() -> None:
    assert KNOB_LAYER["wg_solo_decode"] == "tiling" and KNOB_SPACE["tiling"]["wg_solo_decode"] == (False, True)
    with pytest.raises(KnobError, match="wg_solo_decode"):
        parse_knobs("wg_solo_decode=true")  # a Hopper knob
    for refused in ("mma=wgmma,wg_decode=wgmma,wg_solo_decode=true",  # the cp.async producer
                    "mma=wgmma,wg_load=tma,wg_solo_decode=true",  # decode on the mma.sync tile
                    "mma=wgmma,wg_load=tma,wg_decode=wgmma,wg_full_order=m_fastest,wg_l2_sections=32,"
                    "wg_cluster=2,wg_solo_decode=true",
                    "mma=wgmma,wg_load=tma,wg_decode=wgmma,wg_consumers=1,wg_pingpong=false,wg_solo_decode=true"):
        with pytest.raises(KnobError, match=r"wg_solo_decode=True .* needs wg_load=tma and wg_decode=wgmma"):
            parse_knobs(refused)
    k = parse_knobs(str(ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-k.knobs.json"))
    assert "wg_solo_decode" not in k.recorded()
    solo = k.replace(wg_solo_decode=True).validate()
    assert solo.slug().endswith("-solo") and solo.recorded()["wg_solo_decode"] is True
    base, src = render(k), render(solo)
    assert not [str(f) for f in check_source(src) if f.blocking]
    kernel = src.split("__global__ void __launch_bounds__(kSolo ? 256 : Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90(")[1]
    kernel = kernel.split("\n}\n")[0]
    head = "template <int D, bool kTma, bool kSolo = false, bool kLong = false, int kCl = 1>\n"
    assert src.count(head) == 2  # kernel, prepare
    assert "  constexpr int HC = kSolo ? 1 : WgC<D>::HC;" in kernel
    # the empty barriers expect the launched consumers' warps; turns and register hand-over only
    # where a second consumer exists
    assert kernel.count(", 4 * HC);") + kernel.count(", 4 * HC * kCl);") == 4
    assert "  constexpr int HC = kSolo ? 1 : WgC<D>::HC;" in base
    assert kernel.count("if constexpr (HC > 1) asm volatile(\"setmaxnreg.") == 2
    assert kernel.count("if constexpr (kWgPingpong && HC > 1)") == 4 and "if constexpr (kWgPingpong) " not in kernel
    # the host: calls of at most 64 (packed) rows take the 256-thread launch, the rest the ordinary one
    launch = src.split("if (kWgSoloDecode && tma && s.mtotal <= 64) {  // wg_solo_decode")[1].split(
        "  cudaError_t e = ")[0]
    assert ("    if constexpr (kWgSoloDecode) {\n"
            "      const int se = prepare_sm90<D, true, true>();\n      if (se != cudaSuccess) return se;\n"
            "      attn_fwd_sm90<D, true, true><<<grid, 256, Sm90Cfg<D>::kSmem, stream>>>(*a, s, maps);\n"
            "    }\n  } else if (kPLongBlocks > 0 && tma && long_call<D>(a, s)) {") in launch
    assert "  } else if (tma) {\n    attn_fwd_sm90<D, true><<<grid, Sm90Cfg<D>::kThreads," in launch
    assert "cudaFuncSetAttribute(attn_fwd_sm90<D, kTma, kSolo, kLong, kCl>," in src
    # nothing else moves: past the record, the file is the leader's but for the constant
    assert len(src.splitlines()) - len(base.splitlines()) == 1  # the record's line
    changed = set(src.splitlines()) - set(base.splitlines())
    assert all(line.startswith("//   ") or line == "constexpr bool kWgSoloDecode = true;  // wg_solo_decode"
               for line in changed) and "constexpr bool kWgSoloDecode = true;  // wg_solo_decode" in changed
    # without three d64 consumers (wg_wide_d64) the count is kWgConsumers at every head dim (the second Q buffer's
    # barrier is there too, unused with one buffer)
    plain = render(parse_knobs("mma=wgmma,wg_load=tma,wg_decode=wgmma,wg_solo_decode=true"))
    assert "  constexpr int HC = kSolo ? 1 : WgC<D>::HC;" in plain
    assert plain.count(", 4 * HC);") + plain.count(", 4 * HC * kCl);") == 4
    assert "struct WgC<64>" not in plain  # every head dim: HC = kWgConsumers
    assert "if constexpr (kWgPingpong) " not in plain and "attn_fwd_sm90<D, true, true><<<grid, 256," in plain


def test_wg_v_ring_deeper_gives_v_a_stage_more_than_k_where_shared_memory_holds_it() -> None:
    from kernels.attention.family.space import MAX_SMEM_BYTES

    j = hopper_knob_on_leader_j(
        "wg_v_ring", ("same", "deeper"), "mma=wgmma,wg_load=tma,wg_v_ring=deeper",
        r"wg_v_ring=deeper .* it needs wg_load=tma and wg_kv_order=k_ahead")
    for other in (dict(wg_cluster=2), dict(wg_idle_rows="skip"), dict(wg_kv_order="kv")):
        with pytest.raises(KnobError, match=r"wg_v_ring=deeper .* written for wg_cluster=1 and wg_idle_rows=compute"):
            j.replace(wg_v_ring="deeper", **other).validate()
    k = j.replace(wg_v_ring="deeper").validate()
    assert k.slug().endswith("-vdeep") and k.recorded()["wg_v_ring"] == "deeper"
    # d128 and d256 get a third V stage beside their Q buffers (two at d128, one at d256); d64 keeps
    # its four; none of it takes a Q buffer away, and the bytes are the layout's
    assert [(k.wg_stages_at(d), k.wg_v_stages_at(d), k.wg_q_buffers(d)) for d in (64, 128, 256)] == [
        (4, 4, 2), (2, 3, 2), (2, 3, 1)]
    assert k.wg_smem_bytes(128) == (2 * 128 + 5 * 128) * 128 * 2 + 8 * (2 * 2 + 4 * 3) + 96 + 1024
    assert k.wg_smem_bytes(256) == (128 + 5 * 64) * 256 * 2 + 8 * (2 + 4 * 3) + 96 + 1024
    assert k.wg_smem_bytes(128) <= MAX_SMEM_BYTES and k.wg_smem_bytes(256) <= MAX_SMEM_BYTES
    assert j.wg_smem_bytes(128) == k.wg_smem_bytes(128) - 128 * 128 * 2 - 8 * 4
    # where a fourth would not fit (three K stages and one Q buffer at d128), V's ring stays K's
    three = k.replace(wg_stages_d128=3).validate()
    assert (three.wg_stages_at(128), three.wg_v_stages_at(128), three.wg_q_buffers(128)) == (3, 3, 1)
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    consts = src.split("// wg_v_ring=deeper: V stages per head_dim")[1].split("\n\n")[0]
    assert "struct WgVStages<128> {\n  static constexpr int value = 3;" in consts
    assert "struct WgVStages<256> {\n  static constexpr int value = 3;" in consts and "<64>" not in consts
    assert "  static constexpr int SK = WgStages<D>::value;" in src
    assert "  static constexpr int S = WgVStages<D>::value;" in src
    assert "kBarOff = QS * kQBytes + (SK + S) * kKVBytes;" in src and "kBars = 2 * QS + 4 * S;" in src
    # V's buffers follow K's SK stages; the barriers keep their spacing by S (K's use the first SK)
    assert "  const uint32_t v_s = k_s + SK * C::kKVBytes;\n" in src
    assert "auto k_full = [&](int s) { return bars + 8 * (2 + s); };" in src
    assert "auto k_empty = [&](int s) { return bars + 8 * (2 + 2 * S + s); };" in src
    # every place K's stage or phase is formed uses SK, every place V's is formed uses S
    producer = src.split("__device__ __forceinline__ void sm90_produce_tma(")[1].split("\n}\n")[0]
    assert ("const int st = int(is_k ? gj % SK : gj % S);" in producer
            and "const uint32_t ph = (is_k ? gj / SK : gj / S) & 1u;" in producer
            and "if (gj >= R) mbar_wait(empty, ph ^ 1u);" in producer
            and "const uint32_t R = is_k ? uint32_t(SK) : uint32_t(S);" in producer)
    kernel = src.split("__global__ void __launch_bounds__(kSolo ? 256 : Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90(")[1]
    cp_async = kernel.split("const int p = tid;  // 0..127")[1].split("cp_async_wait<0>();")[0]
    assert "mbar_wait(k_empty(sk), ((gj / SK) & 1u) ^ 1u);" in cp_async and "cp_async_arrive(k_full(sk));" in cp_async
    assert "mbar_wait(v_empty(st), ph ^ 1u);" in cp_async and "const int st = int(gj % S);" in cp_async
    qk = kernel.split("auto issue_qk = [&](int j) {\n")[1].split("    };\n")[0]
    pv = kernel.split("auto issue_pv = [&](int j, const uint32_t (&pa)[KN][4]) {\n")[1].split("    };\n")[0]
    assert "% SK);" in qk and "/ SK) & 1u" in qk and "% S);" in pv and "/ S) & 1u" in pv and "SK" not in pv
    # three in the computing loops, one in wg_p_buffers=2's step, two in the loop of a warpgroup
    # without rows (wg_idle_rows)
    assert "k_empty(slot(" not in src and src.count("release_kv(k_empty(kslot(") == 6
    assert "release_kv(v_empty(slot(j - 1)));" in kernel and "v_empty(kslot(" not in src
    # with K waited for before the turn (wg_k_wait), that wait uses K's ring too
    kw = render(k.replace(wg_k_wait="before_turn").validate())
    assert "mbar_wait(k_full(int((gb + uint32_t(j)) % SK)), ((gb + uint32_t(j)) / SK) & 1u);" in kw
    # unset, the leader's text is untouched
    assert render(j) == (ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-j.cu").read_text()


def test_wg_k_wait_before_turn_waits_for_k_before_the_warpgroup_takes_its_turn() -> None:
    j = hopper_knob_on_leader_j(
        "wg_k_wait", ("in_turn", "before_turn"), "mma=wgmma,wg_load=tma,wg_k_wait=before_turn,wg_kv_wait=first",
        r"wg_k_wait=before_turn .* it needs wg_kv_wait=each, not first")
    k = j.replace(wg_k_wait="before_turn").validate()
    assert k.slug().endswith("-kwait") and k.recorded()["wg_k_wait"] == "before_turn"
    for src in (render(k), render(k.replace(wg_overlap=False).validate()), render(k.replace(wg_cluster=2).validate()),
                render(parse_knobs("mma=wgmma,wg_k_wait=before_turn"))):
        assert not [str(f) for f in check_source(src) if f.blocking]
        issue_qk = src.split("    auto issue_qk = [&](int j) {\n")[1].split("    };\n")[0]
        assert "constexpr bool kWgKBeforeTurn = true;  // wg_k_wait=before_turn" in src
        # the turn issues only: issue_qk's wait for K is wg_k_wait=in_turn's
        assert "if (!kWgKBeforeTurn && " in issue_qk and "wgmma_ss<BN>(s, " in issue_qk
        consumers = src.split("    auto issue_qk = [&](int j) {\n")[1].split("    // Epilogue:")[0]
        # (wg_p_buffers=2's loop, which wg_k_wait=before_turn does not run with, left out)
        two_p, rest = consumers.split("        if constexpr (kTwoP) {\n")
        consumers = two_p + rest.split("        } else {\n          pack();\n", 1)[1]
        # every S = Q K^T of the computing loops: K waited for, then the turn, then the wgmmas
        issues = re.findall(r"\n( *)turn_wait\(\);\n\1issue_qk\((\w+)\);", consumers)
        assert len(issues) == 3 and all(
            f"{ind}wait_k({j});\n{ind}turn_wait();\n{ind}issue_qk({j});" in consumers for ind, j in issues)
        assert src.count("wait_k(") == 3 and src.count("auto wait_k = ") == 1  # three calls, one helper
        wait_k = src.split("    auto wait_k = [&](int j) {\n")[1].split("\n    };\n")[0]
        assert wait_k == ("      if constexpr (kWgKBeforeTurn) "
                          "mbar_wait(k_full(int((gb + uint32_t(j)) % SK)), ((gb + uint32_t(j)) / SK) & 1u);")
        # V's wait stays inside the turn, between the two products
        assert "mbar_wait(v_full(st), ((gb + uint32_t(j)) / S) & 1u);" in src.split(
            "    auto issue_pv = [&](int j, const uint32_t (&pa)[KN][4]) {\n")[1].split("    };\n")[0]


def test_wg_kv_wait_first_leaves_the_waits_to_the_first_warpgroup_in_the_turn_order() -> None:
    assert KNOB_LAYER["wg_kv_wait"] == "memory" and KNOB_SPACE["memory"]["wg_kv_wait"] == ("each", "first")
    with pytest.raises(KnobError, match=r"wg_kv_wait=first .* it needs wg_load=tma and wg_pingpong=True"):
        parse_knobs("mma=wgmma,wg_load=tma,wg_consumers=1,wg_pingpong=false,wg_kv_wait=first")
    with pytest.raises(KnobError, match=r"wg_kv_wait=first .* it needs wg_load=tma"):
        parse_knobs("mma=wgmma,wg_kv_wait=first")
    gallery = ROOT / "kernels" / "attention" / "gallery"
    g = parse_knobs(str(gallery / "wgmma-tma-g.knobs.json"))
    k = g.replace(wg_kv_fence="cp_async", wg_kv_wait="first").validate()
    assert k.slug().endswith("-nofence-waitfirst") and "wg_kv_wait" not in g.recorded()
    src = render(k)
    assert not [str(x) for x in check_source(src) if x.blocking]
    consumer = src.split("// ---- consumer warpgroups")[1].split("// Epilogue:")[0]
    for name, bar, wait in (("issue_qk", "k_full", "if (!kWgKBeforeTurn && (!kWgKvWaitFirst || !kTma || c == 0))\n"
                                                     "        mbar_wait"),
                            ("issue_pv", "v_full", "if (!kWgKvWaitFirst || !kTma || c == 0) mbar_wait")):
        body = consumer.split(f"auto {name} = [&](int j")[1].split("};")[0]
        ring = "SK" if bar == "k_full" else "S"  # K's ring and V's (wg_v_ring)
        assert f"{wait}({bar}(st), ((gb + uint32_t(j)) / {ring}) & 1u);" in body
    assert "constexpr bool kWgKvWaitFirst = true;  // wg_kv_wait=first" in src
    # consumer 0 takes the first turn, and every issue sits inside a turn, so the others issue a
    # block's wgmmas only after consumer 0 has waited for it
    assert "if (c == WgC<D>::HC - 1) asm volatile(\"bar.arrive 1, 256;\\n\" ::: \"memory\");" in consumer
    calls = re.findall(r"turn_wait\(\);|issue_qk\(\w+(?: - 1)?\);|issue_pv\(\w+(?: - 1)?, \w+\);|turn_pass\(\);",
                       consumer.split("if constexpr (kWgOverlap) {")[1])
    inside = False
    for call in calls:
        if call == "turn_wait();":
            inside = True
        elif call == "turn_pass();":
            inside = False
        else:
            assert inside, calls
    # the Q buffer's wait stays with every warpgroup (each reads its tile from the slot after it; the
    # text also holds wg_tile_decode=consumers' read of the index alone, which this file does not take)
    assert consumer.count("mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);") == 3
