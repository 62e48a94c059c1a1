"""Fixtures for the question bank's tests: a real SQLite file per test, with the bank's tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, create_engine

from question_bank.models import BankAutoAsk, BankMeta, BankQuestion, BankUse

BANK_TABLES = [m.__table__ for m in (BankQuestion, BankUse, BankAutoAsk, BankMeta)]  # type: ignore[attr-defined]


def _foreign_keys_on(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def bank_engine(path: Path) -> Engine:
    engine = create_engine(f"sqlite:///{path}")
    event.listen(engine, "connect", _foreign_keys_on)
    SQLModel.metadata.create_all(engine, tables=BANK_TABLES)
    return engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = bank_engine(tmp_path / "bank.db")
    yield eng
    eng.dispose()


@pytest.fixture
def db(engine: Engine) -> Iterator[Session]:
    with Session(engine, expire_on_commit=False) as session:
        yield session
