"""What runs, above the services: agents (agents/), the one tool table (tools/), the candidate
pipeline (pipeline.py), session runners (runner/), session, fork and campaign creation, and the
`Engine` (engine.py) that the web app, MCP and the scripts start once."""
