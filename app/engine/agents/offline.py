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

Two options make it a campaign member and a fair control (docs/campaigns.md):
- `policy: "autonomous"`: at its own plateau (`patience` evaluations without a new leader, or no
  untried neighbour left) it moves on by itself instead of declaring the limit: to the layer it
  explored least that still has untried neighbours (in a board campaign, the layer the whole
  campaign explored least). "No questions" then competes.
- `board: true`: after each submission it reads the campaign's board (`read_board`). Unless a
  message came in the same step (a message comes first): the campaign leader's setting becomes
  its parent where it beats its own leader by more than 1%; it tries on its leader the changes
  that led or improved elsewhere, whatever their layer (all together, then each alone, best
  gain first, once per leader); it never measures a setting the board shows measured or in
  flight, nor a single change discarded elsewhere; its own plateau takes it to the layer the
  campaign explored least. Its own layer search goes on from there. A "Switch strategy: LAYER"
  message (the campaign plateau) moves it to LAYER; a "Parent: ... knobs {...}" line
  (evolution) makes that setting its parent.

Two strategies (`strategy`): "greedy" is the agent described above (today's agent, kept as the
control); "measured" (the second version, the default) profiles each new leader through the
`profile` tool, takes the layer and knob the diagnosis and the hardware rank first (an sm_90
kernel without the warpgroup MMA: the math layer's `mma=wgmma`), writes the gain it expects in the
candidate's notes, never measures a setting twice, leaves a layer at its own plateau for the next
one the diagnosis ranks, and declares done only when every layer was tried from the leader
(docs/agents.md). Questions move both; a question that names a bottleneck makes it profile first.

Deterministic for a seed: candidates are ordered by a hash of (seed, setting)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.agents.base import (
    DECLARE_DONE,
    PROFILE,
    READ_BOARD,
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
from harness.stats import geomean
from lessons.distill import NOISE as LESSON_NOISE
from lessons.distill import setting_hash
from lessons.use import PRIOR_MIN_CONFIDENCE

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
    from kernels.attention.family.render import recorded_knobs

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


_SWITCH_RE = re.compile(r"^\s*Switch strategy:\s*(\w+)", re.IGNORECASE)
_PARENT_RE = re.compile(r"^Parent:.*?knobs (\{.*\})\s*$", re.MULTILINE)
POLICIES = ("questions", "autonomous")
# "greedy": today's agent (the control); "measured": the second version, led by the leader's profile.
STRATEGIES = ("measured", "greedy")
# A question that names a bottleneck or a measurement makes the measured agent profile first.
_BOTTLENECK_RE = re.compile(
    r"\bbottleneck\w*|\bbound(?:s|ed)?\b|\bwhat (?:limits|bounds|holds)\b|\bprofil\w*|\broofline\b|\bstall\w*"
    r"|\butili[sz]\w*|\bthroughput\b|\bbandwidth\b|\bsass\b|\binstruction mix\b|\bwhich (?:tensor-core )?"
    r"instructions\b|\bmeasure\w*", re.IGNORECASE)


def names_a_bottleneck(text: str) -> bool:
    return bool(_BOTTLENECK_RE.search(text))


def split_parent(text: str) -> tuple[str, dict[str, Any] | None]:
    """A message without its "Parent: ..." line, and the parent's knobs when the line names them."""
    found = _PARENT_RE.search(text)
    if found is None:
        return text, None
    try:
        knobs = json.loads(found.group(1))
    except json.JSONDecodeError:
        knobs = None
    rest = (text[:found.start()] + text[found.end():]).strip()
    return rest, knobs if isinstance(knobs, dict) else None


def settings_of(finding: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The settings a profile finding (`Finding.to_dict()`, as the profile tool returns it) names,
    in its order: its own, then its moves."""
    first = (str(finding.get("layer", "")), str(finding.get("knob", "")), str(finding.get("value", "")))
    moves = [tuple(str(x) for x in m) for m in finding.get("moves") or ()
             if isinstance(m, list | tuple) and len(m) == 3]
    return [(layer, knob, value.lower()) for layer, knob, value in [first, *moves]]


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
    policy: str = "questions"  # "questions": only a question moves it; "autonomous": its own plateau policy
    board: bool = False  # read the campaign's board after each submission and use it
    patience: int = 3  # autonomous (and measured): evaluations without a new leader before it moves on
    strategy: str = "measured"  # "measured" (the second version) or "greedy" (today's agent, the control)
    lessons: bool = True  # measured: the task's lessons (lessons/) move their actions ahead; false: ignored

    @classmethod
    def parse(cls, config: dict[str, Any]) -> OfflineConfig:
        if FAMILY_ERROR:
            raise AgentConfigError(FAMILY_ERROR)
        known = {"seed", "start", "focus", "batch", "policy", "board", "patience", "strategy", "lessons"}
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
        policy = str(config.get("policy", "questions"))
        if policy not in POLICIES:
            raise AgentConfigError(f"policy must be one of {', '.join(POLICIES)}")
        try:
            patience = int(config.get("patience", 3))
        except (TypeError, ValueError) as exc:
            raise AgentConfigError("patience must be an integer") from exc
        if patience < 1:
            raise AgentConfigError("patience must be at least 1")
        strategy = str(config.get("strategy", "measured"))
        if strategy not in STRATEGIES:
            raise AgentConfigError(f"strategy must be one of {', '.join(STRATEGIES)}")
        lessons = config.get("lessons", True)
        if not isinstance(lessons, bool):
            raise AgentConfigError("lessons must be true or false")
        return cls(seed, start, focus, batch, policy, bool(config.get("board", False)), patience, strategy, lessons)


def start_knobs(start: str) -> Knobs:
    try:
        return parse_knobs(STARTS.get(start, start), files=False) if start != "default" else default_knobs()
    except KnobError as exc:
        raise AgentConfigError(f"start: {exc}") from exc


def start_spec(knobs: dict[str, Any]) -> str:
    """The `start` option for a knob setting: its knobs that differ from the family's defaults,
    `key=value,...` ("default" when none does); what a fork of a family kernel starts from."""
    setting = knobs_from_mapping(knobs).to_dict()
    changed = {k: v for k, v in setting.items() if default_knobs().to_dict().get(k) != v}
    return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in changed.items()) or "default"


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
        self.board_failed: list[list[str]] = []  # [knob, value] discarded elsewhere: never retried
        self.board_worked: list[list[str]] = []  # [knob, value] that led or improved elsewhere: tried first
        self.board_layers: dict[str, int] = {}  # layer -> evaluations in it elsewhere (the board's entries)
        self.board_measured: dict[str, float] = {}  # slug -> visible speedup (0: not correct) measured elsewhere
        self.board_best: dict[str, Any] = {}  # the campaign leader's setting (as of the board), speedup, author
        self.board_pending: list[str] = []  # slugs other agents submitted that are not judged yet
        self.foreign_parent = False  # the current parent came from another agent (evolution, the board)
        self.followed = False  # ... from the board: kept until a kernel of its own is faster
        self.since_gain = 0  # evaluations since the last new leader (the autonomous plateau)
        # the measured strategy: what the leader's profile found, and the layers tried from this leader
        self.findings: list[dict[str, Any]] = []  # the profile's findings, most at stake first
        self.arch = ""  # the compile target the profile names (sm_90a: Hopper)
        self.diagnosis = ""
        self.need_profile = False  # profile the leader before the next choice
        self.profiled = ""  # the slug of the setting last profiled
        self.visited: list[str] = []  # layers tried from the current leader, in order
        self.finding_misses: Counter[str] = Counter()  # finding code -> its moves measured without a gain
        self.steered = False  # a question chose the focus: the diagnosis does not override it
        # lessons (lessons/): knob changes earlier sessions measured, with their effect (Task.priors)
        self.priors: list[dict[str, Any]] = list(task.priors) if self.settings.lessons else []
        self._outcomes: tuple[str, dict[str, dict[str, Any]]] = ("", {})  # leader hash -> child slug -> outcome
        self.intro = ""  # a continued start's words (a fork), said in the first step
        self._continue_from(task.leader)

    def _continue_from(self, leader: dict[str, Any] | None) -> None:
        """A session that has a leader before the agent's first step (a fork: app/engine/fork.py
        sets `start` to the forked kernel's setting): when the leader records the start setting in
        its header, that setting is measured already, so it is not submitted again. It leads, the
        search goes on from it (the measured strategy profiles it first: its suite evaluation came
        with it), and it is never measured twice."""
        if not leader or not isinstance(leader.get("source"), str):
            return
        recorded = recorded_knobs(leader["source"])
        try:
            setting = knobs_from_mapping(recorded) if recorded is not None else None
        except (KnobError, TypeError, ValueError):
            setting = None
        if setting is None or setting.to_dict() != self.best:
            return
        speed = leader.get("visible_speedup")
        speed = float(speed) if isinstance(speed, int | float) and not isinstance(speed, bool) else None
        slug = setting.slug()
        self.started, self.has_leader, self.best_speedup = True, True, speed
        self.tried[slug] = {"knobs": setting.to_dict(), "slug": slug, "layer": "start", "knob": "", "value": "",
                            "verdict": "leader", "speedup": speed}
        self.need_profile = self.settings.strategy == "measured"
        where = str(leader.get("origin") or "the session's leader")
        shown = f", {speed:.3f}x over the visible scenarios" if speed is not None else ""
        self.intro = (f"I continue from the leader, candidate #{leader.get('number', 1)} ({where}{shown}): its "
                      f"setting is measured already, so I do not submit it again; I go on in the {self.focus} layer.")

    # -- the step ---------------------------------------------------------------------------

    async def step(self, feedback: Feedback) -> AgentStep:
        if self.settings.strategy == "measured":
            return self._measured_step(feedback)
        self._learn(feedback)
        words = [self._hear(m) for m in feedback.messages]
        if self.intro:
            words.insert(0, self.intro)
            self.intro = ""
        if not self.started:
            self.started = True
            knobs = knobs_from_mapping(self.best)
            words.append(f"I start from a straightforward port ({self.settings.start}) and will tune "
                         f"the {self.focus} layer first.")
            return self._submit(words, [(knobs, "start", "", "")])
        if self.settings.board and not feedback.messages:
            followed = self._follow_board()
            if followed:
                words.append(followed)
        adopt = [] if feedback.messages else self._board_adoptions()
        if adopt:  # what worked in another agent's lineage, tried on this one's leader
            self.declared = False
            self.circled = 0
            chosen = adopt[: self.settings.batch]
            names = [f"{k}={v}" if v else k for _, _, k, v in chosen]
            words.append("From the board, on my leader: " + "; ".join(names) + ".")
            return self._submit(words, chosen, "worked in another agent's lineage (the board)")
        fresh = self._untried_neighbours()
        plateau = self.since_gain >= self.settings.patience
        if self.settings.policy == "autonomous" and (not fresh or plateau):
            moved = self._own_move()
            if moved:
                words.append(moved)
                self.since_gain = 0
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

    def _submit(self, words: list[str], chosen: list[tuple[Knobs, str, str, str]], why: str = "",
                finding: str = "") -> AgentStep:
        calls = []
        for knobs, layer, knob, value in chosen:
            self.calls += 1
            call_id = f"offline-{self.calls}"
            change = f"{knob}={value}" if value else knob  # several changes name their own values
            title = f"{layer}: {change}" if knob else "first port"
            how = why or f"greedy search in the {layer} layer"
            args: dict[str, Any] = {"source": render(knobs), "title": title,
                                    "notes": f"{how}; setting {knobs.slug()}"}
            if self.has_leader and not self.foreign_parent:
                args["parent"] = "leader"
            self.pending[call_id] = {"knobs": knobs.to_dict(), "slug": knobs.slug(), "layer": layer,
                                     "knob": knob, "value": value, "finding": finding,
                                     "was": str(self.best.get(knob, "")) if knob in self.best else "",
                                     "parent_speedup": self.best_speedup if self.has_leader else None}
            calls.append(ToolCall(SUBMIT_CANDIDATE, args, call_id))
        if self.settings.board:  # what the others concluded meanwhile, for the next choice
            self.calls += 1
            calls.append(ToolCall(READ_BOARD, {"others_only": True}, f"offline-{self.calls}"))
        return AgentStep(" ".join(words).strip(), calls, Usage())

    def _finish(self, words: list[str], reason: str) -> AgentStep:
        self.calls += 1
        return AgentStep(" ".join(words).strip(),
                         [ToolCall(DECLARE_DONE, {"reason": reason}, f"offline-{self.calls}")], Usage())

    # -- the measured strategy (the second version) ---------------------------------------------

    def _measured_step(self, feedback: Feedback) -> AgentStep:
        """Led by the leader's profile: it profiles each new leader, goes to the layer and knob the
        diagnosis (and the hardware) ranks first, writes the expected gain in the notes, never
        measures a setting twice, leaves a layer at its own plateau for the next one the
        diagnosis ranks, and declares done only when every layer was tried from the leader."""
        self._learn(feedback)
        words = [self.intro] if self.intro else []
        self.intro = ""
        for m in feedback.messages:
            before = self.focus
            words.append(self._hear(m))
            if m.kind == "question":
                if self.focus != before:
                    self.steered = True
                    self.visited = [layer for layer in self.visited if layer != self.focus]
                if names_a_bottleneck(m.text) and self.has_leader:
                    self.need_profile = True
                    words.append("Your question names a bottleneck: I profile the leader first.")
        if not self.started:
            self.started = True
            knobs = knobs_from_mapping(self.best)
            words.append(f"I start from a straightforward port ({self.settings.start}); its profile will say "
                         "which layer to change first.")
            return self._submit(words, [(knobs, "start", "", "")], "the first port: measured before any choice")
        if self.need_profile and self.has_leader:
            self.need_profile = False
            self.calls += 1
            words.append("I profile the leader before choosing what to change.")
            return AgentStep(" ".join(words).strip(), [ToolCall(PROFILE, {}, f"offline-{self.calls}")], Usage())
        if self.settings.board and not feedback.messages:
            followed = self._follow_board()
            if followed:
                words.append(followed)
        adopt = [] if feedback.messages else self._board_adoptions()
        if adopt:
            chosen = adopt[: self.settings.batch]
            words.append("From the board, on my leader: " + "; ".join(f"{k}={v}" if v else k for _, _, k, v in chosen))
            return self._submit(words, chosen, "measured: worked in another agent's lineage (the board)")
        taught = self._lesson_moves(self.focus if self.steered else None)
        if taught:
            self.declared = False
            setting, layer, knob, value, prior = taught[0]
            words.append(f"A lesson (#{prior['id']}) says {knob}={value} paid off {prior['ratio']:.3f}x from a "
                         f"leader like mine ({prior['count']} time(s)); I measure it here.")
            return self._submit(words, [(setting, layer, knob, value)], self._lesson_expectation(prior))
        diagnosed = self._finding_moves()
        if diagnosed:
            self.declared = False
            setting, layer, knob, value, finding = diagnosed[0]
            if layer != self.focus:
                self.moves.append({"text": "", "from": self.focus, "to": layer,
                                   "why": f"measured: {finding.get('code')}"})
                self.focus = layer
            change = f"{knob}={value}" if value else knob
            words.append(f"The profile finds {finding.get('code')}; next: {change} ({layer}).")
            return self._submit(words, [(setting, layer, knob, value)], self._finding_expectation(finding, knob, value),
                                finding=str(finding.get("code", "")))
        fresh = self._ordered_untried(self.focus)
        if not fresh or self.since_gain >= self.settings.patience:
            if self.focus not in self.visited:
                self.visited.append(self.focus)
            target, why = self._next_layer()
            if target is None:
                # every change never measured is measured: the findings' changes that missed from an
                # earlier leader (within the noise), then the layers' (`_ordered_untried(again=True)`)
                again = self._finding_moves(again=True)
                if again:
                    self.declared = False
                    setting, layer, knob, value, finding = again[0]
                    change = f"{knob}={value}" if value else knob
                    words.append(f"Every change the profile and the layers name is measured; {change} missed from "
                                 f"an earlier leader within the noise, so I measure it again from this one ({layer}).")
                    return self._submit(words, [(setting, layer, knob, value)],
                                        self._finding_expectation(finding, knob, value),
                                        finding=str(finding.get("code", "")))
                self.visited = [] if self.declared else self.visited
                target, why = self._next_layer(again=True)
            if target is None and self.declared:
                # resumed without a question after it declared: only what was never measured is left
                self.visited = []
                target, why = self._next_layer(again=True)
            if target is None:
                if self.declared:
                    reason = ("Every neighbour of the leader in every layer is measured already (the record "
                              f"holds {len(self.tried)} settings); I do not measure a setting twice.")
                else:
                    reason = (f"I have tried every layer from the current leader ({', '.join(self.visited)}) "
                              f"without a gain; the profile says: {self.diagnosis or 'no profile'}.")
                self.declared = True
                words.append(reason)
                return self._finish(words, reason)
            before = self.focus
            self.focus, self.since_gain, self.steered = target, 0, False
            self.moves.append({"text": "", "from": before, "to": target, "why": f"measured: {why}"})
            words.append(f"My {before} search has stalled; the diagnosis ranks {target} next ({why}).")
            fresh = self._ordered_untried(self.focus) or self._ordered_untried(self.focus, again=True)
        self.declared = False
        chosen = fresh[: self.settings.batch]
        _, layer, knob, value = chosen[0]
        why = self._expectation(layer, knob, value)
        words.append(f"Next in {self.focus}: " + "; ".join(f"{k}={v}" for _, _, k, v in chosen) + ".")
        return self._submit(words, chosen, why)

    def _after_profile(self) -> str:
        """Right after a profile: unless a question chose the focus, go to the layer the diagnosis
        ranks first among those with an untried neighbour; returns the words that say so."""
        if self.steered:
            return ""
        for layer, why in self._ranked_layers():
            if layer in self.visited or not self._ordered_untried(layer):
                continue
            if layer != self.focus:
                self.moves.append({"text": "", "from": self.focus, "to": layer, "why": f"measured: {why}"})
                self.focus, self.since_gain = layer, 0
            return why
        return ""

    def _finding_moves(self, again: bool = False) -> list[tuple[Knobs, str, str, str, dict[str, Any]]]:
        """The settings the leader's findings name, most at stake first and each finding's in its
        own order, that make a valid setting one change from the leader and were never measured
        (nor discarded on a campaign's board). The findings take turns: after a miss, a finding's
        next setting waits behind the other findings' settings that have missed less from this
        leader (on the H100 a finding's second and third settings missed where the next finding's
        first won); one that missed `patience` times waits for the next leader. A question that
        chose the focus keeps them inside its layer. A setting the family refuses alone comes with
        the other finding's setting it needs (`_with_enabler`).

        Only changes never measured from any leader: on the H100 (2026-12-06, the two measured
        arms on 36 prefill scenarios) 13 changes measured again from a later leader after a miss
        gained nothing, where the layers' 13 new changes gave 2 leaders. `again=True`: the changes that missed
        once from an earlier leader within the noise (never one that lost clearly, `_lost`, nor
        one that missed twice), for when nothing new is left in any layer."""
        out = []
        discarded = {(k, str(v).lower()) for k, v in self.board_failed}
        for f in self.findings:
            code = str(f.get("code", ""))
            if self.finding_misses[code] >= self.settings.patience and not again:
                continue
            for layer, knob, value in settings_of(f):
                if not value or layer not in LAYERS or (self.steered and layer != self.focus):
                    continue
                if str(self.best.get(knob)).lower() == value or (knob, value) in discarded:
                    continue
                one = self._changed({knob: value})
                setting, label = one, knob
                if one is None:  # needs another of the finding's moves first
                    setting, label = self._with_enabler(knob, value)
                if setting is None or setting.to_dict() == self.best or self._known(setting):
                    continue
                out.append((setting, layer, label, value if label == knob else "", f))
        misses, lost, undoes = self._misses(), self._lost(), self._undoes()
        out = [m for m in out if (m[2], m[3].lower()) not in undoes]  # the layers' last resort (`_ordered_untried`)
        if again:
            kept = [m for m in out if misses[m[2], m[3].lower()] == 1 and (m[2], m[3].lower()) not in lost]
        else:
            kept = [m for m in out if not misses[m[2], m[3].lower()]]
        return sorted(kept, key=lambda m: self.finding_misses[str(m[4].get("code", ""))])

    def _misses(self) -> Counter[tuple[str, str]]:
        """How many times each change (knob, value) was measured without becoming the leader,
        from whichever leader."""
        return Counter((str(t.get("knob", "")), str(t.get("value", "")).lower()) for t in self.tried.values()
                       if t.get("verdict") != "leader")

    def _lost(self) -> set[tuple[str, str]]:
        """(knob, value) changes that made a kernel clearly slower (by over 3%) than the leader they
        were measured from, whichever leader that was."""
        out = set()
        for t in self.tried.values():
            speed, parent = t.get("speedup"), t.get("parent_speedup")
            if (t.get("value") and isinstance(parent, int | float) and parent > 0
                    and (not isinstance(speed, int | float) or speed < 0.97 * parent)):
                out.add((str(t["knob"]), str(t["value"]).lower()))
        return out

    def _changed(self, changes: dict[str, str]) -> Knobs | None:
        """The leader with these knobs set, when that is a valid setting."""
        spec = ",".join(f"{k}={v}" for k, v in changes.items())
        try:
            return parse_knobs(spec, knobs_from_mapping(self.best), files=False).validate()
        except (KnobError, TypeError, ValueError):
            return None

    def _with_enabler(self, knob: str, value: str) -> tuple[Knobs | None, str]:
        """`knob=value` together with another setting a finding names that it needs (the family
        refuses it alone), in the findings' order: e.g. the dynamic scheduler or the copy-engine
        epilogue with the Q ring; where one is not enough, two (the dynamic scheduler needs both
        persistent CTAs and the Q ring). A companion that made a kernel clearly slower alone (over
        3%) is paired once at most: a pair is another kernel (on the H100 persistent CTAs alone
        lost 5% where with the dynamic scheduler they won 5%), but a loser paired twice cost two
        evaluations (2026-12-06)."""
        lost = self._lost()
        paired = {str(t.get("knob", "")).split(", ", 1)[0] for t in self.tried.values()
                  if ", " in str(t.get("knob", "")) and t.get("verdict") != "leader"}
        companions: list[tuple[str, str]] = []
        for f in self.findings:
            for _, k, v in settings_of(f):
                if k == knob or not v or str(self.best.get(k)).lower() == v or (k, v) in companions:
                    continue
                before = self._changed({k: v})
                if before is None:
                    continue
                seen = self.tried.get(before.slug())
                speed = seen.get("speedup") if seen else None
                slower = (k, v) in lost or bool(seen and (not isinstance(speed, int | float) or not self.best_speedup
                                                          or speed < 0.97 * self.best_speedup))
                if slower and f"{k}={v}" in paired:
                    continue
                both = self._changed({k: v, knob: value})
                if both is not None:
                    return both, f"{k}={v}, {knob}={value}"
                companions.append((k, v))
        for i, (k1, v1) in enumerate(companions):
            for k2, v2 in companions[i + 1:]:
                if k2 == k1:
                    continue
                three = self._changed({k1: v1, k2: v2, knob: value})
                if three is not None:
                    return three, f"{k1}={v1}, {k2}={v2}, {knob}={value}"
        return None, ""

    def _finding_expectation(self, f: dict[str, Any], knob: str, value: str) -> str:
        change = f"{knob}={value}" if value else knob
        return (f"measured: the leader's profile finds {f.get('code')} ({f.get('message')}); {change} should "
                f"{f.get('direction')}; expected gain: {f.get('expected')}")

    def _is_hopper(self) -> bool:
        return self.arch.startswith("sm_90")

    def _ranked_layers(self) -> list[tuple[str, str]]:
        """The layers in the order the diagnosis and the hardware rank them: the findings' layers,
        most at stake first (on sm_90 without the warpgroup MMA the math layer leads), then the
        layers it explored least."""
        out: list[tuple[str, str]] = []
        if self._is_hopper() and self.best.get("mma") != "wgmma":
            out.append(("math", f"{self.arch}: Hopper's warpgroup MMA (mma=wgmma) is unused"))
        for f in self.findings:
            layer = str(f.get("layer", ""))
            if layer in LAYERS and layer not in [x for x, _ in out]:
                out.append((layer, f"{f.get('code')}: {f.get('message')}"))
        rest = sorted((x for x in LAYERS if x not in [y for y, _ in out]),
                      key=lambda x: (self.layer_evals[x], LAYERS.index(x)))
        out.extend((x, f"no finding points at it; explored {self.layer_evals[x]} times") for x in rest)
        return out

    def _next_layer(self, again: bool = False) -> tuple[str | None, str]:
        for layer, why in self._ranked_layers():
            if layer not in self.visited and self._ordered_untried(layer, again):
                return layer, why
        return None, ""

    def _ordered_untried(self, layer: str, again: bool = False) -> list[tuple[Knobs, str, str, str]]:
        """The layer's unmeasured neighbours whose change was never measured from any leader, the
        settings the findings name first. `again=True`: every unmeasured neighbour, those whose
        change missed from an earlier leader after the new ones, fewest misses first, and those
        that lost clearly there last."""
        wanted = [(knob, value) for f in self.findings for x, knob, value in settings_of(f)
                  if x == layer and value]
        if self._is_hopper() and self.best.get("mma") != "wgmma":
            wanted.insert(0, ("mma", "wgmma"))
        misses, lost, undoes = self._misses(), self._lost(), self._undoes()

        def rank(t: tuple[Knobs, str, str, str]) -> tuple[bool, bool, int, int]:
            change = (t[2], t[3].lower())
            return (change in undoes, change in lost, misses[change],
                    next((i for i, w in enumerate(wanted) if w == change), len(wanted)))

        return sorted((t for t in self._untried_neighbours(layer)
                       if again or not (misses[t[2], t[3].lower()] or (t[2], t[3].lower()) in undoes)), key=rank)

    def _undoes(self) -> set[tuple[str, str]]:
        """(knob, value) changes that would take back a change that made a leader: on the H100
        (2026-12-06, the all-182 arm) five of 53 evaluations set a knob back to the value a leader
        had left (causal_skip, softmax_exp, split_kv, mask_split, pack_gqa) and each lost 8-40%."""
        return {(str(t["knob"]), str(t["was"]).lower()) for t in self.tried.values()
                if t.get("verdict") == "leader" and t.get("was") and t.get("value")}

    def _expectation(self, layer: str, knob: str, value: str) -> str:
        """Why this change, and the gain expected: the audit reads it in the candidate's notes."""
        for f in self.findings:
            if any(x == layer and k == knob and v in ("", value.lower()) for x, k, v in settings_of(f)):
                return self._finding_expectation(f, knob, value)
        if knob == "mma" and value == "wgmma" and self._is_hopper():
            return (f"measured: {self.arch} and the leader uses warp-level mma.sync; expected gain: 1.5-2.5x on "
                    "compute-bound calls (Hopper's warpgroup MMA)")
        return (f"measured: the {layer} layer, ranked by the diagnosis ({self.diagnosis or 'no profile yet'}); "
                f"expected gain: a few % at most (no finding points at {knob})")

    # -- what it learns and hears -----------------------------------------------------------

    def _learn(self, feedback: Feedback) -> None:
        profiled = False
        for r in feedback.results:
            if r.name == READ_BOARD:
                if r.ok:
                    self._read_board(r.data.get("entries") or [], r.data.get("in_flight") or [])
                continue
            if r.name == PROFILE:
                found = r.data.get("profile") or {} if r.ok else {}
                self.findings = [dict(f) for f in found.get("findings") or []]
                self.arch = str(found.get("arch") or self.arch)
                self.diagnosis = str(found.get("diagnosis") or "")
                self.profiled = knobs_from_mapping(self.best).slug()
                profiled = True
                continue
            sent = self.pending.pop(r.call_id, None)
            if sent is None:
                continue
            verdict = r.data.get("verdict") if r.ok else "refused"
            visible = r.data.get("visible") or {}
            speedup = visible.get("geomean_vs_baseline")
            self.tried[sent["slug"]] = {**sent, "verdict": verdict, "speedup": speedup}
            self.layer_evals[sent["layer"]] += 1
            self.since_gain += 1
            if sent.get("finding"):
                self.finding_misses[sent["finding"]] += 1
            behind = (self.followed and self.best_speedup is not None
                      and not (isinstance(speedup, (int, float)) and speedup > self.best_speedup))
            if verdict == "leader" and not behind:  # (a session's leader slower than the parent it built on: no)
                self.best, self.best_speedup, self.has_leader = sent["knobs"], speedup, True
                self.foreign_parent = self.followed = False
                self.since_gain = 0
                self.visited, self.need_profile = [], self.settings.strategy == "measured"
                self.finding_misses.clear()
        self.pending.clear()
        if profiled:
            self._after_profile()

    def _read_board(self, entries: list[dict[str, Any]], waiting: Sequence[dict[str, Any]] = ()) -> None:
        """Keep what the board says: single knob changes that failed or worked, the
        evaluations per layer, every setting measured (and its speed) or being measured."""
        failed: list[list[str]] = []
        worked: dict[tuple[str, str], float] = {}  # change -> its best gain over its parent
        explored: dict[str, int] = {}
        measured: dict[str, float] = {}
        fastest: dict[str, Any] = {}
        for e in entries:
            try:
                setting = knobs_from_mapping(e["setting"]) if isinstance(e.get("setting"), dict) else None
            except KnobError:
                setting = None
            if setting is not None:
                fine = e.get("campaign_verdict") != "discarded" and isinstance(e.get("speedup"), (int, float))
                speed = float(e["speedup"]) if fine else 0.0
                measured[setting.slug()] = max(measured.get(setting.slug(), 0.0), speed)
                if e.get("campaign_verdict") == "leader" and speed > 0:  # the newest one is the campaign's leader
                    fastest = {"knobs": setting.to_dict(), "speedup": speed, "author": str(e.get("author", "")),
                               "candidate": e.get("candidate")}
            knobs = e.get("knobs") or {}
            # the board's per-category effects (app/domain/campaigns/board.py); a category
            # the entry has no number for is left out, never counted as zero
            gain = geomean(float(v) for v in (e.get("effects") or {}).values() if v is not None)
            if len(knobs) == 1:
                [(knob, value)] = knobs.items()
                pair = [str(knob), str(value)]
                if e.get("campaign_verdict") == "discarded":
                    failed.append(pair)
                elif e.get("campaign_verdict") == "leader" or (gain is not None and gain > 1.01):
                    worked[str(knob), str(value)] = max(worked.get((str(knob), str(value)), 0.0), gain or 1.0)
            for layer in str(e.get("layer") or "").split(","):
                if layer in LAYERS:
                    explored[layer] = explored.get(layer, 0) + 1
        best_first = sorted(worked, key=lambda pair: -worked[pair])  # stable: board order among equals
        self.board_failed, self.board_layers = failed, explored
        self.board_measured, self.board_best = measured, fastest
        pending = []
        for w in waiting:
            try:
                if isinstance(w.get("setting"), dict):
                    pending.append(knobs_from_mapping(w["setting"]).slug())
            except KnobError:
                continue
        self.board_pending = pending
        self.board_worked = [list(pair) for pair in best_first]

    def _own_move(self) -> str:
        """The autonomous plateau policy, among the layers that still have untried neighbours
        here: with the board, the one the campaign explored least (its own evaluations and the
        board's entries; adoption already brings the others' gains), else the one it explored
        least itself."""
        here = self.focus
        options = {layer: len(self._untried_neighbours(layer)) for layer in LAYERS if layer != here}
        options = {layer: n for layer, n in options.items() if n}
        if not options:
            return ""
        if self.settings.board:
            # The board brings the others' gains here already (adoptions): go where the campaign
            # has looked least, here and elsewhere, so that its agents spread instead of herding.
            target = min(options, key=lambda layer: (self.layer_evals[layer] + self.board_layers.get(layer, 0),
                                                     -options[layer], LAYERS.index(layer)))
            seen = self.layer_evals[target] + self.board_layers.get(target, 0)
            why = f"{target} is the layer the campaign explored least ({seen} evaluations)"
        else:
            target = min(options, key=lambda layer: (self.layer_evals[layer], -options[layer], LAYERS.index(layer)))
            why = f"{target} is the layer I explored least ({self.layer_evals[target]} evaluations)"
        self.focus, self.declared, self.circled = target, False, 0
        self.moves.append({"text": "", "from": here, "to": target, "why": f"own policy: {why}"})
        return f"My {here} search has stalled; by my own policy I move to {target}: {why}."

    def _hear(self, m: SteeringMessage) -> str:
        """Decide where a message moves the focus; returns the agent's answer to it."""
        before = self.focus
        text, parent = split_parent(m.text)
        m = SteeringMessage(m.intervention_id, m.kind, m.mode, text, m.author)
        adopted = ""
        if parent is not None:
            try:
                self.best = knobs_from_mapping(parent).to_dict()
            except KnobError:
                adopted = " The parent's knobs are not a valid setting; I keep my own."
            else:
                self.foreign_parent, self.followed = True, False
                adopted = " I start from the parent you give me."
        switch = _SWITCH_RE.match(m.text)
        if switch and switch.group(1).lower() in LAYERS:
            target = switch.group(1).lower()
            self.focus, self.declared, self.circled = target, False, 0
            self.moves.append({"text": m.text, "from": before, "to": target, "why": "the campaign switched me"})
            return f"The campaign switches me from {before} to {target}." + adopted
        return self._hear_words(m, before) + adopted

    def _hear_words(self, m: SteeringMessage, before: str) -> str:
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

    def _follow_board(self) -> str:
        """The campaign leader's setting (the board's newest leader entry, crowned by the
        campaign judge after its re-time) becomes this agent's parent where it beats its own
        leader by more than 1% (visible scenarios): the agents search their own layers around
        the campaign's best kernel instead of each re-deriving it change by change."""
        fastest = self.board_best
        mine = self.best_speedup or 0.0
        if not fastest or fastest["knobs"] == self.best or not fastest["speedup"] > mine * 1.01:
            return ""
        self.best, self.best_speedup = dict(fastest["knobs"]), float(fastest["speedup"])
        self.foreign_parent, self.since_gain, self.declared, self.circled = True, 0, False, 0
        self.followed = True
        return (f"I build on {fastest['author'] or 'another agent'}'s kernel #{fastest['candidate']} "
                f"({fastest['speedup']:.2f}x, the campaign leader) and go on in {self.focus}.")

    def _known(self, setting: Knobs) -> bool:
        """Measured here, or elsewhere in the campaign (the board), or being measured there, or
        measured from this very leader in an earlier session and found not to pay off (a
        lesson's evidence): never measured again."""
        slug = setting.slug()
        if slug in self.tried or slug in self.board_measured or slug in self.board_pending:
            return True
        seen = self._lesson_outcomes().get(slug)
        return seen is not None and (bool(seen.get("broke")) or not (seen.get("ratio") or 0) > 1 + LESSON_NOISE)

    # -- lessons (lessons/: what earlier sessions measured) --------------------------------------

    def _lesson_fits(self, prior: dict[str, Any]) -> bool:
        """Seen on this architecture (once the profile names it) from the values this leader holds."""
        if self.arch and prior.get("arch") and not self.arch.startswith(str(prior["arch"])):
            return False
        return all(self.best.get(k) == v[0] for k, v in prior["changes"].items())

    def _lesson_setting(self, prior: dict[str, Any]) -> Knobs | None:
        try:
            return knobs_from_mapping({**self.best, **{k: v[1] for k, v in prior["changes"].items()}}).validate()
        except (KnobError, TypeError, ValueError):
            return None

    def _lesson_outcomes(self) -> dict[str, dict[str, Any]]:
        """The leader's neighbours a lesson measured from this exact leader: slug -> outcome."""
        key = setting_hash(self.best) if self.priors else ""
        if self._outcomes[0] != key:
            found: dict[str, dict[str, Any]] = {}
            for prior in self.priors:
                seen = [m for m in prior.get("measured", []) if m.get("parent") == key]
                if not seen or not self._lesson_fits(prior):
                    continue
                setting = self._lesson_setting(prior)
                if setting is not None:
                    found[setting.slug()] = {"lesson": prior["id"], **seen[-1]}
            self._outcomes = (key, found)
        return self._outcomes[1]

    def _lesson_moves(self, layer: str | None = None) -> list[tuple[Knobs, str, str, str, dict[str, Any]]]:
        """Changes a lesson says paid off from a leader like this one (same values before the change,
        same architecture), in the lessons' order (expected gain x confidence x fit); only settings
        never measured, and inside `layer` when a question chose it."""
        out = []
        for prior in self.priors:
            if prior["ratio"] <= 1 + LESSON_NOISE or prior["confidence"] < PRIOR_MIN_CONFIDENCE:
                continue
            if not self._lesson_fits(prior) or (layer and layer not in prior.get("layers", [])):
                continue
            setting = self._lesson_setting(prior)
            if setting is None or setting.to_dict() == self.best or self._known(setting):
                continue
            knob = ", ".join(prior["changes"])
            value = str(getattr(setting, knob)) if len(prior["changes"]) == 1 else ""
            where = (prior.get("layers") or ["lessons"])[0]
            out.append((setting, where, knob, value, prior))
        return out

    def _lesson_expectation(self, prior: dict[str, Any]) -> str:
        return (f"lesson #{prior['id']}: {', '.join(f'{k} {v[0]}->{v[1]}' for k, v in prior['changes'].items())} "
                f"paid off {prior['ratio']:.3f}x over its parent in earlier sessions ({prior['count']} time(s), "
                f"confidence {prior['confidence']:.2f}); expected gain: about {prior['ratio']:.2f}x")

    def _board_adoptions(self) -> list[tuple[Knobs, str, str, str]]:
        """The changes that led or improved elsewhere (best gain first), applied to this agent's
        leader whatever their layer: first all of them in one setting (when there are several
        and together they make a valid one), then each alone; only those its leader lacks, that
        make a valid setting, and that it has not measured, so each is tried once per leader."""
        out = []
        stacked = knobs_from_mapping(self.best)
        changes: list[str] = []
        for knob, value in self.board_worked:
            layer = KNOB_LAYER.get(knob)
            if layer is None or str(self.best.get(knob)) == value or [knob, value] in self.board_failed:
                continue  # (worked in one lineage but discarded in another: not adopted)
            try:
                setting = parse_knobs(f"{knob}={value}", knobs_from_mapping(self.best), files=False).validate()
            except KnobError:
                continue
            if self._known(setting) or setting.to_dict() == self.best:
                continue
            out.append((setting, layer, knob, value))
            if any(c.startswith(f"{knob}=") for c in changes):
                continue  # one value per knob in the stack: the best gain's
            try:  # every change that worked elsewhere at once, where they make a valid setting
                stacked = parse_knobs(f"{knob}={value}", stacked, files=False).validate()
                changes.append(f"{knob}={value}")
            except KnobError:
                pass
        if len(changes) > 1 and not self._known(stacked):  # all at once first, then one by one
            return [(stacked, "board", ", ".join(changes), "")]
        return out

    def _untried_neighbours(self, layer: str | None = None) -> list[tuple[Knobs, str, str, str]]:
        """The leader's neighbours in the layer not yet measured, less the changes discarded
        elsewhere; those that worked elsewhere first, then in the seed's order."""
        layer = layer or self.focus
        best = knobs_from_mapping(self.best)
        out = []
        for n in neighbours(best, layer):
            if self._known(n):
                continue
            knob = next(k for k, v in n.to_dict().items() if v != self.best[k])
            pair = [knob, str(getattr(n, knob))]
            if pair in self.board_failed:
                continue
            out.append((n, layer, knob, pair[1]))
        seed = self.settings.seed
        return sorted(out, key=lambda t: ([t[2], t[3]] not in self.board_worked, _order_key(seed, t[0])))

    def _layer_tried(self, layer: str) -> list[dict[str, Any]]:
        return [t for t in self.tried.values() if t["layer"] == layer and KNOB_LAYER.get(t["knob"]) == layer]

    # -- persistence ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {"best": self.best, "best_speedup": self.best_speedup, "has_leader": self.has_leader,
                "focus": self.focus, "tried": self.tried, "pending": self.pending,
                "layer_evals": dict(self.layer_evals), "declared": self.declared, "circled": self.circled,
                "calls": self.calls, "started": self.started, "moves": self.moves,
                "board_failed": self.board_failed, "board_worked": self.board_worked,
                "board_layers": self.board_layers,
                "board_measured": self.board_measured, "board_best": self.board_best,
                "board_pending": self.board_pending, "followed": self.followed,
                "foreign_parent": self.foreign_parent,
                "since_gain": self.since_gain, "findings": self.findings, "arch": self.arch,
                "diagnosis": self.diagnosis, "need_profile": self.need_profile, "profiled": self.profiled,
                "visited": self.visited, "steered": self.steered, "finding_misses": dict(self.finding_misses)}

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
        self.board_failed = [list(p) for p in state.get("board_failed", [])]
        self.board_worked = [list(p) for p in state.get("board_worked", [])]
        self.board_layers = {str(k): int(v) for k, v in state.get("board_layers", {}).items()}
        self.board_measured = {str(k): float(v) for k, v in state.get("board_measured", {}).items()}
        self.board_best = dict(state.get("board_best", {}))
        self.board_pending = [str(x) for x in state.get("board_pending", [])]
        self.followed = bool(state.get("followed", False))
        self.foreign_parent = bool(state.get("foreign_parent", False))
        self.since_gain = int(state.get("since_gain", 0))
        self.findings = [dict(f) for f in state.get("findings", [])]
        self.arch = str(state.get("arch", ""))
        self.diagnosis = str(state.get("diagnosis", ""))
        self.need_profile = bool(state.get("need_profile", False))
        self.profiled = str(state.get("profiled", ""))
        self.visited = [str(x) for x in state.get("visited", [])]
        self.steered = bool(state.get("steered", False))
        self.finding_misses = Counter({str(k): int(v) for k, v in state.get("finding_misses", {}).items()})
        self.intro = ""  # a restored agent has said it already
