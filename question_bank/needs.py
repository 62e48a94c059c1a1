"""What a question presumes about the session it is asked in, read from its text: a number of
evaluations ("your last ten candidates", "the ones three steps back"), a leader ("does the
leader reach"), a profile of the leader ("what does the leader's profile say"). A pause
suggests (and auto-ask sends) only questions whose needs the session meets: "your last ten
candidates" before any evaluation reads as a bank that is not listening.

The needs are read from the text the agent is sent, so a question written or imported by a
curator is judged by the same words; the rules are deliberately plain (docs/question_bank.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "few": 3, "a few": 3, "several": 3,
          "couple": 2, "a couple of": 2}
_NUMBER = r"(\d{1,3}|a few|a couple of|couple|" + "|".join(sorted(_WORDS, key=len, reverse=True)) + r")"
_THINGS = r"(?:candidates?|variants?|evaluations?|attempts?|kernels?|tries|submissions?|versions?|iterations?)"
_LAST_N = re.compile(rf"\b(?:last|past|previous|recent|latest)\s+{_NUMBER}\s+{_THINGS}\b", re.I)
_N_BACK = re.compile(rf"\b{_NUMBER}\s+(?:steps?|candidates?|evaluations?|versions?)\s+(?:back|ago|earlier)\b", re.I)
_YOUR_LAST = re.compile(r"\byour\s+(?:last|latest|previous|recent|newest|new)\s+"
                        r"(candidate|variant|kernel|evaluation|version|attempt|change|submission)(s?)\b", re.I)
_THIS_RESULT = re.compile(r"\bthis\s+(?:jump|gain|win|speedup|result)\b", re.I)
_LEADER = re.compile(r"\bleader\b|\bleading\s+(?:kernel|candidate)\b", re.I)
_PROFILE = re.compile(r"\b(?:the|its|this|your)\s+(?:leader'?s\s+|kernel'?s\s+|candidate'?s\s+)?profile\b(?!r)"
                      r"|\bprofile\s+(?:says|shows|finds|found|reports|points)\b|\bthe\s+diagnosis\b", re.I)


@dataclass(frozen=True)
class SessionState:
    """What a session has when it pauses."""

    evaluations: int   # judged evaluations so far
    leader: bool       # a candidate leads (one that beat the baseline)
    profile: bool      # the leader has a profile (a suite evaluation with what bounds it)


@dataclass(frozen=True)
class Needs:
    evaluations: int = 0
    leader: bool = False
    profile: bool = False

    def unmet(self, state: SessionState) -> str | None:
        """Why the question does not fit the session yet, or None when it does."""
        if self.evaluations > state.evaluations:
            return (f"needs {self.evaluations} evaluation{'s' if self.evaluations != 1 else ''} "
                    f"(the session has {state.evaluations})")
        if self.leader and not state.leader:
            return "asks about the leader, and no candidate leads yet"
        if self.profile and not state.profile:
            return "asks about the leader's profile, and there is none yet"
        return None


def _count(word: str) -> int:
    word = word.lower()
    return int(word) if word.isdigit() else _WORDS.get(word, 3)


@lru_cache(maxsize=1024)
def needs_of(text: str) -> Needs:
    """What the question's words presume about the session."""
    evaluations = 0
    for m in _LAST_N.finditer(text):
        evaluations = max(evaluations, _count(m.group(1)))
    for m in _N_BACK.finditer(text):  # "the ones three steps back": the latest and three before it
        evaluations = max(evaluations, _count(m.group(1)) + 1)
    for m in _YOUR_LAST.finditer(text):
        evaluations = max(evaluations, 2 if m.group(2) else 1)
    if _THIS_RESULT.search(text):
        evaluations = max(evaluations, 1)
    profile = bool(_PROFILE.search(text))
    leader = bool(_LEADER.search(text))
    return Needs(evaluations=evaluations, leader=leader, profile=profile)
