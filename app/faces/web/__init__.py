"""The HTTP face of the server. Routes translate only: validate, make one domain call through
deps.Steering (unit of work, wake the runner, read back), render or answer.

Start here:
  app.py             the application: one Engine in its lifespan, middleware, routers, errors
  deps.py            dependency injection: Ctx, Runners, Db, Steer
  api.py             the JSON API (OpenAPI at /openapi.json)
  pages.py           dashboard, session, candidate, login, API index
  ws.py              the session websocket (replay, live events, steering messages)
  bank_schemas.py    the question bank's API schemas; bank_api.py its JSON API; bank_pages.py its pages
  render.py          Jinja environment, fragments, the speedup chart
  security.py        token, same-origin, CSP; hosts.py Host and Origin; request_limits.py sizes
  audit_pages.py     the audit's pages (audit_charts.py its charts); campaigns.py campaigns
  workbench.py       compare, fork; cluster_view.py devices; identity.py named authors

The /mcp endpoint is app/faces/mcp.py."""
