"""What each ratio on the pages is against, which way it goes, and over how many scenarios.

A ratio "x P" is P's time over this kernel's time on one scenario; above 1 this kernel is
faster than P. A summary of such ratios is their geomean over the scenarios where both sides
were timed, and says how many those are: a baseline, a previous leader or a peer that returned
an error on a scenario leaves that scenario out of the geomean, and no chip may count it.

`ratio_help` is the words of a column's title and legend; `evaluation_view` gives one stored
evaluation its comparison point ("the baseline", "leader #7"), its chips, the note on what was
not timed, its peer columns (named FA2, FA3, cuDNN) and each scenario's TFLOP/s and GB/s as
shares of the roofline the harness measured on that GPU (harness/profile.py's arithmetic)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.domain.audit.compare import peer_label
from app.store.models import Evaluation
from harness.profile import ScenarioProfile, measured_rates, scenario_profile
from harness.report import PEER_NAMES, EvaluationReport, GeomeanSummary, ScenarioResult

BASELINE = "the baseline"
PREVIOUS_LEADER = "the previous leader"
# Re-times stored before they were labelled "leader #N" (and traces exported then).
_CANDIDATE_LABEL = re.compile(r"^leader candidate-(\d+)$")
_UNTIMED_FLAG = "baseline not timed"  # the harness's flag (harness/worker.py) on a scenario without a ratio


def comparison_point(purpose: str, against: str) -> str:
    """What an evaluation's `speedup_vs_baseline` is against, in words: "the baseline" for a
    suite evaluation, "leader #7" or the campaign leader for a re-time."""
    text = (against or "").strip()
    if purpose != "retime":
        return BASELINE if text in ("", "baseline") else text
    old = _CANDIDATE_LABEL.match(text)
    if old:
        return f"leader #{old.group(1)}"
    return text or PREVIOUS_LEADER


def short_name(point: str) -> str:
    """The name in a column header: "baseline", "leader #7", "FA3"."""
    return point.removeprefix("the ")


def ratio_help(point: str) -> str:
    """The title and legend of a ratio column: which way the ratio goes."""
    name = short_name(point)
    return (f"x {name} = {name} time / this kernel's time, per scenario; above 1 is faster than {point}. "
            "Summaries are geomeans over the scenarios where both were timed, and say how many")


def timing_words(summary: GeomeanSummary, purpose: str, point: str) -> str:
    """One line on what a re-time (or suite evaluation) measured: "re-time vs leader #7: 7 of
    10 scenarios timed, 1.091x over those 7". Never a count of scenarios that were not timed."""
    lead = f"re-time vs {point}" if purpose == "retime" else f"vs {point}"
    if summary.vs_baseline is None or summary.timed == 0:
        return f"{lead}: no scenario timed on both sides, no ratio"
    ratio = f"{summary.vs_baseline:.3f}x"
    if summary.timed == summary.scenarios:
        return f"{lead}: all {summary.scenarios} scenarios timed, {ratio}"
    return f"{lead}: {summary.timed} of {summary.scenarios} scenarios timed, {ratio} over those {summary.timed}"


@dataclass(frozen=True)
class Chip:
    """One part's geomean (visible, hidden, all) as a pill."""

    part: str
    text: str
    partial: bool  # the geomean covers fewer scenarios than the part holds
    title: str


@dataclass(frozen=True)
class PeerColumn:
    name: str  # as the report holds it: cudnn, flash, fa3
    label: str  # cuDNN, FA2, FA3
    help: str
    summary: str  # "1.234x over 10 of 10" for the `all` part, or ""


@dataclass
class EvaluationView:
    """A stored evaluation as the candidate page draws it."""

    evaluation: Evaluation
    report: EvaluationReport | None  # None: the stored report could not be read
    purpose: str
    point: str  # what speedup_vs_baseline is against, in words
    headline: str = ""
    chips: list[Chip] = field(default_factory=list)
    untimed_note: str = ""
    peers: list[PeerColumn] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # peer label -> why it was not timed
    roofline: dict[str, ScenarioProfile] = field(default_factory=dict)
    matrix_tflops: float | None = None
    copy_gbps: float | None = None

    @property
    def name(self) -> str:
        return short_name(self.point)

    @property
    def column(self) -> str:
        return f"x {self.name}"

    @property
    def column_help(self) -> str:
        return ratio_help(self.point)

    @property
    def fully_timed(self) -> bool:
        return self.report is not None and self.report.summary("all").fully_timed

    def flag_words(self, flag: str) -> str:
        """A scenario flag with "baseline" named as what it was in this evaluation (in a
        re-time the harness's baseline is the previous leader)."""
        return _renamed(flag, self.purpose, self.point)

    def tflops_help(self) -> str:
        rate = (f"; % of the {self.matrix_tflops:.0f} TFLOP/s matrix rate the harness measured on this GPU"
                if self.matrix_tflops else "; no measured roofline in this report")
        return "the scenario's attention FLOPs (4 b h pairs d) over this kernel's time" + rate

    def gbps_help(self) -> str:
        rate = (f"; % of the {self.copy_gbps:.0f} GB/s copy bandwidth the harness measured on this GPU"
                if self.copy_gbps else "; no measured roofline in this report")
        return "Q, K, V read and O written once (bf16) over this kernel's time" + rate


def _renamed(text: str, purpose: str, point: str) -> str:
    """The harness's words about its "baseline", where that was the previous leader (a re-time)."""
    if purpose != "retime":
        return text
    name = short_name(point)
    if text.startswith(_UNTIMED_FLAG):
        text = f"{name} not timed" + text[len(_UNTIMED_FLAG):]
    return text.replace("the baseline returned", f"{name} returned")


def _chip(part: str, s: GeomeanSummary, point: str) -> Chip:
    partial = s.vs_baseline is not None and s.timed < s.scenarios
    untimed = s.passed - s.timed
    title = (f"geomean of {short_name(point)} time / this kernel's time over the {s.timed} scenarios where both "
             f"were timed" if s.timed else f"no scenario of this part was timed against {point}")
    if untimed > 0:
        title += f"; {untimed} passing scenario(s) have no ratio against {point} and are not counted"
    return Chip(part, f"{part}: {s.ratio_words(point)}", partial, title)


def _first_untimed(report: EvaluationReport) -> ScenarioResult | None:
    return next((r for r in report.scenarios if r.passed and r.speedup_vs_baseline is None), None)


def untimed_note(report: EvaluationReport, point: str, purpose: str = "retime") -> str:
    """Why the ratio covers fewer scenarios than passed: how many, the first, and its reason."""
    total = report.summary("all")
    missing = total.passed - total.timed
    first = _first_untimed(report)
    if missing <= 0 or first is None:
        return ""
    why = next((f for f in first.flags if f.startswith(_UNTIMED_FLAG)), "not timed")
    why = _renamed(why.split(":", 1)[1].strip() if ":" in why else why, purpose, point)
    left = (f"the ratio covers the other {total.timed}" if total.timed else "there is no ratio")
    return (f"No ratio against {point} on {missing} of {total.passed} passing scenarios (first {first.scenario}: "
            f"{why}): {left}, and no count here includes them.")


def peer_columns(report: EvaluationReport) -> list[PeerColumn]:
    """Every peer the report holds a ratio for, in the harness's order (cuDNN, FA2, FA3) then any other."""
    held: list[str] = [p for p in PEER_NAMES if any(p in r.speedup_vs_peers for r in report.scenarios)]
    held += sorted({p for r in report.scenarios for p in r.speedup_vs_peers} - set(held))
    total = report.summary("all")
    columns = []
    for name in held:
        label = peer_label(name)
        ratio = total.vs_peers.get(name)
        timed = total.peers_timed.get(name, 0)
        summary = f"{ratio:.3f}x over {timed} of {total.scenarios}" if ratio is not None else ""
        columns.append(PeerColumn(name, label, ratio_help(label), summary))
    return columns


def evaluation_view(e: Evaluation) -> EvaluationView:
    point = comparison_point(e.purpose, e.against)
    try:
        report = EvaluationReport.from_dict(e.report)
        parts = [(part, report.summary(part)) for part in ("visible", "hidden", "all")]
    except (KeyError, TypeError, ValueError, AttributeError):  # an imported report may be anything
        return EvaluationView(e, None, e.purpose, point)
    view = EvaluationView(e, report, e.purpose, point)
    view.headline = timing_words(report.summary("all"), e.purpose, point)
    view.chips = [_chip(p, s, point) for p, s in parts if s.scenarios]
    view.untimed_note = untimed_note(report, point, e.purpose)
    view.peers = peer_columns(report)
    view.unavailable = {peer_label(k): str(v) for k, v in report.unavailable_peers().items()
                        if not any(c.name == k for c in view.peers)}
    view.matrix_tflops, view.copy_gbps = measured_rates(report.settings)
    if view.matrix_tflops is not None:
        view.roofline = {r.scenario: scenario_profile(r, view.matrix_tflops, view.copy_gbps) for r in report.scenarios}
    return view


def retime_words(e: Evaluation | None) -> str:
    """The re-time in one line for a candidate's facts, or "" when it has none."""
    if e is None:
        return ""
    view = evaluation_view(e)
    return view.headline if view.report is not None else f"re-time vs {view.point}"

