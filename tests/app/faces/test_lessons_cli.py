"""`socratic lessons ...` (app/faces/commands/lessons.py), run in this process through the CLI's
own entry point: distil a trace file, list and search, a person's status, export and import into
another database; a person's mistakes exit 2 with one line and change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.faces.commands.cli import main
from app.settings import PROJECT_ROOT

TRACE = PROJECT_ROOT / "examples" / "h200-offline-bank-questions.jsonl"


def test_distill_list_status_export_and_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(tmp_path / "a.db"), "--data-dir", str(tmp_path)]
    assert main(["lessons", "distill", "--from", str(TRACE), *db]) == 0
    out = capsys.readouterr().out
    assert "distilled 1 session(s)" in out and " new, " in out
    assert main(["lessons", "distill", "--from", str(TRACE), *db]) == 0
    assert "0 new, 0 updated" in capsys.readouterr().out  # idempotent
    assert main(["lessons", "list", "exp2", *db]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed and "softmax_exp" in listed[0]
    first = int(listed[0].split()[0].lstrip("#"))
    assert main(["lessons", "status", str(first), "retired", *db]) == 0
    assert main(["lessons", "list", "exp2", "--status", "retired", *db]) == 0
    assert capsys.readouterr().out.count("retired") >= 2
    out_file = tmp_path / "lessons.yaml"
    assert main(["lessons", "export", "--format", "yaml", "-o", str(out_file), *db]) == 0
    other = ["--db", str(tmp_path / "b.db"), "--data-dir", str(tmp_path)]
    assert main(["lessons", "import", str(out_file), *other]) == 0
    assert " new, 0 updated, 0 unchanged" in capsys.readouterr().out
    assert main(["lessons", "show", str(first), *other]) == 0
    assert '"status": "retired"' in capsys.readouterr().out


def test_a_persons_mistakes_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(tmp_path / "a.db"), "--data-dir", str(tmp_path)]
    assert main(["lessons", "distill", "--from", str(tmp_path / "nope.jsonl"), *db]) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header", "format": "socratic-trace", "version": 1}\n')
    assert main(["lessons", "distill", "--from", str(bad), *db]) == 2
    assert "bad.jsonl" in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    assert main(["lessons", "import", str(broken), *db]) == 2
    assert "line 1: not JSON" in capsys.readouterr().err
    assert main(["lessons", "show", "42", *db]) == 2
    assert "no lesson 42" in capsys.readouterr().err


def test_words_without_a_key_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert main(["lessons", "words", "--db", str(tmp_path / "a.db"), "--data-dir", str(tmp_path)]) == 2
    assert "ANTHROPIC_API_KEY is not set" in capsys.readouterr().err
