"""Fresh contents for the timing loop of attention forward. Before every timed call an input
set is rewritten in place with a new version whose exact answer follows from the validated
one, so no reference has to be recomputed:

- V of each (batch, kv head) block is multiplied by a power of two with a random sign
  (+-2^e, e in -3..3, never the block's previous factor): the output heads that read that
  block scale by the same factor, exactly (scaling by 2^e commutes with rounding);
- query heads are permuted within their kv group: the output heads permute alike.

Every element of V changes between two calls of a set, so a cache keyed on pointers, or on
contents sampled anywhere in V, either misses or returns the answer for older contents,
which the check after the timing loop sees. The answer is compared by value (-0 == +0)."""

from __future__ import annotations

import random

import torch

from harness.problem import InputVersions
from harness.scenario import Scenario

FACTORS = tuple(sign * 2.0**e for e in range(-3, 4) for sign in (1.0, -1.0))


class AttentionVersions(InputVersions):
    def __init__(
        self, s: Scenario, inputs: list[torch.Tensor], validated: torch.Tensor, seed: int,
        count: int,
    ) -> None:
        q, _, v = inputs
        self.q, self.v = q, v
        self.q0, self.v0 = q.clone(), v.clone()
        self.o0 = validated.clone()
        self.batch, self.heads_q, self.heads_kv = s.batch, s.heads_q, s.heads_kv
        self.group = s.group
        self.rng = random.Random(seed)
        n, blocks = max(1, count), s.batch * s.heads_kv
        gen = torch.Generator().manual_seed(seed)
        # Version 0 is the validated contents (identity, factor 1); each later version moves
        # every block to another factor: a random step of 1..13 places in the 14 factors.
        steps = torch.randint(1, len(FACTORS), (n, blocks), generator=gen)
        first = torch.randint(0, len(FACTORS), (1, blocks), generator=gen)
        first = torch.where(torch.tensor(FACTORS)[first] == 1.0, (first + 1) % len(FACTORS), first)
        index = torch.cat([first, steps[1:]]).cumsum(0) % len(FACTORS)
        table = torch.tensor(FACTORS, dtype=torch.float32)
        factors = torch.cat([torch.ones(1, blocks), table[index]])
        # Query heads shuffled within their kv group (identity for version 0).
        order = torch.rand(n, s.heads_kv, s.group, generator=gen).argsort(dim=-1)
        base = (torch.arange(s.heads_kv) * s.group).view(1, s.heads_kv, 1)
        perms = torch.cat([torch.arange(s.heads_q).view(1, -1), (order + base).view(n, -1)])
        dev = q.device
        self.perms = perms.to(dev)
        self.factors = factors.to(dtype=q.dtype, device=dev).view(n + 1, s.batch, s.heads_kv)
        self.history = [0]
        self._probe: tuple[torch.Tensor, torch.Tensor] | None = None

    def advance(self) -> None:
        k = self.history[-1] + 1
        if k >= self.perms.shape[0]:
            k = 1  # more calls than planned: start over (consecutive versions still differ)
        self._write(self.perms[k], self.factors[k])
        self.history.append(k)

    def _write(self, perm: torch.Tensor, factors: torch.Tensor) -> None:
        torch.index_select(self.q0, 2, perm, out=self.q)
        torch.mul(self.v0, factors.view(self.batch, 1, self.heads_kv, 1), out=self.v)

    def _answer(self, perm: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
        per_head = factors.repeat_interleave(self.group, dim=1)
        return torch.index_select(self.o0, 2, perm) * per_head.view(self.batch, 1, self.heads_q, 1)

    def expected(self, version: int) -> torch.Tensor:
        return self._answer(self.perms[version], self.factors[version])

    def probe(self) -> torch.Tensor:
        """Change one (batch, kv head) block of V (not the first when there are several) and
        return the answer for the new contents; nothing else is rewritten."""
        k = self.history[-1]
        blocks = self.batch * self.heads_kv
        pick = self.rng.randrange(1, blocks) if blocks > 1 else 0
        bi, hi = divmod(pick, self.heads_kv)
        factors = self.factors[k].clone()
        old = float(factors[bi, hi].item())
        factors[bi, hi] = self.rng.choice([f for f in FACTORS if f != old])
        self.v[bi, :, hi].copy_(self.v0[bi, :, hi] * factors[bi, hi])
        return self._answer(self.perms[k], factors)

    def last_versions(self, n: int) -> list[int]:
        """The versions before the last one, most recent first (without repeats)."""
        seen: list[int] = []
        for k in reversed(self.history[:-1]):
            if k not in seen:
                seen.append(k)
            if len(seen) == n:
                break
        return seen
