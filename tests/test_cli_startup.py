"""`socratic` starts fast for commands that need no GPU stack: `--help` and `bank export`
import neither torch nor fastapi (lazy imports), measured in a fresh interpreter. The limit
is 1.5 s for what takes about 0.4-0.7 s here, to stay clear of a busy CI machine's noise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 1.5

MEASURE = """
import contextlib, io, json, sys, time
start = time.perf_counter()
from app.cli import main
code = None
with contextlib.redirect_stdout(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:  # --help exits 0
        code = exc.code
print(json.dumps({"s": time.perf_counter() - start, "code": code,
                  "heavy": sorted(m for m in ("torch", "fastapi", "uvicorn") if m in sys.modules)}))
"""


def run_command(*argv: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", MEASURE, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_help_starts_without_torch_or_fastapi() -> None:
    result = run_command("--help")
    assert result["code"] == 0
    assert result["heavy"] == []
    assert float(result["s"]) < LIMIT_S, result  # type: ignore[arg-type]


def test_bank_export_starts_without_torch_or_fastapi(tmp_path: Path) -> None:
    result = run_command("bank", "export", "--data-dir", str(tmp_path), "--out", str(tmp_path / "bank.yaml"))
    assert result["code"] == 0
    assert result["heavy"] == []
    assert float(result["s"]) < LIMIT_S, result  # type: ignore[arg-type]
    assert (tmp_path / "bank.yaml").read_text().strip()


def test_a_file_that_is_no_database_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    not_a_db = tmp_path / "notes.db"
    not_a_db.write_text("these are notes, not SQLite\n" * 50)
    for argv in (["trace", "audit", "1"], ["bank", "export"]):
        done = subprocess.run([sys.executable, "-m", "app.cli", *argv, "--db", str(not_a_db)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert lines == [f"socratic {argv[0]}: the database cannot be used: file is not a database"], lines
