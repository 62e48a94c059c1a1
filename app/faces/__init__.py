"""What people and other programs talk to, the top layer: the web app (web/), the MCP endpoint
(mcp.py) and the `socratic` commands (commands/). Faces translate only: validate, make one
domain or engine call, render or answer."""
