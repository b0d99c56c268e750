"""Numbers written in English words, as models write answers: "twenty-one", "One hundred twenty",
"three units", "eighteen dollars"; and one-word numbers of five other languages ("seis días").

Only whole numbers from zero to the billions in the usual short scale, with hyphens or spaces
between the words and an optional "and" after a hundred ("one hundred and five"), and fractions
with a numerator in words ("one-third", "two thirds", "three quarters", "a half") or a half after a
whole number ("two and a half" -> ``2 1/2``); an ordinal alone is left alone ("the third day", "a
quarter": words a grader must not read as numbers).
"""

from __future__ import annotations

import re

_ONES = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"thousand": 10 ** 3, "million": 10 ** 6, "billion": 10 ** 9}
_WORDS = {*_ONES, *_TENS, "hundred", *_SCALES}
# a run of number words (and the "and" / hyphens between them), as a whole word sequence
_ANY_WORD = "|".join(sorted(_WORDS, key=len)[::-1])
_RUN = r"(?:%s)(?:(?:[ \t]+(?:and[ \t]+)?|-)(?:%s))*" % (_ANY_WORD, _ANY_WORD)
NUMBER_RUN = re.compile(rf"\b{_RUN}\b", re.IGNORECASE)


def spelled_number(text: str) -> int | None:
    """The whole number ``text`` spells (case and hyphens do not matter), or None when it is not one.

    >>> spelled_number("One hundred twenty"), spelled_number("twenty-one"), spelled_number("a dozen")
    (120, 21, None)
    """
    words = re.split(r"[ \t]+|-", text.strip().lower())
    if not words or words == [""]:
        return None
    total, group, last = 0, 0, None  # last: the kind of the previous word, to refuse "twenty twenty"
    scale_before = None  # scales must fall: "two million three thousand", never "thousand million"
    for i, word in enumerate(words):
        if word == "and" and last == "hundred" and i + 1 < len(words):
            continue
        if word in _ONES:
            if last in ("one", "teen") or (last == "ten" and _ONES[word] >= 10):
                return None
            group += _ONES[word]
            last = "teen" if _ONES[word] >= 10 else "one"
        elif word in _TENS:
            if last in ("one", "teen", "ten"):
                return None
            group += _TENS[word]
            last = "ten"
        elif word == "hundred":
            if last not in ("one", "teen", "ten") or group >= 100:
                return None
            group *= 100
            last = "hundred"
        elif word in _SCALES:
            if group == 0 or (scale_before is not None and _SCALES[word] >= scale_before):
                return None
            scale_before = _SCALES[word]
            total += group * _SCALES[word]
            group, last = 0, "scale"
        else:
            return None
    if last is None:
        return None
    return total + group


_DENOMINATORS = {"half": 2, "halves": 2, "third": 3, "fourth": 4, "quarter": 4, "fifth": 5, "sixth": 6, "seventh": 7,
                 "eighth": 8, "ninth": 9, "tenth": 10}
_NUMERATOR = r"one|two|three|four|five|six|seven|eight|nine"
# "one-third", "two thirds", "three quarters", "one half", "a half", "two and a half", "5 and a half"
_FRACTION = re.compile(rf"\b(?:(?P<whole>\d+|{_RUN})[ \t]+and[ \t]+a[ \t]+half"
                       rf"|(?P<num>{_NUMERATOR}|a(?=[ \t]+half))[ \t-]+(?P<den>halves|half|(?:third|fourth|quarter|fifth|"
                       rf"sixth|seventh|eighth|ninth|tenth)s?))\b", re.IGNORECASE)


def fraction(m: re.Match) -> str:
    """One match of ``_FRACTION`` as digits: ``1/3``, ``2 1/2``; as written when the words are no fraction
    ("one thirds" keeps its words, since one takes the singular)."""
    if m.group("whole"):
        whole = m.group("whole") if m.group("whole").isdigit() else spelled_number(m.group("whole"))
        return m.group(0) if whole is None else f"{whole} 1/2"
    num = 1 if m.group("num").lower() == "a" else spelled_number(m.group("num"))
    den_word = m.group("den").lower()
    plural = den_word.endswith("s") and den_word != "halves" or den_word == "halves"
    if num is None or (num == 1) == plural:
        return m.group(0)
    return f"{num}/{_DENOMINATORS[den_word.rstrip('s') if den_word != 'halves' else 'halves']}"


# Whole numbers as one word in Spanish, Portuguese, French, German and Italian (2 to 20 and the tens), as
# models answer in the problem's language ("Respuesta: seis días"); words that are also common words of
# these languages or of English stay words: articles (un, une, ein), "neuf" (new), "sei" (are), "elf", "cent",
# "once", "due", "otto", "sept", "seize"
_FOREIGN = {
    **dict(zip("dos tres cuatro cinco seis siete ocho nueve diez doce trece catorce quince dieciséis "
               "diecisiete dieciocho diecinueve veinte treinta cuarenta cincuenta sesenta setenta ochenta "
               "noventa".split(), [*range(2, 11), *range(12, 21), *range(30, 100, 10)])),
    **dict(zip("quatro cinco sete oito nove dez onze doze treze catorze quinze dezesseis dezessete dezoito "
               "dezenove vinte trinta quarenta cinquenta sessenta setenta oitenta noventa".split(),
               [4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 30, 40, 50, 60, 70, 80, 90])),
    **dict(zip("deux trois quatre cinq huit dix onze douze treize quatorze quinze vingt trente "
               "quarante cinquante soixante".split(), [2, 3, 4, 5, 8, 10, 11, 12, 13, 14, 15, 20, 30, 40, 50, 60])),
    **dict(zip("zwei drei vier fünf sechs sieben acht neun zehn zwölf dreizehn vierzehn fünfzehn sechzehn "
               "siebzehn achtzehn neunzehn zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig "
               "neunzig".split(), [*range(2, 11), *range(12, 21), *range(30, 100, 10)])),
    **dict(zip("quattro cinque sette nove dieci undici dodici tredici quattordici quindici sedici "
               "diciassette diciotto diciannove venti trenta quaranta cinquanta sessanta settanta ottanta "
               "novanta".split(), [4, 5, 7, 9, 10, *range(11, 21), *range(30, 100, 10)])),
}
_FOREIGN_RUN = re.compile(r"(?<![\w-])(?:%s)(?![\w-])" % "|".join(sorted(_FOREIGN, key=len)[::-1]), re.IGNORECASE)


def digits_for_words(text: str) -> str:
    """``text`` with every run of number words that spells a number replaced by its digits
    ("makes eighteen dollars" -> "makes 18 dollars"); a lone "one" stays (it is a pronoun as often:
    "one of them", "the one") unless a word of quantity comes before it ("exactly one of them") or a
    comparative after it ("she needs one more dollar"), and
    so does a number that picks items out ("the first two terms", "the other three")."""
    def replace(m: re.Match) -> str:
        value = spelled_number(m.group(0))
        before = m.string[:m.start()]
        counted = re.search(r"\b(?:exactly|only|just|precisely)\s+$", before, re.IGNORECASE) or \
            re.match(r"\s+(?:more|less|fewer|extra|additional)\b", m.string[m.end():], re.IGNORECASE)
        if value is None or (m.group(0).lower() == "one" and not counted):
            return m.group(0)
        if re.search(r"\b(?:first|next|other|top|previous)\s+$|\b(?:the|its|their|his|her|these|those|our|my|your)"
                     r"\s+(?:very\s+)?last\s+$", before, re.IGNORECASE):
            return m.group(0)  # "the first two terms" picks terms out ("the eggs last six days" does not)
        return str(value)

    text = _FRACTION.sub(fraction, text)
    text = NUMBER_RUN.sub(replace, text)
    text = _FOREIGN_RUN.sub(lambda m: str(_FOREIGN[m.group(0).lower()]), text)
    return re.sub(r"\b(?:minus|negative)[ \t]+(?=\d)", "-", text, flags=re.IGNORECASE)  # "minus three" -> -3
