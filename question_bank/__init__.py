"""Questions that move an agent to another layer of the problem: model, bank, ranking, evidence.

Start here:
  models.py          kinds, triggers, layers; the `bank_*` tables
  starter_bank.yaml  the reviewed starter bank, loaded on first start (store.ensure_starter_bank)
  bank_file.py       the YAML format: parse and validate (errors name their line), write
  store.py           reading the bank, importing a file (all or nothing), exporting
  curation.py        add, edit, retire, merge duplicates, promote a session message
  evidence.py        leader gain over the K evaluations after each message, per question and overall
  ranking.py         which questions to show first when a session pauses
  search.py          keyword search as a person types, plus semantic.py's embeddings when installed
  auto_ask.py        the per-session auto-ask policy (off, after T s without a person, at once)
  agent_tool.py      the agent's tool: a situation in, a few questions out
"""
