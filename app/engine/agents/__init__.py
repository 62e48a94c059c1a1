"""Agents the runner drives. They depend on the agent interface only (never on the runner):
what an agent needs about its session arrives in its Task.

Start here:
  base.py            the interface: Agent, Task, Feedback, AgentStep, ToolCall, ToolResult, tool names
  registry.py        backends by name
  scripted.py        replays a script (scripts.py: the built-in ones), for tests and demos
  claude.py          Claude through the anthropic SDK (claude_config.py: options and prices, no SDK)
  offline.py         a search over the kernel family's knobs, no model
  mcp_agent.py       an outside MCP client as the session's agent
"""
