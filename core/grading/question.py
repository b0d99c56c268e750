"""What a problem's question counts: the noun after "How many", to tell the answer among a closing
sentence's numbers ("Since each box holds 6 eggs, 4 boxes hold 24 eggs." answers "How many eggs ...?"
with 24, not 4).
"""

from __future__ import annotations

import re

__all__ = ["counted_noun", "question_of"]

# "How many eggs", "how many more boxes", "How many total miles"
_HOW_MANY = re.compile(r"\bhow[ \t]+many[ \t]+(?:more|fewer|less|total|extra|different|additional|whole|full)?[ \t]*"
                       r"([A-Za-z]{3,})\b", re.IGNORECASE)
# words after "how many" that are not what is counted ("how many of them", "how many did she")
_NOT_NOUNS = frozenset("""of are were was is did does do will would can could should have has had in on at for
    the a an he she they it we you there""".split())


def question_of(problem: str) -> str:
    """The problem's question: its last sentence that ends in ``?`` and what follows it, else its last
    sentence; ``""`` for an empty statement."""
    sentences = [s for s in re.split(r"(?<=[.?!])\s+", problem.strip()) if s.strip()]
    if not sentences:
        return ""
    questions = [i for i, s in enumerate(sentences) if s.rstrip().endswith("?")]
    return " ".join(sentences[questions[-1]:]) if questions else sentences[-1]


def _stem(word: str) -> str:
    w = word.lower()
    if re.search(r"(?:ch|sh|x|s|z)es$", w):
        return w[:-2]
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    return w[:-1] if w.endswith("s") and not w.endswith("ss") else w


def counted_noun(problem: str | None) -> str | None:
    """The noun the question counts, singular and lowercased ("How many more eggs ...?" -> ``egg``),
    else None (no statement, no "how many", or two different nouns asked)."""
    if not problem:
        return None
    nouns = {_stem(m.group(1)) for m in _HOW_MANY.finditer(question_of(problem))
             if m.group(1).lower() not in _NOT_NOUNS}
    return nouns.pop() if len(nouns) == 1 else None


def counts(text_after_number: str, noun: str) -> bool:
    """Whether the words right after a number name ``noun`` (at most one word between: "24 eggs",
    "3 more boxes", "24 brown eggs")."""
    m = re.match(r"[ \t*_]+(?:([A-Za-z]+)[ \t]+)?([A-Za-z]+)", text_after_number)
    if not m:
        return False
    return _stem(m.group(2)) == noun or (m.group(1) is not None and _stem(m.group(1)) == noun)
