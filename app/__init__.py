"""The Socratic server: sessions, steering, agents, pages and the JSON API.

Its folders are its layers, top to bottom; each imports only from those below it
(tests/app/test_import_graph.py checks this, docs/server.md has every module):

  faces/      what people and programs talk to: web/ (pages, JSON API, websockets), mcp.py,
              commands/ (`socratic`, also `python -m app`)
  engine/     what runs: agents/, the tool table (tools/), the candidate pipeline, session
              runners (runner/), campaigns, and engine.py, the one object that starts it all
  services/   what the server holds while it runs: the device queue, the evaluator (this
              machine or a cluster), ServerContext
  domain/     the rules, no processes or GPUs: session states and actions, steering, the
              after-verdict routine, audits, campaigns' board and judge
  store/      what is kept: every table, the database and its migrations, the event log,
              the input limits
  settings.py the one settings object, under every layer

Below app/: question_bank/ and harness/, which never import app/."""
