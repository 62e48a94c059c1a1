"""Fresh inputs for every timed call of attention forward, and the check of every timed output.

Before each candidate call of the timing loop an input set's Q, K and V are rewritten in place
(the addresses the kernel saw) with new random contents: a 62-bit nonce drawn from the
operating system's random source keys a counter-based generator (fresh_fill.py), the
distribution (normal, large logits, shifted uniform) and the softmax scale are drawn too, all
outside the timed region. Nothing a kernel saw before determines them. The set's output of each
call is kept (a device copy, outside the timed region). After the calls, rows (batch, query
head, query) are chosen from the same random source, so the kernel cannot know them while it
runs; only the inputs those rows read (their query rows, their (batch, kv head) blocks of K and
V) are made again from the call's nonce, and the rows are checked against fp32 and bf16
references with the correctness rule (2x the bf16 reference's error on those rows + the
rounding floor).

A wrong timed output is explained when it can be: equal to an earlier answer (a replay),
each sampled row a multiple of a row of an earlier answer (a transformed replay), the answer
for softmax_scale = head_dim^-0.5 where the call passed another scale, wrong only from some
call on (drift); otherwise wrong on fresh inputs after being right on validated ones."""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.attention.fields import default_scale, timed_scale
from harness.attention.fresh_fill import CallTable, FreshFill, Logical, for_device
from harness.attention.reference import attention_rows_reference, chunk_bytes_for
from harness.correctness import check_output, tolerance_tensor
from harness.problem_interface import TimedInputs
from harness.scenario import Scenario

DISTRIBUTIONS = ("normal", "large-logits", "uniform-shifted")
# Rows checked per timed call: up to BLOCKS (batch, kv head) blocks, ROWS in each.
BLOCKS = 4
ROWS = 16
# A wrong row whose centered correlation with a row of an earlier answer exceeds this is a
# (scaled) copy of it; rows of independent random inputs correlate near 0.
COPY_CORRELATION = 0.98
COPY_SHARE = 0.9


def draw(shape: tuple[int, ...], kind: str, dist: str, gen: torch.Generator,
         device: torch.device) -> torch.Tensor:
    """bf16 random values of one distribution (made in bf16: the timed loop pays for it)."""
    if dist == "uniform-shifted":
        t = torch.rand(shape, generator=gen, device=device, dtype=torch.bfloat16)
        return t * 2.0 - 0.75 if kind != "v" else t * 2.0
    t = torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16)
    if dist == "large-logits" and kind in ("q", "k"):
        t = t * 4.0  # logits with std ~16: a kernel without max subtraction overflows
    if kind == "v":
        t = t + 0.5
    return t


def logical(s: Scenario) -> tuple[Logical, Logical]:
    """The logical [B, S, H, D] shapes of Q (and of O), and of K and V."""
    return (Logical(s.batch, s.seqlen_q, s.heads_q, s.head_dim),
            Logical(s.batch, s.seqlen_k, s.heads_kv, s.head_dim))


def fresh_qkv(s: Scenario, nonce: int, dist: str, device: torch.device) -> list[torch.Tensor]:
    """Contiguous Q, K, V of a nonce, whole; the same nonce gives the same values again."""
    fill = for_device(device)
    q_shape, kv_shape = logical(s)
    return [fill.full(q_shape, nonce, "q", dist, device), fill.full(kv_shape, nonce, "k", dist, device),
            fill.full(kv_shape, nonce, "v", dist, device)]


def write_fresh_qkv(s: Scenario, nonce: int, dist: str, dsts: Sequence[torch.Tensor],
                    fill: FreshFill) -> None:
    """fresh_qkv(s, nonce, dist) written into Q, K, V in place, whatever their strides (K and V
    interleaved in one buffer included): one launch a tensor on a GPU."""
    q_shape, kv_shape = logical(s)
    for dst, kind, shape in zip(dsts, ("q", "k", "v"), (q_shape, kv_shape, kv_shape), strict=True):
        fill.fill(dst, shape, nonce, kind, dist)


def changed_keys(seqlen_k: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """The probe's key rows: a random half of rows 1.. (row 0 alone when there is no other),
    drawn on the device from a generator the OS source seeded. Drawing them on the host from
    the OS source cost one system call per random word: ~16,000 for a 32k-key probe, 54 ms."""
    if seqlen_k < 2:
        return torch.zeros(1, dtype=torch.long, device=device)
    others = seqlen_k - 1
    return torch.randperm(others, generator=gen, device=device)[: max(1, others // 2)] + 1


@dataclass
class TimedCall:
    number: int  # the candidate's n-th call on fresh inputs in this scenario (all sets)
    set_no: int
    nonce: int
    dist: str
    scale: float
    out: torch.Tensor | None = None
    verdict: str = ""  # "" not checked, "ok", or "wrong"


@dataclass
class Rows:
    """Rows chosen for a check: blocks [n] and per block r (query head, query) pairs."""

    batch: torch.Tensor  # [n]
    kv_head: torch.Tensor  # [n]
    heads: torch.Tensor  # [n, r]
    queries: torch.Tensor  # [n, r]

    def take(self, t: torch.Tensor) -> torch.Tensor:
        """Those rows of a [b, s, h, d] tensor: [n, r, d]."""
        return t[self.batch.view(-1, 1), self.queries, self.heads]


class AttentionTimedInputs(TimedInputs):
    def __init__(
        self, s: Scenario, set_no: int, inputs: list[torch.Tensor], buffers: Any,
        call: Callable[[], None], counter: list[int], rng: random.Random,
    ) -> None:
        self.s = s
        self.set_no = set_no
        self.q, self.k, self.v = inputs
        self.bufs = buffers
        self.call = call
        self.counter = counter
        self.rng = rng
        self.device = self.q.device
        self.saved = [x.clone() for x in inputs]
        self.saved_scale = float(buffers.scale)
        self.validated = buffers.o.clone()
        self.calls: list[TimedCall] = []
        self.pending: TimedCall | None = None
        self.fill = for_device(self.device)
        # The copy of this set's last output taken when its call ended (after_call), and per call
        # a device flag: did the output buffer differ from that copy before the set's next call?
        self.last_kept: TimedCall | None = None
        self.changed: list[tuple[TimedCall, torch.Tensor]] = []

    # -- the timing loop -------------------------------------------------------------------

    def before_call(self) -> None:
        kept = self.last_kept
        if kept is not None and kept.out is not None:
            # Enqueued on the harness stream, no wait: read once after the loop (tamper_reason).
            self.changed.append((kept, torch.ne(_bits16(self.bufs.o), _bits16(kept.out)).any()))
            self.last_kept = None
        self.keep_last()
        nonce = self.rng.getrandbits(62)
        dist = self.rng.choice(DISTRIBUTIONS)
        scale = timed_scale(self.s, self.rng)
        write_fresh_qkv(self.s, nonce, dist, (self.q, self.k, self.v), self.fill)
        self.bufs.scale = scale
        self.counter[0] += 1
        self.pending = TimedCall(self.counter[0], self.set_no, nonce, dist, scale)

    def keep_last(self) -> None:
        if self.pending is not None:
            self.pending.out = self.bufs.o.clone()
            self.calls.append(self.pending)
            self.pending = None

    def after_call(self) -> None:
        """The output copied the moment its call ended, before any other candidate call: a
        kernel that repairs it later changes only the buffer, never what is checked."""
        if self.pending is not None:
            kept = self.pending
            self.keep_last()
            self.last_kept = kept

    def tamper_reason(self) -> str | None:
        if not self.changed:
            return None
        flags = torch.stack([f for _, f in self.changed]).tolist()
        bad = [c for (c, _), f in zip(self.changed, flags, strict=True) if f]
        self.changed = []
        if not bad:
            return None
        c = bad[0]
        return (f"tampering: the output of timed call {c.number} (input set {c.set_no}) changed after "
                "its call ended, before the harness's next call on that set: the kernel rewrites outputs "
                f"after it returns ({len(bad)} such call(s); the harness checks the copy it took when "
                "each call ended)")

    # -- after the calls -------------------------------------------------------------------

    def draw_rows(self, blocks: Sequence[tuple[int, int]] | None = None) -> list[list[int]]:
        """Rows drawn now from the OS source, on the host: per (batch, kv head) block the list
        [batch, kv head, r query heads..., r queries...]. One 256-bit seed is taken from the OS
        source per draw, after the calls, and seeds the generator that picks the rows (drawing
        each row from the OS source cost one system call per random word: ~70 per timed call)."""
        s = self.s
        rng = random.Random(self.rng.getrandbits(256))
        if blocks is None:
            everything = s.batch * s.heads_kv
            picked = rng.sample(range(everything), min(BLOCKS, everything))
            blocks = [divmod(p, s.heads_kv) for p in picked]
        pairs = s.group * s.seqlen_q
        r = min(ROWS, pairs)
        out = []
        for b, kvh in blocks:
            chosen = rng.sample(range(pairs), r)
            out.append([b, kvh, *(kvh * s.group + c % s.group for c in chosen),
                        *(c // s.group for c in chosen)])
        return out

    def choose_rows(self, blocks: Sequence[tuple[int, int]] | None = None) -> Rows:
        return rows_of(torch.tensor(self.draw_rows(blocks), device=self.device))

    def references(
        self, rows: Rows, inputs: Sequence[torch.Tensor], scale: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = inputs
        kb = k[rows.batch, :, rows.kv_head]  # [n, sk, d]
        vb = v[rows.batch, :, rows.kv_head]
        qr = rows.take(q)
        s = self.s
        return tuple(  # type: ignore[return-value]
            attention_rows_reference(qr, kb, vb, rows.queries, causal=s.causal, scale=scale,
                                     seqlen_q=s.seqlen_q, compute_dtype=dtype)
            for dtype in (torch.float32, torch.bfloat16)
        )

    def probe(self) -> str | None:
        """In one (batch, kv head) block (not the first when there are several), a random half
        of the key rows (never the first row) get new K and V; the workspace stays as the
        previous call left it; rows of the changed block and of the rest are checked against
        the new contents. A cache keyed on pointers or on a few sampled elements hits and
        returns the previous answer."""
        self.last_kept = None  # the probe's call is not a timed one: nothing to compare after it
        s = self.s
        blocks = s.batch * s.heads_kv
        pick = self.rng.randrange(1, blocks) if blocks > 1 else 0
        bi, hi = divmod(pick, s.heads_kv)
        previous = self.bufs.o.clone()
        gen = torch.Generator(device=self.device)
        gen.manual_seed(self.rng.getrandbits(62))
        changed = changed_keys(s.seqlen_k, gen, self.device)
        shape = (changed.numel(), s.head_dim)
        self.k[bi, :, hi].index_copy_(0, changed, draw(shape, "k", "normal", gen, self.device))
        self.v[bi, :, hi].index_copy_(0, changed, draw(shape, "v", "normal", gen, self.device))
        self.bufs.o.fill_(float("nan"))
        self.call()
        chosen = [(bi, hi)]
        if blocks > 1:
            others = [p for p in range(blocks) if p != pick]
            chosen += [divmod(p, s.heads_kv) for p in self.rng.sample(others, min(BLOCKS - 1, len(others)))]
        rows = self.choose_rows(chosen)
        ref32, ref16 = self.references(rows, (self.q, self.k, self.v), float(self.bufs.scale))
        out = rows.take(self.bufs.o)
        chk = check_output(out, ref32, ref16)
        if chk.ok:
            return None
        if torch.equal(out[0], rows.take(previous)[0]):
            return (
                f"output was stale: input set {self.set_no} changed in one randomly chosen block "
                "(half its key rows, in K and V) since the previous call, its workspace was left "
                "as that call wrote "
                "it, and the kernel returned the previous answer: it caches results (in its "
                "workspace or in device memory) keyed on pointers or on sampled contents"
            )
        if bool(torch.isnan(out.float()).any().item()):
            return (
                f"output was not written when the workspace was not re-poisoned (input set "
                f"{self.set_no}): the kernel depends on workspace contents it did not write in "
                "the call"
            )
        return (
            f"wrong answer when the workspace was not re-poisoned (input set {self.set_no}, max "
            f"error {chk.max_error:.3e} > tolerance {chk.tolerance:.3e} on sampled rows): the "
            "kernel reads workspace contents it did not write in the call"
        )

    def restore(self) -> None:
        self.last_kept = None  # the harness writes the set itself from here: nothing to compare
        for dst, src in zip((self.q, self.k, self.v), self.saved, strict=True):
            dst.copy_(src)
        self.bufs.scale = self.saved_scale


# -- judging the timed calls of a scenario ---------------------------------------------------


def _bits16(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def _centered(t: torch.Tensor) -> torch.Tensor:
    t = t.float()
    return t - t.mean(dim=-1, keepdim=True)


def _copied_rows(out_rows: torch.Tensor, candidates: torch.Tensor) -> float:
    """Share of rows that are multiples of one of the candidate rows (same query, a head of the
    same group): out_rows [n, r, d], candidates [n, r, g, d]."""
    a = _centered(out_rows).unsqueeze(2)
    b = _centered(candidates)
    num = (a * b).sum(-1)
    den = a.norm(dim=-1) * b.norm(dim=-1)
    corr = torch.where(den > 0, num.abs() / den.clamp_min(1e-30), torch.zeros_like(num))
    live = a.norm(dim=-1).squeeze(-1) > 0
    if not bool(live.any()):
        return 0.0
    hit = (corr.max(dim=-1).values > COPY_CORRELATION) & live
    return float(hit.sum().item()) / float(live.sum().item())


def _group_rows(s: Scenario, rows: Rows, t: torch.Tensor) -> torch.Tensor:
    """For each chosen row, the same query in every head of its group: [n, r, g, d]."""
    base = (rows.heads // s.group) * s.group
    heads = base.unsqueeze(-1) + torch.arange(s.group, device=rows.heads.device)
    return t[rows.batch.view(-1, 1, 1), rows.queries.unsqueeze(-1), heads]


def _earlier_answers(
    sets: Sequence[AttentionTimedInputs], c: TimedCall
) -> list[tuple[str, torch.Tensor]]:
    """Answers that existed before call c, newest first: outputs of earlier timed calls, then
    the outputs validated before timing."""
    calls = sorted((x for t in sets for x in t.calls if x.number < c.number and x.out is not None),
                   key=lambda x: -x.number)
    found = [(f"the inputs of timed call {x.number}", x.out) for x in calls]
    many = len(sets) > 1
    for t in sets:
        label = "the contents validated before timing" + (f" (input set {t.set_no})" if many else "")
        found.append((label, t.validated))
    return [(label, out) for label, out in found if out is not None]


def timed_reason(sets: Sequence[AttentionTimedInputs]) -> str | None:
    """Check every kept output not checked yet; the reason of the first wrong one in call order."""
    calls = sorted((c for t in sets for c in t.calls if not c.verdict and c.out is not None),
                   key=lambda c: c.number)
    if not calls:
        return None
    by_set = {t.set_no: t for t in sets}
    measured, values = measure_calls(by_set, calls)
    first: tuple[TimedCall, Rows] | None = None
    for c, rows, (err, tol, bad) in zip(calls, measured, values, strict=True):
        c.verdict = "ok" if not bad and err <= tol else "wrong"
        if c.verdict == "wrong" and first is None:
            first = (c, rows)
    if first is None:
        return None
    c, rows = first
    owner = by_set[c.set_no]
    assert c.out is not None
    inputs = fresh_qkv(owner.s, c.nonce, c.dist, owner.device)
    chk = check_output(rows.take(c.out), *owner.references(rows, inputs, c.scale))
    total = sum(len(t.calls) for t in sets)
    wrong = sum(x.verdict == "wrong" for t in sets for x in t.calls)
    return (_explain(sets, owner, c, rows, chk, inputs)
            + f" [{wrong} of {total} timed calls on fresh inputs wrong in this scenario]")


def rows_of(packed: torch.Tensor) -> Rows:
    """Rows from draw_rows' lists as one device tensor [n, 2 + 2r]."""
    r = (packed.shape[1] - 2) // 2
    return Rows(packed[:, 0], packed[:, 1], packed[:, 2:2 + r], packed[:, 2 + r:])


def _calls_per_chunk(s: Scenario, device: torch.device) -> int:
    """How many calls' sampled rows are judged in one batch: their K and V blocks (bf16 and an
    fp32 copy) and scores must fit the device's reference chunk."""
    n = min(BLOCKS, s.batch * s.heads_kv)
    r = min(ROWS, s.group * s.seqlen_q)
    per_call = n * s.seqlen_k * (2 * s.head_dim * (2 + 4) + 4 * r * 4)
    return max(1, chunk_bytes_for(device) // max(1, per_call))


def measure_calls(
    by_set: dict[int, AttentionTimedInputs], calls: Sequence[TimedCall]
) -> tuple[list[Rows], list[list[float]]]:
    """For each call (in order): the rows chosen now and [max error, tolerance, non-finite] on
    them. Rows are drawn per call as before; per batch of calls (sized to the device's
    reference chunk) one upload carries the calls' nonces, distributions, scales, kept outputs'
    addresses and rows, the inputs those rows read are made again from the nonces (FreshFill:
    the query rows, and each chosen (batch, kv head) block of K and V), the outputs' rows are
    cut, and the references of every call are computed at once with each call's own
    softmax_scale; the device is synchronized once for the whole scenario."""
    if not calls:
        return [], []
    owner0 = by_set[calls[0].set_no]
    dev, s, fill = owner0.device, owner0.s, owner0.fill
    q_shape, kv_shape = logical(s)
    per_chunk = _calls_per_chunk(s, dev)
    all_rows: list[Rows] = []
    stats: list[torch.Tensor] = []
    for c0 in range(0, len(calls), per_chunk):
        chunk = calls[c0:c0 + per_chunk]
        m = len(chunk)
        drawn = [by_set[c.set_no].draw_rows() for c in chunk]
        flat = [x for c in chunk for x in (*CallTable.columns(c.nonce, c.dist, _kept(c)),
                                           _float_bits(c.scale))]
        flat += [x for call in drawn for block in call for x in block]
        uploaded = torch.tensor(flat, dtype=torch.int64, device=dev)
        table = uploaded[:4 * m].view(m, 4)
        table_calls = CallTable.from_columns(table[:, :3])
        scale = table[:, 3].to(torch.int32).view(torch.float32)
        packed = uploaded[4 * m:].view(m, len(drawn[0]), -1)  # [m, n, 2 + 2r]
        n, r = packed.shape[1], (packed.shape[2] - 2) // 2
        rows = [rows_of(p) for p in packed]
        call = torch.arange(m, device=dev).view(m, 1, 1).expand(m, n, r)
        batch = packed[:, :, :1].expand(m, n, r)
        queries = packed[:, :, 2 + r:]
        q_desc = torch.stack([call, batch, queries, packed[:, :, 2:2 + r]], dim=-1).view(-1, 4)
        kv_desc = torch.stack([call[:, :, 0], batch[:, :, 0], torch.zeros_like(batch[:, :, 0]),
                               packed[:, :, 1]], dim=-1).view(-1, 4)
        q = fill.rows(q_desc, table_calls, q_shape, "q").view(m * n, r, -1)
        k = fill.blocks(kv_desc, table_calls, kv_shape, "k")
        v = fill.blocks(kv_desc, table_calls, kv_shape, "v")
        out = fill.take(q_desc, table_calls, [_kept(c) for c in chunk], q_shape)
        per_row_scale = scale.repeat_interleave(n).view(-1, 1, 1)
        ref32, ref16 = (
            attention_rows_reference(q, k, v, queries.reshape(m * n, r), causal=s.causal,
                                     scale=per_row_scale, seqlen_q=s.seqlen_q, compute_dtype=dtype)
            for dtype in (torch.float32, torch.bfloat16)
        )
        outf = out.float().view(m, -1)
        r32 = ref32.view(m, -1)
        err = torch.nan_to_num((outf - r32).abs().max(dim=1).values, nan=float("inf"))
        tol = tolerance_tensor(r32, ref16.view(m, -1), dim=1)
        bad = (~torch.isfinite(outf)).any(dim=1).float()
        stats.append(torch.stack([err, tol, bad], dim=1))
        all_rows.extend(rows)
    return all_rows, torch.cat(stats).tolist()


def _kept(c: TimedCall) -> torch.Tensor:
    if c.out is None:
        raise ValueError(f"timed call {c.number} kept no output to check")
    return c.out


def _float_bits(x: float) -> int:
    """An fp32's bits as an integer (the scale travels in the int64 upload)."""
    return int.from_bytes(struct.pack("<f", x), "little", signed=True)


def _explain(
    sets: Sequence[AttentionTimedInputs], owner: AttentionTimedInputs, c: TimedCall, rows: Rows,
    chk: Any, inputs: list[torch.Tensor],
) -> str:
    s = owner.s
    assert c.out is not None
    where = f"timed call {c.number} (input set {c.set_no})"
    for label, earlier in _earlier_answers(sets, c):
        if earlier.shape == c.out.shape and torch.equal(earlier, c.out):
            return (
                f"output was stale: after the timing loop, {where} holds the answer for {label}, "
                "not for its own fresh inputs: the kernel returns cached results (keyed on "
                "pointers or on sampled contents) or replays an earlier answer instead of computing"
            )
    if math.isfinite(chk.max_error):
        out_rows = rows.take(c.out)
        for label, earlier in _earlier_answers(sets, c):
            if earlier.shape == c.out.shape and _copied_rows(out_rows, _group_rows(s, rows, earlier)) >= COPY_SHARE:
                return (
                    f"output was stale: after the timing loop, {where} is a transformed copy of "
                    f"the answer for {label} (each sampled row is a multiple of a row of it), not "
                    "the answer for its own fresh inputs: the kernel replays a cached answer, "
                    "rescaled or permuted, instead of computing attention"
                )
        usual = default_scale(s)
        if abs(c.scale - usual) > 1e-6 * usual:
            ref32, ref16 = owner.references(rows, inputs, usual)
            if check_output(out_rows, ref32, ref16).ok:
                return (
                    f"ignores softmax_scale: {where} passed softmax_scale = {c.scale:.6g} and "
                    f"got the answer for head_dim^-0.5 = {usual:.6g}: the kernel must use the "
                    "scale the call passes"
                )
    detail = (f"max error {chk.max_error:.3e} > tolerance {chk.tolerance:.3e} on "
              f"{rows.heads.numel()} sampled rows" if math.isfinite(chk.max_error)
              else chk.reason)
    before = [x for t in sets for x in t.calls if x.number < c.number]
    if len(before) >= 2 and all(x.verdict == "ok" for x in before):
        return (
            f"output of {where} changed during the timing loop: the {len(before)} timed calls "
            f"before it were right, this one is wrong on sampled rows ({detail}): the kernel "
            "drifts after repeated calls or races"
        )
    return (
        f"timed outputs wrong on sampled rows: {where}, {detail}; the kernel was right on the "
        "inputs it was validated on but not on fresh ones: it appears to cache or replay "
        "results, or to depend on inputs it saw before"
    )
