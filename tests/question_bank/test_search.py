"""Search as a person types: keywords with prefixes, and meaning where a packaged model exists."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from question_bank.search import search
from question_bank.semantic import default_embedder, semantic_available
from question_bank.store import ensure_starter_bank


@pytest.fixture
def bank(db: Session) -> Session:
    ensure_starter_bank(db)
    return db


def top_keys(hits: list, n: int = 3) -> list[str]:
    return [h.question.key for h in hits[:n]]


def test_a_word_being_typed_matches_by_prefix(bank: Session) -> None:
    hits = search(bank, "bank confl")
    assert top_keys(hits, 1) == ["v-tile-bank-conflicts"]
    assert hits[0].semantic is None and hits[0].keyword > 0.5


def test_each_keystroke_narrows_toward_the_question(bank: Session) -> None:
    assert "which-mma-instructions-issue" in top_keys(search(bank, "tens"), 10)
    assert "which-mma-instructions-issue" in top_keys(search(bank, "tensor-core instr"), 2)


def test_plural_and_singular_match(bank: Session) -> None:
    assert "barriers-per-iteration" in top_keys(search(bank, "barrier"), 2)
    assert "waves-and-last-wave" in top_keys(search(bank, "waves"), 2)


def test_layer_and_trigger_names_are_searchable(bank: Session) -> None:
    hits = search(bank, "masking")
    assert hits and all("masking" in h.question.layers or "mask" in h.question.text.lower() for h in hits)


def test_filters_apply_before_the_query(bank: Session) -> None:
    hits = search(bank, "", trigger="budget", kind="question")
    assert hits and all("budget" in h.question.triggers for h in hits)
    assert all(h.question.kind == "question" for h in hits)
    assert search(bank, "roofline", layer="masking") == []


def test_nothing_found_for_words_the_bank_does_not_hold(bank: Session) -> None:
    assert search(bank, "zebra giraffe") == []


def test_curator_notes_count_but_less_than_the_text(bank: Session) -> None:
    # "MUFU" appears only in a check note.
    hits = search(bank, "mufu")
    assert top_keys(hits, 1) == ["exponentials-versus-mma-rate"]
    assert hits[0].keyword == pytest.approx(0.5)


@pytest.mark.skipif(not semantic_available(), reason="the packaged embedding model is not installed")
def test_semantic_search_finds_a_question_by_meaning(bank: Session) -> None:
    embedder = default_embedder()
    assert embedder is not None
    # No word in common with the question ("precision", "accumulator", "error"): keywords alone
    # find nothing, meaning finds it.
    assert search(bank, "numerical accuracy") == []
    hits = search(bank, "numerical accuracy", embedder=embedder)
    assert top_keys(hits, 1) == ["accumulator-precision"]
    assert hits[0].keyword == 0 and hits[0].semantic is not None and hits[0].semantic > 0.3
    # With both, meaning breaks ties between keyword matches.
    hits = search(bank, "is the kernel limited by compute or by DRAM?", embedder=embedder)
    assert top_keys(hits, 1) == ["what-bounds-the-kernel-now"]
