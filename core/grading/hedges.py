"""Hedged answers: a stated answer that the model does not commit to.

A model that writes "The answer is 12, unless the teacher counts, in which case 13", "**45** [or 50 if
the coupon does not apply]" or "$\\boxed{24}$, though 25 is also possible" has named two candidate
answers and committed to neither; a grader that reads the first value accepts it whenever the gold is
12, 45 or 24. :func:`alternative_after` finds the other candidate in the text that follows a stated
answer; :func:`conflicting` tells whether two final statements (a box and an ``Answer:`` line) name
different numbers. Both only ever look at plain numbers (with a unit or currency at most): a LaTeX
answer is left to the grader.

What is not a hedge: another value that is rejected ("12 (not 13)", "rather than 13"), a
counterfactual ("if she had kept them, she would have had 10"), a number of the problem in a
condition ("12 if we count the 3 boxes"), the same value again ("0.5, or 50%", "1/2 or 0.5") and a
restatement in another unit of measure ("3 hours, or 180 minutes").
"""

from __future__ import annotations

import re
from fractions import Fraction

from .units import measure_after, unit_key

__all__ = ["alternative_after", "answer_sentence", "conflicting", "plain_value", "undecided_values"]

_NUMBER = r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?"
# "or" in the languages the grader reads, with what may stand between it and the other value
_OR_WORDS = r"(?:or|oder|ou|o|oppure|или|либо|أو|या|또는|혹은|或者|或是|或|也可能是|也可能|または|か|hoặc|veya|ya[ \t]+da|atau|lub|albo|або|чи|یا|หรือ|nebo|eller|vagy|অথবা|বা|sau|ή|או|tai)"
_OR_MODAL = (r"(?:(?:possibly|perhaps|maybe|even|else|also|eventually|vielleicht|peut-être|quizás|tal[ \t]+vez|talvez|"
             r"about|around|roughly|approximately|около|примерно|khoảng|yaklaşık|sekitar|environ|etwa|unos|cerca[ \t]+de)[ \t]+|~[ \t]*|"
             r"(?:it|that|the[ \t]+answer)[ \t]+(?:could|might|may|would)[ \t]+(?:also[ \t]+|even[ \t]+)?be[ \t]+)*")
_OR_VALUE = re.compile(r"(?:(?<=[\s,;(\[*_$，、\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af])|(?<=^)|(?<=\d))" + _OR_WORDS + r"(?![^\W\d_])[ \t]*" + _OR_MODAL +
                       r"[ \t*_$\\(]*(?:\$[ \t]*)?(" + _NUMBER + r")(?![\d/])", re.IGNORECASE)
# a condition's other branch, after which another value is the answer in the other case
_CONDITION = re.compile(r"\b(?:unless|otherwise|else|in[ \t]+which[ \t]+case|depending[ \t]+on|depends[ \t]+on|"
                        r"alternatively|sonst|andernfalls|sinon|selon|según|de[ \t]+lo[ \t]+contrario|si[ \t]+no|senão|"
                        r"caso[ \t]+contrário|dependendo|иначе|в[ \t]+зависимости)\b|否则|要不然", re.IGNORECASE)
# a condition: its value is a candidate only as the result of the case ("if she walks back, it would be 120",
# "24 if the teacher is excluded, 25 if included"), never the condition's own number
_IF = re.compile(r"\b(?:if|falls|wenn|si|se|если)\b|如果|要是", re.IGNORECASE)
_RESULT = re.compile(r"\b(?:would|will|could|might)[ \t]+(?:\w+[ \t]+)?(?:be|make|give|get|become|equal|total|cost|come|take)\b"
                     r"|\bthen\b|\bin[ \t]+which[ \t]+case\b|,[ \t]*(?:it|that|this|the[ \t]+(?:answer|total|result))"
                     r"(?:'s|[ \t]+is|[ \t]+becomes)\b|\bmaking[ \t]+it\b|\bwe(?:'d|[ \t]+would)?[ \t]+get\b", re.IGNORECASE)
# another value allowed as the answer too: "could also be 20", "25 is also possible"
_MODAL = re.compile(r"\b(?:could|might|may)[ \t]+(?:also[ \t]+|even[ \t]+)?be\b|\b(?:is|are|would[ \t]+be)[ \t]+also[ \t]+"
                    r"(?:possible|valid|correct|acceptable|plausible|reasonable)\b", re.IGNORECASE)
# what makes a value in a hedge's clause no candidate: a rejection, a counterfactual, a mistake
_NOT_CANDIDATE = re.compile(r"\b(?:not|rather[ \t]+than|instead[ \t]+of|as[ \t]+opposed[ \t]+to|vs\.?|versus|had|"
                            r"were|would[ \t]+have|wrong|incorrect|mistake|mistaken|error|nicht|pas|não)\b|n't[ \t]+(?:be|work|fit|make)\b|≠",
                            re.IGNORECASE)
# a sentence after the answer's that offers another case: "However, if she walks both ways, it is 120."
_OPENER = re.compile(r"[\s*_(\[]*(?:however|but|or|otherwise|alternatively|unless|though|although|then[ \t]+again|"
                     r"that[ \t]+said)\b|[\s*_(\[]*if\b", re.IGNORECASE)
# other values set aside by what the question asks: "0 or 1 are also possible, but the question asks for the greatest"
_SET_ASIDE = re.compile(r"[^.;)]*\bbut\b[^.;)]*\b(?:question|problem|asks?|asked|wants?|only)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<!\d)[.!?。！？](?=[\s*_)\]]|$)|\.(?=\s)|\n")


def plain_value(answer: str) -> Fraction | None:
    """The value of an answer that is one plain number, perhaps with a currency sign, a percent sign or a
    word after it (``$45``, ``\\$18``, ``7 apples``, ``1,360``, ``3/4``), else None."""
    s = re.sub(r"\\text\{([^{}]*)\}|\\mathrm\{([^{}]*)\}", lambda m: m.group(1) or m.group(2) or "", answer)
    s = re.sub(r"[$*_\\]|\b(?:dollars?|euros?|cents?)\b", " ", s).strip()
    m = re.fullmatch(r"(" + _NUMBER + r")[ \t]*(?:%|[^\W\d_]+(?:[ \t]+[^\W\d_]+)?)?\.?", s)
    if not m:
        return None
    try:
        return Fraction(m.group(1).replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def _candidate(answer: Fraction, other: str, after: str) -> bool:
    """Whether ``other`` (a number, ``after`` the text that follows it) is another value than ``answer``:
    not the same value, nor the same as a percent ("0.5, or 50%", "25%, or 1/4"), nor the first term of
    an expression ("36, or 6 × 6"), nor a share of another quantity ("$45, or 75% of the price"), nor a
    count of dozens ("12 eggs, or 1 dozen")."""
    try:
        value = Fraction(other.replace(",", "").replace("−", "-"))
    except (ValueError, ZeroDivisionError):
        return False
    after = re.sub(r"^(?:\*\*|__|\$|\\\))+", "", after)  # the bold or math the value closes
    if re.match(r"[ \t]*(?:[-+*/×÷·^−]|\\(?:times|cdot|div)\b|x[ \t]*\d|(?:\\?%|[ \t]*percent)[ \t]+of\b)|[ \t]+dozens?\b", after):
        return False
    percent = after.lstrip().startswith(("%", "percent", "\\%"))
    return value != answer and not (percent and value == answer * 100) and value * 100 != answer


def _in_problem(number: str, problem: str | None) -> bool:
    return bool(problem) and re.search(r"(?<![\d.,])" + re.escape(number.replace(",", "")) + r"(?![\d]|[.,]\d)",
                                       re.sub(r"(?<=\d),(?=\d{3})", "", problem)) is not None


def answer_sentence(text: str, start: int) -> str:
    """The text from ``start`` to the end of its sentence (a full stop, ``!`` or ``?`` before a space, or
    a line end; not the dot of a decimal), and the next sentence of the same paragraph too when it opens
    another case ("However, if ...", "Otherwise ...", "Or ...")."""
    first = _SENTENCE_END.search(text, start)
    end = first.end() if first else len(text)
    if first and text[first.start()] != "\n" and not re.match(r"[ \t]*\n", text[end:]):
        second = _SENTENCE_END.search(text, end)
        following = text[end:second.end() if second else len(text)]
        if _OPENER.match(following) or _MODAL.search(following):
            end = second.end() if second else len(text)
    return text[start:end]


def alternative_after(tail: str, answer: str, problem: str | None = None) -> str | None:
    """The other candidate answer a hedge right after a stated answer offers, else None.

    Args:
        tail: the text right after the stated answer's value, to the end of its sentence (see
            :func:`answer_sentence`): ", unless the teacher counts, in which case 13.", " [or 50 if ...]".
        answer: the stated answer (``12``, ``$45``, ``7 apples``); only a plain number is ever hedged
            (:func:`plain_value`).
        problem: the problem statement: its own numbers are conditions ("12 if we count the 3 boxes"),
            not candidates.

    Returns:
        The other value as written (``"13"``), or None when the answer is committed to.

    Rules: another value joined by "or" (in the grader's languages, "or possibly 20", "or it could be
    20"), unless it is the same value or the same quantity in another unit of measure; a value after a
    condition or its other branch ("unless", "otherwise", "if", "depending on", "in which case") that is
    none of the problem's numbers; a value the model allows too ("could also be 20", "25 is also
    possible"). A value after "not", "rather than", a counterfactual "had" / "would have" or "wrong"
    in the same clause is rejected, not offered.
    """
    value = plain_value(answer)
    if value is None or not tail:
        return None
    answer_unit = measure_after(re.sub(r"^[^\d]*" + _NUMBER, "", answer.replace("\\", " "))) or ""
    for m in _OR_VALUE.finditer(tail):
        after = tail[m.end():]
        if not _candidate(value, m.group(1), after) or _NOT_CANDIDATE.search(tail[:m.start()].split(",")[-1]):
            continue
        if re.match(_SET_ASIDE, after):
            continue  # "(0 or 1 are also possible leftovers, but the question asks for the greatest)"
        unit = measure_after(re.sub(r"^[*_$}\s]+", " ", after)) or ""
        if unit and answer_unit and unit_key(unit) != unit_key(answer_unit):
            continue  # "3 hours, or 180 minutes": the same time in other units ("5 or 6 days" share theirs)
        return m.group(1)
    cues = [(cue, 0) for cue in [*_CONDITION.finditer(tail), *_MODAL.finditer(tail)]]
    for cue in _IF.finditer(tail):
        # the case's result, or the value before a second case: "24 if ... excluded, 25 if included"
        result = _RESULT.search(tail, cue.end())
        if result and ";" not in tail[cue.end():result.start()]:
            cues.append((cue, result.end() - cue.start()))
        second = re.search(r"(?<![\w.,])" + _NUMBER + r"[^\d.;]{0,30}?(?:" + _IF.pattern + ")", tail[cue.end():], re.IGNORECASE)
        if second:
            cues.append((cue, 0))
    for cue, skip in cues:
        clause = re.split(r"[;]", tail[cue.start():], maxsplit=1)[0]
        if _NOT_CANDIDATE.search(clause):
            continue
        for number in re.finditer(r"(?<![\w.,])" + _NUMBER + r"(?![\d/])", clause):
            if number.start() < skip:
                continue
            n = number.group(0)
            if _candidate(value, n, clause[number.end():]) and not _in_problem(n, problem):
                return n
    # "25 is also possible", "25 would also be valid": the value before the allowance
    allowed = re.search(r"(?<![\w.,])(" + _NUMBER + r")(?![\d/])[^.\d\n]{0,40}?\b(?:is|are|would[ \t]+be)[ \t]+also[ \t]+"
                        r"(?:possible|valid|correct|acceptable|plausible|reasonable)\b", tail, re.IGNORECASE)
    if allowed and _candidate(value, allowed.group(1), "") and not _NOT_CANDIDATE.search(allowed.group(0)) and \
            not re.match(_SET_ASIDE, tail[allowed.end():]):
        return allowed.group(1)
    return None


def conflicting(first: str | None, second: str | None) -> bool:
    """Whether two final statements of one solution (its box and its ``Answer:`` line) name different
    plain numbers (``7`` and ``9 apples``); False when either is no plain number (the grader decides)."""
    a, b = plain_value(first or ""), plain_value(second or "")
    return a is not None and b is not None and a != b


# words that show a sentence holds a doubt between values: "I'd lean towards 13", "probably 7, though 9 is
# defensible", "somewhere between 12 and 13", "Je dirais 12, ou peut-être 10", "Ich schwanke zwischen 50 und 25"
_DOUBT = re.compile(r"\b(?:lean(?:ing|s)?[ \t]+(?:towards?|to)|inclination|inclined|probably|possibly|perhaps|maybe|might|could|"
                    r"best[ \t]+guess|(?:just[ \t]+as[ \t]+|most[ \t]+|it(?:'|’)s[ \t]+)likely|"
                    r"defensible|plausible|arguabl[ey]|either|(?:somewhere|lies|is|falls)[ \t]+between|depending[ \t]+on|depends[ \t]+on|"
                    r"one[ \t]+way|other[ \t]+way|(?:first|second|other)[ \t]+reading|under[ \t]+the[ \t]+(?:first|second|other)|interpretations?|hard[ \t]+to[ \t]+"
                    r"(?:say|tell)|difficult|not[ \t]+sure|unsure|guess|torn|undecided|"
                    r"peut-être|difficile|hésite|zwischen|schwanke|plausibel|vielleicht|entweder|wahrscheinlich|quizás?|"
                    r"tal[ \t]+vez|talvez|entre|dúvida|forse|probablemente|provavelmente|возможно|либо|между|не[ \t]+уверен)\b"
                    r"|或者|(?<![种種个個])可能|也许|还是|不确定|かもしれ|どちら|아마|확실하지|शायद|ربما|อาจ|น่าจะ"
                    # "depending on (the reading)" in more languages
                    r"|取决于|取決於|залежно[ \t]+від|в[ \t]+залежності[ \t]+від|بسته[ \t]+به|(?:w[ \t]+)?zależnie[ \t]+od|w[ \t]+zależności[ \t]+od"
                    r"|afhankelijk[ \t]+van|beroende[ \t]+på|v[ \t]+závislosti[ \t]+na|podle[ \t]+(?:toho|výkladu)|tùy[ \t]+(?:thuộc|theo)"
                    r"|tergantung|bağlı[ \t]+olarak|je[ \t]+nach|dependiendo|a[ \t]+seconda|によって|에[ \t]*따라|ขึ้นอยู่กับ"
                    # "otherwise" in other languages: "Letteralmente fa 70; altrimenti 67."
                    r"|\b(?:altrimenti|sinon|sonst|si[ \t]+no|de[ \t]+lo[ \t]+contrario|caso[ \t]+contrário|senão|se[ \t]+não|иначе|"
                    r"anders|jika[ \t]+tidak|aksi[ \t]+takdirde|nếu[ \t]+không|jinak|inaczej|інакше|annars|muuten|egyébként|altfel)\b"
                    r"|否则|그렇지[ \t]*않으면|अन्यथा|وإلا", re.IGNORECASE)
# a value stated outright: "it is 32", "the answer is $\sqrt{5}$", "= 40" ("is probably 7" states nothing)
_STATES = re.compile(r"(?:\b(?:is|are|equals|gives|becomes|totals|it(?:'|’)s|that(?:'|’)s|est|es|ist|é|è)|=|是|为)"
                     r"[ \t]*(?=[*_$\\(\[]*[ \t]*-?\d|\$|\\)", re.IGNORECASE)
_VALUE = re.compile(r"\$([^$]+)\$|(?<![\w.,^_{])(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?)(?![\d/]|\.\d)")


def undecided_values(sentence: str, problem: str | None = None) -> list[str] | None:
    """The candidate answers of a sentence that weighs two values without choosing, else None.

    "I'd lean towards $13$, but it would be $11$ if ...", "So the answer is probably $7$, though $9$ is
    defensible", "Ich schwanke zwischen $50$ und $25$": two values or more that the problem does not
    give, a word of doubt (:data:`_DOUBT`), and no value stated outright after the last doubt ("Either
    27 or 32 seemed possible at first; after re-reading, it is 32." commits to 32; "the difference
    between 120 and 80 is 40" states 40 after its "between").

    Args:
        sentence: the sentence that closes a solution or holds its final answer statement.
        problem: the problem statement, whose own numbers are no candidates.

    Returns:
        The candidate values in order (``["13", "11"]``), or None.
    """
    values: list[str] = []
    seen: set = set()
    for m in _VALUE.finditer(sentence):
        v = (m.group(1) or m.group(2)).strip()
        key = plain_value(v)
        key = v.replace(" ", "") if key is None else key
        offered = re.search(r"(?:\b(?:becomes?|be|towards?|answer(?:[ \t]+\w+)?[ \t]+is|inclination[ \t]+is|guess[ \t]+is|it(?:'|’)?s|"
                            r"it[ \t]+is|either|with|between|and|dirais|zwischen|entre|e|und|et|y)"
                            r"|(?<![^\W\d_])" + _OR_WORDS + r"|[,(])[ \t*_$\\]*$", sentence[:m.start()], re.IGNORECASE)
        if key in seen or (m.group(2) and _in_problem(v, problem) and not offered):
            continue  # the problem's own number, unless offered as an answer ("the answer becomes 20")
        seen.add(key)
        values.append(v)
    if len(values) < 2:
        return None
    doubts = list(_DOUBT.finditer(sentence))
    if not doubts:
        return None
    last_doubt = doubts[-1].end()
    for stated in _STATES.finditer(sentence, last_doubt):
        # a statement in the doubt's own clause is part of it ("My inclination is $11$"); one in a later
        # clause without a condition settles it ("...; after re-reading, it is 32")
        parts = re.split(r"[;:—–]|\b(?:but|mas|pero|mais|aber|ma|но)\b|但是|但|しかし|하지만|लेकिन|لكن", sentence[last_doubt:stated.start()])
        if len(parts) > 1 and not re.search(r"\b(?:if|unless|would|could|might|may)\b", parts[-1], re.IGNORECASE):
            return None
    return values
