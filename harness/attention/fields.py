"""Contract fields of ABI v1 that vary by trial and by timed call, so that no kernel can assume
a value: softmax_scale. (Layouts and strides vary by trial in problem.make_inputs; the
workspace is poisoned before every call; batch, heads and the causal offset vary by scenario:
docs/harness.md lists each field and what exercises it.)

softmax_scale:
- trial 1: the scenario's scale (its `softmax_scale` field, or head_dim^-0.5 when it has none);
- trial 2: a production value that is not head_dim^-0.5: 1/sqrt(144) at head_dim 128 (Gemma 2
  27B scales its 128-wide heads by query_pre_attn_scalar = 144), else a random draw from the
  trial's seed: head_dim^-0.5 times a log-uniform factor in [1/2, 1/1.25] or [1.25, 2];
- later trials: log-uniform draws in that range;
- each timed call: one of head_dim^-0.5, the production value, or a log-uniform draw, chosen
  with the call's nonce."""

from __future__ import annotations

import math
import random

from harness.scenario import Scenario

# head_dim -> a scale real models use at that width that is not head_dim^-0.5.
PRODUCTION_SCALES: dict[int, tuple[float, str]] = {
    128: (1.0 / math.sqrt(144.0), "1/sqrt(144), Gemma 2 27B"),
}
# Random scales: head_dim^-0.5 times a factor in [1/2, 1/1.25] or [1.25, 2], log-uniform: never
# so close to the usual value that a kernel ignoring the field could pass by rounding.
RANDOM_RANGE = (1.25, 2.0)


def default_scale(s: Scenario) -> float:
    """The scale a kernel would assume: head_dim^-0.5."""
    return 1.0 / math.sqrt(s.head_dim)


def scenario_scale(s: Scenario) -> float:
    return s.softmax_scale if s.softmax_scale is not None else default_scale(s)


def _random_scale(s: Scenario, rng: random.Random) -> float:
    lo, hi = (math.log(x) for x in RANDOM_RANGE)
    return default_scale(s) * math.exp(rng.choice((-1.0, 1.0)) * rng.uniform(lo, hi))


def production_scale(s: Scenario, rng: random.Random) -> float:
    if s.head_dim in PRODUCTION_SCALES:
        return PRODUCTION_SCALES[s.head_dim][0]
    return _random_scale(s, rng)


def trial_scale(s: Scenario, trial: int, seed: int) -> float:
    if trial == 0:
        return scenario_scale(s)
    rng = random.Random(seed * 7919 + trial)
    return production_scale(s, rng) if trial == 1 else _random_scale(s, rng)


def timed_scale(s: Scenario, rng: random.Random) -> float:
    pick = rng.randrange(3)
    if pick == 0:
        return default_scale(s)
    return production_scale(s, rng) if pick == 1 else _random_scale(s, rng)


def describe_scales(s: Scenario, trials: int = 2) -> dict[str, object]:
    """What `socratic scenarios --json` shows about softmax_scale for a scenario."""
    prod = PRODUCTION_SCALES.get(s.head_dim)
    return {
        "softmax_scale": scenario_scale(s),
        "trial_softmax_scales": [
            round(trial_scale(s, t, 0), 8) for t in range(trials)
        ],
        "timed_softmax_scales": (
            f"per call: head_dim^-0.5 = {default_scale(s):.6g}, "
            + (f"{prod[0]:.6g} ({prod[1]})" if prod else "a log-uniform draw")
            + f", or head_dim^-0.5 x a log-uniform factor in [1/{RANDOM_RANGE[1]:g}, 1/{RANDOM_RANGE[0]:g}]"
            + f" or [{RANDOM_RANGE[0]:g}, {RANDOM_RANGE[1]:g}]"
        ),
    }
