"""The rules, above the store: what a session, a candidate, a campaign is, and what each action
does to them. Nothing here starts a process or touches a GPU; every function takes the
transaction (`Unit`) or database session it works in.

  kernel_names.py  the kernels a request may name        lifecycle.py  the session state machine
  steering/        judge, goal, triggers, suggestions     schemas.py    what the API accepts
  sessions.py      every action on a session, read models progress.py   the chart's points
  bank_actions.py  people's bank actions about a session  forks.py      lineage across sessions
  verdicts.py      what follows a verdict (sessions and campaigns alike)
  audit/           a session's trace audited and moved   campaigns/    board, judge, evolution"""
