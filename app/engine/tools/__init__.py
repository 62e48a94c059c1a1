"""The agent tools, each defined once: name, JSON schema, handler and the text the agent reads.

Start here:
  table.py       the one table (`TOOLS`), the workspace set offered to model-driven agents,
                 and `dispatch`, through which the runner (for Claude, offline, scripted agents)
                 and the MCP endpoint's agent run every call
  base.py        `Tool` (one row of the table) and `ToolContext` (what a handler receives:
                 session id, services, runner state, cancel, the agent's task, the pipeline)
  candidates.py  submit_candidate, read_candidate, list_candidates, declare_done
  workspace.py   the working copy (read_kernel, write_kernel, edit_kernel), evaluate,
                 read_findings, consult_bank
  readouts.py    harness results as an agent may read them (hidden scenarios counted, never named)

Handlers call downward only: the candidate pipeline (app/engine/pipeline.py, handed in through
the context), sessions, steering and the question bank. None of them sees the runner."""
