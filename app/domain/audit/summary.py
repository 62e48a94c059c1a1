"""The audit of a session as plain data (the JSON API) and as text (`socratic trace audit`)."""

from __future__ import annotations

from typing import Any

from app.domain.audit.attribution import attribute
from app.domain.audit.churn import session_churn
from app.domain.audit.cost import TOKEN_LABELS, session_cost
from app.domain.audit.lineage import build_lineage
from app.domain.audit.record import AuditRecord


def audit_summary(record: AuditRecord) -> dict[str, Any]:
    s = record.session
    attribution = attribute(record)
    churn = session_churn(record)
    cost = session_cost(record)
    lineage = build_lineage(record)
    return {
        "session": {"id": record.session_id, "title": s.title, "status": s.status, "agent": s.agent,
                    "imported": record.imported, "read_only": s.read_only,
                    "trace_session": record.trace_id("session", record.session_id),
                    "leader": record.leader.number if record.leader else None, "leader_speedup": s.leader_speedup},
        "evaluations": [{"index": st.index, "number": st.number, "verdict": st.verdict, "speedup": st.speedup,
                         "leader_after": st.leader_after} for st in attribution.steps],
        "triggers": [{"seq": t.seq, "kind": t.kind, "summary": t.summary, "after_evaluations": t.after_evaluations}
                     for t in attribution.triggers],
        "interventions": [{"label": i.label, "kind": i.kind, "author": i.author, "mode": i.mode, "text": i.text,
                           "trigger": i.trigger_kind, "delivered": i.delivered_seq is not None,
                           "after_evaluations": i.after_evaluations, "leader_before": i.leader_before,
                           "leader_after": i.leader_after, "evaluations_seen": i.evaluations_seen,
                           "window": i.window, "gain": i.gain, "new_leaders": i.new_leaders,
                           "reply": i.reply}
                          for i in attribution.interventions],
        "gain_by_kind": {k: v.to_dict() for k, v in attribution.by_kind.items()},
        "silent_control": attribution.silent.to_dict(),
        "churn": {"share": churn.share, "added": churn.added, "readded": churn.readded,
                  "edits": [{"number": e.number, "author": e.author, "added": e.added, "removed": e.removed,
                             "readded": e.readded, "cumulative_share": e.cumulative_share} for e in churn.edits]},
        "cost": {"tokens": cost.tokens, "cost_usd": cost.cost_usd, "where": cost.where,
                 "missing_fields": cost.missing, "steps": len(cost.steps),
                 "device_seconds": {f"{d.device}/{d.purpose}": d.seconds for d in cost.device_time}},
        "lineage": {"leader_path": lineage.leader_path,
                    "parents": {str(n.number): (p.key) for p, n in lineage.edges()}},
    }


PLURAL = {"question": "questions", "information": "information messages"}


def clip(text: str, width: int = 60) -> str:
    """One line of at most `width` characters, an ellipsis where it was cut."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def _gain(stats: dict[str, Any]) -> str:
    """A geomean gain with its 95% interval where there is one."""
    low_high = stats.get("interval")
    text = f"{stats['geomean_gain']:.3f}x"
    return text + (f" (95% interval {low_high[0]:.3f}-{low_high[1]:.3f}x)" if low_high else "")


def audit_text(record: AuditRecord) -> str:
    """A terminal-sized audit: the same numbers as the overview page."""
    data = audit_summary(record)
    s = data["session"]
    out = [f"Session {s['id']}: {s['title']} ({s['status']}{', imported' if s['imported'] else ''}), "
           f"agent {s['agent']}, leader {'#' + str(s['leader']) if s['leader'] else 'none'} "
           f"at {_x(s['leader_speedup'])}", ""]
    out.append(f"Evaluations: {len(data['evaluations'])}; leader path: {' -> '.join(data['lineage']['leader_path'])}")
    out.append("")
    out.append("Interventions (gain = leader after / leader at delivery, over the next K evaluations):")
    if not data["interventions"]:
        out.append("  none")
    for i in data["interventions"]:
        where = f"after evaluation {i['after_evaluations']}" if i["delivered"] else "never delivered"
        gain = "-" if i["gain"] is None else f"{i['gain']:.3f}x"
        out.append(f"  {i['label']:<4} {i['kind']:<11} {where:<22} gain {gain:>7} over {i['evaluations_seen']}/"
                   f"{i['window']}  {clip(i['text'])}")
    for kind, stats in data["gain_by_kind"].items():
        if stats["credited"]:
            out.append(f"  {PLURAL.get(kind, kind)}: {stats['credited']} credited of {stats['uses']} delivered, "
                       f"geomean gain {_gain(stats)}, followed by a new leader "
                       f"{stats['hit_rate'] * 100:.0f}% of the time")
        elif stats["uses"]:
            out.append(f"  {PLURAL.get(kind, kind)}: {stats['uses']} delivered, no evaluation after them yet")
    silent = data["silent_control"]
    if silent["credited"]:
        out.append(f"  silent control (pauses resumed without a message): {silent['credited']} credited, "
                   f"geomean gain {_gain(silent)}, followed by a new leader "
                   f"{silent['hit_rate'] * 100:.0f}% of the time")
    c = data["churn"]
    share = "-" if c["share"] is None else f"{c['share'] * 100:.1f}%"
    out += ["", f"Churn: {c['readded']} of {c['added']} added lines had been removed earlier ({share})"]
    cost = data["cost"]
    tokens = ", ".join(f"{TOKEN_LABELS[k]} {v}" for k, v in cost["tokens"].items() if v) or "none recorded"
    out += ["", f"Cost: {cost['steps']} agent steps, ${cost['cost_usd']:.4f}; tokens: {tokens}"]
    if cost["where"]:
        out.append("  where the tokens went: " + ", ".join(f"{k} {v}" for k, v in cost["where"].items()))
    for name, seconds in cost["device_seconds"].items():
        out.append(f"  evaluation time on {name}: {seconds:.1f} s")
    return "\n".join(out) + "\n"
