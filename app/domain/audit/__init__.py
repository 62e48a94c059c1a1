"""Trace audit: what a session did, what each question changed, and what it cost.

Start here:
  record.py       one session's whole trace loaded once (rows, events, ids as the trace knows them)
  trace_io.py     export to / import from the versioned JSONL format (docs/trace.md)
  timeline.py     events by kind (agent message, tool call, evaluation, trigger, intervention),
                  search, and the candidates each event concerns
  lineage.py      the candidate tree (baseline -> children), the leader path, diffs
  heatmap.py      per-scenario speedup of one candidate
  attribution.py  speedup over evaluations and the gain credited to each intervention
                  (question_bank/evidence.py's rule, replayed over the trace)
  churn.py        lines an agent adds that it had removed earlier, over the session
  cost.py         tokens by kind, money by step, where the tokens went
  ratios.py       what every ratio is against, which way it goes, over how many scenarios
Its pages are app/faces/web/audit_pages.py and audit_charts.py; its command
app/faces/commands/trace.py; the `trace_import` table app/store/trace_models.py.
"""
