"""The Socratic server: sessions, steering, agents, pages and the JSON API.

Start here (docs/server.md has the full module table and the import directions):
  web/app.py          the application; web/deps.py what routes receive (act / wake / read back)
  runner/             one session's loop, the candidate pipeline, the runner's persisted state
  tools/              every agent tool, defined once, and the dispatch all agents go through
  agents/             the agent interface and its backends (scripted, claude, offline, mcp)
  sessions.py         what every action does to the database; new_session.py creates one
  steering/           the judge, the goal, triggers, suggestions, the question bank's adapter
  audit/              trace export/import and the audit pages
  campaigns/          several agents, one budget and one board; the campaign judge; evolution
  settings.py         the one settings object; db.py the database (open_database); events.py the log
  models.py           tables; schemas.py what the API accepts and returns; context.py the services
  cli.py              `socratic`; serve.py (serve, db), bank_cli.py (bank), audit/cli.py (trace)

Imports run downward: web -> runner -> tools -> domain -> question_bank, harness; agents
never import the runner; harness and question_bank never import app."""
