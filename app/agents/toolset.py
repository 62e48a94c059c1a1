"""The tool catalog as agents see it: the workspace tools a model-driven agent (Claude, any
MCP client) is offered. Each tool is defined once, in app/tools/ (name, schema, handler, what
the agent reads back); this module only names the set, for the agent backends.

The agent edits one working copy of the kernel (the draft), runs the harness on it, reads
what the session has learnt, asks the question bank, and may declare that it is done."""

from __future__ import annotations

from app.agents.base import EDIT_KERNEL, EVALUATE, READ_FINDINGS, READ_KERNEL, WRITE_KERNEL
from app.tools.table import ACTING_TOOLS, WORKSPACE_TOOL_NAMES, WORKSPACE_TOOL_SPECS
from app.tools.workspace import CONSULT_BANK, KERNEL_VIEWS

__all__ = ["ACTING_TOOLS", "CONSULT_BANK", "EDIT_KERNEL", "EVALUATE", "KERNEL_VIEWS", "READ_FINDINGS",
           "READ_KERNEL", "WORKSPACE_TOOL_NAMES", "WORKSPACE_TOOL_SPECS", "WRITE_KERNEL"]
