"""Lessons: what finished work taught, distilled, found again, and used by the next session.
The question bank (question_bank/) is the person-curated half of the project's memory; this is
the machine-distilled half.

Start here:
  models.py    a lesson (situation, action, effect per category, evidence, scope, status); the `lesson` table
  distill.py   a session's facts -> observations (candidate vs parent) -> the merge into a lesson
  store.py     applying observations, a person's status and words, export and import (YAML, JSON Lines)
  search.py    hybrid retrieval (keywords, meaning where installed), tag filters, fit and evidence
  use.py       what each reader gets: a model's prompt section, the offline agent's priors, the tool's text

The app builds the facts (app/domain/lessons.py), distils in the background
(app/services/distiller.py) and shows lessons (/lessons, the pause panel, `socratic lessons`)."""
