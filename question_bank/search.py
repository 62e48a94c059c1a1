"""Search as a person types: keywords (with prefixes, so "tens" finds "tensor") and, where an
embedding model is installed, meaning ("is it compute bound?" finds "what bounds this kernel").
Keyword alone when there is no model."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import Session

from question_bank.models import BankQuestion
from question_bank.semantic import Embedder
from question_bank.store import list_questions

WORD_RE = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "did", "for", "from", "has",
    "have", "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "that", "the",
    "then", "there", "this", "to", "was", "what", "when", "where", "which", "while", "who", "why",
    "will", "with", "you", "your",
})
KEYWORD_WEIGHT = 0.55         # share of the keyword score when both kinds of score exist
SEMANTIC_FLOOR = 0.30         # cosine below which a question without keyword hits is not shown
PREFIX_CREDIT = 0.8           # "tens" -> "tensor"
STEM_CREDIT = 0.9             # "barriers" -> "barrier"
SECONDARY_FIELD = 0.5         # hypothesis and check count half as much as the text itself


@dataclass(frozen=True)
class SearchHit:
    question: BankQuestion
    score: float
    keyword: float
    semantic: float | None

    def to_dict(self) -> dict[str, object]:
        return {**self.question.to_dict(), "score": round(self.score, 4), "keyword": round(self.keyword, 4),
                "semantic": None if self.semantic is None else round(self.semantic, 4)}


def _stem(word: str) -> str:
    for suffix in ("ing", "es", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def words(text: str) -> list[str]:
    return WORD_RE.findall(text.lower().replace("_", " "))


def _document(q: BankQuestion) -> tuple[set[str], set[str]]:
    primary = set(words(" ".join([q.text, q.key, *q.layers, *q.triggers, q.kind])))
    secondary = set(words(f"{q.hypothesis} {q.check}")) - primary
    return primary, secondary


def _match(term: str, doc: set[str], is_last: bool) -> float:
    if term in doc:
        return 1.0
    stem = _stem(term)
    if any(_stem(w) == stem for w in doc):
        return STEM_CREDIT
    # Prefixes count for the word being typed, and for any word of three letters or more.
    if (is_last or len(term) >= 3) and any(w.startswith(term) for w in doc):
        return PREFIX_CREDIT
    return 0.0


def keyword_scores(questions: Sequence[BankQuestion], query: str) -> list[float]:
    """Score in [0, 1] per question: idf-weighted share of the query's words found."""
    return document_scores([_document(q) for q in questions], [q.text for q in questions], query)


def document_scores(docs: Sequence[tuple[set[str], set[str]]], texts: Sequence[str], query: str) -> list[float]:
    """Score in [0, 1] per document (its primary and secondary words, and its text for a whole
    phrase): idf-weighted share of the query's words found. The lessons' search uses it too."""
    terms = [w for w in words(query) if w not in STOPWORDS] or words(query)
    if not terms:
        return [0.0] * len(docs)
    n = len(docs)
    ends_mid_word = bool(query) and not query[-1].isspace()
    idf = []
    for i, term in enumerate(terms):
        last = ends_mid_word and i == len(terms) - 1
        df = sum(1 for p, s in docs if _match(term, p | s, last) > 0)
        idf.append(math.log(1 + (n + 1) / (df + 0.5)))
    total = sum(idf)
    phrase = " ".join(query.lower().split())
    scores = []
    for text, (primary, secondary) in zip(texts, docs, strict=True):
        got = 0.0
        for i, term in enumerate(terms):
            last = ends_mid_word and i == len(terms) - 1
            got += idf[i] * max(_match(term, primary, last), SECONDARY_FIELD * _match(term, secondary, last))
        score = got / total
        if len(phrase) >= 4 and phrase in text.lower():
            score = min(1.0, score + 0.2)
        scores.append(score)
    return scores


def relevance(keyword: float, semantic: float | None) -> float | None:
    """One relevance from a keyword score and a cosine (None: no embedding model); None when the
    document is not a hit at all. The lessons' search uses it too."""
    if semantic is None:
        return keyword if keyword > 0 else None
    if keyword <= 0 and semantic < SEMANTIC_FLOOR:
        return None
    return KEYWORD_WEIGHT * keyword + (1 - KEYWORD_WEIGHT) * max(0.0, semantic)


def semantic_scores(questions: Sequence[BankQuestion], query: str, embedder: Embedder) -> list[float]:
    vectors = embedder.embed([query, *(q.text for q in questions)])
    qv = vectors[0]
    return [sum(a * b for a, b in zip(qv, v, strict=True)) for v in vectors[1:]]


def search_questions(
    questions: Sequence[BankQuestion], query: str, *, embedder: Embedder | None = None, limit: int | None = None
) -> list[SearchHit]:
    """Rank `questions` for a typed query. An empty query returns them all, in their order."""
    questions = list(questions)
    if not query.strip():
        hits = [SearchHit(q, 0.0, 0.0, None) for q in questions]
        return hits[:limit] if limit is not None else hits
    kw = keyword_scores(questions, query)
    sem: list[float | None] = [None] * len(questions)
    if embedder is not None and questions:
        sem = list(semantic_scores(questions, query, embedder))
    hits = []
    for q, k, s in zip(questions, kw, sem, strict=True):
        score = relevance(k, s)
        if score is not None:
            hits.append(SearchHit(q, score, k, s))
    hits.sort(key=lambda h: (-h.score, h.question.id or 0))
    return hits[:limit] if limit is not None else hits


def search(
    session: Session,
    query: str,
    *,
    status: str | None = None,
    kind: str | None = None,
    trigger: str | None = None,
    layer: str | None = None,
    embedder: Embedder | None = None,
    limit: int | None = 50,
) -> list[SearchHit]:
    """Filter the bank, then rank what is left for `query`."""
    pool = list_questions(session, status=status, kind=kind, trigger=trigger, layer=layer)
    return search_questions(pool, query, embedder=embedder, limit=limit)
