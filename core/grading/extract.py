"""Pull a final answer string out of a free-form solution.

Nothing here judges correctness; see :mod:`core.grading.equivalence` for that. An answer is taken
whole: a list stays a list (``69, 84``), an expression stays an expression (``2^{1009}``,
``3x+2``), a tuple or interval keeps its brackets, a time or ratio keeps its colon (``7:30``). Only
a quantity written in prose loses its unit (``25 cm^2`` -> ``25``), unless it is a unit of measure
written out (``1.25 kilometers``, ``2 hours 40 minutes``); a number in ``$...$`` keeps the unit
written after it (``$5$ m`` -> ``5 m``), and the grader decides about units, with the problem at
hand. The problem, when given, also tells which of a closing sentence's numbers answers its
question ("How many eggs ...?").
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from .forms import repeating_value
from .hedges import alternative_after, answer_sentence, conflicting, plain_value, undecided_values
from .intervals import as_difference
from .number_words import (cardinal, chinese_digits, digits_for_words, digits_in_document, document_language, language_of,
                           spelled_number)
from .question import counted_noun, counts, question_of, question_words, stem
from .units import DIMENSIONS, asked_unit, english_units, measure_after, unit_key

__all__ = ["last_boxed", "final_boxes", "gsm8k_hash_answer", "math_segments", "leading_expression",
           "extract_answer", "closing_answer", "normalise_unicode"]

# The negative lookahead keeps macros that merely start with these names
# (e.g. a user-defined ``\boxedanswer``) from being taken for a box.
_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")

# A number with thousands separators: groups of three digits after a first group of one to three,
# the whole run of digits and commas (``27,54,108,135`` has a group of two: it is a list, and so
# are all its commas; ``1,2`` is a list of solutions).
# "0,356" is no thousands (a leading zero), nor is a pair in brackets alone: "(12,102)" is an interval's ends
_THOUSANDS_BODY = r"[1-9]\d{0,2}(?:,\d{3})+(?!,?\d)"
_THOUSANDS_RUN = re.compile(rf"(?<!\d)(?<!\d,)(?:(?<![(\[]){_THOUSANDS_BODY}|{_THOUSANDS_BODY}(?![)\]]))")
# LaTeX's thousands separators in a number (``70{,}000``, ``10,\!080``) and a space between groups of
# three (``95 200``, the SI style; NFKC made thin and no-break spaces plain), read as a plain comma
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|,\\!)[ ]?(?=\d{3}(?!\d))")
_SPACED_THOUSANDS = re.compile(r"(?<![\d,.])\d{1,3}(?: \d{3})+(?![\d,]| \d)")

_ANSWER_PHRASE = re.compile(r"(?:final\s+answer|the\s+(?:(?:correct|right|actual|true|real|corrected|revised|final)\s+)?answer"
                            r"|the\s+(?:correct|right|best)\s+(?:choice|option))"
                            r"\s*(?:is\b|:)\s*:?"
                            # a small model's bare last line: "answer is sixty-six"
                            r"|(?m:^[ \t]*answer[ \t]+is\b)"
                            r"|התשובה(?:[ \t]+(?:הנכונה|הסופית))?[ \t]+(?:היא|הוא)"
                            # the same in French, Spanish, Portuguese, German, Italian, Russian and Chinese
                            r"|\b(?:la\s+(?:bonne\s+)?réponse(?:\s+finale)?\s+est|la\s+respuesta(?:\s+(?:final|correcta))?\s+es"
                            r"|a\s+resposta(?:\s+(?:final|correta))?\s+é|die\s+(?:richtige\s+|endgültige\s+)?antwort\s+(?:ist|lautet)"
                            r"|ist\s+die\s+(?:richtige\s+)?antwort(?:\s+eigentlich)?"
                            r"|la\s+risposta(?:\s+(?:finale|corretta))?\s+è)(?![\w])\s*:?"
                            r"|(?:(?<![\w])(?:правильный\s+|окончательный\s+)?ответ(?:\s*[:：—]|\s+(?=[-\d])))|答案(?:其实|实际上|应该|可能)?(?:是|为)[:：]?"
                            # ... in Japanese, Korean and Arabic: "答えは 157 です", "정답은 42입니다", "الإجابة هي 42"
                            r"|(?:正しい|最終的な)?答えは|(?:최종[ \t]*)?(?:정답|답)은|(?:ال)?(?:إجابة|جواب)(?:[ \t]+(?:ال)?(?:نهائية|صحيحة))?"
                            r"(?:[ \t]+(?:هي|هو)|(?=[ \t]+إما))"
                            # "So my answer is 22", Turkish, Vietnamese and Indonesian: "cevap 93001 olur", "Đáp án là 9"
                            r"|\b(?:my|our)[ \t]+(?:final[ \t]+)?answer[ \t]+is\b|\bcevap(?:ımız)?[ \t]+(?=\d)|"
                            r"đáp[ \t]+(?:án|số)(?:[ \t]+cuối[ \t]+cùng)?[ \t]+là|jawaban(?:nya)?(?:[ \t]+akhir)?[ \t]+adalah"
                            # "final answer:" in a sentence, or a bold label in one: "... une erreur. **Réponse finale : 6,277**"
                            r"|\b(?:réponse|respuesta|resposta|risposta)[ \t]+finale?[ \t]*[:：]|\bendgültige[ \t]+antwort[ \t]*[:：]"
                            r"|(?<=\*\*)(?:réponse|respuesta|resposta|risposta|antwort|ответ|答案|答え|정답|उत्तर|الإجابة)[ \t]*[:：]",
                            re.IGNORECASE)
# A labelled line: "Answer: 12", "**Final Answer:** 12", "#### Answer: 12", in any case, and the label in
# French, Spanish, Portuguese, German, Italian, Russian and Chinese ("Réponse : 12", "答案：12"); or a heading
# "**Final Answer**" / "### Final Answer" alone on its line, the answer on the lines after it.
_ANSWER_LABEL = re.compile(r"^[ \t>#*_-]*(?:(?:final|correct(?:ed)?|revised|updated)[ \t_]+)?answer[ \t*_]*[:：]"
                           # a correction's label after a sentence on its line: "... doesn't count. Corrected answer: 39."
                           r"|(?<=[.!?)][ \t])[ \t*_]*(?:corrected|revised|updated|new|actual)[ \t_]+answer[ \t*_]*[:：]"
                           r"|^[ \t{,]*[\"'](?:final[ \t_]?)?answer[\"'][ \t]*:"
                           r"|^[ \t>#*_-]*(?:(?:réponse|respuesta|resposta|risposta)(?:[ \t]+finale?)?|"
                           r"(?:(?:endgültige|finale)[ \t]+)?antwort|(?:end)?ergebnis|résultat[ \t]+final|resultado[ \t]+final|(?:окончательный[ \t]+|итоговый[ \t]+)?ответ|(?:最终)?答案|"
                           r"(?:最終的な)?答え|解答|(?:최종[ \t]*)?(?:정답|답)|(?:अंतिम[ \t]+)?उत्तर|"
                           r"(?:ال)?(?:إجابة|جواب)(?:[ \t]+(?:ال)?نهائية)?|(?:nihai[ \t]+)?(?:cevap|yanıt)|sonuç|"
                           r"đáp[ \t]+(?:án|số)(?:[ \t]+cuối[ \t]+cùng)?|kết[ \t]+quả|jawaban(?:[ \t]+akhir)?|hasil[ \t]+akhir)[ \t*_]*[:：]"
                           r"|^[ \t#*_]*(?:final[ \t]+)?answer[ \t*_]*$", re.IGNORECASE | re.MULTILINE)
# A labelled line whose label holds the word for "answer" (or "result") of a language the grader reads, among
# up to six words: "Poprawiona odpowiedź: 22", "Gecorrigeerd antwoord: 16", "修正后的答案：-16", "คำตอบสุดท้าย: 480"
_ANSWER_WORD = (r"(?:\b(?:answer|réponse|respuesta|resposta|risposta|antwort|antwoord|odpowied[zź]|odp|svar(?:et)?|cevab?ı?|"
                r"yanıt|jawaban(?:nya)?|trả[ \t]+lời|đáp[ \t]+(?:án|số)|kết[ \t]+quả|ответ|відповідь|wynik|resultado|"
                r"résultat|ergebnis|endergebnis|eindantwoord|slutsvar|sonuç|hasil|vastaus|válasz|odpověď|תשובה)\b|ค(?:ำ|\u0e4d\u0e32)ตอบ|答案|答え|解答|정답|उत्तर|"
                r"الإجابة|الجواب|إجابة)")
_NAMED_LABEL = re.compile(r"^[ \t>#*_-]*(?=[^\n:：\d=]{0,60}?" + _ANSWER_WORD + r")(?:[^\s:：\d=*_()\[\]]+[ \t.]*){1,6}?[ \t*_]*[:：]"
                          r"(?=[^\n`]*\d)", re.IGNORECASE | re.MULTILINE)
# ... and a sentence that names it: "Poprawna odpowiedź to 2520.", "Jawaban yang benar adalah 147."
_NAMED_PHRASE = re.compile(_ANSWER_WORD + r"(?:[ \t]+[^\s\d$]+){0,3}?[ \t]+(?:to|adalah|jest|är|er|on|olur|lautet|là|är)"
                           r"[ \t]*:?(?=[ \t*_]*(?:\$|-?\d))", re.IGNORECASE)
# A GSM8K answer line: ``#### 18``; ``#### Step 1``, ``#### 1. The area`` and ``#### (a) Part one`` are
# Markdown headings (a word follows, or a numbered word), no answer.
_HASH_LINE = re.compile(r"####(?![ \t]*(?:[A-Za-z]{2}|\(?[A-Za-z0-9]{1,3}[.):][ \t]+[A-Za-z]))[ \t]*(\S[^\n]*)$",
                        re.MULTILINE)

# A line that opens a new problem, as in the few-shot prompts models continue after their answer
_NEXT_QUESTION = re.compile(r"^[ \t>*_#]*(?:question|q|problem|user|human|instruction|input)(?:[ \t]*\d+)?[ \t*_]*[:：.]"
                            r"(?:[ \t*_]*\S|[ \t*_]*\n[ \t]*\S)"
                            # a numbered heading of its own: "### Problem 2"
                            r"|^[ \t]*(?:#{1,6}[ \t]*|\*\*)(?:question|problem|exercise)[ \t]+\d+[ \t*_]*\n",
                            re.IGNORECASE | re.MULTILINE)
# A line that opens an exercise or an offer of the model's own after its solution: "Follow-up question:",
# "Try it yourself: ...", "Related practice: ...", "Next question: ...", "Would you like me to ..."
_FOLLOW_UP = re.compile(r"^[ \t>*_#-]*(?:(?:next|new|another|related|similar|bonus|extra|follow[- ]?up)"
                        r"(?:[ \t]+(?:question|problem|practice|exercise|example|challenge))?[ \t*_]*[:：]"
                        r"|(?:try[ \t]+it[ \t]+yourself|practice(?:[ \t]+(?:question|problem))?|exercise|challenge)"
                        r"[ \t*_]*[:：!]"
                        r"|(?:would|do)[ \t]+you[ \t]+(?:like|want)\b|shall[ \t]+i\b|want[ \t]+me[ \t]+to\b"
                        r"|is[ \t]+there[ \t]+anything[ \t]+else\b|anything[ \t]+else\b"
                        r"|(?:related|bonus|extra|fun|similar)[ \t]+\w+(?:[ \t]+\w+){0,4}[ \t*_]*[:：])"
                        # "Here's a similar problem for you to practice:"
                        r"|^[ \t*_]*(?:here(?:'|’)s|here[ \t]+is)[ \t]+(?:a|another|one[ \t]+more)[ \t]+(?:similar|related|practice|new|bonus|"
                        r"follow[- ]?up)\b[^\n]*[:：]"
                        # a heading of its own: "### Practice Problem", "**Bonus question**"
                        r"|^[ \t]*(?:#{1,6}[ \t]*|\*\*)(?:practice|bonus|extra|similar|related|follow[- ]?up|next|new|another)"
                        r"(?:[ \t]+\w+){0,2}[ \t*_]*$",
                        re.IGNORECASE | re.MULTILINE)
# The end-of-text tokens of common chat and base models, written out when a model runs past its end
_END_TOKEN = re.compile(r"<\|(?:endoftext|im_end|eot_id|end_of_text|end)\|>|</s>|<end_of_turn>|<｜end▁of▁sentence｜>")
# A number as written in prose: digits (thousands groups kept together, see _THOUSANDS_RUN), a
# decimal part, an exponent (``4e-3``).
_NUMBER = re.compile(r"(?:(?<![(\[])[1-9]\d{0,2}(?:,\d{3})+(?!,?\d)|[1-9]\d{0,2}(?:,\d{3})+(?!,?\d)(?![)\]])|\d+)(?:\.\d+)?(?:[eE][-+]?\d+(?![A-Za-z]))?|\.\d+")
_WORD = re.compile(r"[A-Za-z]+")
_OPERATORS = "+-*/^×÷·−<>≤≥≠±∓∪∩"
_SIGNS = "-+−±∓"
_SYMBOLS = "π∞αβγδεθλμρστφψω"  # operands written as one character: constants, Greek variables
# "and" / "or" between two numbers of a list: "2 and 5", "1, 3, and 5", "24 or 32" (a hedge names both)
# "or" / "and" before another inequality of one variable: "x < 1 or x > 3", "x > -2 and x ≠ 5"
_OR_RELATION = re.compile(r"(?:or|and)[ \t]+(?=(?:[A-Za-z]|[αβγθλμ])[ \t]*(?:[<>≤≥≠]))")
_AND_ITEM = re.compile(r"(?:and|or)[ \t]+(?=[-+−]?(?:\\?\$)?\d)")
# A unit after a number in math: a few words, then the end of the sentence ("$5$ m.", "$12$ square feet")
_UNIT_AFTER = re.compile(r"[ \t]+([A-Za-z]+(?:\^\{?\d\}?)?(?:(?:[ \t]+|[ \t]*/[ \t]*)[A-Za-z]+(?:\^\{?\d\}?)?){0,2})"
                         r"[ \t]*(?=[.,;!]?[ \t]*(?:$|\n)|[.,;!][ \t])")
# Words that end a sentence's math without being its unit ("$5$ is the answer", "$3$ times as much").
_NOT_UNITS = frozenset("""is are was were be been being the a an and or but as because since so which that this these
    those for of to in on at by with then thus hence here there it its we you they he she i each total altogether only
    exactly approximately about left remaining more less than times if when where ways""".split())
_PLAIN_NUMBER = re.compile(r"^[-−]?(?:\d[\d,]*(?:\.\d+)?|\.\d+|\\[dt]?frac\{\d+\}\{\d+\})$")

# Unicode forms models write (see normalise_unicode)
_SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁽⁾ⁿ", "0123456789+-()n"))
_SUPERSCRIPT_RUN = re.compile("[" + "".join(_SUPERSCRIPTS) + "]+")
_SUBSCRIPT_RUN = re.compile("[₀-₉]+")
_VULGAR_FRACTION = re.compile(r"(\d*)([\u00bc-\u00be\u2150-\u215e])")
_ASCII_LE = re.compile(r"(?<![<=])<=(?![>=])")
_ASCII_GE = re.compile(r"(?<![<=>-])>=(?!=)")
_NATIVE_DIGIT = re.compile(r"(?![0-9])\d")  # a decimal digit of any script but ASCII's
_INVISIBLE = re.compile("[\u00ad\u200b-\u200d\u2060\ufeff]")
# a hyphen or en dash written as a minus sign: before a number, after no term ("= –128"; "3–5" is a range)
_DASH_MINUS = re.compile(r"(?<![\w)\]}.])[\u2010-\u2013](?=\d)")
_OPEN, _CLOSE = "([{", ")]}"
# functions written out in prose, which apply to the operand after them
_FUNCTIONS = frozenset("sin cos tan cot sec csc sinh cosh tanh arcsin arccos arctan log ln exp sqrt".split())
# what may follow such a name before its operand: a base, a power ("log_2 8", "sin^2(x)"), then a space or "("
_FUNCTION_TAIL = re.compile(r"(?P<tail>(?:_(?:\{\w+\}|\w))?(?:\^(?:\{-?\w+\}|\w))?)[ (]")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
# Between two math segments that together are one answer: "$69$ and $84$", "$1$, $3$ or $5$".
# ... "and" and "or" in the grader's other languages too: "De wortels zijn $7$, $5$ en $3$.", "$x=1$ หรือ $x=5$"
_SEGMENT_JOINER = re.compile(r"^\s*(?:,|,?\s*(?:and|or|en|und|et|y|e|i|и|và|dan|ve|oraz|和|と|及|или|або|oder|ou|o|hoặc|atau|veya|"
                             r"lub|albo|nebo|eller|vagy|หรือ|또는|または|或|أو|یا|या|অথবা))\s*$", re.IGNORECASE)


def normalise_unicode(text: str) -> str:
    """The text with the Unicode forms models write mapped to plain ones, before anything reads it.

    NFKC (full-width digits, letters and brackets ``（３，５）`` -> ``(3,5)``, ``－`` -> ``-``, non-breaking
    and other spaces -> a space, ``：`` -> ``:``), after superscripts became powers (``x²`` -> ``x^{2}``,
    which NFKC would make ``x2``), subscripts as indices (a base: ``2516₈`` -> ``2516_{8}``) and vulgar fractions (``½`` -> ``1/2``, ``3½`` -> ``(3+1/2)``);
    invisible characters go and the ideographic full stop is a full stop; a hyphen or en dash before a
    number where no term precedes it is a minus (``= –128``; the range ``3–5`` stays); ``∴`` is "Therefore,".
    The minus sign U+2212 and math symbols (``≤``, ``π``, ``√``) stay: extraction reads them as they are
    and grading maps them to LaTeX.
    """
    if text.isascii():
        return text
    text = _INVISIBLE.sub("", text)
    text = _SUPERSCRIPT_RUN.sub(lambda m: "^{" + "".join(_SUPERSCRIPTS[c] for c in m.group(0)) + "}", text)
    text = _SUBSCRIPT_RUN.sub(lambda m: "_{" + unicodedata.normalize("NFKC", m.group(0)) + "}", text)

    def fraction(m: re.Match) -> str:
        num, _, den = unicodedata.normalize("NFKC", m.group(2)).partition("\u2044")
        return f"({m.group(1)}+{num}/{den})" if m.group(1) else f"{num}/{den}"

    text = _VULGAR_FRACTION.sub(fraction, text)
    text = unicodedata.normalize("NFKC", text)
    # digits of other scripts (Devanagari २९, Arabic-Indic ٢٩, Bengali ...) and the Arabic separators as ASCII
    text = _NATIVE_DIGIT.sub(lambda m: str(unicodedata.decimal(m.group(0))), text)
    text = text.replace("\u066b", ".").replace("\u066c", ",").replace("\u066a", "%")
    text = _DASH_MINUS.sub("-", text)
    text = re.sub(r"(?<=[\u0590-\u06ff])-(?=\d)", " ", text)  # "ב-3 משאיות": a prefix's hyphen, no minus
    return text.replace("\u2044", "/").replace("。", ". ").replace("、", ", ").replace("∴", "Therefore, ")


def ascii_relations(text: str) -> str:
    """``<=`` / ``>=`` as the signs ``≤`` / ``≥`` they stand for (``x <= 1 or x > 3``); ``<=>`` and ``=>`` stay."""
    return _ASCII_GE.sub("≥", _ASCII_LE.sub("≤", text))


def drop_thousands_separators(text: str) -> str:
    """``1,000`` -> ``1000`` wherever a run of digits and commas is one number (see ``_THOUSANDS_RUN``)."""
    return _THOUSANDS_RUN.sub(lambda m: m.group(0).replace(",", ""), text)


def _braced_group(text: str, start: int) -> str | None:
    """Return the content of the brace group opening at ``text[start]``.

    Escaped braces (``\\{``) are literal characters in LaTeX and must not
    count towards the balance; ``\\\\`` is skipped as a unit so that
    ``\\\\{`` is read as a line break followed by a real group.
    """
    end = _braced_end(text, start)
    return None if end is None else text[start + 1:end - 1]


def _braced_end(text: str, start: int) -> int | None:
    """Index just past the brace group opening at ``text[start]``, or None if it never closes."""
    depth = 0
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


@dataclass
class _Box:
    start: int  # index of the backslash
    end: int  # index just past the box
    content: str | None  # None: the braces never close


def _boxes(text: str) -> list[_Box]:
    """Every ``\\boxed``/``\\fbox`` in ``text``, boxes nested in another box left out."""
    out: list[_Box] = []
    n = len(text)
    for m in _BOX_CMD.finditer(text):
        if out and out[-1].content is not None and m.start() < out[-1].end:
            continue  # inside the previous box
        pos = m.end()
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n:
            out.append(_Box(m.start(), n, None))
            continue
        if text[pos] == "{":
            end = _braced_end(text, pos)
            if end is None:
                out.append(_Box(m.start(), n, None))
            else:
                out.append(_Box(m.start(), end, text[pos + 1:end - 1].strip()))
            continue
        tok = re.match(r"[^\s$]+", text[pos:])
        token = tok.group(0).rstrip(".,;") if tok else ""
        out.append(_Box(m.start(), pos + (tok.end() if tok else 0), token or None))
    return out


def last_boxed(text: str) -> str | None:
    """Return the content of the last ``\\boxed`` / ``\\fbox`` in ``text``.

    Handles nested braces (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``)
    and the brace-less form ``\\boxed 5`` (content runs to the next
    whitespace or ``$``, trailing ``.,;`` dropped).

    Args:
        text: Solution text, typically model output or a MATH reference
            solution.

    Returns:
        The content of the last box, stripped of surrounding whitespace (may
        be ``""`` for ``\\boxed{}``), or None if there is no box or the last
        box's braces never close (e.g. a generation cut off mid-answer).

    Raises:
        Nothing.
    """
    if not text:
        return None
    boxes = _boxes(text)
    return boxes[-1].content if boxes else None


_LIST_ITEM = re.compile(r"[ \t]*(?:[-*•+]|\d{1,2}[.)])[ \t]+")


def final_boxes(text: str) -> str | None:
    """The answer the boxes of a solution give: the last box, or the list of boxes on its line.

    A two-answer problem is often closed with ``\\boxed{69}`` and ``\\boxed{84}`` on one line; keeping
    only the last would drop an answer. So when the line of the last box holds several boxes, the
    answer is their contents joined by ``", "`` (``"69, 84"``); so is a bulleted or numbered list
    of cases closing the text with a box in each item. Boxes on earlier lines (intermediate
    results) are ignored.

    Args:
        text: a solution.

    Returns:
        The answer, or None when there is no box, the last box is empty or its braces never close.

    Raises:
        Nothing.
    """
    if not text:
        return None
    boxes = _boxes(text)
    if not boxes or not boxes[-1].content:
        return None
    line_start = text.rfind("\n", 0, boxes[-1].start) + 1
    # a list of cases, one box each, closing the text ("- $a=0$ gives $x=\\boxed{3}$" ...): all its boxes
    while _LIST_ITEM.match(text, line_start) and line_start > 0:
        previous = text.rfind("\n", 0, line_start - 1) + 1
        if not (_LIST_ITEM.match(text, previous) and any(previous <= b.start < line_start - 1 for b in boxes)):
            break
        line_start = previous
    # on one line, the boxes before a sentence's end are intermediate: "gives $\\boxed{6}$. Then $\\boxed{7}$."
    for previous, box in zip(reversed(boxes[:-1]), reversed(boxes)):
        if previous.start < line_start:
            break
        if re.search(r"[.!?;:](?:\s|\$)", text[previous.end:box.start]) and not _LIST_ITEM.match(text, line_start):
            line_start = box.start
            break
    on_line = [b.content for b in boxes if b.start >= line_start and b.content]
    if len(set(on_line)) == 1:
        return on_line[0]  # the same answer boxed twice: "gives $\\boxed{3}$ ways. So the answer is $\\boxed{3}$."
    return ", ".join(on_line)


def gsm8k_hash_answer(text: str) -> str | None:
    """Return the GSM8K-style answer written after the last ``####``.

    Args:
        text: Solution text containing a line such as ``#### 2,125``.

    Returns:
        The rest of that line, stripped, with thousands separators removed
        (``2,125`` -> ``2125``) and a trailing period dropped; None if there
        is no ``####`` or nothing follows it on its line.

    Raises:
        Nothing.
    """
    if not text:
        return None
    idx = text.rfind("####")
    if idx < 0:
        return None
    ans = text[idx + 4 :].split("\n", 1)[0].strip()
    ans = drop_thousands_separators(ans)
    ans = ans.rstrip(".").strip()
    return ans or None


_DISPLAY_ENV = re.compile(r"\\begin\{((?:align|equation|gather|multline|eqnarray)\*?)\}")


def math_segments(text: str, start: int = 0) -> list[tuple[int, int, str]]:
    """Inline and display math in ``text`` from ``start``: ``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``,
    and display environments (``\\begin{align*} ... \\end{align*}``, ``equation``, ``gather``: their rows
    joined, alignment marks dropped).

    An escaped dollar (``\\$18.90``, currency) is text inside or outside math, never a delimiter; so is
    an unescaped one that can only be money (:func:`_currency_sign`: ``$80,000 + $50,000``).

    Returns:
        ``(start, end, content)`` per closed segment, in order; ``content`` is stripped. A segment
        that never closes is left out.
    """
    out: list[tuple[int, int, str]] = []
    n = len(text)
    i = start
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in "([":
            close = "\\)" if text[i + 1] == "(" else "\\]"
            end = _find_unescaped(text, close, i + 2)
            if end < 0:
                i += 2
                continue
            out.append((i, end + 2, text[i + 2:end].strip()))
            i = end + 2
            continue
        env = _DISPLAY_ENV.match(text, i) if ch == "\\" else None
        if env:  # \begin{align*} ... \end{align*}: display math, its rows one chain (a &= b \\ &= c is a = b = c)
            close = text.find("\\end{" + env.group(1) + "}", env.end())
            if close < 0:
                i = env.end()
                continue
            rows = re.sub(r"\\\\(?:\[[^\]]*\])?", " ", text[env.end():close]).replace("&", "")
            out.append((i, close + len(env.group(1)) + 6, " ".join(rows.split()).rstrip(".,")))
            i = close + len(env.group(1)) + 6
            continue
        if ch == "\\":
            i += 2
            continue
        if ch == "$":
            delim = "$$" if text.startswith("$$", i) else "$"
            end = _find_unescaped(text, delim, i + len(delim))
            if end < 0:
                return out
            if delim == "$" and _currency_sign(text, i, end):
                i += 1  # a dollar sign: the next "$" may open math
                continue
            out.append((i, end + len(delim), text[i + len(delim):end].strip()))
            i = end + len(delim)
            continue
        i += 1
    return out


def _currency_sign(text: str, start: int, end: int) -> bool:
    """Whether the ``$`` at ``start`` is a dollar sign rather than the math its ``$`` at ``end`` would close.

    TeX's inline math never holds a paragraph break, and a model's math does not end in a space:
    ``$80,000 + $50,000`` and ``The answer is $20.`` followed by a blank line and ``... for $4 each``
    are money. So a ``$`` before a digit whose closing ``$`` follows a space or an opening bracket
    (``$14,400 a year ($1,200 a month)``), or lies past a blank line, is currency.
    """
    if _BLANK_LINE.search(text, start, end):
        return True
    return start + 1 < len(text) and text[start + 1].isdigit() and text[end - 1] in " \t\n(["


def _find_unescaped(text: str, delim: str, start: int) -> int:
    """Index of the first ``delim`` at or after ``start`` that is not an escaped character, or -1."""
    i, n = start, len(text)
    while i < n:
        if text.startswith(delim, i):
            return i
        i += 2 if text[i] == "\\" else 1
    return -1


def leading_expression(text: str) -> str | None:
    """The mathematical expression that ``text`` (prose) starts with, whole; None if it starts otherwise.

    Read token by token: numbers (``12,345,678`` is one number and loses its separators, while
    ``27,54,108,135`` is a list; ``4e-3`` is one number), single-letter variables, ``π`` and ``∞``,
    operators and relations (``x ≥ 2``, ``0 < t ≤ 4``), ``√``, brackets, a colon between numbers (a
    time or ratio: ``7:30``), and commas or "and" between items (a list or tuple stays one: ``1, 3,
    5``, ``(2,4)``, ``2 and 5``). Implicit products need no space (``3x+2``, ``2(n-1)``, ``3√2``).
    The expression ends where prose begins: a word of two or more letters, or any letter after a
    space that follows a complete term (a unit: ``25 cm^2`` -> ``25``, ``5 m/s^2`` -> ``5``).

    Args:
        text: prose that may start with an expression, e.g. the rest of "The answer is ...".

    Returns:
        The expression as written (spacing kept, thousands separators removed), or None when
        ``text`` does not start with one or its brackets do not close.
    """
    s = text.strip()
    n = len(s)
    i = 0
    expect_operand = True  # at the start, after an operator, an opening bracket or a comma
    depth = 0
    end = 0  # end of the last complete term
    last_number = False  # the last complete term is a number (a colon may follow: 7:30)
    while i < n:
        j = i
        while j < n and s[j] == " ":
            j += 1
        if j >= n:
            break
        spaced, ch = j > i, s[j]
        word = _WORD.match(s, j)
        # one letter, not a word elided before another ("l'iPhone", "d'un": French prose)
        single_letter = word is not None and word.end() - j == 1 and not re.match(r"['’][A-Za-z]", s[j + 1:j + 3]) \
            and not (word.end() < n and s[word.end()].isalpha())  # "vậy": a word of Vietnamese, not the letter v
        if expect_operand:
            number = _NUMBER.match(s, j)
            if number:
                i, expect_operand, end, last_number = number.end(), False, number.end(), True
            elif single_letter or ch in _SYMBOLS:
                i, expect_operand, end, last_number = j + 1, False, j + 1, False
            elif ch in _OPEN:
                depth, i = depth + 1, j + 1
            elif ch in _SIGNS or ch == "√":
                i = j + 1
            elif word and word.group(0) in _FUNCTIONS and _FUNCTION_TAIL.match(s, word.end()):
                # a function written out, with its base or power: "cos x / sin x", "log_2 8", "sin^2(x)"
                i = _FUNCTION_TAIL.match(s, word.end()).end("tail")
            elif re.match(r"\\?\$\d", s[j:]):  # a dollar sign before the number: "$24 or $32"
                i = j + (2 if ch == "\\" else 1)
            elif spaced and depth == 0 and _AND_ITEM.match(s, j) and s[:i].rstrip().endswith(","):
                i = _AND_ITEM.match(s, j).end()  # "1, 3, and 5"
            else:
                break
        elif ch in _OPERATORS:
            i, expect_operand = j + 1 + (ch in "<>" and s[j + 1:j + 2] == "="), True  # "<=" is one sign
        elif spaced and depth == 0 and _OR_RELATION.match(s, j):  # "x < 1 or x > 3": one answer
            i, expect_operand = _OR_RELATION.match(s, j).end(), True
        elif ch == "%" and last_number and not spaced:  # a percentage is one term: "8% or 20%"
            i = end = j + 1
        elif ch == "_" and last_number and not spaced and re.match(r"_(?:\{\d+\}|\d+)", s[j:]):
            i = end = j + re.match(r"_(?:\{\d+\}|\d+)", s[j:]).end()  # a number's base: 2516_8, 2516_{8}
        elif ch == ":" and last_number and re.match(r":[ ]*\d", s[j:]):
            i, expect_operand = j + 1, True
        elif spaced and last_number and _mixed_fraction(s, end, j):  # a mixed number: "137 1/2 miles"
            i = end = _mixed_fraction(s, end, j)
            last_number = False
        elif ch in _CLOSE and depth > 0:
            depth, i, end, last_number = depth - 1, j + 1, j + 1, False
        elif ch == ",":
            i, expect_operand = j + 1, True
        elif spaced and depth == 0 and _AND_ITEM.match(s, j):  # "2 and 5"
            i, expect_operand = _AND_ITEM.match(s, j).end(), True
        elif not spaced and (single_letter or ch in _SYMBOLS):  # implicit product: 3x, 2n, 2π
            i, end, last_number = j + 1, j + 1, False
        elif not spaced and (ch in _OPEN or ch == "√"):  # implicit product: 2(n-1), 3√2
            depth, i, expect_operand = depth + (ch in _OPEN), j + 1, True
        else:
            break
    if depth or not end:
        return None
    if s[:end] == "a" and re.match(r" +[A-Za-z]{2}", s[end:]):
        return None  # the article: "a multiple of 3"
    # a bracket left open after the last complete term (an unfinished group) makes no expression
    expr = s[:end]
    if expr.count("(") + expr.count("[") + expr.count("{") != expr.count(")") + expr.count("]") + expr.count("}"):
        return None
    return drop_thousands_separators(expr).strip() or None


# a multiple-choice letter in brackets, alone or before its option's text
_CHOICE = re.compile(r"[*_]*(?:\\?\(\s*([A-E])\s*\\?\)|([A-E])(?=[ \t]+\()|([A-E])\))[*_]*(?=[\s.,;:]|$)")


# a number with a scale word ("$1.45 million", "70 thousand"), a temperature "below zero", an interval
# in words ("all real numbers greater than 2")
_SCALED = re.compile(r"(?<![\d.,])(\d{1,3}(?:,\d{3})*(?:\.\d+)?|\d+(?:\.\d+)?)(?:[ \t]*(thousand|million|billion|trillion)\b"
                     r"|(?<=\d)(K|M|B|bn)(?=[\s.,;!?*)]|$))", re.IGNORECASE)  # "$70k." yes, "$2k+2$" no
_SCALES = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12, "k": 3, "m": 6, "b": 9, "bn": 9}
_BELOW_ZERO = re.compile(r"(?<![\d.-])(\d+(?:\.\d+)?)((?:[ \t]*(?:°|degrees?)(?:[ \t]*(?:C|F|Celsius|Fahrenheit))?)?)"
                         r"[ \t]+below[ \t]+zero\b", re.IGNORECASE)
_REAL_INTERVAL = re.compile(r"\ball[ \t]+real[ \t]+numbers[ \t]+(?:[a-z][ \t]+)?(?:that[ \t]+are[ \t]+)?"
                            r"(greater|more|less|smaller)[ \t]+than[ \t]+(or[ \t]+equal[ \t]+to[ \t]+)?"
                            r"(?:\$[ \t]*(-?\d[\d.,]*)[ \t]*\$|(?=-?\d))", re.IGNORECASE)  # the number in math or not
# "all x with x > 5", "all y such that y ≤ 0": the inequality is the set
_ALL_SUCH = re.compile(r"\ball[ \t]+(?:real[ \t]+(?:numbers[ \t]+)?)?([a-z])[ \t]+(?:with|such[ \t]+that|where|for[ \t]+which)"
                       r"[ \t]+(?=\1[ \t]*(?:[<>≤≥]|\\[lg]e))", re.IGNORECASE)


# a number written the continental way: dots or spaces group its thousands, a comma is its decimal point
_GROUPED_DECIMAL = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?:[. \u202f]\d{3})+,\d{1,2}(?![\d.,]*\d)")
# (never the mantissa of scientific notation: "1.736 × 10³")
_DOT_THOUSANDS = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?:\.\d{3})+(?![\d.,]*\d)(?![ \t]*(?:\\times|\\cdot|×|·|\*)[ \t]*10)")
# an amount of money with a decimal comma: "140,00 $", "21,00 reais", "$ 90,00"
_MONEY_DECIMAL = re.compile(r"(?<![\d.,])(\d+),(\d{2})(?=[ \t]*(?:\$|€|£|¥|₹|dollars?|d[óo]lares|euros?|reais|pesos|"
                            r"rupees?|USD|EUR|ドル|美元|元|달러|원|रुपये|डॉलर|دولار|руб|долл))"
                            r"|(?<=[$€£][ \t])(\d+),(\d{2})(?![\d,])|(?<=[$€£])(\d+),(\d{2})(?![\d,])")


# words of languages that group thousands with dots and have no number-word reader here (tr, vi, id)
_DOT_GROUPING = re.compile(r"\b(?:cevap|sonuç|adım|olarak|için|đáp|bước|là|của|jawaban|langkah|adalah|yang|dengan|"
                           r"kita|maka|jadi|totalnya|hitung)\b", re.IGNORECASE)


# a check in brackets after the answer: "(check: 3 + 2 = 5 ✓)", "(verification: 12 / 4 = 3)"
_BRACKETED_CHECK = re.compile(r"[ \t]*\((?:quick[ \t]+)?(?:check(?:ing)?|verif(?:y|ying|ication)|sanity[ \t]+check)\b[^()\n]*\)",
                              re.IGNORECASE)


# the languages in which a dot groups thousands ("1.128"), of those language_of tells
_DOT_LANGUAGES = ("es", "pt", "de", "it", "nl", "id", "tr", "vi")


def _groups_by_dots(text: str) -> bool:
    """Whether a text not written in English groups thousands by dots: it has letters of another script or
    accents ("Còn lại", "öder") or a decimal comma ("1000 × 1,5"), every dotted number has groups of three
    digits, and two of them do ("250.000 ... 40.000") or one does beside a decimal comma."""
    dotted = re.findall(r"(?<![\d.,])\d+(?:\.\d+)+(?![\d.,]*\d)", text)
    grouped = [d for d in dotted if _DOT_THOUSANDS.fullmatch(d)]
    comma = re.search(r"(?<![\d.,])\d+,\d{1,2}(?![\d,])", text)
    foreign = any(ch.isalpha() and ord(ch) > 127 for ch in text)
    return bool(grouped) and len(grouped) == len(dotted) and (foreign or comma) and (len(set(grouped)) >= 2 or comma)


def _european_numbers(text: str) -> str:
    """Numbers in the continental form as plain ones: ``1.248,00`` / ``1 100,00`` -> ``1248.00`` /
    ``1100.00`` (thousands grouped, a decimal comma: never English), ``140,00 $`` -> ``140.00 $`` (two
    decimals of money), and in a text written in Spanish, Portuguese, German, Italian, Dutch, Indonesian,
    Turkish or Vietnamese ``1.128`` -> ``1128`` (a dot groups thousands there;
    :func:`core.grading.number_words.language_of`)."""
    text = _GROUPED_DECIMAL.sub(lambda m: re.sub(r"[. \u202f]", "", m.group(0)).replace(",", "."), text)
    text = _MONEY_DECIMAL.sub(lambda m: ".".join(g for g in m.groups() if g is not None), text)
    if re.search(r"\d\.\d{3}(?!\d)", text) and (language_of(text) in _DOT_LANGUAGES or _DOT_GROUPING.search(text)
                                               or _groups_by_dots(text)):
        text = _DOT_THOUSANDS.sub(lambda m: m.group(0).replace(".", ""), text)
    return text


def _in_plain_numbers(text: str) -> str:
    """Numbers written with words as the numbers they are: ``$1.45 million`` -> ``$1450000``, ``10 degrees
    below zero`` -> ``-10 degrees``, ``all real numbers greater than 2`` -> ``x > 2``, ``all x with x > 5``
    -> ``x > 5``."""
    def scaled(m: re.Match) -> str:
        if m.group(3) and not m.string[:m.start()].endswith("$"):
            return m.group(0)  # "140K" is money only after a dollar sign ("$140K", "$70k"); "5K" may be kelvin
        value = Decimal(m.group(1).replace(",", "")).scaleb(_SCALES[(m.group(2) or m.group(3)).lower()])
        return format(value.normalize(), "f")

    def interval(m: re.Match) -> str:
        above = m.group(1).lower() in ("greater", "more")
        return "x " + ({(True, False): ">", (True, True): "≥", (False, False): "<", (False, True): "≤"}
                       [above, bool(m.group(2))]) + " " + (m.group(3) or "")

    text = _SCALED.sub(scaled, text)
    text = _BELOW_ZERO.sub(lambda m: f"-{m.group(1)}{m.group(2)}", text)
    return _ALL_SUCH.sub("", _REAL_INTERVAL.sub(interval, text))


def _mixed_fraction(s: str, number_end: int, j: int) -> int | None:
    """End of the proper fraction at ``s[j]`` that makes the whole number ending at ``number_end`` a
    mixed number (``1 4/5``), else None."""
    m = re.match(r"(\d+)/(\d+)(?![\d/.])", s[j:])
    if m and int(m.group(1)) < int(m.group(2)) and re.search(r"(?<![\d.,])\d+$", s[:number_end]):
        return j + m.end()
    return None


# How an answer was read after "the answer is": its math, the expression it starts with, an expression
# after some prose ("is not 7", "approximately 18"), or plain words.
_MATH, _EXPRESSION, _LATER_EXPRESSION, _WORDS = "math", "expression", "later expression", "words"


def _phrase_answer(rest: str, problem: str | None = None, lang: str | None = None) -> tuple[str | None, str]:
    """The answer in the text after "the answer is": its math, else its expression, else its words; a
    sentence under the label that states its value after a verb is read as a closing sentence is
    ("Answer: 6 apples cost $2.70." -> ``$2.70``, :func:`closing_answer` with ``problem``). ``lang``: the
    language its label is in ("Réponse :" is French), to read numbers in words ("quatre-vingts").

    Returns ``(answer or None, how it was read)``: ``_MATH``, ``_EXPRESSION``, ``_LATER_EXPRESSION`` or ``_WORDS``.
    """
    lead = re.match(r"[\s:*_]*(?:(?:definitely|clearly|indeed|simply|just|exactly|still|actually|really|now|donc|alors|"
                    r"entonces|então|also|quindi|итак|поэтому)[ \t]+)?", rest, re.IGNORECASE)
    body = _restated_explicitly(rest[lead.end():])
    stated_cjk = _cjk_value(re.split(r"[。\n]", body, maxsplit=1)[0])
    if stated_cjk:  # "答え：$18^6$ の一の位は4です": the value after the last stating word, not the math before it
        return stated_cjk, _EXPRESSION
    choice = _CHOICE.match(body)
    if choice:  # a choice letter, perhaps with its option's value: "(B) 9", "(B) $3(1+r/10)^x=7$"
        option = re.match(r"[ \t]*(?:\$([^$\n]+)\$|(\S.*?))[ \t]*(?:[.*_]*[ \t]*$|[.*_]*\n|\.[ \t])", body[choice.end():])
        value = option and (option.group(1) or leading_expression(option.group(2)))
        letter = next(g for g in choice.groups() if g)  # "(B) 9", "B ($x = 4$)", "A) 72 km/h"
        second = re.match(r"[ \t]*(?:or|oder|ou|o|или|або|또는|または|或者?|hoặc|atau|veya|lub|albo|nebo|eller|vagy|หรือ|أو|یا|या)"
                          r"[ \t]*\(([A-E])\)", body[choice.end():], re.IGNORECASE)
        if second and second.group(1) != letter:
            return f"({letter}), ({second.group(1)})", _EXPRESSION  # "정답: (C) 또는 (B)": two choices, none
        return f"({letter}) {value.strip()}" if value else f"({letter})", _EXPRESSION
    segments = math_segments(body)
    if segments and segments[0][0] == 0:
        parts = [segments[0][2]]
        last_end = segments[0][1]
        for (_, prev_end, _), (start, seg_end, content) in zip(segments, segments[1:]):
            if not _SEGMENT_JOINER.match(body[prev_end:start]):
                break
            parts.append(content)
            last_end = seg_end
        parts = [p for p in parts if p]
        if len(parts) == 1 and _PLAIN_NUMBER.match(parts[0]):
            # a unit written after the math belongs to the answer: "$5$ m." -> "5 m"
            unit = _UNIT_AFTER.match(body, last_end)
            if unit and not {w.lower() for w in re.findall(r"[A-Za-z]+", unit.group(1))} & _NOT_UNITS:
                return parts[0] + " " + unit.group(1), _MATH
        also = _ALSO_POSSIBLE.match(body, last_end)
        if parts and also:  # "$30^\circ$, although $150^\circ$ is also possible": a hedge, no single answer
            return ", ".join([*parts, also.group(1)]), _MATH
        if parts:
            return ", ".join(parts), _MATH
    # the sentence: to a full stop followed by space or the end, or to the end of the line
    m = re.match(r"(.*?)(?:\.(?=\s|$)|\n|$)", body, re.S)
    sentence = m.group(1).replace("**", "").strip()
    if not sentence:
        return None, _WORDS
    if "\\" not in sentence:
        sentence = digits_for_words(chinese_digits(sentence), lang)  # "she needs three more boxes", "a half", "二"
        # an aside in brackets after the value: "16(最初は 8 になりましたが, 間違いでした)", "12 (not 13 — ...)"
        sentence = re.sub(r"(?<=\d)((?:[ \t]+[A-Za-z]+){0,2})[ \t]*\((?=[^()]*[^\W\d_]{2})[^()]*\)", r"\1", sentence)
        # ... its unit kept: "720 minutes (= 12 hours)"
    if (lang or language_of(sentence)) in _DOT_LANGUAGES:  # "La respuesta es 1.128.": dots group thousands there
        sentence = re.sub(r"(?<![\d.,])[1-9]\d{0,2}(?:\.\d{3})+(?![\d.,]*\d)", lambda m: m.group(0).replace(".", ""), sentence)
    either = re.match(r"(?:either|entweder)[ \t]+(.+?)[ \t]+(?:or|oder)[ \t]+(.+?)(?:[ \t]+(?:depending|if|when|je)\b|[,;]|$)"
                      r"|soit[ \t]+(.+?),?[ \t]+soit[ \t]+(.+?)(?:[ \t]+(?:selon|si)\b|[,;]|$)", sentence, re.IGNORECASE)
    if either:  # "either 98 or \"not possible\"", "soit 3, soit 7": a hedge between two answers names no single one
        first, second = [g for g in either.groups() if g is not None]
        return f"{first.strip()}, {second.strip()}", _EXPRESSION
    if math_segments(sentence) and _outside_math(sentence, _STATES):
        # a sentence under the label: "The measure of $\\alpha$ is $145^\\circ$." states its answer
        stated = closing_answer(sentence)
        if stated:
            return stated, _MATH
    subject = leading_expression(sentence) if re.match(r"[-−]?\d", sentence) else None
    if subject:
        verb = next((v for v in _outside_math(sentence, _STATES) if v.start() >= len(subject)), None)
        if verb and verb.group(0) not in ("=", ":") and re.fullmatch(r"[^\W\d_\s]*[ \t]+(?:[^\W\d_]+[ \t]+)*",
                                                                      sentence[len(subject):verb.start()]) \
                and re.search(r"\d", sentence[verb.end():]):
            # a number, what it counts, a verb, a value: "6 apples cost $2.70", "6 Äpfel kosten 2,70 €"
            stated = closing_answer(sentence, problem)
            if stated:
                return stated, _EXPRESSION
    named_math = re.fullmatch(r"(?:the|a|an)[ \t]+(?:[A-Za-z]+[ \t]+){0,2}\$([^$]+)\$[ \t.]*", sentence, re.IGNORECASE)
    if named_math:  # "Answer: the vector $\langle -18, -49, 96 \rangle$.": what it names is its math
        return named_math.group(1).strip(), _MATH
    if "\\" in sentence:  # LaTeX without $: take it whole
        return sentence.rstrip(".").strip() or None, _MATH
    roots = _values_of_one_name(sentence)
    if roots:  # "x = 2 and x = 7": both values
        return roots, _EXPRESSION
    if "=" in sentence and re.search(r"\d", _REASON.sub("", sentence)):
        sentence = _REASON.sub("", sentence)  # "2, since the other root, x = -3, is not positive": the reason's
    if "=" in sentence and not _is_equation(sentence):  # "2 * 1 = 2 bolts": the value is after the last "="
        sentence = sentence.rsplit("=", 1)[1].strip()
    elif "=" in sentence:  # an equation is the answer whole: "the plane is 5x-7y+11z+4=0."
        return sentence.rstrip(".").strip(), _EXPRESSION
    expr = leading_expression(sentence)
    if expr is not None:
        other = _OTHER_VALUE.search(sentence) or \
            (_MIGHT_ALSO_AFTER.match(sentence, len(expr)) if sentence.startswith(expr) else None)
        if other and not _same_number(expr, drop_thousands_separators(other.group(1))):  # "104 hours (possibly 44)", "70, but it might also be 71 goats": two answers
            return f"{expr}, {drop_thousands_separators(other.group(1))}", _EXPRESSION
        rounded = re.match(r"[ \t]*(?:≈|\\approx|~)[ \t]*", sentence[len(expr):]) if sentence.startswith(expr) else None
        if rounded and _in_problem(expr, problem) and leading_expression(sentence[len(expr) + rounded.end():]):
            # "57/160 ≈ 0.356" for "Convert 57/160 to a decimal": the problem's own number, then the answer
            sentence = sentence[len(expr) + rounded.end():].lstrip()
            expr = leading_expression(sentence)
        variable = re.fullmatch(r"[ \t]+([A-Za-z])[ \t]*", sentence[len(expr):]) if sentence.startswith(expr) else None
        if variable and re.fullmatch(r"[-−]?\d+(?:\.\d+)?", expr) and _problem_variable(variable.group(1), problem):
            expr += variable.group(1)  # "2 k" for "Express ... in terms of $k$": the product 2k, not 2 and a unit
        return _with_unit(_with_half_day(expr, sentence), sentence.strip(), 0), _EXPRESSION
    # prose first ("approximately 18 dollars"): the first expression that starts with a number after
    # the sentence's verb ("The 50th term is 2"), never an ordinal
    verbs = [m for m in _outside_math(sentence, _STATES) if m.group(0) != "="]
    if verbs and re.search(r"\d", sentence[verbs[-1].end():]):
        sentence = sentence[verbs[-1].end():]
    bounded = re.search(r"(?<![\w\\])[A-Za-z](?=[ \t]*[<>≤≥][ \t]*[-−]?\d)", sentence)
    first = re.search(r"(?<![A-Za-z0-9_.])[-−]?\d", sentence)
    if bounded and first and bounded.start() < first.start():  # "defined when x < 2 or x > 3": the inequalities
        expr = leading_expression(sentence[bounded.start():])
        if expr is not None and expr != bounded.group(0):
            return expr, _LATER_EXPRESSION
    for num in re.finditer(r"(?<![A-Za-z0-9_.])[-−]?\d+(?!\d|st\b|nd\b|rd\b|th\b)", sentence):
        expr = leading_expression(sentence[num.start():])
        if expr is not None:
            return _with_unit(expr, sentence, num.start()), _LATER_EXPRESSION
    # a word answer in quotes or emphasis: "even", *Evelyn*
    return sentence.rstrip(".").strip().strip("\"'“”‘’*_").strip() or None, _WORDS


def _in_problem(expr: str, problem: str | None) -> bool:
    """Whether the number or fraction ``expr`` (``57/160``, ``0.45``) is one the problem statement writes, in
    math or not (``$\\frac{57}{160}$``): the problem's own number, not a result."""
    if not problem or not re.fullmatch(r"-?\d+(?:\.\d+)?(?:[ \t]*/[ \t]*\d+)?", expr):
        return False
    text = re.sub(r"\\[dt]?frac\{(\d+)\}\{(\d+)\}", r"\1/\2", normalise_unicode(problem))
    numbers = re.findall(r"(?<![\d.])-?\d+(?:\.\d+)?(?:[ \t]*/[ \t]*\d+)?", text)
    return re.sub(r"\s", "", expr) in {re.sub(r"\s", "", n) for n in numbers}


def _problem_variable(letter: str, problem: str | None) -> bool:
    """Whether ``letter`` stands alone as a variable in the problem's math (``$k$``, ``$(h,k)$``)."""
    return bool(problem) and any(re.search(rf"(?<![A-Za-z\\]){letter}(?![A-Za-z])", content)
                                 for _, _, content in math_segments(problem))


def _chain_value(text: str) -> str | None:
    """The value of the expression ``text`` starts with, after any ``=`` that follows it: ``"12"`` for
    "20/2 = 12 loaves", ``"$450"`` for "$150 + $300 = $450"; None when it starts with none."""
    value = leading_expression(text)
    rest = text.strip()[len(value):] if value and text.strip().startswith(value) else ""
    while value and re.match(r"[ \t]*=[ \t]*", rest) and leading_expression(rest.split("=", 1)[1]):
        value = leading_expression(rest.split("=", 1)[1])
        rest = rest.split("=", 1)[1].lstrip()[len(value):]
    return value


def _same_number(a: str, b: str) -> bool:
    """Whether two plain numbers (``1/2``, ``0.5``, ``70``) are one value; False for anything else."""
    try:
        return Fraction(a.replace(",", "")) == Fraction(b.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return False


def _values_of_one_name(sentence: str) -> str | None:
    """``"2, 7"`` for "x = 2 and x = 7" (values of one name joined by "," / "and" / "or", each a number or
    an expression: "x = 1 + √19 and x = 1 − √19"); ``"x = 15, y = -29"``
    for "x = 15 and y = -29" (values of different names, one each: a point's coordinates, kept named for
    the grader to order); else None."""
    parts = re.split(r"[ \t]*(?:,[ \t]*(?:and|or)?|\band\b|\bor\b|(?<=[ \t])(?:و|и|und|et|en|och|dan|ve|và|और)(?=[ \t])|和)[ \t]*",
                     sentence.rstrip(". "))
    named = [re.fullmatch(r"[ \t]*([A-Za-z])[ \t]*=[ \t]*([^=]*?)[ \t]*", p) for p in parts]
    # each value one expression whole: "n = −2", "x = 1 + √19"
    if len(parts) < 2 or not all(m and m.group(2) and leading_expression(m.group(2)) == m.group(2) for m in named):
        return None
    names = [m.group(1) for m in named]
    if len(set(names)) == len(names) and " or " not in sentence:
        return ", ".join(f"{m.group(1)} = {m.group(2)}" for m in named)
    if len(set(names)) != 1:
        return None
    return ", ".join(m.group(2) for m in named)


def _with_unit(expr: str, text: str, start: int) -> str:
    """A number keeps its unit of measure (``1.25 kilometers``, :func:`core.grading.units.measure_after`),
    and an amount the dollar sign written before it or the word after it (``$2.70``, ``2.7 dollars``):
    the grader tells dollars from cents, and kilometers from the miles a question asks for."""
    written = text[start:start + len(expr)] == expr
    after = re.match(r"[ \t*_]*(dollars?|cents?)\b", text[start + len(expr):], re.IGNORECASE) if written else None
    if expr[:1].isdigit() and (text[:start].endswith("$") or (after and after.group(1).lower().startswith("d"))):
        return "\\$" + expr
    if after and expr[:1].isdigit():
        return expr + " cents"
    unit = measure_after(text[start + len(expr):]) if written and re.fullmatch(r"-?[\d.,]+", expr) else None
    return f"{expr} {unit}" if unit else expr


def _with_half_day(expr: str, sentence: str) -> str:
    """A time keeps the a.m. / p.m. written after it: ``10:20 AM`` is not ``10:20 PM``."""
    if re.fullmatch(r"\d{1,2}:\d{2}", expr):
        # right after it, or where the sentence names the same time again ("10:20, so it ends at 10:20 AM")
        m = re.search(r"(?<![\d:])" + re.escape(expr) + r"[ \t]*([AaPp])\.?[ \t]*[Mm]\.?(?![A-Za-z])", sentence)
        if m:
            return f"{expr} {m.group(1).lower()}.m."
    return expr


def _solution_part(text: str) -> tuple[str, re.Match | None]:
    """The text up to the end of its first GSM8K answer line (``#### 18``), and that line's match.

    A model that writes ``#### 18`` and goes on to invent a new problem ending in ``#### 7``
    answered 18: the first ``####`` closes the solution. So does a new question after a stated
    answer: a line opening ``Question:``, ``Q:`` or ``Problem 2:`` (the few-shot layout models
    continue) once "the answer is X" or a box came before it, or once a number came before it and an
    ``Answer:`` follows it (a new question and answer pair: the next sample); and, once a number came before it, a
    line opening an exercise or an offer of the model's own ("Follow-up question:", "Try it
    yourself:", "Next question:", "Would you like me to ..."), unless a computation follows its colon
    at once ("Extra widgets: 15 × 720 = 10,800." is a step), or a label that names no exercise is followed by
    numbers and no question ("Extra point for those over 20: Mike → 22"). Without these the text is whole.
    """
    end = _END_TOKEN.search(text)
    if end:  # a model's end-of-text token: what follows is another sample of the few-shot prompt
        text = text[:end.start()]
    m = _HASH_LINE.search(text)
    if m:
        text = text[:m.end()]
    for follow in _FOLLOW_UP.finditer(text):
        line_end = text.find("\n", follow.end())
        rest = text[follow.end():line_end if line_end >= 0 else len(text)]
        if follow.group(0).rstrip().endswith((":", "：")) and re.match(r"[ \t]*[-$\\(\d][^A-Za-z]*?[=×÷]", rest):
            continue  # a step of the solution under its label: "Extra widgets: 15 × 720 = 10,800."
        if re.match(r"[ \t>*_#-]*(?:bonus|extra)[ \t]+(?!(?:question|problem|practice|exercise|example|challenge|task|"
                    r"puzzle|fact|facts|info|note|tip|trivia)\b)", follow.group(0), re.IGNORECASE) and \
                re.search(r"\d", rest) and "?" not in rest:
            continue  # "Extra point for those over 20: Mike → 22, Tony → 43.": a step under a label of its own
        if re.search(r"\d[^\n]*\bor\b[^\n]*\d[^\n]*\?", rest):
            continue  # "Do you want the number she buys, which is 4, or the number she gets, which is 6?": a question back
        if re.search(r"\d", text[:follow.start()]):
            text = text[:follow.start()]
            break
    for question in _NEXT_QUESTION.finditer(text):
        before = text[:question.start()]
        after = text[question.end():]
        answered_after = re.search(r"\d", before) and (_ANSWER_LABEL.search(after) or _ANSWER_PHRASE.search(after))
        if _ANSWER_PHRASE.search(before) or _ANSWER_LABEL.search(before) or _BOX_CMD.search(before) or answered_after:
            # a new question/answer pair after the solution's work is the next few-shot sample, answered or not
            return before, (m if m and m.end() <= question.start() else None)
    return text, (m if m and m.end() <= len(text) else None)  # a #### line of a follow-up cut off is none


def extract_answer(text: str, problem: str | None = None) -> str | None:
    """Extract the final answer from a solution.

    The text is normalised first (:func:`normalise_unicode`) and ends at its first GSM8K answer line
    (``#### 18``; what follows is a new problem the model made up). Then the last stated answer wins:

    1. boxes (:func:`final_boxes`): the last ``\\boxed{...}`` / ``\\fbox{...}``, or the comma-joined
       list of the boxes on its line -- the MATH convention;
    2. else the text after that ``####`` -- the GSM8K convention;
    3. else the last phrase like "The final answer is X" / "the answer is X", or labelled line
       (``Answer: X``, ``**Final Answer:** X``, a "Final Answer" heading with X below it):

       * X in math (``$...$``, ``\\(...\\)``): the math, whole (``$69, 84$`` -> ``69, 84``;
         ``$2^{1009}$`` -> ``2^{1009}``); math segments joined by "," / "and" / "or" form a list;
         a number keeps the unit written after it (``$5$ m`` -> ``5 m``);
       * X in prose: the expression the sentence starts with (:func:`leading_expression`), a list
         or tuple kept whole (``1, 3, 5``, ``(2,4)``), thousands separators dropped (``1,000`` ->
         ``1000``), a unit dropped (``25 cm^2`` -> ``25``) unless it is a unit of measure written out
         (``1.25 kilometers``); after an ``=``, the value after the
         last one; prose before the first number skipped ("approximately 18 dollars" -> ``18``);
         plain words when there is no number ("yes").

    A phrase or labelled line after the last box or ``####`` line is a correction and wins over
    them, when it starts with math or an expression (not words: "the answer is consistent", "the
    answer is not 7"); "Corrected answer:" / "Revised answer:" are labelled lines too. A new chat
    turn (``User:``, ``Human:``) after a stated answer closes the solution like a new question, and
    so does an exercise or offer of the model's own after a number ("Try it yourself:"). An answer
    spelled in words is given as its digits ("Forty" -> ``40``, "three units" -> ``3``). A ``$``
    that can only be money is no math delimiter (:func:`math_segments`); LaTeX and SI thousands
    separators (``70{,}000``, ``95 200``) read as commas, numbers in words as numbers
    (``$1.45 million``, ``7 degrees below zero``, ``all real numbers greater than 2``); a choice
    letter drops its option's text; "the correct answer is X" states X; an amount keeps its currency
    (``$2.70``, ``2.7 dollars`` -> ``\\$2.7``: dollars are not cents); a model's end-of-text token
    (``<|endoftext|>``) ends the solution. A bare number keeps the unit of measure written after it
    where the solution last writes it (``75`` from "= 75, so he needs 75 seconds more" is ``75
    seconds``; :mod:`core.grading.units`), so that the grader can hold it against the question's unit.
    An answer that is no plain value, restated after "i.e." / "that is" / "namely", is the
    restatement (``-I, i.e. [[-1, 0], [0, -1]]``); a solution without an answer marker that ends in a
    generation loop cut off mid-way (the same span three times or more, no sentence end), or that
    stops mid-sentence (:func:`_cut_off`: "... so the number of days is"), has no answer.

    Args:
        text: A reference solution or model generation.
        problem: the problem statement, or None: where a closing sentence without an answer marker
            holds several numbers, the one that counts what the question asks for ("How many eggs")
            is the answer (:func:`closing_answer`).

    Returns:
        The answer string, or None if no source yields a non-empty answer.

    Raises:
        Nothing.
    """
    text = normalise_unicode(text) if text else text
    lang = document_language(text) if text else None
    ans, solution = _extract(text, problem, lang)
    return _with_stated_unit(_in_digits(english_units(ans) if ans else ans, lang), solution)


def _with_stated_unit(ans: str | None, solution: str) -> str | None:
    """A bare number keeps the unit of measure written after it where the solution last writes it
    ("120 - 45 = 75, so he needs **75 seconds** more." -> ``75 seconds``; "$\\boxed{6}$ weeks" ->
    ``6 weeks``): the grader holds a unit other than the question's against it."""
    if not ans or not re.fullmatch(r"-?\d+(?:\.\d+)?", ans):
        return ans
    last = None
    for last in re.finditer(r"(?<![\d.,])" + re.escape(ans) + r"(?![\d]|\.\d)", drop_thousands_separators(solution)):
        pass
    if last is None:
        return ans
    rest = last.string[last.end():]
    unit = measure_after(re.sub(r"^(?:[ \t*_$]|\\\)|\}|\\text\{\s*)*", " ", rest))
    return f"{ans} {unit}" if unit else ans


# what may follow a number spelled in words and still be its answer: "three units", "eighteen dollars"
_SPELLED_ANSWER = re.compile(r"(?:(?:a|an|the|exactly|only)[ \t]+)?(?P<number>[A-Za-z -]+?)"
                             r"(?:[ \t]+[A-Za-z]+){0,2}[ \t]*[.!]?")


_WORDS_OF_ANSWER = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")


def _in_digits(ans: str | None, lang: str | None = None) -> str | None:
    """An answer spelled in words as its digits ("Forty" -> ``40``, "three units" -> ``3``, "negative three"
    and ``\\text{negative three}`` -> ``-3``); in the solution's language ``lang`` too, one included
    ("Resposta: um." -> ``1``, "una hora" -> ``1``, :func:`core.grading.number_words.cardinal`); others as
    given."""
    text = re.fullmatch(r"\\(?:text|textbf|textrm|mathrm)\{([^{}\\$]*)\}", ans.strip()) if ans else None
    if text:  # a box of words: \boxed{\text{negative three}}
        inner = _in_digits(text.group(1), lang)
        return inner if inner != text.group(1) else ans
    if ans and lang not in (None, "en") and not re.search(r"[\d$\\{}=]", ans):
        words = _WORDS_OF_ANSWER.findall(ans)
        for cut in range(min(len(words), 8), 0, -1):  # a number of at most eight words, a unit of at most two
            try:
                if len(words) - cut <= 2:
                    return str(cardinal(" ".join(words[:cut]), lang))
            except ValueError:
                continue
    if not ans or re.search(r"[\d$\\{}=]", ans):
        return ans
    sign = re.match(r"[ \t]*(?:negative|minus)[ \t]+(?=[A-Za-z])", ans, re.IGNORECASE)
    if sign:
        value = _in_digits(ans[sign.end():])
        return f"-{value}" if value and re.fullmatch(r"\d+", value) else ans
    m = _SPELLED_ANSWER.fullmatch(ans.strip())
    if m:
        words = m.group(0).rstrip(" .!").split()
        # the longest leading run of words that spells a number, the rest a unit of at most two words
        for cut in range(len(words), 0, -1):
            value = spelled_number(" ".join(w for w in words[:cut] if w.lower() not in ("a", "an", "the", "exactly",
                                                                                         "only")))
            if value is not None and len(words) - cut <= 2:
                return str(value)
    return ans


# "i.e." read as the words it abbreviates: its full stops end no sentence ("..., i.e. (2, 12) ∪ (12, 102).")
_THAT_IS_ABBREVIATION = re.compile(r"\bi\.[ \t]?e\.,?", re.IGNORECASE)
# an answer restated in an explicit form after it: "-I, that is, [[-1, 0], [0, -1]]"
_THAT_IS = re.compile(r"[ \t]*,?[ \t]*\b(?:that[ \t]+is|in[ \t]+other[ \t]+words|namely)\b[ \t]*[,:]?[ \t]*",
                      re.IGNORECASE)


_PAST_STATES = re.compile(r"\b(?:was|were)\b", re.IGNORECASE)


def _restated_explicitly(text: str) -> str:
    """``text`` (an answer line or a sentence) with an answer that is no plain value replaced by its
    explicit restatement after "that is" / "i.e." / "namely": "-I, i.e. [[-1, 0], [0, -1]]" -> the
    matrix, "all x with 2 < x < 102 and x ≠ 12, i.e. (2, 12) ∪ (12, 102)" -> the union (a verb
    before it is kept: "The domain is (2, 12) ∪ ..."). A plain value, with a unit or without, stays, without its
    gloss: "1/2, i.e. about 50%" is 1/2, "6 days, i.e. 144 hours" is 6 days."""
    line_end = text.find("\n")
    line = text if line_end < 0 else text[:line_end]
    cue = next(iter(_outside_math(line, _THAT_IS)), None)
    if cue is None:
        return text
    before, after = line[:cue.start()], line[cue.end():]
    if not re.search(r"[\d\[(\\$]", after):
        return text
    verbs = sorted([*_outside_math(before, _STATES), *_outside_math(before, _PAST_STATES)], key=lambda m: m.end())
    head = before[:verbs[-1].end()] + " " if verbs else ""
    value = before[verbs[-1].end():] if verbs else before
    bare = re.sub(r"[$*_]", "", value).strip(" ,")
    tail = "" if line_end < 0 else text[line_end:]
    if len(re.findall(r"(?<![\w\\])[A-Za-z][ \t]*=[ \t]*[-−]?\d", before)) >= 2 and re.search(r"[=(]", after):
        return after + tail  # "a = 1, b = −16, c = −4, d = 43, i.e. (a, b, c, d) = (1, −16, −4, 43)": the tuple
    lead = leading_expression(bare) if re.match(r"[-−]?\d", bare) else None
    if not lead and re.search(r"(?<![\w.,])-?\d[\d,]*(?:\.\d+)?[ \t]*(?:[A-Za-z]+[ \t]*){0,3}$", bare) \
            and not re.search(r"[=<>≤≥≠\\]", bare):
        return before + "." + tail  # "It took him 2 hours, that is, 120 minutes.": a plain value ends what comes before
    if lead and bare.endswith("("):  # "2 possible values for $B$ (namely 1 and 3)": a gloss in brackets
        if re.fullmatch(r"[^\d=]*\(", bare[len(lead):]):
            return before.rstrip(" \t(") + "." + tail
    elif lead and re.fullmatch(r"[ \t]*(?:[A-Za-z]+[ \t]*){0,3}", bare[len(lead):]):
        return before + "." + tail  # a plain value already: what follows only glosses it
    return head + after + tail


# a decimal whose last digits repeat, then an ellipsis: "0.666…", "0.142857142857..." (NFKC writes … as ...)
_REPEATING_ELLIPSIS = re.compile(r"(?<![\d.])(\d*\.\d*?)(\d{1,6}?)(\2+)[ \t]*\.\.\.(?!\d)")


def _repeating_ellipsis(m: re.Match) -> str:
    """A decimal written out with an ellipsis as the fraction its repeating digits make: ``0.666...`` -> ``2/3``,
    ``0.1666...`` -> ``1/6``; a run of fewer than three repeated digits ("2.33...") is left alone."""
    if len(m.group(2)) + len(m.group(3)) < 3:
        return m.group(0)
    value = repeating_value(*m.group(1).split("."), m.group(2))
    return f"{value.numerator}/{value.denominator}" if value.denominator != 1 else str(value.numerator)


# an interval without some points, in plain text or LaTeX: "(0, 36) \ {9}", "(0,36) \setminus \{9\}"
_PLAIN_DIFFERENCE = re.compile(r"[\[(][ \t]*-?\d[\d.]*[ \t]*,[ \t]*-?\d[\d.]*[ \t]*[\])][ \t]*(?:\\setminus|\\backslash|\\(?=[ \t])|∖)"
                               r"[ \t]*\\?\{[ \t]*-?\d[-\d., \t]*\\?\}")


def _as_pieces(m: re.Match) -> str:
    """An interval without some points as the union of its pieces (:func:`core.grading.intervals.as_difference`)."""
    union = as_difference(m.group(0))
    return union.replace("\\cup", "∪") if union else m.group(0)


# a value under a label that names its base: "In base eight: 2516", "In base 8, the answer is 2516"
_BASE_LABEL = re.compile(r"\b(?P<lead>(?:in|to)[ \t]+base[ \t]+(?P<base>\d+|[a-z]+)[ \t]*(?::|,[ \t]*(?:it|this|that|the[ \t]+"
                         r"(?:answer|number|result))[ \t]+is)[ \t]*\$?[ \t]*)(?P<digits>[0-9A-Za-z]+)(?![\w_])(?=\$?[ \t]*[.!]?[ \t]*$)",
                         re.IGNORECASE | re.MULTILINE)


def _with_base(m: re.Match) -> str:
    """A value under a label that names its base, restated with that base as its subscript: "In base eight:
    2516" -> "In base 8 it is 2516_{8}" (a colon after a digit states nothing: it may be a ratio's)."""
    base = int(m.group("base")) if m.group("base").isdigit() else spelled_number(m.group("base"))
    if not base or not 2 <= base <= 36 or not re.fullmatch(r"[0-9A-Z]+|[0-9a-z]+", m.group("digits")):
        return m.group(0)
    return f"In base {base} it is {m.group('digits')}_{{{base}}}"


# ten thousands and hundred millions in Chinese, Japanese and Korean digits: "16万8000" (168000), "33万" (330000),
# "1.5亿", "4만" (40000)
_MYRIADS = re.compile(r"(?<![\d.,])(\d+(?:\.\d+)?)[ \t]*(万|萬|만|亿|億|억)(?:[ \t]*(\d{1,4})(?![\d.,]))?")


def _in_myriads(m: re.Match) -> str:
    """A number written with 万 (10^4) or 亿/億 (10^8) as its digits: ``16万8000`` -> ``168000``."""
    if re.match(r"[ \t]*\d+[ \t]*[千百十천백십]", m.string[m.end(2):]):
        return m.group(0)  # "3万5千", "3만 5천": numerals after it, not digits
    scale = 10 ** 4 if m.group(2) in "万萬만" else 10 ** 8
    value = Decimal(m.group(1)) * scale + int(m.group(3) or 0)
    return format(value.normalize(), "f") if value == value.to_integral_value() else str(value)


# "per one day" in Japanese and Korean, before the value it is the rate of: "1日に18ドル", "1時間で18個", "1일에 18달러"
_PER_ONE = re.compile(r"(?<![\d.,])1[ \t]*(?=(?P<counter>日|時間|週間|週|か月|ヶ月|カ月|年|分|人|일|시간|주|개월|달|년|분|명)[ \t]*"
                      r"(?:に|で|あたり|当たり|につき|에|당|마다)[^\n。.!?]*?\d)")
# what each counter counts, in the question's English
_COUNTER_WORDS = {**dict.fromkeys("日 일".split(), "day"), **dict.fromkeys("時間 시간".split(), "hour"),
                  **dict.fromkeys("週間 週 주".split(), "week"), **dict.fromkeys("か月 ヶ月 カ月 개월 달".split(), "month"),
                  **dict.fromkeys("年 년".split(), "year"), **dict.fromkeys("分 분".split(), "minute"),
                  **dict.fromkeys("人 명".split(), "(?:person|people)")}


def _without_per_one(text: str, problem: str | None) -> str:
    """``text`` without the 1 of "per one day" before the value it is the rate of ("1日に18ドル" -> "日に18ドル"),
    unless the question asks for that counter's unit ("How many hours ...?": "1時間で18個" answers 1)."""
    question = question_of(problem).lower() if problem else ""

    def drop(m: re.Match) -> str:
        word = _COUNTER_WORDS[m.group("counter")]
        long = r"|\bhow[ \t]+long\b" if word != "(?:person|people)" else ""  # a time unit only
        asks = re.search(rf"\bhow[ \t]+many[ \t]+(?:\w+[ \t]+)?{word}s?\b|\bin[ \t]+{word}s\b{long}", question)
        return m.group(0) if asks or m.group("counter") in question else ""
    return _PER_ONE.sub(drop, text)


# a point in prose whose coordinates ";" separates (decimal commas inside): "(15; -29)", "(1,5; -13)"
_SEMICOLON_TUPLE = re.compile(r"\((\s*[-−]?\d+(?:[.,]\d+)?\s*(?:;\s*[-−]?\d+(?:[.,]\d+)?\s*)+)\)")


def _extract(text: str, problem: str | None, lang: str | None) -> tuple[str | None, str]:
    """``(answer, the solution it was read from)`` of ``text``, normalised (:func:`normalise_unicode`) and written
    in ``lang`` (:func:`core.grading.number_words.document_language`): see :func:`extract_answer`."""
    if not text:
        return None, ""
    text = digits_in_document(text, lang)  # "cincuenta y ocho minutos", "열일곱", "三百一十条"
    text = _REPEATING_ELLIPSIS.sub(_repeating_ellipsis, _LATEX_THOUSANDS.sub(",", text))
    text = _PLAIN_DIFFERENCE.sub(_as_pieces, text)  # "(0, 36) \ {9}": (0,9) ∪ (9,36)
    text = _SEMICOLON_TUPLE.sub(lambda m: "(" + ", ".join(v.strip().replace(",", ".") for v in m.group(1).split(";")) + ")",
                                text)  # "(15; -29)", "(1,5; -13)": a point written with ";" between its coordinates
    text = _MYRIADS.sub(_in_myriads, text)  # "16万8000ドル": 168000
    text = _BASE_LABEL.sub(_with_base, text)  # "In base eight: 2516": 2516_{8}
    text = re.sub(r"\b(?:R|US|C|A)\$[ \t]*(?=\d)", "", text)  # reais and other dollars' signs: "R$ 21,00" is 21,00
    text = _THAT_IS_ABBREVIATION.sub("that is,", text)
    text = ascii_relations(text)
    text = english_units(_european_numbers(_without_per_one(text, problem)))  # "1日に18ドル": 18 dollars a day
    text = _SPACED_THOUSANDS.sub(lambda m: m.group(0).replace(" ", ","), text)
    text = _in_plain_numbers(text)
    text = _BRACKETED_CHECK.sub("", text)  # "**x = 6** (check: 3 + 2 = 5 ✓).": the check answers nothing
    text, hash_line = _solution_part(text)
    boxes = _boxes(text)
    boxed = final_boxes(text)
    hashed = drop_thousands_separators(hash_line.group(1)).rstrip(".").strip() if hash_line else None
    glossed = hashed and re.fullmatch(r"(?P<words>[^()]+?)[ \t]*\((?P<digits>-?\d[\d.]*)\)", hashed)
    if glossed and re.search(r"[^\W\d_]|, ", glossed.group("words")):
        hashed = glossed.group("digits")  # "#### one thousand, two hundred and eighteen (1218)"
    aside = hashed and re.fullmatch(r"(?P<value>-?\\?\$?\d[\d.,]*)[ \t]*\((?=[^()]*[^\W\d_]{2})[^()]*\)", hashed)
    if aside:
        hashed = aside.group("value")  # "#### 8 (that's 16 pencils in total)": an aside after the answer
    statements = sorted([*_ANSWER_PHRASE.finditer(text), *_ANSWER_LABEL.finditer(text), *_NAMED_LABEL.finditer(text),
                         *_NAMED_PHRASE.finditer(text)], key=lambda m: m.end())
    anchors = ([boxes[-1].end] if boxed else []) + ([hash_line.start()] if hashed else [])
    if anchors:
        anchor = max(anchors)
        for m in reversed(statements):
            if m.start() < anchor:
                break
            if re.match(r"[\s:*_]*(?:not|n't)\b", text[m.end():], re.IGNORECASE):
                continue  # "the answer is not $\\sqrt{149}$ (that was my earlier mistake)": a rejection
            ans, how = _phrase_answer(text[m.end():], problem, language_of(m.group(0)))
            labelled = m.re in (_ANSWER_LABEL, _NAMED_LABEL) and how == _LATER_EXPRESSION
            if ans and (how in (_MATH, _EXPRESSION) or labelled):
                if boxed and conflicting(boxed, ans) and _adjacent(text[boxes[-1].end:m.start()]):
                    return f"{boxed}, {ans}", text  # "$\\boxed{7}$ ... **Final answer: 9**": two answers, none
                return _hedged(text, m.end(), ans, problem), text
    if _undecided(text):
        return None, text
    if boxed and hashed and hash_line.start() > boxes[-1].end:
        # "So the answer is \\(\\boxed{5}\\). Let me reconsider ... 5 - 4 = 1.\n\n#### 1": the last word
        if conflicting(boxed, hashed) and _adjacent(text[boxes[-1].end:hash_line.start()]):
            return f"{boxed}, {hashed}", text
        boxed = None
    if boxed:
        retracted = _retracted(text, boxes[-1].end, problem)
        if retracted:
            return retracted, text
        cases = _conditional_boxes(text, boxes)
        if cases:
            return cases, text
        before = _statement_before(text, statements, boxes[-1].start, problem)
        if conflicting(before, boxed):
            return f"{before}, {boxed}", text  # "**Answer: 7**\n\n$\\boxed{9}$": two answers, none
        alternative = alternative_after(answer_sentence(text, boxes[-1].end), boxed, problem)
        if alternative:
            return f"{boxed}, {alternative}", text
        return _undecided_between(text, boxes[-1].start, boxes[-1].end, problem) or boxed, text
    if hashed:
        return hashed, text
    for m in reversed(statements):
        if _doubted(text[m.end():]):
            continue  # "## Final Answer\n$720 - 576 = 144$? Recounting gives ...": the model doubts it
        ans, _ = _phrase_answer(text[m.end():], problem, language_of(m.group(0)))
        if ans and _cut_off(text) and not re.search(r"\S[ \t]*\n", text[m.end():].lstrip()):
            return None, text  # "... to get the final answer:\n\n84 -": the answer line never ended
        if ans:
            return _retracted(text, m.end(), problem) or _undecided_between(text, m.start(), m.end(), problem) or \
                _hedged(text, m.end(), ans, problem), text
    if _oscillates(text):
        return None, text
    text = _without_cut_repetition(text)
    if _ends_in_loop(text) or _cut_off(text) or _gives_up(text) or _restates_problem(text, problem):
        return None, text
    inverted = _inverted_statement(text, problem)
    if inverted:
        return inverted, text
    restated = _bold_restated(text)
    if restated:
        return restated, text
    bold_first = re.match(r"[ \t]*\*\*[ \t]*(\$[^$*\n]+\$|-?\d[\d.,]*)[ \t]*\*\*[ \t]*(?:—|–|--)[ \t]*(?:(?:and|but|which|this|that)\b"
                          r"|(?![^\n]*\b(?:wait|actually|no|not|or|mistake|correct\w*)\b)(?=[^\d\n]*$))",
                          text.rstrip().rsplit("\n", 1)[-1], re.IGNORECASE)
    if bold_first:  # "**$55^\\circ$** — and a quick re-check of each step gives the same result.", "**24** — independent of $r$"
        return bold_first.group(1).strip("$"), text
    closing = closing_answer(text, problem)
    if closing:
        # the sentence it is read from: the last one that is no check, footer or aside
        sentences = _stating_sentences(text)
        values = undecided_values(sentences[-1], problem) if sentences else None
        if values:
            return ", ".join(values), text
        last = sentences[-1] if sentences else ""
        at = last.rfind(closing)
        other = alternative_after(last[at + len(closing):], closing, problem) if at >= 0 else None
        if other and re.search(re.escape(other) + r"[ \t.!*_$)°%]*(?:[,;]|$)", last):
            # "Odpowiedź: 4 lub −12." after a sentence: a hedge between two values ("90 pages, or about 3
            # chapters" names the value again in other words)
            return f"{closing}, {other}", text
        twice = re.fullmatch(r"(.+?),?[ \t]+or[ \t]+(.+?)", closing)
        if twice and plain_value(twice.group(1)) is not None and \
                alternative_after(" or " + twice.group(2), twice.group(1), problem) is None:
            return twice.group(1), text  # "..., i.e. 0.34 or 34%": one value written twice
    return closing, text


def _hedged(text: str, start: int, ans: str, problem: str | None) -> str:
    """``ans``, stated in the sentence that starts at ``start``, or ``"ans, other"`` when a hedge after
    its value offers another candidate (:func:`core.grading.hedges.alternative_after`: "12, unless the
    teacher counts, in which case 13"): a solution that names two answers commits to none."""
    restated = re.fullmatch(r"(.+?),?[ \t]+or[ \t]+(.+?)", ans)
    if restated and plain_value(restated.group(1)) is not None:
        ans = restated.group(1)  # "0.5, or 50%", "$45, or 75% of the price": the rest of its sentence decides
    value = plain_value(ans)
    if value is None:
        return ans
    sentence = answer_sentence(text, start)
    for number in re.finditer(r"(?<![\d.,])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?(?![\d/])", sentence):
        if plain_value(number.group(0)) == value:
            alternative = alternative_after(sentence[number.end():], ans, problem)
            return f"{ans}, {alternative}" if alternative else ans
    return ans


def _stating_sentences(text: str) -> list[str]:
    """The sentences of ``text`` that may state its answer: no check, footer or bracketed aside, nothing
    after a check heading or a rule (:func:`_without_checks`)."""
    return [x for x in _sentences(_without_checks(text))
            if x.strip() and not _CHECK.match(x) and not _FOOTER.match(x) and not _is_aside(x)]


# the answer named before its label: "**$1** is the final answer.", "So we get \\frac{3}{2} as our answer."
_INVERTED = re.compile(r"^(?:.*?\b(?:get|got|obtain|have|find)[ \t]+)?(?P<answer>[^\s].*?)[ \t]+(?:is|as)[ \t]+(?:the|my|our)[ \t]+"
                       r"(?:final[ \t]+|correct[ \t]+)?answer[ \t*_]*[.!]?[ \t*_]*$", re.IGNORECASE)


# ... or after it: "Redoing it yields $1440$, which is my final answer.", "komme ich auf 28, das ist meine Antwort."
_NAMED_AFTER = re.compile(r"(?P<answer>\$[^$]+\$|\\?\$?-?\d[\d.,/]*)[ \t]*,?[ \t]*(?:which|that|this|das|c(?:'|’)est|esa|esta|isso|questa)"
                          r"[ \t]+(?:(?:is|ist|es|é|è)[ \t]+)?(?:my|our|meine|unsere|ma|mi|minha|la[ \t]+mia)[ \t]+"
                          r"(?:final[ \t]+|finale[ \t]+|endgültige[ \t]+)?(?:answer|antwort|réponse|respuesta|resposta|risposta)\b",
                          re.IGNORECASE)


def _inverted_statement(text: str, problem: str | None) -> str | None:
    """The answer of a last sentence that names it before its label ("**$1** is the final answer.", "So we get
    \\frac{3}{2} as our answer.", "... yields $1440$, which is my final answer."; checks, footers and asides
    after it aside), else None."""
    sentences = _stating_sentences(text)
    m = (_INVERTED.search(sentences[-1].strip()) or _NAMED_AFTER.search(sentences[-1])) if sentences else None
    if not m:
        return None
    ans, how = _phrase_answer(" " + m.group("answer"), problem)
    return ans if ans and how in (_MATH, _EXPRESSION) else None


# a bold answer in the last sentence, then the same quantity in other words: "She will eat **7 dozen eggs** in
# 4 weeks — that's 84 eggs.", "**100 roses** per month — which is 25 roses each week.", "**20 dozen** eggs, i.e. 240"
_BOLD_RESTATED = re.compile(r"\*\*(?:[^*\n]*?[:：][ \t]*)?(?P<value>[^*\n]*?\d[^*\n]*?)\*\*[^*\n]*?(?:—|–|--|,|;|\()[ \t]*"
                            r"(?:that(?:'|’)s|that[ \t]+is|which[ \t]+is|i\.e\.|(?:which[ \t]+is[ \t]+)?the[ \t]+same[ \t]+as|"
                            r"equivalently)\b[^*]*$", re.IGNORECASE)


def _bold_restated(text: str) -> str | None:
    """The bold answer of a last sentence that restates it after a dash or comma ("**7 dozen eggs** in 4 weeks —
    that's 84 eggs."): the restatement is the same quantity in other units, the bold value the answer."""
    sentences = _stating_sentences(text)
    m = _BOLD_RESTATED.search(sentences[-1]) if sentences else None
    if not m:
        return None
    ans, how = _phrase_answer(" " + m.group("value"))
    return ans if ans and how in (_MATH, _EXPRESSION) else None


def _restates_problem(text: str, problem: str | None) -> bool:
    """Whether the solution's last paragraph only copies the problem statement ("Okay, so the problem says:
    Jamal's phone can hold 6 times more", cut off by a token limit): a number in it is the problem's, no
    answer. What counts is the paragraph after its first colon, 20 characters or more, spacing aside."""
    if not problem:
        return False
    last = re.sub(r"\s+", " ", re.split(r"\n[ \t]*\n", text.strip())[-1]).strip()
    source = re.sub(r"\s+", " ", normalise_unicode(problem))
    # the paragraph from its first colon or from the start of one of its sentences
    starts = [0] + [m.end() for m in re.finditer(r"[:.!?][ ]", last[:200])]
    return any(len(last) - k >= 20 and last[k:].strip() in source for k in starts)


def _undecided_between(text: str, start: int, end: int, problem: str | None) -> str | None:
    """``"13, 11"`` when the sentence around ``text[start:end]`` (a box, an answer phrase, the closing
    words) weighs values without choosing ("I'd lean towards $13$, but it would be $11$ if ...";
    :func:`core.grading.hedges.undecided_values`), else None."""
    before = max(text.rfind("\n", 0, start), *(m.end() - 1 for m in re.finditer(r"[.!?][)\]]?(?=\s)", text[:start])), -1)
    sentence = text[before + 1:end] + answer_sentence(text, end)
    sentence = re.sub(r"\\(?:boxed|fbox)\{([^{}]*)\}", r"\1", sentence)
    values = undecided_values(sentence, problem)
    return ", ".join(values) if values else None


def _conditional_boxes(text: str, boxes: list[_Box]) -> str | None:
    """``"48, 44"`` when the last paragraph boxes different values on lines that each open with a condition
    ("If we include both years: ... $\\boxed{48}$.\nIf we count from 23: $\\boxed{44}$."): an answer per reading,
    none chosen; else None."""
    start = max(text.rfind("\n\n", 0, boxes[-1].start), 0)
    lines = [text[max(text.rfind("\n", 0, b.start), 0):b.start].strip() for b in boxes if b.start >= start and b.content]
    contents = [b.content for b in boxes if b.start >= start and b.content]
    if len(set(contents)) > 1 and all(re.match(r"[*_-]*[ \t]*(?:if|when|assuming|unless)\b", ln, re.IGNORECASE) for ln in lines):
        return ", ".join(dict.fromkeys(contents))
    return None


def _adjacent(gap: str) -> bool:
    """Whether two final statements with ``gap`` between them stand side by side: no retraction and at most
    three words between them besides an answer phrase ("So", "The final answer is:"), so no sentence that
    corrects one ("The two ends were counted twice.")."""
    # each character of a script written without spaces counts as a word
    words = re.findall(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[^\W\d_]+",
                       _ANSWER_PHRASE.sub(" ", _ANSWER_LABEL.sub(" ", gap)).replace("boxed", " "))
    return not _RETRACTION.search(gap) and len(words) <= 3


def _statement_before(text: str, statements: list[re.Match], box_start: int, problem: str | None) -> str | None:
    """The answer a phrase or labelled line states right before the box at ``box_start`` (at most one
    short line between them, no retraction), else None: "**Answer: 7**\n\n$\\boxed{9}$" states 7."""
    for m in reversed(statements):
        if m.start() >= box_start:
            continue
        end = m.end() + len(answer_sentence(text, m.end()))
        gap = text[end:box_start]
        if end > box_start:
            continue  # "The final answer is: $\\boxed{15}$": the box's own statement
        if not _adjacent(gap):
            return None
        ans, _ = _phrase_answer(text[m.end():], problem, language_of(m.group(0)))
        return ans
    return None


# a model saying it has not decided between answers: "I can't pin it down further", "Both readings seem possible",
# "Could you clarify whether ...?", "These disagree, and I don't have time to resolve which is correct."
_UNDECIDED = re.compile(r"\b(?:i[ \t]+)?(?:can(?:no|'|’)?t|cannot|could(?:n(?:'|’)t|[ \t]+not)|(?:am|'m)[ \t]+unable[ \t]+to|"
                        r"do(?:n(?:'|’)t|[ \t]+not)[ \t]+(?:have[ \t]+time[ \t]+to|know))[ \t]+(?:pin[ \t]+(?:(?:it|this)[ \t]+)?down|"
                        r"tell[ \t]+which|decide|rule[ \t]+(?:either|one|out)|resolve[ \t]+which|be[ \t]+sure[ \t]+which|"
                        r"say[ \t]+which|determine[ \t]+which)"
                        r"|\b(?:not|n(?:'|’)t)[ \t]+(?:completely[ \t]+|entirely[ \t]+|fully[ \t]+)?(?:sure|certain)[ \t]+"
                        r"(?:which|whether)\b"
                        r"|\bboth[ \t]+(?:readings|interpretations|answers|values|options|cases|results)[ \t]+"
                        r"(?:seem|are|remain|look|could|might)\b"
                        r"|\b(?:could|can|would)[ \t]+you[ \t]+(?:please[ \t]+)?clarify\b"
                        r"|\b(?:the[ \t]+)?(?:problem|question|wording)[ \t]+(?:does(?:n(?:'|’)t|[ \t]+not)|did(?:n(?:'|’)t|[ \t]+not))"
                        r"[ \t]+(?:say|specify|make[ \t]+(?:it[ \t]+)?clear|tell)\b"
                        r"|\b(?:the[ \t]+answer[ \t]+is[ \t]+)?one[ \t]+of[ \t]+(?:these|those|the)[ \t]+two\b"
                        r"|\bwhich[ \t]+(?:interpretation|reading|one|version)[ \t]+did[ \t]+you[ \t]+(?:intend|mean)\b"
                        r"|\b(?:could|can|would)[ \t]+you[ \t]+(?:please[ \t]+)?(?:confirm|tell[ \t]+me)[ \t]+which\b|\bbefore[ \t]+i[ \t]+commit\b"
                        r"|\blet[ \t]+me[ \t]+know[ \t]+which\b|\bi[ \t]+don(?:'|’)t[ \t]+think[ \t]+i[ \t]+can[ \t]+(?:give|pin|say|be[ \t]+sure)\b"
                        r"|\bcan(?:no|'|’)?t[ \t]+give[ \t]+a[ \t]+(?:definitive|definite|final|clear)[ \t]+(?:answer|number|value)\b"
                        r"|\bnot[ \t]+(?:\w+[ \t]+)?confident[ \t]+in[ \t]+(?:a[ \t]+single|one|any|either)\b|\bbefore[ \t]+committing\b"
                        r"|\bnot[ \t]+(?:\w+[ \t]+)?confident[ \t]+enough[ \t]+to[ \t]+(?:pick|choose|decide|commit)\b"
                        r"|\bcan(?:no|'|’)?t[ \t]+narrow[ \t]+(?:it|this)[ \t]+down\b|\bjust[ \t]+as[ \t]+likely\b"
                        # "please say which you mean" in the grader's other languages
                        r"|لطفا[ً]?[ \t]+مشخص[ \t]+کنید|请说明|請說明|请问您?指的是|bitte[ \t]+(?:präzisieren|geben[ \t]+sie[ \t]+an)"
                        r"|veuillez[ \t]+préciser|pourriez-vous[ \t]+préciser|por[ \t]+favor,?[ \t]+(?:aclare|especifique|indique|esclareça)"
                        r"|per[ \t]+favore,?[ \t]+(?:specifica|chiarisci)|proszę[ \t]+(?:o[ \t]+)?(?:doprecyzowanie|sprecyzować|doprecyzować)"
                        r"|уточните|уточніть|lütfen[ \t]+belirt|có[ \t]+thể[ \t]+làm[ \t]+rõ|mohon[ \t]+(?:jelaskan|perjelas)|vui[ \t]+lòng[ \t]+(?:cho[ \t]+biết|làm[ \t]+rõ)"
                        r"|กรุณาระบุ|कृपया[ \t]+स्पष्ट|يرجى[ \t]+(?:التوضيح|توضيح|تحديد)|どちらか教えて|알려[ \t]*주시|upřesněte|specificera"
                        r"|kunt[ \t]+u[ \t]+aangeven"
                        # "So 24 or possibly something else.": a value, then anything else
                        r"|\bor[ \t]+(?:possibly[ \t]+|maybe[ \t]+|perhaps[ \t]+)?(?:something|anything)[ \t]+else\b"
                        # a value offered as a bound or one of two, never as the answer: "I'd flag both numbers rather
                        # than pick one", "treat it as an upper bound ... rather than the answer itself", "the most I can
                        # honestly say is that the minimum is at least 16"
                        r"|\brather[ \t]+than[ \t]+(?:pick(?:ing)?|choos(?:e|ing)|commit(?:ting)?[ \t]+to)[ \t]+(?:one|either)\b"
                        r"|\b(?:an?[ \t]+)?(?:upper|lower)[ \t]+bound\b[^.\n]*\brather[ \t]+than[ \t]+the[ \t]+answer\b"
                        r"|\bthe[ \t]+most[ \t]+i[ \t]+can[ \t]+(?:honestly[ \t]+|safely[ \t]+|really[ \t]+)?say\b"
                        r"|\bhaven(?:'|’)t[ \t]+been[ \t]+able[ \t]+to[ \t]+(?:convince[ \t]+myself|confirm|verify|show|prove)\b"
                        r"|не[ \t]+могу[ \t]+(?:точно[ \t]+)?(?:сказать|решить|выбрать)|\bsiwezi[ \t]+kuamua\b"
                        r"|\bcan(?:no|'|’)?t[ \t]+tell[ \t]+(?:precisely|exactly|for[ \t]+sure|from)\b"
                        r"|\bdo[ \t]+you[ \t]+want[ \t]+the\b[^\n?]*\bor\b[^\n]*\?|\blet[ \t]+me[ \t]+know[ \t]+and[ \t]+i(?:'|’)ll[ \t]+(?:confirm|finali[sz]e|update)\b"
                        r"|\b(?:você[ \t]+pode|podes|podrías|puedes|pourriez-vous|pouvez-vous|kannst[ \t]+du|könnten[ \t]+sie|potresti)[ \t]+"
                        r"(?:esclarecer|aclarar|préciser|clarifier|klären|bestätigen|chiarire)"
                        # "not sure" in Korean, Thai, Hindi, Polish, Indonesian, Vietnamese, Turkish, Dutch, Italian
                        r"|확실하지[ \t]*않|ไม่แน่ใจ|पक्का[ \t]+नहीं|यकीन[ \t]+नहीं|\bnie[ \t]+jestem[ \t]+pew(?:ien|na|ny)\b|不太确定|不能确定|\btidak[ \t]+yakin\b|\bkhông[ \t]+chắc\b"
                        r"|\bemin[ \t]+değilim\b|\bniet[ \t]+zeker\b|\bnon[ \t]+sono[ \t]+sicur"
                        r"|\bbefore[ \t]+i[ \t]+give[ \t]+a[ \t]+final[ \t]+answer\b|\bi(?:'|’)ll[ \t]+finali[sz]e\b"
                        r"|\bcan(?:no|'|’)?t[ \t]+give[ \t]+a[ \t]+single[ \t]+answer\b|\bdoes(?:n(?:'|’)t|[ \t]+not)[ \t]+settle\b"
                        r"|\b(?:it|this|that|the[ \t]+answer)[ \t]+depends[ \t]+on\b|\bin[ \t]+one[ \t]+case\b[^.]*\bin[ \t]+the[ \t]+other\b"
                        r"|\bno[ \t]+estoy[ \t]+segur[oa]|\bje[ \t]+ne[ \t]+suis[ \t]+pas[ \t]+s[ûu]r|\bnicht[ \t]+sicher\b"
                        r"|\bне[ \t]+уверен|\bnão[ \t]+tenho[ \t]+certeza|无法确定|不确定|わかりません|判断できません", re.IGNORECASE)
# what commits to an answer after a doubt: "..., but I'll go with 12", "... so the answer is 12"
_COMMITS = re.compile(r"\b(?:i(?:'|’)?ll|i[ \t]+will|i(?:'|’)?d|let(?:'|’)s|we(?:'|’)ll)[ \t]+(?:go[ \t]+with|choose|pick|take|"
                      r"settle[ \t]+on|answer)\b|\bgoing[ \t]+with\b|\b(?:most|more)[ \t]+likely\b|\bdefinitely\b|"
                      r"\bconfident\b|\\boxed", re.IGNORECASE)


def _undecided(text: str) -> bool:
    """Whether the solution's last paragraph says the model has not decided between answers ("I can't
    pin it down further", "Both readings seem possible", "Could you clarify whether ...?", "These
    disagree, and I don't have time to resolve which is correct.") and nothing after it commits to one
    ("..., but I'll go with 12", "so the answer is 12"): whatever it stated before answers nothing."""
    paragraphs = [p for p in re.split(r"\n[ \t]*\n", text.strip()) if p.strip() and not _FOOTER.match(p)]
    if not paragraphs:
        return False
    last = paragraphs[-1]
    doubts = list(_UNDECIDED.finditer(last))
    if not doubts:
        return False
    after = last[doubts[-1].end():]
    unconditional = [m for m in _ANSWER_PHRASE.finditer(after)
                     if not re.search(r"\b(?:if|unless|otherwise|whether)\b[^.;]*$", after[:m.start()], re.IGNORECASE)]
    return not (_COMMITS.search(after) or unconditional)


# a model saying it could not finish: "I'm not sure how to finish this one; the problem seems to be missing
# some information.", "There is not enough information to determine the answer."
# "I cannot" and "definitive" in the grader's other languages: "Je ne peux donc pas donner de réponse définitive",
# "Eine endgültige Antwort kann ich daher noch nicht geben", "Konečnou odpověď proto zatím nemohu dát"
_CANNOT = (r"(?:no[ \t]+puedo|não[ \t]+posso|não[ \t]+consigo|non[ \t]+posso|je[ \t]+ne[ \t]+peux|"
           r"(?:ich[ \t]+kann|kann[ \t]+ich)[^.\n]{0,30}?\bnicht|(?:kan[ \t]+ik|ik[ \t]+kan)[^.\n]{0,30}?\bniet|"
           r"(?:kan[ \t]+jag|jag[ \t]+kan)[^.\n]{0,30}?\binte|nie[ \t]+mogę|nemohu|nemůžu|не[ \t]+могу|не[ \t]+можу|"
           r"tidak[ \t]+(?:dapat|bisa)|không[ \t]+thể|no[ \t]+consigo|no[ \t]+logro|keine[nr]?|lyckas[ \t]+jag[ \t]+inte|"
           r"nie[ \t]+udało[ \t]+mi[ \t]+się|nie[ \t]+potrafię|не[ \t]+удалось|не[ \t]+вдалося|je[ \t]+n'arrive[ \t]+pas|"
           r"impossible[ \t]+de)")
_DEFINITIVE = (r"(?:definitiv\w*|définitiv\w*|definitief|endgültig\w*|ostateczn\w*|konečn\w*|slutgiltig\w*|окончательн\w*|"
               r"остаточн\w*|certa|sicura|pasti|chắc[ \t]+chắn|final\w*|segur\w*|eindeutig\w*|säkert|säker|однозначн\w*|"
               r"jednoznaczn\w*|univoc\w*)")
_GIVES_UP = re.compile(r"\b(?:i[ \t]*(?:'|’)?m|i[ \t]+am)[ \t]+(?:not[ \t]+sure|unsure|unable)[ \t]+(?:how[ \t]+)?(?:to[ \t]+)?"
                       r"(?:finish|solve|proceed|continue|complete|determine|answer)\b"
                       r"|\bi[ \t]+(?:can(?:no|'|’)?t|could(?:n(?:'|’)t|[ \t]+not))[ \t]+(?:solve|finish|determine|figure|work[ \t]+out|answer)\b"
                       r"|\b(?:missing|lacks?)[ \t]+(?:some[ \t]+)?(?:key[ \t]+|needed[ \t]+|necessary[ \t]+)?information\b"
                       r"|\bnot[ \t]+enough[ \t]+information\b"
                       r"|\bunable[ \t]+to[ \t]+(?:give|provide|offer|reach)[ \t]+(?:a|an|the)[ \t]+(?:(?:definitive|definite|final|clear|"
                       r"certain|reliable|single)[ \t]+)?(?:answer|result)\b"
                       # "I'll stop here without a final answer", "I'd rather not give a final answer than ..."
                       r"|\bwithout[ \t]+(?:giving[ \t]+)?a[ \t]+final[ \t]+answer\b|\brather[ \t]+not[ \t]+give[ \t]+(?:a|an)[ \t]+(?:final[ \t]+)?answer\b"
                       r"|\b(?:could|can)[ \t]+you[ \t]+double-?check[ \t]+the[ \t]+(?:problem|question)\b"
                       # "I cannot give a definitive answer" and "I can't reach a reliable result" in the grader's
                       # other languages
                       r"|\b" + _CANNOT + r"\b[^.\n]{0,40}?\b" + _DEFINITIVE + r"|\b" + _DEFINITIVE + r"\b[^.\n]{0,40}?\b" + _CANNOT + r"\b"
                       r"|\b(?:kesin|nihai)[ \t]+bir[ \t]+(?:cevap|yanıt|sonuç)[ \t]+(?:veremiyorum|vere[ \t]*miyorum|bulamıyorum)"
                       r"|无法(?:给出|得到|确定)|不能(?:给出|确定)|無法(?:給出|確定)|答えを?(?:出せ|確定でき)ません|確定的な答え[^。\n]{0,10}ません"
                       r"|(?:답을|답변을)[^.\n]{0,10}(?:드릴|할)[ \t]*수[ \t]*없|نمی[‌ ]?توانم[^.\n]{0,20}(?:پاسخ|جواب)"
                       r"|لا[ \t]+(?:أستطيع|يمكنني)[^.\n]{0,20}(?:إجابة|جواب)|(?:उत्तर|जवाब)[^।.\n]{0,20}नहीं[ \t]+दे[ \t]+(?:सकता|सकती)"
                       # (NFKC writes the Thai vowel ำ as ํ + า: both forms are matched)
                       r"|ไม่สามารถ(?:ให้|หา)ค(?:ำ|\u0e4d\u0e32)ตอบ|ค(?:ำ|\u0e4d\u0e32)ตอบที่แน่นอน[^\n]{0,10}ไม่ได้", re.IGNORECASE)


def _gives_up(text: str) -> bool:
    """Whether the solution's last paragraph says it could not finish ("I'm not sure how to finish this
    one; the problem seems to be missing some information."): a value worked out before it answers nothing."""
    paragraphs = [p for p in re.split(r"\n[ \t]*\n", text.strip()) if p.strip() and not _FOOTER.match(p)]
    return bool(paragraphs) and bool(_GIVES_UP.search(paragraphs[-1]))


# the words a sentence cannot end with: articles, prepositions, conjunctions, copulas, a verb before its object
_DANGLING = frozenset("""the a an of by to into from for with at as than per and or but because since if is are
    was were be equals gives give get gets makes become becomes we where whether might could would should will can
    may must need needs using when while its their his her our my your these those each every both onto about
    through then""".split())
# verbs that need an object: a text ending in one was cut off, unless a "what" clause is their object
_OBJECT_VERBS = frozenset("find use compute calculate determine consider requires require".split())


def _cut_off(text: str) -> bool:
    """Whether the text stops in the middle of a sentence (a search path or generation cut off by a
    step or token limit before it concluded): its last line is a bare step heading ("Step 2:"), or it
    ends in an operator, ``=``, a comma, a colon or an opening bracket, in a computation without its result
    ("each friend gets 780 ÷ 10"), or in a word no sentence ends with ("... so the number of days is", "Then
    we divide by"). Its last sentences state no answer."""
    last = text.rstrip().rstrip("*_ \t")
    if not last:
        return False
    if re.search(r"(?:^|\n)[ \t#>*_-]*step[ \t]*\d+[ \t]*[:.)]?$", last, re.IGNORECASE):
        return True
    # a minus after a term ("so 20 -"), never a horizontal rule ("---") closing the text
    if last[-1] in "=+−×*/÷·^(,:" and not last.endswith(":)") or re.search(r"[\w)}$][ \t]*-$", last):
        return True
    if re.search(r",[ \t]*(?:so|then|thus|hence|therefore|which|and|but)$", last, re.IGNORECASE):
        return True  # "She uses 6 eggs a day, so"
    if re.search(r"\b(?:must|should|needs?[ \t]+to|has[ \t]+to|have[ \t]+to|will|would|can|could)[ \t]+[a-z]+$", last):
        return True  # "Thus Oliver, who was at an elevation of 3,000 feet, must climb"
    if re.search(r"(?:\b(?:c'est-à-dire|es[ \t]+decir|ou[ \t]+seja|cioè|то[ \t]+есть|tức[ \t]+là|yaitu|yani|d\.[ \t]?h\.|że|aby|oraz|"
                 r"dass|weil|porque|que|parce|что|потому|що|rằng|bahwa|karena|çünkü|att|omdat|dat)|یعنی|أي|즉|つまり|即|考虑|還需要|"
                 r"还需要|然后|因为|并且|ので|ため|그리고|때문에)$", last, re.IGNORECASE):
        return True  # "مایکل ۶ اسکناس ۵ دلاری دارد، یعنی" ("..., that is"): cut off
    if re.search(r"\d[ \t]*[×÷*+][ \t]*\d+(?:\.\d+)?$", last) and "=" not in re.split(r"[.!?]\s", last)[-1]:
        return True  # "each friend gets 780 ÷ 10": the computation, never its result
    word = re.search(r"(?<![\\$])\b([A-Za-z]+)$", last)
    if word and word.group(1).lower() in _OBJECT_VERBS:  # "Next we need to use it to find", never "what it asks to find"
        sentence = re.split(r"[.!?]\s", last)[-1]
        return not re.search(r"\b(?:what|whatever)\b", sentence, re.IGNORECASE)
    return bool(word) and word.group(1).lower() in _DANGLING and not math_segments(last[word.start():])


# a span of 10 characters or more written three times or more in a row at the very end of the text
_LOOP = re.compile(r"(?P<unit>\S.{9,199}?)(?P=unit){2,}(?P<rest>.{0,200})\Z", re.S)


def _without_cut_repetition(text: str) -> str:
    """``text`` without the start of one more repetition of a whole sentence it repeats at its end ("So April has
    10 plant pots left over." three times, then "So April has"): a loop of whole sentences concludes each time,
    and only its last, cut-off copy states nothing."""
    tail = text.rstrip()
    if re.search(r"[.!?)}$*]$", tail):
        return text  # it ends with a sentence: nothing was cut off
    loop = _LOOP.search(tail[-2000:])
    rest = loop.group("rest") if loop else ""
    if not loop or not re.search(r"[.!?](?:\s|$)", loop.group("unit")) or not rest.strip() or \
            not loop.group("unit").startswith(rest.strip()):
        return text
    # the unit may start at its sentence's end (". So April has ... left over"): keep that full stop
    return tail[:len(tail) - len(rest)].rstrip() + (rest.strip()[0] if rest.strip()[0] in ".!?" else "")


def _oscillates(text: str) -> bool:
    """Whether ``text`` ends in a loop whose repeated span says one sentence twice with different numbers ("...
    = 3 But wait, we need to check again. ... = 13 But wait, we need to check again." over and over): the
    model goes back and forth between two values and commits to neither."""
    loop = _LOOP.search(text.rstrip()[-2000:])
    if not loop:
        return False
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|(?<=\d)\s+(?=[A-Z])", loop.group("unit")) if s.strip()]
    shapes = {}
    for sentence in sentences:
        shapes.setdefault(re.sub(r"\d+(?:\.\d+)?", "#", sentence), set()).add(sentence)
    return any(len(variants) > 1 for variants in shapes.values())


def _ends_in_loop(text: str) -> bool:
    """Whether the text ends in a generation loop cut off by the token limit ("log_2 7 · log_7 8 =
    log_2 7 · log_7 8 = ... ="): the same span three times or more in a row, then at most a start
    of it, and no sentence end at the end. Such a solution never concluded; its last sentences state
    no answer."""
    if re.search(r"[.!?)}$*]\s*$", text):
        return False  # a loop of whole sentences ("The remainder is 0." six times) concludes each time
    loop = _LOOP.search(text[-2000:])
    return bool(loop) and loop.group("unit").startswith(loop.group("rest").strip())


# a model taking back what it just stated: "\boxed{10}... wait, that's the discounts", "Wait, I should check"
_RETRACTION = re.compile(r"(?:^|(?<=[\s.!?)}$,]))(?:wait|actually|hmm+|hold on|oops|on second thought|attendez|attends|espera|"
                         r"espere|warte|moment(?:[ \t]+mal|(?=[ \t]*[,!]))|aspetta|подождите|погодите|रुकिए|रुको|等等|等一下|待って|"
                         r"ちょっと待って|待ってください|잠깐|انتظر|لحظة|bekle|bir[ \t]+dakika|khoan(?:[ \t]+đã)?|đợi(?:[ \t]+chút)?|"
                         r"เดี๋ยว(?:ก่อน)?|tunggu|wacht|chwila|halt|"
                         r"let[ \t]+me[ \t]+(?:re-?consider|re-?read|re-?think|redo|re-?compute|re-?check)|i(?:'|’)ll[ \t]+(?:re-?compute|re-?check|redo)|"
                         r"i[ \t]+need[ \t]+to[ \t]+re-?check|i[ \t]+forgot|we[ \t]+are[ \t]+not[ \t]+done|"
                         r"(?:we|i)[ \t]+still[ \t]+need[ \t]+to)(?:\b|(?<=[^\x00-\x7f]))[,.!:]?",
                         re.IGNORECASE)


def _retracted(text: str, end: int, problem: str | None) -> str | None:
    """The answer a solution concludes with after taking back the one stated before ``end`` (a box, an
    "answer is" phrase), else None: after "wait" / "actually" / "hmm", the answer of its last sentences
    (:func:`closing_answer`) when the retraction comes right after the stated answer ("\\boxed{10}...
    wait") or its last sentence is a conclusion ("So the only solution is $x = 5$.")."""
    cue = _RETRACTION.search(text, end)
    if not cue:
        return None
    rest = text[cue.start():]
    sentences = [s for s in _sentences(rest) if s.strip()]
    # the end of the stated answer's own sentence: the retraction follows it at once
    # (after a box: its closing marks; after "the answer is": the rest of its sentence)
    at_once = re.fullmatch(r"(?:[^\n.!?]|\.(?=\d))*[\s.,;:!)}\]$\\`]*", text[end:cue.start()]) is not None
    concludes = bool(sentences) and re.match(r"[\s*_#]*(?:so|thus|therefore|hence|the (?:only|final|correct)|"
                                              r"(?:that|this|which) (?:makes|gives)|\d|таким образом|итак|donc|"
                                              r"por lo tanto|portanto|daher|quindi|maka|jadi|vậy|dolayısıyla|"
                                              r"sonuç olarak)\b|[\s*_#]*(?:因此|所以|したがって|따라서|इसलिए|لذلك)",
                                              sentences[-1], re.IGNORECASE)
    concludes = concludes or bool(sentences) and re.search(
        r"\b(?:which|that|this)[ \t]+is[ \t]+(?:my|our|the)[ \t]+(?:final[ \t]+)?answer\b|\bdas[ \t]+ist[ \t]+meine[ \t]+antwort\b|"
        r"\bc(?:'|’)est[ \t]+ma[ \t]+réponse\b|\b(?:esa|esta)[ \t]+es[ \t]+mi[ \t]+respuesta\b", sentences[-1], re.IGNORECASE)
    if not (at_once or concludes) or len(sentences) < 2:
        return None
    later = _inverted_statement(rest, problem) or closing_answer(rest, problem)
    return later if later and re.search(r"[\d\\]", later) else None


# A conclusion's verb or sign, after which its answer comes: "Therefore, the area is 12", "so x = 4"
_CONCLUDES = re.compile(r"\b(?:so|thus|therefore|hence|meaning(?:[ \t]+that)?|(?:which|this|that)[ \t]+means(?:[ \t]+that)?"
                        # ... and in the grader's other languages: "..., vậy Bill đang ở tầng 17", "donc", "поэтому"
                        r"|donc|entonces|por[ \t]+lo[ \t]+tanto|então|portanto|quindi|dunque|поэтому|значит|итак|vậy|do[ \t]+đó|"
                        r"jadi|maka|dolayısıyla|bu[ \t]+yüzden)\b|所以|因此|したがって|よって|따라서",
                        re.IGNORECASE)
# A check restates the computation with the answer put in; it answers nothing ("Check: 3(46) - 9 = 129 ✓")
_CHECK = re.compile(r"^[\s*_>#-]*(?:(?:sanity[ \t]+|double[ \t-]*|last[ \t]+|final[ \t]+|quick[ \t]+)?check(?:ing)?|verif(?:y|ying|ication))\b|.*[✓✔][\s*_]*$"
                    # the answer put back in: "To verify, $2 \\cdot 4 + 3 = 11$.", "Substituting back, ...", "If we plug $x = 4$ back in",
                    # "Plugging in: $2(4) + 3 = 11$.", "Alternatively, we can plug in $x = 2$: ... \\ne 11"
                    r"|^[\s*_>#-]*(?:to[ \t]+(?:check|verify|confirm)\b|(?:if[ \t]+we[ \t]+|we[ \t]+can[ \t]+|let['’]?s[ \t]+)?"
                    r"(?:plug(?:ging)?|substitut(?:e|ing)|putting)\b[^.\n]{0,40}?\bback\b"
                    r"|(?:plug(?:ging)?|substitut(?:e|ing))[ \t]+(?:(?:it|this|that|(?:our|the)[ \t]+(?:answer|value|result))[ \t]+)?in(?:to)?\b[^.\n:]{0,30}[:：]"
                    r"|alternatively\b[^.\n]{0,30}?\b(?:plug|substitut|check|test|try))"
                    # "This matches the information given in the problem (6, 8, 12).", never "This matches option B."
                    r"|^[\s*_>#-]*(?:this|that|it)[ \t]+(?:matches|agrees[ \t]+with|is[ \t]+consistent[ \t]+with|checks[ \t]+out|fits)\b"
                    r"(?![^\n]*\b(?:option|choice|answer)\b)",
                    re.IGNORECASE)
# a heading that opens a check of the answer: "**Verification:**", "### Check"
_CHECK_HEADING = re.compile(r"^[ \t#*_]*(?:(?:sanity[ \t]+|double[ \t-]*)?check(?:ing)?|verif(?:y|ying|ication))"
                            r"(?:[ \t]+(?:the[ \t]+)?(?:answer|solution|result))?[ \t*_]*[:：]?[ \t*_]*$",
                            re.IGNORECASE | re.MULTILINE)
# An explanation that follows an answer given first ("$13\\sqrt{3}$ units.\n\nExplanation: ...", "**19**\n\nHere's why:",
# "Here's the breakdown:")
_EXPLANATION = re.compile(r"^[ \t*_#]*(?:explanation|reasoning|reason|justification|why"
                          r"|here(?:['’]s|[ \t]+is)[ \t]+(?:why|how|(?:the|a|my)[ \t]+(?:breakdown|reasoning|explanation))\b"
                          r"[^:\n]{0,30})[ \t*_]*[:：]",
                          re.IGNORECASE | re.MULTILINE)
# What a chat model adds after its answer: offers, wishes, notes, trivia ("Let me know if ...")
_FOOTER = re.compile(r"^[\s*_>#-]*(?:let me know|i hope|hope this|feel free|if you(?:'d| would)? like|"
                     r"note:|tip:|hint:|remark:|fun fact|p\.?s\.?\b|happy to help|if you (?:got|get|found|obtained)\b|"
                     r"(?:don(?:'|’)t|do not) confuse|be careful not to|a common (?:mistake|error|slip)|"
                     # a comparison or a consistency note after the answer: "For comparison, $f(2) = 30$."
                     r"(?:for|by|in) comparison\b|for (?:reference|context)\b|happy to\b|"
                     r"(?:this|that|these|those)[ \t]+(?:\w+[ \t]+)?(?:is|are)[ \t]+consistent\b)", re.IGNORECASE)
# A horizontal rule: what follows it is a footer once something was stated before it
_RULE_LINE = re.compile(r"^[ \t]*(?:-{3,}|\*{3,}|_{3,})[ \t]*$", re.MULTILINE)
_STATES = re.compile(r"\bis\b|\bare\b|\bequals?\b|(?<!\bto )\bbe\b|\bgives\b|\bmakes\b|\bmeasures\b|\btotals\b|\bha(?:s|ve|d)\b|"
                     r"\b(?:that|it|this|which|here|there)['’]s\b|\b(?:works?|comes?)[ \t]+(?:out[ \t]+)?to\b|"
                     r"\b(?:amounts|simplifies|reduces)[ \t]+to\b|\byields\b|\b(?:giving|yielding)\b|"
                     r"\bresult(?:s|ing)[ \t]+in\b|"
                     r"\bbelongs[ \t]+to\b|\bcosts?\b|=|"
                     # the same verbs in French, Spanish, Portuguese, German and Italian: "6 Äpfel kosten 2,70 €"
                     r"\b(?:est|sont|fait|font|vaut|coûtent|coûte|es|son|cuesta|cuestan|hace|é|são|custa|custam|ist|sind|"
                     r"beträgt|kostet|kosten|macht|ergibt|è|sono|costa|costano|fa)\b|"
                     r"(?<!\d):(?=\s)",
                     re.IGNORECASE)
# an aside in brackets after the answer: "(For comparison, a full serving is 60 g.)"
_ASIDE = re.compile(r"^\((?![A-Za-z]\)).*\)[.!]?$", re.S)  # not a choice letter: "(C)"


def _is_aside(sentence: str) -> bool:
    """Whether the sentence is wholly one bracketed aside ("(For comparison, a serving is 60 g.)"), not
    an equation of brackets ("(m, b) = (1.5, -13)")."""
    if not _ASIDE.match(sentence):
        return False
    depth = 0
    body = sentence.rstrip(".!")
    for i, ch in enumerate(body):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return i == len(body) - 1
    return False
# a value the answer is contrasted with: "28 pets in total — it's not 24", "$24, not $32 (...)"
_REJECTION = re.compile(r"\s*(?:[,;:]|—|–|--|\s-)\s*(?:(?:and|but)\s+)?(?:(?:it|that|this)(?:'s|\s+is|\s+was)\s+)?"
                        r"(?:not|rather\s+than|instead\s+of)\b.*$", re.IGNORECASE | re.S)
# an approximation in brackets closing a sentence, after its exact answer
_APPROXIMATELY = re.compile(r"\s*\((?:about|approximately|approx\.?|roughly|around|nearly|that\s+is|i\.e\.|equivalently|"
                            r"≈|~)[^()]*\)(?=[\s.!]*$)",
                            re.IGNORECASE)
# a name closing a "who ... the most" solution: "Navin would earn the most.", "So Evelyn has the greatest speed."
_WINNER = re.compile(r"^(?:(?i:so|thus|therefore|hence)[ \t,]+)?[*_]*([A-Z][a-z]+)[*_]*[ \t]+(?:\w+[ \t]+){0,3}?"
                     r"(?:the[ \t]+)?(?:most|least|fastest|slowest|greatest|best|largest|smallest|highest|lowest|"
                     r"longest|shortest|farthest|furthest)\b")
_NOT_NAMES = frozenset("The This That It He She They We You Each Every Both All None Which Who Whoever One So Thus "
                        "Therefore Hence Then Now Here There".split())
# another value offered in brackets after the answer
_OTHER_VALUE = re.compile(r"\((?:or[ \t]+)?(?:possibly|perhaps|maybe|or)[ \t]+\\?\$?(-?\d[\d.,]*(?:/\d+)?)", re.IGNORECASE)
# another value the model allows after its answer: "70, but it might also be 71 goats", "$15, or it could be $14"
_MIGHT_ALSO = (r"[^.\d\n]*?\b(?:but|or|though|although)[ \t]+(?:it|that|the[ \t]+answer)[ \t]+(?:might|could|may)[ \t]+"
               r"(?:also[ \t]+|even[ \t]+)?be[ \t]+(?:[^.\d\n]*?[ \t])?\\?\$?(-?\d[\d.,]*\d|\d)\b")
_MIGHT_ALSO_AFTER = re.compile(_MIGHT_ALSO, re.IGNORECASE)
# the two values of a modal hedge: "The answer could be 30 dragons or 130 dragons.", "70, but it might also be 71"
_MODAL_HEDGE = re.compile(r"(?:\b(?:could|might|may)[ \t]+be[ \t]+(?:either[ \t]+)?\\?\$?(-?\d[\d.,]*\d|\d)\b[^.\d\n]*?\bor\b"
                          r"[^.\d\n]*?\\?\$?(-?\d[\d.,]*\d|\d)\b)|(?:(-?\d[\d.,]*\d|\d)\b" + _MIGHT_ALSO + ")", re.IGNORECASE)
# another value in math allowed after the answer: "$30^\circ$, although $150^\circ$ is also possible" (a plain
# number joined by "or" is core.grading.hedges.alternative_after's)
_ALSO_POSSIBLE = re.compile(r"[ \t]*,?[ \t]*(?:although|though|but|while|and|or)[ \t]+(?:[^.$\n]*?[ \t])?\$([^$]+)\$[^.\n]*?"
                            r"\b(?:is|are|would[ \t]+be|could[ \t]+be|might[ \t]+be|may[ \t]+be)[ \t]+(?:also[ \t]+)?"
                            r"(?:possible|valid|correct|acceptable|an?[ \t]+(?:answer|solution|option))", re.IGNORECASE)
# the total a sentence closes on: "..., for a total of 70 minutes", "a grand total of $1,200"
_TOTAL_OF = re.compile(r"\ba[ \t]+(?:grand[ \t]+)?total[ \t]+of[ \t]+(?=\\?\$?-?\d)", re.IGNORECASE)
# a second value offered as an answer too: "I get 28, but 8 is also a reasonable answer"
_ALSO_ANSWER = re.compile(r"(-?\d[\d.,]*\d|\d)\b[^.\d]*?\b(?:but|although|though|while|or)\b[^.\d]*?(-?\d[\d.,]*\d|\d)\b[^.\d]*?"
                          r"\b(?:is|are|would[ \t]+be|could[ \t]+be|might[ \t]+be|may[ \t]+be)[ \t]+also[ \t]+(?:an?[ \t]+)?"
                          r"(?:reasonable|possible|valid|correct|acceptable|plausible)\b", re.IGNORECASE)
# the reason given after a stated answer, and a hedge between two values
# a reason after the answer, in the grader's languages: "2, since ...", "18, vì 4 × 3 + 6 = 18", "12, porque ..."
_REASON = re.compile(r"\s*,?\s+(?:because|since|porque|puisque|parce[ \t]+que|weil|perché|poiché|потому[ \t]+что|так[ \t]+как|"
                     r"vì|karena|çünkü)\b.*$", re.IGNORECASE | re.S)
_HEDGE = re.compile(r"\beither\b[^\d]*?(-?\d[\d.,]*\d|\d)\b.*?\bor\b[^\d]*?(-?\d[\d.,]*\d|\d)\b", re.IGNORECASE)
# a short answer alone on the last line ("Evelyn", "even", "C", "(B)", "(C) Plane"), not a word that closes a text
_BARE_ANSWER = re.compile(r"^[*_]*(?:\([A-Za-z]\)(?:[ ][A-Za-z][A-Za-z'-]*){0,2}|[A-Za-z][A-Za-z'-]*(?:[ ][A-Za-z][A-Za-z'-]*){0,2})[*_]*\.?$")
_NOT_ANSWERS = frozenset(["done", "qed", "end", "the end", "solution", "answer", "final answer", "thus", "therefore",
                          "so", "hence", "check", "verified", "correct", "ok", "okay", "good", "great", "thanks",
                          "thank you", "cheers", "hope this helps"])
# a variable's name alone: one letter or a Greek one, maybe with a subscript (never \pi: a value)
_LONE_VARIABLE = re.compile(r"(?:[A-Za-z]|\\(?:alpha|beta|gamma|delta|epsilon|theta|lambda|mu|phi|psi|omega|"
                            r"Delta|Theta|Phi|Omega))(?:_\{?\w+\}?)?")
# a pronoun points back at what the text said; it names no answer ("... and that's it")
_PRONOUNS = frozenset(["it", "this", "that", "these", "those", "they", "them", "he", "she", "him", "her", "we", "us",
                       "you", "one", "all", "both", "none", "everything", "nothing"])
_ABBREVIATION = re.compile(r"\b(?:Mr|Mrs|Ms|Dr|St|Prof|Sr|Jr|vs|etc|approx|e\.g|cf)\.$")
_SENTENCE_END = re.compile(r"(?<=[.!?])[ \t]+(?=[A-Z*$\\(])")


_DISPLAY_BLOCK = re.compile(r"\\\[(?:(?!\\\]).)*?\n(?:(?!\\\]).)*?\\\]|\$\$[^$]*?\n[^$]*?\$\$"
                            r"|\\begin\{((?:align|equation|gather|multline|eqnarray)\*?)\}.*?\\end\{\1\}", re.S)


_DISPLAY_LINE = re.compile(r"^\s*(?:\$\$.*\$\$|\\\[.*\\\]|\\begin\{(\w+\*?)\}.*\\end\{\1\})\s*$")


def _display_lines_joined(lines: list[str]) -> list[str]:
    """Lines with a display-math line joined to the sentence it belongs to: the line before when that
    line runs on into it ("So the quotient is" / ``$$x^5 - 1,$$``), the line after when it goes on in
    lower case ("with remainder $-2$.")."""
    out: list[str] = []
    joining = False  # the last line out ends in a display that a lower-case line may continue
    for line in lines:
        if _DISPLAY_LINE.match(line):
            if out and out[-1].strip() and not re.search(r"[.!?:]\s*$", out[-1]):
                out[-1] = out[-1].rstrip() + " " + line.strip()
            else:
                out.append(line)
            joining = True
        elif joining and re.match(r"\s*[a-z]", line):
            out[-1] = out[-1].rstrip() + " " + line.strip()
            joining = False
        else:
            out.append(line)
            joining = False
    return out


def _sentences(text: str) -> list[str]:
    """The sentences of ``text``: its lines, each split after ``.``/``!``/``?``, never inside math (a
    decimal point or a ``.`` in LaTeX stays). Lines first, since a dollar sign written as currency
    (``$75.00``) would otherwise pair with one on a later line into a "math segment"."""
    out = []
    # display math written over several lines (\\[ on its own line, the formula, \\]) is one sentence
    text = _DISPLAY_BLOCK.sub(lambda m: " ".join(m.group(0).split()), text)
    for line in _display_lines_joined(text.splitlines()):
        spans = [(a, b) for a, b, _ in math_segments(line)]
        start = 0
        for cut in _SENTENCE_END.finditer(line):
            if any(a < cut.start() < b for a, b in spans) or _ABBREVIATION.search(line, 0, cut.start()):
                continue  # within math, or after "Mrs." / "Dr." / "e.g.": no sentence ends there
            out.append(line[start:cut.start()])
            start = cut.end()
        out.append(line[start:])
    return [s.strip() for s in out if s.strip()]


def _outside_math(sentence: str, pattern: re.Pattern) -> list[re.Match]:
    spans = [(a, b) for a, b, _ in math_segments(sentence)]
    return [m for m in pattern.finditer(sentence) if not any(a <= m.start() < b for a, b in spans)]


# the words that state a value in Chinese, Japanese and Korean prose: "196 共有 9 个正因数", "$f(3)$ の値は 8 です",
# "的值为 47", "余数是 3", "답은 42"
_CJK_STATES = re.compile(r"是|为|為|等于|等於|有|需要|花了|用了|得到|一共|总共|合计|(?<!また)(?<!あるい)は|이다|은|는")  # または: "or"
_CJK = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]")


def _cjk_value(sentence: str) -> str | None:
    """The value a Chinese, Japanese or Korean sentence states right after its last stating word (outside
    math): the math or number that follows it; None when none follows it or the sentence has no such word."""
    if not _CJK.search(sentence):
        return None
    # an aside in brackets states nothing: "5（最初は 6 になりましたが、間違いでした）"
    sentence = re.sub(rf"[（(][^（）()]*{_CJK.pattern}[^（）()]*[）)]", " ", sentence)
    states = _outside_math(sentence, _CJK_STATES)
    if not states:
        return None
    after = sentence[states[-1].end():]
    lead = re.match(r"[ \t*_]*", after).end()
    segment = next((seg for seg in math_segments(after) if seg[0] == lead), None)
    if segment:
        return segment[2] or None
    if re.match(r"[-−]?\d", after[lead:]):
        return leading_expression(after[lead:])
    return None


def _math_answer(sentence: str) -> str | None:
    """The answer a sentence states in math: its last run of math segments (joined by "," / "and" /
    "or"), with the unit written after a lone number; in a chain ``5 + 3 = 8`` the value after the
    last ``=``, while a named value (``x = 4``, ``P = (8, -2)``) stays whole for the grader."""
    segments = math_segments(sentence)
    if not segments:
        return None
    first = len(segments) - 1
    # a chain of "=" ends in its own value: no list with the segments before it ("$2002 \\equiv 1$, $z = ... = 1+274i$")
    while first > 0 and segments[-1][2].count("=") < 2 and \
            _SEGMENT_JOINER.match(sentence[segments[first - 1][1]:segments[first][0]]):
        first -= 1
    if first > 0 and re.match(r"\s*(?:\\approx|≈)", segments[first][2]):
        first -= 1  # "$= 6\sqrt{2}$ cm $\approx 8.49$ cm": the rounding of the value before it
    ans, how = _phrase_answer(sentence[segments[first][0]:])
    return _stated_value(ans) if ans and how == _MATH else None


# one term in closed form: [-]a number, a fraction, a root, or a product of a number and a root or pi
_CLOSED_FORM = re.compile(r"-?(?:\d+(?:\.\d+)?|\\[dt]?frac\{[^{}]+\}\{[^{}]+\})?\s*(?:\\sqrt(?:\[\d\])?\{[^{}]+\}|\\pi)?")


# the left side of a named value: x, \theta, f(x), a_{n}, area (never a bracket or fraction: \left(..., \frac{..)
_NAMED = re.compile(r"\s*(?!\\(?:left|right|frac|dfrac|tfrac|sqrt|cdot|times|big|Big)(?![a-z]))\\?[A-Za-z]+"
                    r"(?:_\{?\w+\}?)?(?:\([^()]*\))?\s*")


def _is_equation(expr: str) -> bool:
    """An equation in variables, the answer whole (a plane ``5x - 7y + 11z + 4 = 0``, a line ``x + 2y = 3``),
    rather than a chain whose value is after the last ``=`` (``5 + 3 = 8``, ``2 \\cdot 6 = 12``): one ``=``,
    terms in a variable (a lone letter outside LaTeX commands) joined by ``+``/``-``/``^`` on its left, and
    no name there (``x = 4``, ``\\operatorname{proj}_{\\mathbf{b}}\\mathbf{a} = ...``)."""
    if expr.count("=") != 1:
        return False
    lhs, rhs = expr.split("=", 1)
    if re.fullmatch(r"[ \t]*\d+(?:\.\d+)?[ \t]+[A-Za-z]{2,}[ \t.]*", rhs) and re.search(r"\b[A-Za-z]{3,}\b", lhs):
        return False  # "6 h swimming + 3 h resting = 9 hours": a sum of quantities, its value after the "="
    return (not _NAMED.fullmatch(lhs) and bool(re.search(r"[-+^]", lhs))
            and bool(re.search(r"(?<![A-Za-z\\])[A-Za-z](?![A-Za-z])", re.sub(r"\\[A-Za-z]+", " ", lhs))))


def _stated_value(ans: str) -> str | None:
    """The value a piece of stated math gives: a congruence's residue, a chain's last value, the
    value an approximation ends on (``\\frac{57}{160} \\approx 0.3562``: the model answered the
    rounded value), a named value (``x = 4``) whole for the grader."""
    ans = ans.replace("≈", "\\approx ")
    if "\\approx" in ans:
        exact, rounded = ans.split("\\approx", 1)
        exact = exact.rsplit("=", 1)[-1].strip()
        # an exact closed form given first is the answer (\\sqrt{51} \\approx 7.14); a sum or a
        # product still to be done is not (1.3 + 1.91 \\approx 3.2: the model answered 3.2)
        ans = exact if exact and _CLOSED_FORM.fullmatch(exact) else rounded.rsplit("\\approx", 1)[-1]
    if "\\equiv" in ans:  # a congruence states its residue: 17^{-1} \equiv 44 \pmod{83}
        ans = re.sub(r"\\pmod\s*\{[^{}]*\}|\(\s*\\mod[^()]*\)|\\mod\s*\S+", "", ans.rsplit("\\equiv", 1)[1])
    elif (ans.count("=") > 1 and "," not in ans) or \
            ("=" in ans and not _NAMED.fullmatch(ans.split("=", 1)[0]) and not _is_equation(ans)):
        ans = ans.rsplit("=", 1)[1]  # a chain or an angle: the value after the last "="
    return ans.strip() or None


def _doubted(rest: str) -> bool:
    """Whether the answer after a label is put as a question ("$720 - 576 = 144$? Recounting ..."): its
    first sentence, math aside, ends in "?"."""
    line = next((ln for ln in rest.split("\n") if ln.strip(" \t*_:")), "")
    for a, b, _ in reversed(math_segments(line)):
        line = line[:a] + "M" + line[b:]
    end = re.search(r"[.?!](?=\s|$)", line)
    return bool(end) and end.group(0) == "?"


# a paragraph that checks the answer or adds to it, by its label: "Sanity check: 80 + 10 = 90 ✓. ...",
# "Extension: if they earn $13 per hour, ...", "💡 Tip: ..."
_ADDED_PARAGRAPH = re.compile(r"(?<=\n)[ \t]*\n[ \t#*_>\-\u2600-\u27bf\U0001F300-\U0001FAFF]*(?:(?:sanity|double|quick|final|last)"
                              r"[ \t-]*)?(?:check|verification|extension|tip|hint|bonus|challenge|follow[ \t-]*up|"
                              r"going[ \t]+further|try[ \t]+this)[ \t*_]*[:：]", re.IGNORECASE)


# a last paragraph that lists the answer's parts again: "Breakdown: May $96,000 · June $72,000."
_RECAP = re.compile(r"(?<=\n)[ \t]*\n[ \t#*_>\-]*(?:breakdown(?:[ \t]+recap)?|recap|summary|in[ \t]+detail)[ \t*_]*[:：]",
                    re.IGNORECASE)


# a last line that states one number, a total, and opens a list of its parts, the list closing the text
_PARTS_LIST = re.compile(r"(?:^|\n)(?P<intro>[^\n]*\d[^\n]*?)[ \t]*:[ \t]*(?:\n[ \t]*(?:[-*•]|\d+[.)])[ \t]+[^\n]*){2,}\s*$")


def _without_checks(text: str) -> str:
    """``text`` up to a horizontal rule or a check heading ("**Verification:**") that follows a number, or up
    to a last paragraph labelled as a check or an addition ("Sanity check: ...", "Extension: ...", "💡 Tip: ..."):
    what comes after only checks the answer or adds to it; nor a last paragraph that lists the parts of an
    answer the paragraph before gives in bold ("Breakdown: ..."), stating nothing of its own (no "=", "is",
    "total", no correction), nor a closing list of the parts of the one number its opening line states
    ("They caught 32 in total:" and a bullet per kind). A rule over a column sum's total is no rule."""
    rules = [m for m in _RULE_LINE.finditer(text) if re.search(r"\d", text[:m.start()])
             and not re.match(r"\s*\n[ \t]*[-−]?[\d.,]+[ \t]*(?:\n|$)", text[m.end():])]
    if rules:
        text = text[:rules[0].start()]
    # a labelled check or addition closes the text only as its last paragraph: one before the answer's is work
    added = [m for m in _ADDED_PARAGRAPH.finditer(text) if not re.search(r"\n[ \t]*\n[ \t]*\S", text[m.end():])]
    checks = [m for m in [*_CHECK_HEADING.finditer(text), *added] if re.search(r"\d", text[:m.start()])]
    text = text[:min(m.start() for m in checks)] if checks else text
    recap = _RECAP.search(text)
    if recap and not re.search(r"\n[ \t]*\n[ \t]*\S", text[recap.end():]) and \
            not re.search(r"[=≈→⇒]|\b(?:is|are|was|were|equals?|so|thus|total)\b", text[recap.end():], re.IGNORECASE) and \
            not _CORRECTION.search(text[recap.end():]) and \
            re.search(r"\*\*[^*\n]*\d[^*\n]*\*\*[^\n]*\s*$", text[:recap.start()]):
        # "... = **50 dumplings**.\n\nBreakdown recap: 32 for the guys, 18 for the women": the answer's parts again
        text = text[:recap.start()]
    parts = _PARTS_LIST.search(text)
    if parts and len(re.findall(r"(?<![\w.,])\d[\d,]*(?:\.\d+)?", parts.group("intro"))) == 1 and \
            re.search(r"\b(?:in[ \t]+total|total|in[ \t]+all|altogether|overall|combined)\b", parts.group("intro"), re.IGNORECASE) and \
            not _CORRECTION.search(text[parts.end("intro"):]):
        # "They caught 32 in total:\n- Starfish: 15\n- Sea horses: 9": the total, then its parts
        text = text[:parts.end("intro")] + "."
    return text


def _last_line_answer(last: str) -> str | None:
    """The answer a last sentence gives by its form alone: a short answer by itself ("Evelyn", "C"),
    LaTeX without ``$`` (``\\frac{5}{9}``), the name closing a "who has the most" solution."""
    if _BARE_ANSWER.match(last) and len(last.split()) <= 3 and last.strip("*_. ").lower() not in _NOT_ANSWERS \
            and not re.match(r"(?:that|it|this|there|here)['’]s\b", last.strip("*_ "), re.IGNORECASE):
        return last.strip("*_. ")
    if "\\" in last and not re.match(r"\s*(?:\\\[|\$\$)", last) and re.fullmatch(r"[\\\w{}^_+\-*/()\[\]., =<>|']+", last) \
            and not re.search(r"(?<!\\)\b[A-Za-z]{3,}", re.sub(r"\\[A-Za-z]+", " ", last)):
        return last.rstrip(".").strip()
    winner = _WINNER.match(last)
    if winner and winner.group(1) not in _NOT_NAMES and not re.search(r"\d", last):
        return winner.group(1)  # "Navin would earn the most."
    return None


# a comparison after the answer: ", which is less than a week (7 days)", ", which is more than the 40 she has"
# (", which is $10 more than Ethel", unless the question asks for such a difference)
_COMPARED = re.compile(r",?[ \t]+(?:which|that)[ \t]+(?:is|are|was|were)[ \t]+(?:(?:\\?\$)?[\w.,]+[ \t]+(?:\w+[ \t]+)?)?(?:less|more|greater|fewer|"
                       r"smaller|larger|bigger|shorter|longer|higher|lower|cheaper|faster|slower)[ \t]+than\b.*$",
                       re.IGNORECASE | re.S)
# the value likened to another after it, with no number of its own: "— the same number her son got"
_SAME_AS = re.compile(r"[ \t]*(?:—|–|,|;)[ \t]*(?:exactly[ \t]+|just[ \t]+)?the[ \t]+same[ \t]+(?:number|amount|as)\b[^\d\n]*$",
                      re.IGNORECASE)
# a question that asks for a difference: "How much more money ...", "how many fewer", "... than Ethel?"
_ASKS_DIFFERENCE = re.compile(r"\b(?:more|less|fewer|longer|shorter|older|younger|taller|heavier|cheaper|than|difference)\b",
                              re.IGNORECASE)
# a relative clause after the answer that only says it is the answer: ", which is how many Bobby has"
_RESTATED = re.compile(r",?[ \t]+which[ \t]+is[ \t]+(?:how[ \t]+many|how[ \t]+much|what|exactly[ \t]+what|the[ \t]+"
                       r"(?:answer|number|result|total|value|amount)\b)[^.\d:=$]*\.?\s*$", re.IGNORECASE)


# a value restated in another unit of the same dimension: "18 dollars, which is 1800 cents", "2 hours, that's
# 120 minutes", "3 km, i.e. 3000 m"
_CONVERTED = re.compile(r"(?<![\d.,])(?P<value>\d[\d,]*(?:\.\d+)?)[ \t]*\$?(?P<unit>[ \t]*[A-Za-z][A-Za-z \t]{0,20}?)[ \t]*"
                        r"(?P<cut>,[ \t]*(?:which[ \t]+(?:is|equals|comes[ \t]+to|makes)|that['’]s|that[ \t]+is,?|i\.[ \t]?e\.,?)"
                        r"[ \t]+(?:about[ \t]+|roughly[ \t]+|approximately[ \t]+|exactly[ \t]+)?(?P<again>\$?[ \t]*\d[\d,]*(?:\.\d+)?"
                        r"(?P<other>[ \t]*[A-Za-z][A-Za-z \t]{0,20})))", re.IGNORECASE)


def _without_conversion(plain: str, asked: str | None = None) -> str:
    """``plain`` with one value where it restates its value in another unit of the same dimension: "makes 18
    dollars, which is 1800 cents every day" -> "makes 18 dollars" (the value first written is the one
    computed), unless the restatement is in ``asked``, the unit key the question asks for
    (:func:`core.grading.units.asked_unit`): "2 hours, that's 120 minutes" -> "120 minutes" for "How many minutes?"."""
    for m in _CONVERTED.finditer(plain):
        first, second = measure_after(m.group("unit")), measure_after(m.group("other"))
        if not first or not second:
            continue
        first_key, second_key = unit_key(first).split("^")[0], unit_key(second).split("^")[0]
        if first_key != second_key and DIMENSIONS.get(first_key) and DIMENSIONS.get(first_key) == DIMENSIONS.get(second_key):
            if asked and second_key == asked:
                return plain[:m.start("value")] + m.group("again")
            return plain[:m.start("cut")]
    return plain


# where a value is attained, after it in brackets: "9 (attained at $x = 1$)", "**12** (when $n = 3$)"
_WHERE_ATTAINED = re.compile(r"[ \t]*\((?:attained|achieved|reached|obtained|occurring|which[ \t]+occurs|when|at|for|with)\b"
                             r"[^()\n]*\)|,[ \t]*(?:attained|achieved|reached|obtained|which[ \t]+(?:is[ \t]+)?(?:attained|achieved|occurs))"
                             r"[ \t]+(?:at|when|for|with)\b[^.;\n]*", re.IGNORECASE)


# words in brackets closing a sentence: "(that's 240 inches per minute).", "(a quarter, 0.25 of the whole)"
_FINAL_ASIDE = re.compile(r"[ \t]*\((?=[^()\n]*[^\W\d_]{2})[^()\n]*\)[ \t]*(?=[.!]?[ \t]*$)")
# a computation in brackets closing a sentence, that multiplies out a number stated before it: "(4 × 14 = 56)"
_CHECK_ASIDE = re.compile(r"[ \t]*\((?P<left>[^()=\n]*\d[ \t]*[×x*·+\-−/÷][ \t]*\d[^()=\n]*)=[^()=\n]*\)[ \t]*(?=[.!]?[ \t]*$)")


# a quantity derived from the value after it: "$9.00, which works out to $4.50 per week", "450 small jelly beans
# — that's six times the 75 large ones", "$450, which is 18% of her $2,500 in sales"
_DERIVED = re.compile(r"[ \t]*(?:,|—|–|;|[ \t]-)[ \t]*(?:(?:which|that|this|it)(?:['’]s|[ \t]+(?:is|works[ \t]+out[ \t]+to|comes[ \t]+"
                      r"(?:out[ \t]+)?to|means|makes))[ \t]+|(?=(?:about|roughly|approximately|around)[ \t]))(?:an[ \t]+average[ \t]+of[ \t]+)?(?:about[ \t]+|roughly[ \t]+|exactly[ \t]+|just[ \t]+(?:over|under)[ \t]+)?"
                      r"\\?\$?(?P<value>\d[\d,]*(?:\.\d+)?|[a-z]+)[ \t]*(?P<kind>%|percent\b|times\b|"
                      r"(?:[A-Za-z]+[ \t]+)?(?:per[ \t]+[a-z]+|(?:a|an|each)[ \t]+(?:day|week|month|year|hour|minute|person|guest|student)"
                      # "— that's 315 kg in a week", "that's $9,360 over a 52-week year"
                      r"|(?:in|over|for)[ \t]+(?:a|an|one|each|every)[ \t]+(?:\d+-[a-z]+[ \t]+)?(?:day|week|month|year))\b)[^\n]*$",
                      re.IGNORECASE)


def _without_derived(plain: str, question: str) -> str:
    """``plain`` without a clause after its value that derives another quantity from it (a percentage, a
    multiple, a rate: "$9.00, which works out to $4.50 per week over the two weeks") unless the question
    (lowercased) asks for that kind of quantity ("What percent ...?", "How many times ...?", "... per week?")."""
    m = _DERIVED.search(plain)
    if not m or not re.search(r"\d", plain[:m.start()]):
        return plain
    kind = m.group("kind").lower()
    if kind.startswith("times") and not (spelled_number(m.group("value")) or m.group("value")[0].isdigit()):
        return plain
    per = re.escape(kind.split()[-1])  # a rate: the question asks for one "per week", "each day", "on average"
    asks = {"%": r"percent|%", "percent": r"percent|%", "times": r"\btimes\b|how[ \t]+many[ \t]+times"}.get(
        kind.split()[0], rf"\b(?:per|each|a|an|every)[ \t]+{per}|\b(?:on|the|an)[ \t]+average\b")
    return plain if re.search(asks, question) else plain[:m.start()]


def _without_where_attained(plain: str) -> str:
    """``plain`` without a bracket after a value that says where it is attained ("**Minimum value: 9** (attained
    at $x = 1$)": its math is the argument, not the value), nor words in brackets that close a sentence which
    states a number before them ("... 4 inches per second (that's 240 inches per minute)."): an aside."""
    m = _WHERE_ATTAINED.search(plain)
    if m and re.search(r"\d[*$}_ \t]*$", plain[:m.start()]):
        return plain[:m.start()] + plain[m.end():]
    m = _FINAL_ASIDE.search(plain)
    if m and re.search(r"\d", plain[:m.start()]):
        return plain[:m.start()] + plain[m.end():]
    m = _CHECK_ASIDE.search(plain)
    if m and any(re.search(rf"(?<![\d.,]){re.escape(n)}(?![\d.,]*\d)", plain[:m.start()])
                 for n in re.findall(r"\d+(?:\.\d+)?", m.group("left"))):
        return plain[:m.start()] + plain[m.end():]  # "14 slices, with 0 left over (4 × 14 = 56).": a check of 14
    return plain


def _statement(sentence: str, asked: str | None = None, question: str = "") -> str:
    """A sentence as it states its answer: numbers in words as digits, and without a value contrasted
    after the answer ("-- not 24"), an approximation in brackets after it ("(about $10.82$)"), its
    reason ("is 0, because $54 = 6 \\times 9$"), its value again in another unit ("18 dollars, which is
    1800 cents": :func:`_without_conversion`, ``asked`` the unit key the question asks for) or a quantity
    derived from it (", which is 18% of her sales": :func:`_without_derived`, ``question`` the question lowercased)."""
    plain = _APPROXIMATELY.sub("", _REJECTION.sub("", digits_for_words(sentence.replace("**", ""))))
    plain = _RESTATED.sub("", _restated_explicitly(_without_conversion(_without_derived(plain, question), asked)))
    plain = _SAME_AS.sub("", plain)  # "3 oranges — the same number her son got"
    compared = _COMPARED.search(plain)
    if compared and not (re.search(r"\d", compared.group(0).split("than")[0]) and _ASKS_DIFFERENCE.search(question)):
        plain = plain[:compared.start()]
    check = _CHECK_CLAUSE.search(plain)
    if check and re.search(r"[-+*/×·^]", check.group("left")) and \
            not re.search(r"\\Rightarrow|\\implies|⇒|⟹", plain[check.end():]) and \
            re.search(rf"(?<![\d.,]){re.escape(check.group('value'))}(?![\d.,]*\d)", check.group("left")):
        # "k = 2^2 3^2 5^2 = 900, making 240·900 = 216000": a check of 900; "= 6$, so $\frac{-2y-3}{6} = \frac56
        # \Rightarrow y = -4$" goes on to a new result
        plain = plain[:check.start("clause")]
    reason = _REASON.search(plain)
    return plain[:reason.start()] if reason and re.search(r"\d", plain[:reason.start()]) else plain


# a clause after a stated value that puts it back into the problem: "= 900, making 240·900 = 216,000 = 60³"
_CHECK_CLAUSE = re.compile(r"=[ \t]*\$?[ \t]*(?P<value>\d[\d,]*(?:\.\d+)?)[ \t]*\$?(?P<clause>,[ \t]*(?:making|giving|"
                           r"so(?:[ \t]+that)?|which[ \t]+(?:makes|gives)|and|confirming|check(?:ing)?:?)[ \t]+)"
                           r"\$?(?P<left>[^=$]+)\$?[ \t]*=", re.IGNORECASE)
# a choice letter after an arrow at the end of a text: "... = 22 → B"
_ARROW_CHOICE = re.compile(r"(?:→|=>|⇒|->)[ \t*_]*\(?([A-E])\)?[*_.]*[ \t]*$")
# a "who ...?" question, and a name in bold that answers it in any language
_ASKS_WHO = re.compile(r"\bwho(?:m|se)?\b")
_BOLD_NAME = re.compile(r"\*\*([A-Z][a-z]+)\*\*")
# a value in bold as the text's first paragraph ("**16 blue marbles.**\n\nLet blue = 4k ..."), never a
# numbered heading ("**1. Set up**")
_BOLD_FIRST = re.compile(r"\s*\*\*[ \t]*((?:\\?\$)?-?\d(?![\d.]*\.?[ \t]+[A-Z])[^*\n]*?)[ \t]*\*\*[ \t.]*\n[ \t]*\n")
# a number and what it counts, before the math it is about: " 76 degrees in ", " 6 ways to choose "
_COUNT_BEFORE_NAME = re.compile(r"[ \t]*(-?\d[\d.,]*)[ \t]+(?!(?:times|plus|minus|over|divided|multiplied)\b)[A-Za-z][A-Za-z \t]*")


def _count_of_named(plain: str, states: list, segments: list) -> str | None:
    """The number a statement gives when the sentence's math only names what it counts: ``76 degrees``
    for "There are 76 degrees in $\\angle B$.", ``6`` for "There are 6 elements in $S$.", ``2`` for "has 2
    $y$-intercepts"; else None
    (math with a digit or a relation in it is a value, not a name)."""
    if not segments or not states or states[-1].end() > segments[0][0] or re.search(r"[\d=<>]", segments[0][2]):
        return None
    # math that is part of the noun: "The parabola has 2 $y$-intercepts, at $y=2\pm\sqrt5$."
    m = re.fullmatch(r"[ \t]*(\d+)[ \t]+", plain[states[-1].end():segments[0][0]])
    if m and re.match(r"-[A-Za-z]", plain[segments[0][1]:]):
        return m.group(1)
    if any(re.search(r"[\d=<>]", content) for _, _, content in segments):
        return None
    m = _COUNT_BEFORE_NAME.fullmatch(plain, states[-1].end(), segments[0][0])
    return _with_unit(m.group(1), plain, m.start(1)) if m else None


# a count of what the question counts, then the list of them: "That gives $3 \times 2 = 6$ values: $1, 2, 3$."
_COUNT_THEN_LIST = re.compile(r"(?<![\w.,])(\d+)\$?[ \t]+(?P<noun>(?:[A-Za-z-]+[ \t]+)?[A-Za-z-]+)[ \t]*:[ \t]*(?P<list>[^:]*)$")


def _count_before_list(plain: str, noun: str | None) -> str | None:
    """The count in a sentence that gives the number of what "How many ...?" counts, then lists them after a
    colon ("6 values: $1, 2, 3, 4, 6, 12$" -> ``6``), else None."""
    m = _COUNT_THEN_LIST.search(plain) if noun else None
    if m and counts(" " + m.group("noun"), noun) and m.group("list").count(",") >= 1:
        return m.group(1)
    return None
# bold that closes a sentence (the answer a model marks): "she faces **east**.", "would cost **$18.90**."
_BOLD_CLOSE = re.compile(r"(?:(?<=\s)|^)\*\*([^*\n]+?)\*\*(?:[ \t]+[A-Za-z]+){0,2}[ \t]*[.!]?[ \t]*$")  # "— **6** values."


# what makes a sentence after a stated value more than a remark on it: a conclusion, a correction, a hedge, a total,
# a verb that states a value
_NOT_REMARK = re.compile(r"\b(?:so|thus|therefore|hence|then|wait|actually|but|however|instead|mistake|correct\w*|oops|sorry|"
                         r"hmm|answer|final\w*|(?<!\d )total|in[ \t]+all|altogether|overall|combined|mean(?:s|ing)|making|gives?|"
                         r"giving|or|maybe|perhaps|might|could|probably|approximately|about|redo|recheck\w*|recalculat\w*|is|are|was|were|"
                         r"be|equals?)\b"
                         r"|[=→⇒]", re.IGNORECASE)
_CORRECTION = re.compile(r"\b(?:wait|actually|but|however|instead|mistake|correct\w*|oops|sorry|hmm|or|redo|recalculat\w*)\b",
                         re.IGNORECASE)


# where a closing sentence's first clause ends and an elaboration of its value begins: ", compared with 49", "; he
# has $115", ": $30,000 for the miles", " — a quarter of an hour" (not a list's comma: "3, 5, 7")
_ELABORATION = re.compile(r"[ \t]*(?:,(?![ \t]*[-−]?\d)|;|:|—|–|--)[ \t]*")
# what makes the rest of a sentence more than an elaboration: a total, the answer named, a hedge or a correction
_HEDGED_HEAD = re.compile(r"\b(?:or|maybe|perhaps|possibly|might|could|either|unless|if)\b", re.IGNORECASE)
_NOT_ELABORATION = re.compile(r"\b(?:in[ \t]+total|total|altogether|in[ \t]+all|overall|combined|answer|final\w*|or|maybe|"
                              r"perhaps|possibly|might|could|either|unless|if|otherwise|wait|actually|but|however|instead|"
                              r"mistake|correct\w*|not|rather|no)\b", re.IGNORECASE)


def _outside_math_text(text: str, segments: list) -> str:
    """``text`` with its math segments (:func:`math_segments`) blanked out."""
    for start, end, _ in reversed(segments):
        text = text[:start] + " " * (end - start) + text[end:]
    return text


def _question_overlap(sentence: str, words: frozenset[str]) -> int:
    """How many of the question's words (:func:`core.grading.question.question_words`) ``sentence`` holds, a
    word of four letters or more matched by its first four ("earns" for "earn", "received" for "receive")."""
    found = {stem(w) for w in re.findall(r"[A-Za-z]+", sentence)}
    return sum(any(w == q or (len(q) >= 4 and w[:4] == q[:4]) for w in found) for q in words)


def _head_answer(sentence: str, problem: str | None) -> str | None:
    """The value the first clause of a closing sentence states, where the rest of the sentence only elaborates
    on it with other numbers: "He pays $31,800 a year: $30,000 for the miles and $1,800 in bonuses." for "How
    much does he pay a year?", "So the sum of the roots of $g$ is 34, compared with 49 for $f$.", "The
    original price was $36, so the discount was $21.60." The first clause must state one value (a verb, or
    "=" in its math) and hold more of the question's words than the rest (two more where the rest concludes
    with "so", as many where it breaks the value down: "240 people: 40 working days × 6 people a day"); the
    rest must compute nothing ("=") and hold no total, answer, hedge or correction, the first clause no hedge;
    else None (:func:`closing_answer` reads the sentence as usual)."""
    if not problem:
        return None
    first = re.search(r"\d", sentence)
    cut = next((m for m in _outside_math(sentence, _ELABORATION) if first and m.start() > first.start()), None)
    if cut is None:
        return None
    head, tail = sentence[:cut.start()], sentence[cut.end():]
    if _NOT_ELABORATION.search(tail) or _HEDGED_HEAD.search(head):
        return None
    if not re.search(r"\d", tail) or (re.match(r"(?:that(?:'|’)?s|that[ \t]+is|i\.?e\.?|which[ \t]+(?:is|equals|means)|namely)\b",
                                            tail, re.IGNORECASE) and not _COMPARED.match(", " + tail)):
        return None  # "2 hours, that's 120 minutes": the value again, for the conversion rules ("which is 3 more
        # than Darren's 11" compares)
    if re.search(r"=|\\Rightarrow|\\implies|⇒", tail):
        return None  # "..., so the 2003rd is $2(2003) - 1 = 4005$": the rest computes the answer
    segments = math_segments(head)
    noun, unit = counted_noun(problem), asked_unit(problem)
    numbers = list(re.finditer(r"(?<![\w.,])\d[\d,]*(?:\.\d+)?", _outside_math_text(head, segments)))
    # the numbers of the first clause that count what the question counts: "They dug 11 holes on the fourth day"
    money = not unit and _ASKS_MONEY.search(question_of(problem))
    counted = [m for m in numbers if _of_asked_kind(head[m.end():], noun, unit)
               or (money and re.search(r"\$[ \t]*$", head[:m.start()]))]  # "Pauline spent $75 ... over the 8 years"
    if not [m for m in [*_outside_math(head, _STATES), *_outside_math(head, _PAST_STATES)] if m.group(0) not in (":", "=")] and \
            not any("=" in seg[2] for seg in segments) and not re.search(r"\b[a-z]+s\b[ \t]+\\?\$?\d", head) and \
            not (counted and re.match(r"[\s*_]*[A-Z][a-z]*(?:[ \t]+[a-z]+){1,3}[ \t]+\\?\$?\d", head)):
        return None  # a label, no statement: "3-inch cube: ...", "Domain: $2<x<102$, $x \neq 12$"
    if len(numbers) + sum(bool(re.search(r"\d", seg[2])) for seg in segments) != 1 and len(counted) != 1:
        # one value in the first clause, or one of what the question counts: "She can drive 300 miles on a full
        # 12-gallon tank" for "How many miles ...?"
        return None
    words = question_words(problem)
    ours, theirs = _question_overlap(head, words), _question_overlap(tail, words)
    # the rest concludes ("so the discount was $21.60"): two words more; it breaks the value down ("40 working
    # days × 6 people a day"): as many
    margin = 2 if _CONCLUDES.search(tail) else 0 if re.search(r"[×*+·÷][ \t]*\\?\$?\d", tail) else 1
    if ours < 1 or ours < theirs + margin:
        return None
    return closing_answer(head.rstrip(" ,") + ".", problem)


def _remark(last: str, previous: str, problem: str | None) -> bool:
    """Whether ``last``, the sentence after ``previous`` in one paragraph, only remarks on the value ``previous``
    states: it names none of what the question asks while ``previous`` restates the question ("Jen will earn
    $34.00 if she sells everything. The sweet potatoes bring in the most ($20)." for "If she sells everything,
    how much will she earn?": at least two of the question's words, :func:`core.grading.question.question_words`,
    and more than ``last`` holds); or it says what would have been ("Bentley paid $11,050. Before the increase,
    the same 170 balloons would have cost only $7,650."), or speaks of something else ("Leila, meanwhile, is
    left with $50.") or breaks the value down ("That's $3 per soda and $2 per water."). Never where ``last``
    corrects ("wait", "actually", "or"); and, but for those last two readings, never where it is in bold,
    concludes, hedges, totals or states ("so", "in all", "=", "is"): a value stated after another is the
    answer as a rule."""
    if not problem or not re.search(r"\d", previous) or not re.search(r"\d", last) or \
            re.search(r"\b(?:wait|actually|mistake|correct\w*|oops|sorry|instead|redo|recalculat\w*)\b", last, re.IGNORECASE):
        return False
    if re.search(r"\bwould(?:n't|[ \t]+not)?(?:[ \t]+only)?[ \t]+have\b|\bwould've\b", last, re.IGNORECASE) and \
            not re.search(r"\bwould\b", question_of(problem), re.IGNORECASE):
        return True
    if not _CORRECTION.search(last) and (
            re.search(r"\b(?:meanwhile|incidentally|by[ \t]+the[ \t]+way)\b", last, re.IGNORECASE)
            or (re.match(r"(?:that|this)(?:['’]s|[ \t]+is)\b", last, re.IGNORECASE)
                and len(re.findall(r"\d[\d.,]*[ \t]+(?:per|each|for|on)[ \t]+[a-z]", last)) >= 2)):
        return True  # "Leila, meanwhile, is left with $50.", "That's $3 per soda and $2 per water.": about other things
    if _CORRECTION.search(last) or _NOT_REMARK.search(last) or "**" in last:
        return False
    words = question_words(problem)
    return _question_overlap(previous, words) >= 2 and _question_overlap(last, words) < _question_overlap(previous, words)


def closing_answer(text: str, problem: str | None = None) -> str | None:
    """The answer a solution states in its last sentences when it has no answer marker (no box, no
    ``####``, no "the answer is", no ``Answer:`` line): "Therefore, $x = \\frac{9}{19}$.", "So she
    pays $36.00 in all.", "The line is $y = -2x$.".

    Of the last three sentences, the last one that states something: the math or expression after
    its last "is" / "=" / "equals" / ":" outside math (a name or a word or two when it is the last
    sentence: "... is Evelyn."), else its math (:func:`_math_answer`), else the first expression that
    starts with a number (prose rules of :func:`leading_expression`). A sentence that is a question
    ("What is 2 + 3?") states nothing; nor does a check line, an offer, wish or note after the
    answer ("Let me know if ...", "I hope this helps", "Note: ..."), nor anything after a horizontal
    rule (``---``) that follows a number. Numbers written in words count as their digits
    ("makes eighteen dollars" -> 18, :mod:`core.grading.number_words`), and a lone variable named
    as the subject gives way to the value its sentence states in prose ("So $\\alpha$ measures
    145 degrees." -> 145). A short answer alone on the last line is the answer ("Evelyn", "C"); a
    sentence wholly in brackets is an aside; a value contrasted after the answer ("-- not 24",
    ", rather than 13") is cut off; a number as the subject of a verb with words after it is the
    answer ("30 units are unoccupied."); display math written over several lines is one sentence.

    A sentence is read from the part that concludes (:func:`_main_clause`: after a ``;`` or a premise
    clause, "Since each box holds 6 eggs, ..."), and from its conclusion when a "so" / "thus" follows
    its last verb ("gives 2 plus 1, so the robe takes 3 bolts"). Bold closing the last sentence is its
    answer ("she faces **east**."), and a name in bold in the last sentence answers a "who ...?" question
    that names that person ("**Navin** verdient am meisten."). Where the problem's question counts
    something ("How many eggs ...?", :func:`core.grading.question.counted_noun`), the last number that
    counts it is the answer of a sentence without a verb that states one ("4 boxes hold 24 eggs" ->
    ``24``), and a subject that counts it wins over the value its verb states ("490 daps equal 42 dips" -> ``490``).

    Args:
        text: the solution, normalised and cut as :func:`extract_answer` does.
        problem: the problem statement, or None.

    Returns:
        The answer string, or None when no such sentence holds math or a number.
    """
    noun, unit = counted_noun(problem), asked_unit(problem)
    question = _plain_question(problem)
    explained = list(_EXPLANATION.finditer(text))
    if explained and explained[-1].start() > 0 and text[:explained[-1].start()].strip():
        # the answer first, then its explanation: the answer is what came before the label
        head = closing_answer(text[:explained[-1].start()], problem)
        if head:
            return head
    first = _BOLD_FIRST.match(text)
    if first and not re.search(r"[:：]", first.group(1)) and len(first.group(1).split()) <= 4:
        # a value in bold as the first paragraph, the work that arrives at it after: "**16 blue marbles.**"
        value = _in_digits(_phrase_answer(first.group(1))[0])
        number = value and re.match(r"\\?\$?(-?\d[\d.,]*)", value)
        if number and re.search(r"(?<![\d.,])" + re.escape(number.group(1).rstrip(".,")) + r"(?![\d]|[.,]\d)",
                                drop_thousands_separators(text[first.end():])):
            return value
    sentences = [s for s in _sentences(_without_checks(text))
                 if not _CHECK.match(s) and not _FOOTER.match(s) and not _is_aside(s)]
    paragraph = _BLANK_LINE.split(text.rstrip())[-1]
    while len(sentences) >= 2 and sentences[-2] in paragraph and document_language(paragraph) is None and \
            _remark(sentences[-1], sentences[-2], problem):  # the question's words are English words
        sentences.pop()  # "Jen will earn $34.00. The sweet potatoes bring in the most ($20).": the answer, a remark
    alone = _last_line_answer(sentences[-1]) if sentences else None
    if alone:
        return alone
    arrow = _ARROW_CHOICE.search(sentences[-1]) if sentences and problem else None
    if arrow and re.search(rf"(?:\({arrow.group(1)}\)|^{arrow.group(1)}[.)])", problem, re.MULTILINE):
        return f"({arrow.group(1)})"  # "P = 2·8 + 2·3 = 22 → B": the option the result is
    named = _BOLD_NAME.search(sentences[-1]) if sentences and problem and _ASKS_WHO.search(question) else None
    if named and re.search(rf"\b{named.group(1)}\b", problem):
        return named.group(1)  # "**Navin** verdient am meisten.": the person a "who ...?" question asks for
    bold = _BOLD_CLOSE.search(sentences[-1]) if sentences else None
    if bold and not bold.group(1).rstrip().endswith(":") and len(bold.group(1).split()) <= 4:
        # the last sentence ends in what it puts in bold: "she faces **east**.", "would cost **\$18.90**."
        named = re.match(r"[A-Za-z][A-Za-z ]*?[ \t]*\$?[ \t]*=", bold.group(1))  # "**Area $= \sqrt{45}$**"
        ans = closing_answer(bold.group(1)) if named else _in_digits(_phrase_answer(bold.group(1))[0])
        if ans:
            return ans
    for sentence in reversed(sentences[-3:]):
        if sentence.rstrip("*_ ").endswith("?"):
            continue
        # asides first: a ";" inside brackets ends no clause ("20 cm long (yellow 12 cm, blue 5 cm; check: ...)")
        whole = _without_where_attained(digits_for_words(sentence))
        head = _head_answer(whole, problem) if sentence is sentences[-1] else None
        if head:
            return head
        plain = _statement(_main_clause(whole), unit, question)
        stated_cjk = _cjk_value(plain)
        if stated_cjk:  # "所以 196 共有 9 个正因数。": the value after its last stating word
            return stated_cjk
        conclusion = ([None] + _outside_math(plain, _CONCLUDES))[-1]
        stated = _outside_math(plain, _STATES)
        if conclusion and stated and stated[-1].end() <= conclusion.start() and \
                re.search(r"\d", plain[conclusion.end():]):
            plain = plain[conclusion.end():]  # "... gives 2 plus 1, so the robe takes 3 bolts": the conclusion
        total = list(_TOTAL_OF.finditer(plain))
        value = _chain_value(plain[total[-1].end():]) if total else None
        if value:  # "30 minutes on crosswords and 40 on sudoku for a total of 30+40 = 70 minutes": the total concludes
            return _with_unit(value, plain, plain.find(value, total[-1].end()))
        hedge = _HEDGE.search(plain) or _ALSO_ANSWER.search(plain) or _MODAL_HEDGE.search(plain)
        if hedge:  # "either $125 (jewelry) or $96", "could be 30 dragons or 130 dragons": two answers, none
            first, second = [g for g in hedge.groups() if g is not None]
            return f"{first}, {second}"
        keyed = _keyed_number(_statement(whole, unit, question), problem) if problem else None
        if keyed:  # "Scores: Naomi 68, Yuri 44, Brianna 85, and Jojo 54." for "How many points did Jojo score?"
            return keyed
        states = _outside_math(plain, _STATES)
        words = [m for m in states if m.group(0) != "="]
        roots = _values_of_one_name(plain[words[-1].end():]) if words else None
        if roots:
            return roots  # "the solutions are x = 2 and x = 7"
        if words and states[-1].group(0) == "=" and _is_equation(plain[words[-1].end():].strip().rstrip(".")):
            states = words  # "the plane is 5x-7y+11z+4=0": the equation is what "is" states
        segments = math_segments(plain)
        count = _count_of_named(plain, states, segments) or _count_before_list(plain, noun)
        if count:  # "There are 76 degrees in $\angle B$.": the math names what the number counts
            return count
        if segments and (not states or states[-1].start() < segments[-1][0]):
            # the sentence's last statement is its math: "gives $2x = 14$, so $x = 7$"; not a lone
            # variable named as the subject with its value in prose ("So $\alpha$ measures 145 degrees.")
            # ... unless the math after the statement is followed by an aside, with no new conclusion
            # ("measures $55^\\circ$, the complement of $35^\\circ$": the answer is 55)
            stated = [seg for seg in segments if states and seg[0] >= states[-1].end()]
            aside = stated and re.match(r"\s*(?:[,;(]\s*(?:the|a|an|which|i\.e\.|or)|,?\s*with)\b", plain[stated[0][1]:]) \
                and not _CONCLUDES.search(plain, stated[0][1])
            ans = _math_answer(plain[:stated[0][1]] if aside else plain)
            if ans and not (_LONE_VARIABLE.fullmatch(ans) and re.search(r"\d", plain[segments[-1][1]:])):
                return ans
        if states:
            after = plain[states[-1].end():]
            ans, how = _phrase_answer(after)
            if ans and how == _MATH and not re.match(r"[\s:*_]*(?:\$|\\[(\[]|\\[A-Za-z])", after):
                ans = None  # words before the math ("is all $y \le 0$"): the math alone, below
            elif ans and how == _MATH:
                ans = _stated_value(ans)
            head = plain[:states[-1].start()]
            # the verb's subject: after the last "so" / "meaning" before it ("..., meaning 4 hours are needed")
            concluded = _outside_math(head, _CONCLUDES)
            head = head[concluded[-1].end():] if concluded else head
            head = re.sub(r"^[\s,]*(?:then\b)?[\s,]*", "", head, flags=re.IGNORECASE)
            subject = _chain_value(head)  # a computation as the subject: "20/2 = 12 loaves are sold" -- 12
            if ans and how in (_MATH, _EXPRESSION, _LATER_EXPRESSION):
                if noun and how != _MATH and subject and re.match(r"-?\d", subject) and \
                        counts(head[len(subject):], noun) and not counts(after[after.find(ans) + len(ans):], noun):
                    return subject  # the subject counts what is asked: "490 daps equal 42 dips" -> 490
                if noun and "," in ans:  # a list, then its count: "gives 1, 2, 4, ..., 196 -- 9 divisors"
                    count = next((m.group(0) for m in re.finditer(r"(?<![\w.,])\d+(?![\w.,])", after)
                                  if counts(after[m.end():], noun)), None)
                    if count:
                        return count
                rest = after[after.find(ans) + len(ans):] if ans in after else ""
                if noun and how != _MATH and re.fullmatch(r"-?\d+(?:\.\d+)?", ans) and not counts(rest, noun):
                    # the stated value counts something else, a later number what is asked: "= 36 eggs in
                    # total, and at 6 a day they last 6 days" -> 6
                    later = [m.group(0) for m in re.finditer(r"(?<![\w.,])\d+(?:\.\d+)?(?![\w.,])", rest)
                             if counts(rest[m.end():], noun)]
                    if later:
                        return later[-1]
                return ans
            if ans and how == _WORDS and subject and re.match(r"(?:\\?\$[ \t]*)?[-−]?\d", subject):
                return subject  # the number is the subject: "30 units are unoccupied.", "So $15 is left."
            if ans and how == _WORDS and sentence is sentences[-1] and ans.strip(" .!").lower() not in _PRONOUNS and \
                    len(re.sub(r"^(?:a|an|the)\s+", "", ans, flags=re.IGNORECASE).split()) <= 2:
                return ans  # a named answer closing the solution: "... is Evelyn."
        ans = _math_answer(plain)
        if ans and not (_LONE_VARIABLE.fullmatch(ans) and re.search(r"\d", plain[segments[-1][1]:])):
            return ans
        # in prose, the clause after the last "so" / "thus" / "therefore" / "hence" concludes
        conclusions = list(_CONCLUDES.finditer(plain))
        clause = plain[conclusions[-1].end():] if conclusions and re.search(r"\d", plain[conclusions[-1].end():]) \
            else plain
        clause = _main_clause(clause)  # "so, with 12 tickets at 4 a ride, she can go 3 times": its main clause
        found = []  # (start, expression, its span as written) of each expression in the clause, in order
        # each starts at a number (or the brackets before it, or a root: "-√3 < x < √3"), or at a variable that an
        # inequality bounds ("t < -2")
        for num in re.finditer(r"(?<![A-Za-z0-9_.([])(?:[([][ \t]*)*[-−]?√?\d|(?<![\w\\])[A-Za-z](?=[ \t]*[<>≤≥])",
                               clause):
            if found and num.start() < found[-1][0] + found[-1][2] or re.search(r"\d,$", clause[:num.start()]):
                continue  # within the last one ("8,000": its 000; "2 hours and 40 minutes": its 40)
            expr = leading_expression(clause[num.start():])
            if expr is not None:
                found.append((num.start(), expr, len(_with_unit(expr, clause, num.start()))))
        # a number the question itself gives is no answer to it ("multiply 10 by 1.5" for "By what number
        # should he multiply $10$?", "the 400-meter hurdles in 36 seconds"), while another remains
        found = [f for f in found if not _given(clause, f[0], f[1], question)] or found
        if len(found) > 1 and document_language(clause) is not None:
            # in another language the words around a number are not the question's: any number it gives
            # ("Dus in de laatste 6 uur keren 75 bijen terug." for "... in the last 6 hours of the day?")
            asked_numbers = set(re.findall(r"\d+(?:\.\d+)?", question))
            found = [f for f in found if f[1] not in asked_numbers] or found
        # the problem's own number before its rounding: "57/160 ≈ 0.356" for "Convert 57/160 to a decimal"
        found = [f for f in found if not (_in_problem(f[1], problem) and
                                          re.match(r"[ \t]*(?:≈|\\approx|~)[ \t]*\S", clause[f[0] + len(f[1]):]))] or found
        money = not unit and problem and _ASKS_MONEY.search(question_of(problem))
        counted = [(start, expr) for start, expr, _ in found
                   if _of_asked_kind(clause[start + len(expr):], noun, unit)
                   or (money and (expr.startswith(("$", "\\$"))
                                  or unit_key(measure_after(clause[start + len(expr):]) or "") == "dollar"))]
        if counted:  # the (last) number of what the question counts: "4 boxes hold 24 eggs" -> 24; the money
            # a question asks for: "2 người nhận tổng cộng 1520 đô la" ("the 2 of them get 1520 dollars") -> 1520
            start, expr = counted[-1]
            return _with_unit(expr, clause, start)
        if found:
            start, expr, _ = found[0]
            return _with_unit(_with_half_day(expr, clause[start:]), clause, start)
    return None


# a number in prose, with a dollar sign before it or a percent sign after it
_PROSE_NUMBER = re.compile(r"(?<![\w.,\\])(\\?\$)?(-?\d[\d,]*(?:\.\d+)?)(?![\d,]*\.?\d)(%)?")
# a question that asks for money
_ASKS_MONEY = re.compile(r"\bhow[ \t]+much[ \t]+money\b|\bamount[ \t]+of[ \t]+money\b|\bin[ \t]+dollars\b|\bhow[ \t]+much\b[^?]*\b"
                         r"(?:earn|make|pay|spend|cost|save|charge|owe|raise|collect|lose)", re.IGNORECASE)


def _of_asked_kind(after: str, noun: str | None, unit: str | None) -> bool:
    """Whether a number followed by ``after`` is of what the question asks: it counts the question's noun
    (:func:`core.grading.question.counts`: "24 eggs") or carries the unit it asks for ("3 miles")."""
    return bool((noun and counts(after, noun)) or (unit and unit_key(measure_after(after) or "") == unit))


# words that never label a number: articles, prepositions, pronouns, auxiliaries
_UNWEIGHED = frozenset("""the a an of in on at for to from by with and or but is are was were be been has have had it its
    he she they them their his her we our you your i my this that these those there which who so then than""".split())


def _keyed_number(plain: str, problem: str | None) -> str | None:
    """Of the numbers a sentence lists in prose without stating one ("Scores: Naomi 68, Yuri 44, Brianna 85,
    and Jojo 54."), the one the question asks for, where one stands out: the only one that counts the
    question's noun or carries its unit ("22 men and 8 women are left" for "How many women ...?"), else the
    only amount of money where the question asks for money, else the one whose label (the words before it,
    after the last comma or dash) holds the question's words: "Jojo 54" for "How many points did Jojo
    score?", "Anthony keeps 10" for "How many pencils did Anthony keep?". None when the sentence computes
    (math, an operator), concludes after its first number ("so", "∴") or states a value with a verb
    ("... and the greater one is 18"), holds fewer than two values, or nothing stands out."""
    if not problem or math_segments(plain) or re.search(r"[=+×*/÷_^√π∞<>≤≥·]|\d[ \t]*-[ \t]*\d", plain):
        return None
    plain = re.sub(r"[ \t]*\([^()]*\)", "", plain)  # asides: "$2,100 ($1,200 in the first month plus $900 ...)"
    if re.search(r"\d[^\W\d]*[ \t]+(?:or|either|oder|ou|o)[ \t]+\\?\$?\d", plain):
        return None  # "sent 44 or 48 people": a hedge between two values, for the hedge rules to read
    numbers = list(_PROSE_NUMBER.finditer(plain))
    if len({drop_thousands_separators(m.group(2)) for m in numbers}) < 2:
        return None
    if any(c.start() > numbers[0].start() for c in _CONCLUDES.finditer(plain)):
        return None  # "Sam had 20 apples, ate 8 ∴ 12 are left.": the conclusion decides
    noun, unit, words = counted_noun(problem), asked_unit(problem), question_words(problem)
    counted = [m for m in numbers if not re.match(r"[ \t]+(?:more|fewer|less)\b", plain[m.end():])  # "8 fewer women"
               and _of_asked_kind(plain[m.end():], noun, unit)]
    money = [m for m in numbers if m.group(1)] if _ASKS_MONEY.search(question_of(problem)) else []
    if counted:  # "So the polygon has 8 sides, and the omitted angle is 10°." for "How many sides ...?"
        chosen = counted[0] if len(counted) == 1 else None
    elif any(v.start() > numbers[0].start() and re.match(r"[ \t]*\\?\$?-?\d", plain[v.end():])
             for v in [*_STATES.finditer(plain), *_PAST_STATES.finditer(plain)] if v.group(0) != ":"):
        return None  # "The 2 integers are 16 and 18, and the greater one is 18.": a verb states the value
    elif money:  # "She sold 65 books in the second year for $1,300.": the only amount of money
        chosen = money[0] if len(money) == 1 else None
    else:
        scores = []
        given = set(re.findall(r"\d+(?:\.\d+)?", drop_thousands_separators(question_of(problem))))
        for k, m in enumerate(numbers):
            if drop_thousands_separators(m.group(2)) in given:
                scores.append(-1)  # "in the remaining 24 liters" for "How much water is in the remaining 24 liters?"
                continue
            before = plain[numbers[k - 1].end() if k else 0:m.start()]
            before = re.split(r"[,;:—–(]|\b(?:and|or)\b", before)[-1]  # what came before belongs to the last number
            label = [w for w in re.findall(r"[A-Za-z][A-Za-z'-]*", before) if w.lower() not in _UNWEIGHED]
            # the word right before a number weighs most ("Jojo 54"), then the one before it ("Anthony keeps 10")
            scores.append(sum(weight * (stem(w) in words) for weight, w in zip((2, 1), reversed(label))))
        best = max(scores)
        chosen = numbers[scores.index(best)] if best >= 1 and scores.count(best) == 1 else None
    if chosen is None:
        return None
    return _with_unit((chosen.group(1) or "") + chosen.group(2) + (chosen.group(3) or ""), plain, chosen.start())


def _plain_question(problem: str | None) -> str:
    """The problem's question (:func:`core.grading.question.question_of`) without math delimiters and
    extra spaces, lowercased, numbers in words as digits ("the three wolves' howls"), to find the numbers
    it gives; ``""`` without a problem."""
    if not problem:
        return ""
    text = re.sub(r"\\[()\[\]]|\$|\\!|[{}]", " ", normalise_unicode(question_of(problem)))
    return " ".join(digits_for_words(drop_thousands_separators(text)).lower().split())


def _given(clause: str, start: int, expr: str, question: str) -> bool:
    """Whether the number ``expr`` at ``start`` in ``clause`` is one the question gives: written there with
    the word before or after it ("multiply 10", "400-meter")."""
    if not question or not re.fullmatch(r"-?\d+(?:\.\d+)?", expr):
        return False
    before = re.search(r"([A-Za-z]+)[ \t$]*$", clause[:start])
    after = re.match(r"[ \t$]*(-?)[ \t]*([A-Za-z]+)", clause[start + len(expr):])
    phrases = ([f"{before.group(1).lower()} {expr}"] if before else []) + \
        ([f"{expr}{after.group(1)}{' ' if not after.group(1) else ''}{after.group(2).lower()}"] if after else [])
    return any(re.search(r"(?<![\w.])" + re.escape(p) + r"(?![\w])", question) for p in phrases)


# a clause that opens a sentence with its premise, before the comma: "Since each box holds 6 eggs, ...",
# "Paying with a $10 bill, ..."
_INTRO_CLAUSE = re.compile(r"^[\s*_]*(?:(?i:since|because|as|with|after|if|given|when|now that|once|using|at|in|for|by|"
                           r"over)\b|(?i:[a-z]+ing)\b)[^,;]*,[ \t]+")
# a premise clause within a sentence, before its conclusion: "..., and since the order covers 2 months, ..."
_PREMISE = re.compile(r",[ \t]+(?:and[ \t]+)?(?:since|because|as)\b[^,;]*,[ \t]+", re.IGNORECASE)


def _main_clause(plain: str) -> str:
    """The part of a sentence that concludes, where the rest only leads up to it: after the last ``;``
    ("ten packs cost $6.00; paying with a $10 bill, Carl gets $4 back"), after a premise clause at its
    start or within it ("Since the board is cleaned 3 times per lesson, it is cleaned 24 times"); the
    sentence itself when that part holds no number, or the cut would fall within math."""
    def cut(at: int) -> bool:
        return re.search(r"\d", plain[at:]) is not None and not any(a < at < b for a, b, _ in math_segments(plain))

    semicolons = [m.end() for m in re.finditer(";", plain)]
    if semicolons and cut(semicolons[-1]):
        plain = plain[semicolons[-1]:]
    intro = _INTRO_CLAUSE.match(plain)
    if intro and cut(intro.end()):
        plain = plain[intro.end():]
    premises = [m.end() for m in _PREMISE.finditer(plain)]
    if premises and cut(premises[-1]):
        plain = plain[premises[-1]:]
    return plain
