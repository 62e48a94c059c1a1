"""The optional pass that writes an active lesson in a model's words (`socratic lessons words`,
lessons/words.py), driven through the real anthropic SDK against the recorded-HTTP stand-in of
tests/claude_fake.py: the model reads the structured record (numbers, no setting dump), its
paragraph is kept with author "model", and distilling the same evidence again keeps it."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.domain.lessons import distill_files
from app.faces.commands.lessons import cmd_words
from app.settings import PROJECT_ROOT, Settings
from app.store.database import open_database
from lessons.store import list_lessons
from tests.claude_fake import FakeMessagesAPI, message, text

TRACE = PROJECT_ROOT / "examples" / "h200-offline-bank-questions.jsonl"


def test_a_models_paragraph_is_kept_and_survives_the_next_distillation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    database = open_database(Settings(data_dir=tmp_path, db_url=url))
    with database.session() as db:
        distill_files(db, [TRACE])
        db.commit()
        proposed = [x for x in list_lessons(db) if x.author == "distiller"]
    database.dispose()
    api = FakeMessagesAPI([message(text(f"Paragraph {i}."), stop_reason="end_turn") for i in range(len(proposed))])
    args = argparse.Namespace(db=url, data_dir=str(tmp_path), all=True, limit=2, model="claude-test",
                              client=api.client())
    assert cmd_words(args) == 0
    assert len(api.requests) == 2 and api.requests[0]["model"] == "claude-test"
    prompt = api.requests[0]["messages"][0]["content"]
    assert "Record:" in prompt and '"confidence"' in prompt and '"setting"' not in prompt
    database = open_database(Settings(data_dir=tmp_path, db_url=url))
    with database.session() as db:
        worded = [x for x in list_lessons(db) if x.author == "model"]
        assert [x.text for x in worded] == ["Paragraph 0.", "Paragraph 1."]
        distill_files(db, [TRACE])
        db.commit()
        assert [x.text for x in list_lessons(db) if x.author == "model"] == ["Paragraph 0.", "Paragraph 1."]
    database.dispose()
