"""Fresh inputs for the timed calls, drawn in place: no temporary, no copy, the same values the
nonce reproduces, and the rows checked after a call seeded by one word of the OS source
(harness/attention/fresh.py)."""

from __future__ import annotations

import random

import pytest
import torch

from harness.attention.forward import AttentionForward
from harness.attention.fresh import DISTRIBUTIONS, AttentionTimedInputs, fresh_qkv, write_fresh_qkv
from harness.attention.fresh_fill import for_device
from tests.harness.recording import CPU, GQA, counting


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("seed", [0, 1])  # seed 1: K and V interleaved in one KV-cache buffer
def test_fresh_inputs_written_in_place_are_the_values_the_nonce_reproduces(dist: str, seed: int) -> None:
    problem = AttentionForward()
    q, k, v = problem.make_inputs(GQA, seed, CPU)
    addresses = [x.data_ptr() for x in (q, k, v)]
    fill = for_device(CPU)
    for nonce in (7, 2**61 + 3):
        write_fresh_qkv(GQA, nonce, dist, (q, k, v), fill)
        assert [x.data_ptr() for x in (q, k, v)] == addresses
        again = fresh_qkv(GQA, nonce, dist, CPU)  # what the check of the timed call regenerates
        assert all(torch.equal(a, b) for a, b in zip(again, (q, k, v), strict=True))


def test_a_timed_call_writes_its_inputs_where_they_lie_whatever_their_strides() -> None:
    problem = AttentionForward()
    for seed in (0, 1):  # seed 1: K and V interleaved in one buffer, written there directly
        inputs = problem.make_inputs(GQA, seed, CPU)
        bufs = problem.buffers(GQA, inputs, problem.new_output(GQA, CPU), None, trial=seed)
        timed = AttentionTimedInputs(GQA, 1, inputs, bufs, lambda: None, [0], random.SystemRandom())
        timed.before_call()  # the first call keeps no output yet
        with counting() as ops:
            timed.before_call()
        # One write per tensor into its own storage, and the output of the call before kept.
        assert ops["copy_"] == 3
        assert ops["clone"] == 1
        assert not any(ops[op] for op in ("normal_", "uniform_", "randn", "rand"))



class CountingSource(random.SystemRandom):
    """The OS source, counting the random words it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.words: list[int] = []

    def getrandbits(self, k: int) -> int:
        self.words.append(k)
        return super().getrandbits(k)


def test_a_timed_calls_rows_take_one_seed_from_the_os_source_and_differ_each_draw() -> None:
    """The rows checked after a timed call come from a generator seeded by one 256-bit word of
    the OS source, drawn then (one system call, where each row's word was one before); two draws
    give different rows, and the rows are valid for the scenario."""
    problem = AttentionForward()
    inputs = problem.make_inputs(GQA, 0, CPU)
    bufs = problem.buffers(GQA, inputs, problem.new_output(GQA, CPU), None, trial=0)
    source = CountingSource()
    timed = AttentionTimedInputs(GQA, 1, inputs, bufs, lambda: None, [0], source)
    draws = []
    for _ in range(2):
        source.words.clear()
        draws.append(timed.draw_rows())
        assert source.words == [256]
    assert draws[0] != draws[1]
    for block in draws[0]:
        b, kvh, rest = block[0], block[1], block[2:]
        heads, queries = rest[:len(rest) // 2], rest[len(rest) // 2:]
        assert 0 <= b < GQA.batch and 0 <= kvh < GQA.heads_kv
        assert all(kvh * GQA.group <= h < (kvh + 1) * GQA.group for h in heads)
        assert all(0 <= q < GQA.seqlen_q for q in queries)
        assert len(set(zip(heads, queries, strict=True))) == len(heads)  # rows without repeats
