"""From finished work to lessons, with no database: a session's facts in, observations out, and
the merge of an observation into a lesson.

An observation is one candidate measured against its parent on the scenarios both passed: the
action is what changed between the two (the kernel family's knobs where both files carry their
setting, else a summary of the edit: the instructions and features it added or removed, and
its title), the situation is where it happened (architecture, problem, the parent's engine and
setting or code summary, the categories measured, the parent's profile diagnosis), the effect is
the ratio parent time / candidate time, overall and per category and head_dim.

Merging is idempotent: an evidence entry has a key (session or trace, candidate), and the same
entry seen again changes nothing; the effect is recomputed from the evidence kept, so repeated
evidence gives one lesson with its count and spread, and a contradicting result lowers the
confidence ((helped + 1) / (count + 2)) instead of adding a twin."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernels.attention.family import KNOB_LAYER
from kernels.attention.family.render import recorded_knobs
from lessons.models import Status, check_lesson

NOISE = 0.01  # a ratio within 1 +- NOISE neither helped nor hurt
MAX_EVIDENCE = 200  # evidence entries kept per lesson (the oldest go first; `count` keeps the total)
ACTIVE_COUNT = 2  # the distiller makes a lesson active once seen this often ...
ACTIVE_CONFIDENCE = 0.7  # ... with at least this confidence

# Features an edit can add or remove, by what the source says (a model's candidate has no knobs).
FEATURES: dict[str, str] = {
    "wgmma": r"\bwgmma\b",
    "tma": r"cp\.async\.bulk\.tensor|CUtensorMap|cuTensorMapEncode",
    "bulk-copy": r"cp\.async\.bulk(?!\.tensor)",
    "cp.async": r"cp\.async\.(?:ca|cg)\b|__pipeline_memcpy_async|cuda::memcpy_async",
    "mbarrier": r"\bmbarrier\b|cuda::barrier",
    "ldmatrix": r"\bldmatrix\b",
    "mma.sync": r"\bmma\.sync\b|\bwmma::",
    "exp2": r"\bexp2f\b|ex2\.approx",
    "warp-shuffle": r"__shfl_\w+_sync",
    "setmaxnreg": r"\bsetmaxnreg\b",
    "split-kv": r"\bsplit_?kv\b|num_splits",
    "swizzle": r"swizzl",
    "persistent": r"\bpersistent\b|gridDim\.x\s*\)\s*\{|tile_counter",
    "causal-skip": r"causal_skip|skip\w*\s*(?:key\s*)?blocks?",
    "vectorized-io": r"\bint4\b|\bfloat4\b|uint4\b",
}
_FEATURE_RE = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in FEATURES.items()}


# -- the facts a distiller reads ---------------------------------------------------------------


@dataclass(frozen=True)
class CandidateFacts:
    number: int
    ref: int  # its id where the facts come from (the database's, or the trace's)
    parent_ref: int | None
    title: str
    source: str
    verdict: str | None
    times: dict[str, float]  # scenario -> time (ms) of each scenario it passed in its suite evaluation
    failed: int  # scenarios of its suite evaluation it did not pass
    evaluation_ref: int | None
    diagnosis: str = ""  # its profile's diagnosis, where one was made


@dataclass(frozen=True)
class SessionFacts:
    origin: dict[str, Any]  # {"session_id": N} and/or {"trace": file name, "sha": its digest}; evidence links
    problem: str
    gpu: str
    scenarios: dict[str, dict[str, Any]]  # name -> {"category", "head_dim"}
    candidates: list[CandidateFacts]

    @property
    def arch(self) -> str:
        return arch_of_gpu(self.gpu)


@dataclass(frozen=True)
class Observation:
    key: str
    situation: dict[str, Any]
    action: dict[str, Any]
    evidence: dict[str, Any]  # {"key", "ratio", "categories", "head_dims", "broke", links...}
    tags: list[str] = field(default_factory=list)


def arch_of_gpu(gpu: str) -> str:
    """The compile target's family of a GPU name as the harness reports it."""
    name = gpu.upper()
    if not name or name in ("CPU", "PYTHON-CPU") or "CPU" in name:
        return "cpu"
    for marks, arch in ((("H100", "H200", "H800", "H20", "GH200"), "sm_90"), (("B200", "B100", "GB200"), "sm_100"),
                        (("L4", "L40", "4090", "ADA"), "sm_89"), (("A100", "A800", "A30"), "sm_80"),
                        (("A10", "A40", "3090", "A6000"), "sm_86")):
        if any(m in name for m in marks):
            return arch
    return "unknown"


def setting_of(source: str) -> dict[str, Any] | None:
    """The knob setting a family file records in its header, with the family's defaults for the
    knobs it leaves out (the family's own reader); None for a file that is not the family's."""
    return recorded_knobs(source)


def setting_hash(setting: dict[str, Any]) -> str:
    """A short stable name of a whole setting: evidence records its parent's, so that an agent on
    the same leader knows which of its neighbours were measured already (lessons/use.py)."""
    return hashlib.sha256(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:16]


def features_of(source: str) -> set[str]:
    return {name for name, rx in _FEATURE_RE.items() if rx.search(source)}


def _gm(values: Iterable[float]) -> float:
    got = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in got) / len(got)) if got else 0.0


def _title_words(title: str) -> str:
    words = re.findall(r"[a-z0-9_=.]+", title.lower())
    return "-".join(words[:8]) or "untitled"


def layer_of(knob: str) -> str:
    return str(KNOB_LAYER.get(knob, ""))


# -- observations --------------------------------------------------------------------------------


def action_between(parent: CandidateFacts, child: CandidateFacts) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(action, what the parent was) between two candidates, or None when nothing changed (a
    re-measure) or the change cannot be named."""
    before, after = setting_of(parent.source), setting_of(child.source)
    if before is not None and after is not None:
        changes = {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v}
        if not changes:
            return None
        layers = sorted({layer_of(k) for k in changes} - {""})
        return ({"kind": "knobs", "changes": changes, "layers": layers},
                {"setting": before, "engine": str(before.get("mma", "mma_sync"))})
    had, has = features_of(parent.source), features_of(child.source)
    added, removed = sorted(has - had), sorted(had - has)
    if parent.source.strip() == child.source.strip():
        return None
    parts = [f"+{f}" for f in added] + [f"-{f}" for f in removed]
    summary = (f"{child.title.strip() or 'an edit'}"
               + (f" ({', '.join(parts)})" if parts else ""))
    return ({"kind": "edit", "summary": summary[:300], "added": added, "removed": removed,
             "title": child.title.strip()[:200]},
            {"features": sorted(had), "engine": "wgmma" if "wgmma" in had else "mma.sync" if "mma.sync" in had
             else "other"})


def lesson_key(arch: str, problem: str, action: dict[str, Any], parent: dict[str, Any]) -> str:
    """Situation and action in one key: the same change from the same values on the same engine,
    architecture and problem is the same lesson, whatever else the parent held."""
    head = f"{arch}|{problem}|{parent.get('engine', '')}"
    if action["kind"] == "knobs":
        body = ";".join(f"{k}={json.dumps(v[0])}>{json.dumps(v[1])}" for k, v in sorted(action["changes"].items()))
        return f"{head}|knobs|{body}"[:255]
    changes = [f"+{f}" for f in action.get("added", [])] + [f"-{f}" for f in action.get("removed", [])]
    body = ",".join(changes) if changes else "title:" + _title_words(action.get("title", ""))
    return f"{head}|edit|{body}"[:255]


def _origin_key(origin: dict[str, Any]) -> str:
    """A trace is named by its session text's digest (the file and its import are one source)."""
    if origin.get("sha"):
        return f"trace:{origin['sha']}"
    if origin.get("session_id") is not None:
        return f"session:{origin['session_id']}"
    return f"trace:{origin.get('trace', '')}"


def observations(facts: SessionFacts) -> list[Observation]:
    """Every candidate measured against its parent: one observation each where both have a
    suite evaluation, they share scenarios both passed, and something changed between them."""
    by_ref = {c.ref: c for c in facts.candidates}
    arch = facts.arch
    out = []
    for child in facts.candidates:
        parent = by_ref.get(child.parent_ref) if child.parent_ref is not None else None
        if parent is None or not parent.times or (not child.times and not child.failed):
            continue
        named = action_between(parent, child)
        if named is None:
            continue
        action, was = named
        shared = sorted(set(parent.times) & set(child.times))
        broke = len(set(parent.times) - set(child.times))
        ratios = {s: parent.times[s] / child.times[s] for s in shared if child.times[s] > 0}
        by_cat: dict[str, list[float]] = {}
        by_dim: dict[str, list[float]] = {}
        for s, r in ratios.items():
            info = facts.scenarios.get(s, {})
            by_cat.setdefault(str(info.get("category", "other")), []).append(r)
            if info.get("head_dim") is not None:
                by_dim.setdefault(str(info["head_dim"]), []).append(r)
        categories = sorted({str(facts.scenarios.get(s, {}).get("category", "other")) for s in parent.times})
        situation = {"arch": arch, "problem": facts.problem, "gpu": facts.gpu, "engine": was.get("engine", ""),
                     "categories": categories, "diagnosis": parent.diagnosis}
        if "setting" in was:
            situation["setting"] = was["setting"]
        else:
            situation["features"] = was.get("features", [])
        check_lesson(situation, action)
        origin = dict(facts.origin)
        evidence = {
            "key": f"{_origin_key(origin)}:{child.number}",
            **origin,
            "candidate": child.number, "parent": parent.number, "evaluation": child.evaluation_ref,
            "verdict": child.verdict,
            "ratio": round(_gm(ratios.values()), 5) if ratios else None,
            "categories": {k: round(_gm(v), 5) for k, v in sorted(by_cat.items())},
            "head_dims": {k: round(_gm(v), 5) for k, v in sorted(by_dim.items())},
            "broke": broke,
        }
        if "setting" in was:
            evidence["parent_setting"] = setting_hash(was["setting"])
        key = lesson_key(arch, facts.problem, action, was)
        tags = [arch, facts.problem, *action.get("layers", []), *action.get("changes", {}),
                *(f"{k}={v[1]}" for k, v in action.get("changes", {}).items()),
                *action.get("added", []), *(f"no-{f}" for f in action.get("removed", []))]
        out.append(Observation(key, situation, action, evidence, sorted(set(map(str, tags)))))
    return out


# -- the merge -----------------------------------------------------------------------------------


def _stats(values: Sequence[float]) -> dict[str, Any]:
    return {"ratio": round(_gm(values), 5), "n": len(values), "min": round(min(values), 5),
            "max": round(max(values), 5)}


def helped(entry: dict[str, Any]) -> bool:
    r = entry.get("ratio")
    return not entry.get("broke") and isinstance(r, (int, float)) and r > 1 + NOISE


def summarize(evidence: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Effect, counts, confidence and scope, recomputed from the evidence entries."""
    overall = [float(e["ratio"]) for e in evidence if isinstance(e.get("ratio"), (int, float)) and e["ratio"] > 0]
    cats: dict[str, list[float]] = {}
    dims: dict[str, list[float]] = {}
    for e in evidence:
        for k, v in (e.get("categories") or {}).items():
            cats.setdefault(k, []).append(float(v))
        for k, v in (e.get("head_dims") or {}).items():
            dims.setdefault(k, []).append(float(v))
    effect: dict[str, Any] = {
        "overall": {**(_stats(overall) if overall else {"ratio": None, "n": 0}),
                    "broke": sum(1 for e in evidence if e.get("broke"))},
        "category": {k: _stats(v) for k, v in sorted(cats.items())},
        "head_dim": {k: _stats(v) for k, v in sorted(dims.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit()
                                                          else 0)},
    }
    count = len(evidence)
    good = sum(1 for e in evidence if helped(e))

    def split(table: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
        return ([k for k, s in table.items() if s["ratio"] > 1 + NOISE],
                [k for k, s in table.items() if s["ratio"] < 1 - NOISE])

    holds_c, fails_c = split(effect["category"])
    holds_d, fails_d = split(effect["head_dim"])
    scope = {"holds": {"category": holds_c, "head_dim": holds_d},
             "fails": {"category": fails_c, "head_dim": fails_d}}
    return {"effect": effect, "ratio": effect["overall"]["ratio"] or 0.0, "count": count, "helped": good,
            "confidence": round((good + 1) / (count + 2), 4), "scope": scope}


def merge(lesson: dict[str, Any] | None, obs: Observation) -> dict[str, Any]:
    """The lesson (as a dict of Lesson's fields) with the observation's evidence in it; a new
    lesson when `lesson` is None. Seen again, the same evidence changes nothing."""
    if lesson is None:
        lesson = {"key": obs.key, "arch": obs.situation["arch"], "problem": obs.situation["problem"],
                  "situation": obs.situation, "action": obs.action, "evidence": [], "tags": [],
                  "status": Status.PROPOSED.value, "status_by": "distiller", "author": "distiller", "text": ""}
    evidence = list(lesson.get("evidence", []))
    at = next((i for i, e in enumerate(evidence) if e.get("key") == obs.evidence["key"]), None)
    if at is None:
        evidence = [*evidence, obs.evidence][-MAX_EVIDENCE:]
    else:  # seen again: in its place (a re-distilled session changes nothing)
        evidence[at] = obs.evidence
    situation = dict(lesson["situation"])
    seen = sorted(set(situation.get("categories", [])) | set(obs.situation.get("categories", [])))
    situation["categories"] = seen
    if obs.situation.get("diagnosis") and not situation.get("diagnosis"):
        situation["diagnosis"] = obs.situation["diagnosis"]
    return settle({**lesson, "situation": situation, "evidence": evidence,
                   "tags": sorted(set(lesson.get("tags", [])) | set(obs.tags)), **summarize(evidence)})


def settle(lesson: dict[str, Any]) -> dict[str, Any]:
    """After its evidence changed: its scope's architecture, its status (the distiller's rule,
    unless a person set it) and its words (the template, unless a person or a model wrote them)."""
    out = {**lesson, "scope": {**lesson["scope"], "arch": [lesson["arch"]]}}
    if out.get("status_by") != "person":
        confirmed = out["count"] >= ACTIVE_COUNT and out["confidence"] >= ACTIVE_CONFIDENCE
        out["status"] = Status.ACTIVE.value if confirmed else Status.PROPOSED.value
    if out.get("author") not in ("person", "model"):
        out["text"] = describe(out)
    return out


# -- words ---------------------------------------------------------------------------------------


def _x(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3f}x"


def action_words(action: dict[str, Any]) -> str:
    if action.get("kind") == "knobs":
        return ", ".join(f"{k} {json.dumps(v[0])} -> {json.dumps(v[1])}" for k, v in action["changes"].items())
    return str(action.get("summary", "an edit"))


def describe(lesson: dict[str, Any]) -> str:
    """The deterministic template: the lesson in two or three sentences."""
    s, eff = lesson["situation"], lesson["effect"]
    overall = eff["overall"]
    where = f"On {s['arch']} ({s.get('gpu') or 'GPU unknown'}), {s['problem']}, a leader on {s.get('engine') or 'its'}"
    verb = "paid off" if (overall.get("ratio") or 0) > 1 + NOISE else "did not pay off"
    seen = (f"seen {lesson['count']} time{'s' if lesson['count'] != 1 else ''}"
            + (f", {_x(overall['min'])}-{_x(overall['max'])}" if overall.get("n", 0) > 1 else ""))
    text = (f"{where}: {action_words(lesson['action'])} {verb}, {_x(overall.get('ratio'))} overall ({seen}; "
            f"confidence {lesson['confidence']:.2f}).")
    holds, fails = lesson["scope"]["holds"], lesson["scope"]["fails"]
    cat = eff["category"]
    if holds["category"]:
        text += " It helped on " + ", ".join(f"{c} ({_x(cat[c]['ratio'])})" for c in holds["category"]) + "."
    if fails["category"]:
        text += " It hurt on " + ", ".join(f"{c} ({_x(cat[c]['ratio'])})" for c in fails["category"]) + "."
    if overall.get("broke"):
        text += f" It broke correctness {overall['broke']} time{'s' if overall['broke'] != 1 else ''}."
    if s.get("diagnosis"):
        text += f" The parent's profile said: {s['diagnosis']}"
    return text
