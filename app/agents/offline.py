"""The offline search agent: no model, no key. It proposes kernels of the attention kernel
family (kernels/attention/family: knobs grouped by layer, `render(knobs)` -> one .cu file)
the way a greedy agent does: it keeps a focus layer and tries the leader's neighbours inside
that layer only, moving to a new leader as soon as the judge accepts one.

It stalls as such agents do: once every neighbour in its layer is tried it declares the
limit; resumed without a message it circles, re-submitting variants it already measured.
A question moves it: a question whose words name another layer (tiles, pipeline stages,
the exponential, the grid, the causal mask, ...) moves its focus there, and one that asks
what it has not tried moves it to its least explored layer. Information (not a question)
is acknowledged and changes nothing: every large gain in the findings followed a question.

Deterministic for a seed: candidates are ordered by a hash of (seed, setting)."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from app.agents.base import (
    DECLARE_DONE,
    SUBMIT_CANDIDATE,
    Agent,
    AgentConfigError,
    AgentStep,
    Feedback,
    SteeringMessage,
    Task,
    ToolCall,
    Usage,
)

try:  # the family belongs to kernels/; the agent says so plainly when it is missing
    from kernels.attention.family import (
        KNOB_LAYER,
        LAYERS,
        KnobError,
        Knobs,
        default_knobs,
        knobs_from_mapping,
        neighbours,
        parse_knobs,
        render,
    )

    FAMILY_ERROR = ""
except ImportError as exc:  # pragma: no cover - the family ships with the repository
    FAMILY_ERROR = f"the kernel family (kernels/attention/family) cannot be imported: {exc}"

# A straightforward first port: small tiles, one pipeline stage, padded rows, expf, no
# causal skipping, no split-KV. Each layer has room to improve, and a question can find it.
FIRST_PORT = ("tile_d64=64x64x4,tile_d128=64x64x4,tile_d256=64x64x4,loader=cp_async,stages=1,smem_layout=pad,"
              "q_fragments=smem,softmax_exp=expf,rescale=always,grid_order=m_fastest,persistent=false,"
              "split_kv=off,pack_gqa=off,causal_skip=false,mask_split=false")
STARTS = {"first-port": FIRST_PORT, "default": ""}

# Words that name a layer of the family (bank layers map onto the same words).
LAYER_PATTERNS: dict[str, tuple[str, ...]] = {
    # A bare "tile" (a K/V tile, the query tile) is the whole kernel's vocabulary, not a layer.
    "tiling": (r"\btiling\b", r"\btile (?:shapes?|sizes?|dimensions?)\b", r"\bblock[ _-]?(?:sizes?|shapes?|m|n)\b",
               r"\brows? per warp\b", r"\bwarps? per (?:cta|block|tile)\b", r"\bbigger tiles?\b",
               r"\bsmaller tiles?\b"),
    "memory": (r"\bshared memory\b", r"\bsmem\b", r"\bcp\.async\b", r"\bbulk\b", r"\btma\b", r"\bcopy engine\b",
               r"\bpipelin\w*", r"\bstages?\b", r"\bdouble[- ]buffer\w*", r"\bprefetch\w*", r"\bswizzl\w*",
               r"\bbank conflicts?\b", r"\blayout\b", r"\bloads?\b", r"\bloading\b", r"\bglobal memory\b",
               r"\bbandwidth\b", r"\bmemory\b", r"\bk/v tiles?\b"),
    "math": (r"\btensor[- ]cores?\b", r"\bmma\b", r"\bmatrix products?\b", r"\bexponentials?\b", r"\bexp2?f?\b",
             r"\bsoftmax\b", r"\brescal\w*", r"\baccumulat\w*", r"\bprecision\b", r"\bfragments?\b",
             r"\bregisters?\b", r"\bffma\b", r"\bconver\w*", r"\bfloating[- ]point\b", r"\bmath\b",
             r"\binstructions?\b", r"\bissue slots?\b",
             # the Hopper layer (mma=wgmma) is a value of the math layer
             r"\bwgmma\b", r"\bhopper\b", r"\bwarp ?groups?\b", r"\bwarp[- ]speciali[sz]\w*"),
    "scheduling": (r"\bgrid\b", r"\bthread blocks?\b", r"\bctas?\b", r"\bsms?\b", r"\bwaves?\b", r"\bpersistent\b",
                   r"\bsplit(?:-kv| kv|s)?\b", r"\boccupancy\b", r"\bschedul\w*", r"\blaunch\w*", r"\border\b",
                   r"\bgqa\b", r"\bgrouped[- ]query\b", r"\bdecode\b", r"\bbusy\b", r"\bidle\b"),
    "masking": (r"\bmask\w*", r"\bcausal\b", r"\bdiagonal\b", r"\bboundar\w*", r"\bragged\b",
                r"\bvisible pairs?\b"),
}
_LAYER_RE = {layer: re.compile("|".join(p), re.IGNORECASE) for layer, p in LAYER_PATTERNS.items()}
# "Which layer have you not touched?", "what haven't you tried?", "something you never changed"
_NOT_TRIED_RE = re.compile(
    r"\b(?:not|never|n't|haven't|hasn't|untried|unexplored)\b[^.?!]{0,60}?"
    r"\b(?:tried|touched|changed|explored|attacked|considered|looked|attempted|used)\b"
    r"|\buntried\b|\bunexplored\b|\bwhat else\b|\banother layer\b|\bother layers?\b",
    re.IGNORECASE,
)


def layer_mentions(text: str) -> Counter[str]:
    """How often the text names each layer of the family."""
    return Counter({layer: len(rx.findall(text)) for layer, rx in _LAYER_RE.items() if rx.search(text)})


def asks_what_was_not_tried(text: str) -> bool:
    return bool(_NOT_TRIED_RE.search(text))


def _order_key(seed: int, setting: Knobs) -> str:
    return hashlib.sha256(f"{seed}:{setting.slug()}".encode()).hexdigest()


@dataclass(frozen=True)
class OfflineConfig:
    seed: int = 0
    start: str = "first-port"  # "first-port", "default", or a knob spec (key=value,... or JSON)
    focus: str = "tiling"
    batch: int = 1  # candidates per step (the runner evaluates them in turn)

    @classmethod
    def parse(cls, config: dict[str, Any]) -> OfflineConfig:
        if FAMILY_ERROR:
            raise AgentConfigError(FAMILY_ERROR)
        known = {"seed", "start", "focus", "batch"}
        unknown = set(config) - known
        if unknown:
            raise AgentConfigError(f"unknown offline option(s) {', '.join(sorted(unknown))}; "
                                   f"options: {', '.join(sorted(known))}")
        try:
            seed = int(config.get("seed", 0))
            batch = int(config.get("batch", 1))
        except (TypeError, ValueError) as exc:
            raise AgentConfigError("seed and batch must be integers") from exc
        if not 1 <= batch <= 8:
            raise AgentConfigError("batch must be between 1 and 8")
        focus = str(config.get("focus", "tiling"))
        if focus not in LAYERS:
            raise AgentConfigError(f"focus must be one of the family's layers: {', '.join(LAYERS)}")
        start = str(config.get("start", "first-port"))
        start_knobs(start)  # refuses an invalid setting now, not halfway through a session
        return cls(seed, start, focus, batch)


def start_knobs(start: str) -> Knobs:
    try:
        return parse_knobs(STARTS.get(start, start)) if start != "default" else default_knobs()
    except KnobError as exc:
        raise AgentConfigError(f"start: {exc}") from exc


def validate_config(config: dict[str, Any]) -> None:
    OfflineConfig.parse(config)


class OfflineAgent(Agent):
    name = "offline"

    def __init__(self, task: Task, config: dict[str, Any]) -> None:
        super().__init__(task, config)
        if task.candidate_kind != "cuda":
            raise AgentConfigError("the offline agent writes CUDA kernels of the family: the session's "
                                   "candidates must be cuda")
        self.settings = OfflineConfig.parse(config)
        self.best: dict[str, Any] = start_knobs(self.settings.start).to_dict()
        self.best_speedup: float | None = None
        self.has_leader = False
        self.focus = self.settings.focus
        self.tried: dict[str, dict[str, Any]] = {}  # slug -> layer, knob, value, verdict, speedup
        self.pending: dict[str, dict[str, Any]] = {}  # call id -> the setting it submitted
        self.layer_evals: Counter[str] = Counter()
        self.declared = False  # declared the limit in the current stall
        self.circled = 0  # re-submissions while stalled
        self.calls = 0
        self.started = False
        self.moves: list[dict[str, Any]] = []  # how each question changed (or not) the focus

    # -- the step ---------------------------------------------------------------------------

    async def step(self, feedback: Feedback) -> AgentStep:
        self._learn(feedback)
        words = [self._hear(m) for m in feedback.messages]
        if not self.started:
            self.started = True
            knobs = knobs_from_mapping(self.best)
            words.append(f"I start from a straightforward port ({self.settings.start}) and will tune "
                         f"the {self.focus} layer first.")
            return self._submit(words, [(knobs, "start", "", "")])
        fresh = self._untried_neighbours()
        if fresh:
            self.declared = False
            self.circled = 0
            chosen = fresh[: self.settings.batch]
            words.append(f"Next in {self.focus}: " + "; ".join(f"{k}={v}" for _, _, k, v in chosen) + ".")
            return self._submit(words, chosen)
        if not self.declared:
            self.declared = True
            reason = (f"I have tried every {self.focus} setting next to the leader "
                      f"({len(self._layer_tried(self.focus))} variants); this is the limit of this kernel.")
            words.append(reason)
            return self._finish(words, reason)
        # Resumed without a question that moves it: circle among variants already measured.
        again = self._layer_tried(self.focus)
        if not again:
            words.append(f"The {self.focus} layer offers no valid variant of the leader; I have no further ideas.")
            return self._finish(words, words[-1])
        pick = again[self.circled % len(again)]
        self.circled += 1
        knobs = knobs_from_mapping(pick["knobs"])
        words.append(f"Retrying {pick['knob']}={pick['value']}: the last measurement may have been noise.")
        return self._submit(words, [(knobs, self.focus, pick["knob"], str(pick["value"]))])

    def _submit(self, words: list[str], chosen: list[tuple[Knobs, str, str, str]]) -> AgentStep:
        calls = []
        for knobs, layer, knob, value in chosen:
            self.calls += 1
            call_id = f"offline-{self.calls}"
            title = f"{layer}: {knob}={value}" if knob else "first port"
            args: dict[str, Any] = {"source": render(knobs), "title": title,
                                    "notes": f"greedy search in the {layer} layer; setting {knobs.slug()}"}
            if self.has_leader:
                args["parent"] = "leader"
            self.pending[call_id] = {"knobs": knobs.to_dict(), "slug": knobs.slug(), "layer": layer,
                                     "knob": knob, "value": value}
            calls.append(ToolCall(SUBMIT_CANDIDATE, args, call_id))
        return AgentStep(" ".join(words).strip(), calls, Usage())

    def _finish(self, words: list[str], reason: str) -> AgentStep:
        self.calls += 1
        return AgentStep(" ".join(words).strip(),
                         [ToolCall(DECLARE_DONE, {"reason": reason}, f"offline-{self.calls}")], Usage())

    # -- what it learns and hears -----------------------------------------------------------

    def _learn(self, feedback: Feedback) -> None:
        for r in feedback.results:
            sent = self.pending.pop(r.call_id, None)
            if sent is None:
                continue
            verdict = r.data.get("verdict") if r.ok else "refused"
            visible = r.data.get("visible") or {}
            speedup = visible.get("geomean_vs_baseline")
            self.tried[sent["slug"]] = {**sent, "verdict": verdict, "speedup": speedup}
            self.layer_evals[sent["layer"]] += 1
            if verdict == "leader":
                self.best, self.best_speedup, self.has_leader = sent["knobs"], speedup, True
        self.pending.clear()

    def _hear(self, m: SteeringMessage) -> str:
        """Decide where a message moves the focus; returns the agent's answer to it."""
        before = self.focus
        if m.kind != "question":
            self.moves.append({"text": m.text, "from": before, "to": before, "why": "information"})
            return f"Noted: \u201c{m.text[:80]}\u201d. I keep tuning {before}."
        named = layer_mentions(m.text)
        others = {layer: n for layer, n in named.items() if layer != before}
        order = LAYERS[LAYERS.index(before) + 1:] + LAYERS[:LAYERS.index(before)]  # the other layers
        if asks_what_was_not_tried(m.text):
            pool = [layer for layer in order if layer in others] or order
            target = min(pool, key=lambda layer: (self.layer_evals[layer], -others.get(layer, 0),
                                                  order.index(layer)))
            why = f"you ask what I have not tried, and I explored {target} least"
        elif others:
            target = max(others, key=lambda layer: (others[layer], -self.layer_evals[layer], -order.index(layer)))
            why = f"your question is about {target}"
        else:
            self.moves.append({"text": m.text, "from": before, "to": before, "why": "names no other layer"})
            return f"You ask \u201c{m.text[:80]}\u201d; I keep tuning {before}."
        self.focus = target
        self.declared = False
        self.circled = 0
        self.moves.append({"text": m.text, "from": before, "to": target, "why": why})
        return f"Your question moves me from {before} to {target} ({why})."

    def _untried_neighbours(self) -> list[tuple[Knobs, str, str, str]]:
        best = knobs_from_mapping(self.best)
        out = []
        for n in neighbours(best, self.focus):
            if n.slug() in self.tried:
                continue
            knob = next(k for k, v in n.to_dict().items() if v != self.best[k])
            out.append((n, self.focus, knob, str(getattr(n, knob))))
        seed = self.settings.seed
        return sorted(out, key=lambda t: _order_key(seed, t[0]))

    def _layer_tried(self, layer: str) -> list[dict[str, Any]]:
        return [t for t in self.tried.values() if t["layer"] == layer and KNOB_LAYER.get(t["knob"]) == layer]

    # -- persistence ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {"best": self.best, "best_speedup": self.best_speedup, "has_leader": self.has_leader,
                "focus": self.focus, "tried": self.tried, "pending": self.pending,
                "layer_evals": dict(self.layer_evals), "declared": self.declared, "circled": self.circled,
                "calls": self.calls, "started": self.started, "moves": self.moves}

    def restore(self, state: dict[str, Any]) -> None:
        self.best = dict(state.get("best", self.best))
        self.best_speedup = state.get("best_speedup")
        self.has_leader = bool(state.get("has_leader", False))
        self.focus = str(state.get("focus", self.focus))
        self.tried = dict(state.get("tried", {}))
        self.pending = dict(state.get("pending", {}))
        self.layer_evals = Counter(state.get("layer_evals", {}))
        self.declared = bool(state.get("declared", False))
        self.circled = int(state.get("circled", 0))
        self.calls = int(state.get("calls", 0))
        self.started = bool(state.get("started", False))
        self.moves = list(state.get("moves", []))
