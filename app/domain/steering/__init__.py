"""Steering: what decides, pauses and suggests.

Start here:
  session_judge.py   the strict judge of a session's candidates (leader, backup, rejected; re-time against the leader)
  goal.py            the goal and its check on harness numbers
  triggers.py        plateau, declared limit, suspicious win, budget, manual
  suggestions.py     the pause banner's suggested questions (the bank plugs in a provider)
  bank.py            thin adapter to question_bank/: suggestions, evidence, the pause as auto-ask sees it
"""
