"""What a problem's question counts: the noun after "How many", to tell the answer among a closing
sentence's numbers ("Since each box holds 6 eggs, 4 boxes hold 24 eggs." answers "How many eggs ...?"
with 24, not 4).
"""

from __future__ import annotations

import re

__all__ = ["counted_noun", "question_of", "question_words", "stem"]

# "How many eggs", "how many more boxes", "How many positive whole-number divisors"
_HOW_MANY = re.compile(r"\bhow[ \t]+many[ \t]+((?:[A-Za-z'-]+[ \t]*){1,5})", re.IGNORECASE)
# words before the counted noun that are not it
_MODIFIERS = frozenset("more fewer less total extra different additional whole full".split())
# words that end the noun phrase after "how many": verbs, prepositions, pronouns ("how many of them")
_STOPS = frozenset("""of are were was is be did does do will would can could should has have had must might there in
    on at for to from that than more less fewer does the a an he she they it we you i his her their its each
    altogether total left remain remaining""".split())


def question_of(problem: str) -> str:
    """The problem's question: its last sentence that ends in ``?`` and what follows it, else its last
    sentence; ``""`` for an empty statement."""
    sentences = [s for s in re.split(r"(?<=[.?!])\s+", problem.strip()) if s.strip()]
    if not sentences:
        return ""
    questions = [i for i, s in enumerate(sentences) if s.rstrip().endswith("?")]
    return " ".join(sentences[questions[-1]:]) if questions else sentences[-1]


def stem(word: str) -> str:
    """A word lowercased without its plural ending (``boxes`` -> ``box``, ``pennies`` -> ``penny``)."""
    w = word.lower()
    if re.search(r"(?:ch|sh|x|s|z)es$", w):
        return w[:-2]
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    return w[:-1] if w.endswith("s") and not w.endswith("ss") else w


# words of a question that say nothing of what it asks for
_FUNCTION_WORDS = frozenset("""how many much what which who whom whose when where why does did do done the a an of in on at
    for to from by with and or but is are was were be been being have has had will would can could should shall may might
    must if then than that this these those it its they them their there he him his she her we our you your i me my all
    any each every some such as so not no into onto about after before over under up down out per find determine
    calculate compute express answer give write value number""".split())


def question_words(problem: str | None) -> frozenset[str]:
    """The content words of the problem's question (:func:`question_of`), stemmed (:func:`stem`): what tells
    which of a closing sentence's numbers answers it ("How many points did Jojo score?" -> point, jojo, score);
    where the question holds no word (it is all math), its statement's last 30 words. Empty without a statement."""
    if not problem:
        return frozenset()
    def content(text: str) -> set[str]:
        plain = re.sub(r"\$[^$]*\$", " ", text)
        return {stem(w) for w in re.findall(r"[A-Za-z][A-Za-z'-]+", plain) if w.lower() not in _FUNCTION_WORDS and len(w) > 2}
    words = content(question_of(problem))
    return frozenset(words or content(" ".join(re.sub(r"\$[^$]*\$", " ", problem).split()[-30:])))


def counted_noun(problem: str | None) -> str | None:
    """The noun the question counts, singular and lowercased ("How many more eggs ...?" -> ``egg``),
    else None (no statement, no "how many", or two different nouns asked)."""
    if not problem:
        return None
    nouns = {noun for m in _HOW_MANY.finditer(question_of(problem)) for noun in [_noun(m.group(1).split())] if noun}
    return nouns.pop() if len(nouns) == 1 else None


def _noun(words: list[str]) -> str | None:
    """The counted noun of the words after "how many": of the words up to a verb or preposition, the
    last plural one, else the last one (``positive whole-number divisors does`` -> ``divisor``, ``daps
    equal`` -> ``dap``)."""
    while words and words[0].lower() in _MODIFIERS:
        words = words[1:]
    phrase = []
    for word in words:
        if word.lower() in _STOPS:
            break
        phrase.append(word)
    if not phrase:
        return None
    plural = [w for w in phrase if w.lower().endswith("s") and len(w) > 3]
    return stem((plural or phrase)[-1])


def counts(text_after_number: str, noun: str) -> bool:
    """Whether the words right after a number name ``noun`` (at most one word between: "24 eggs",
    "3 more boxes", "24 brown eggs")."""
    m = re.match(r"[ \t*_]+(?:([A-Za-z]+)[ \t]+)?([A-Za-z]+)", text_after_number)
    if not m:
        return False
    return stem(m.group(2)) == noun or (m.group(1) is not None and stem(m.group(1)) == noun)
