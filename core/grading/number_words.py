"""Numbers written in English words, as models write answers: "twenty-one", "One hundred twenty",
"three units", "eighteen dollars"; and numbers of five other languages ("seis días", "quatre-vingt-dix"),
read by text2num in the language a sentence is written in.

Only whole numbers from zero to the billions in the usual short scale, with hyphens or spaces
between the words and an optional "and" after a hundred ("one hundred and five"), and fractions
with a numerator in words ("one-third", "two thirds", "three quarters", "a half") or a half after a
whole number ("two and a half" -> ``2 1/2``); an ordinal alone is left alone ("the third day", "a
quarter": words a grader must not read as numbers).
"""

from __future__ import annotations

import re

from text_to_num import text2num

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


# Short words frequent in each language and rare in the others (and in English), to tell which language a
# sentence is in: "La vitesse moyenne du train est de quatre-vingt-dix km/h." is French
_STOPWORDS = {
    "fr": set("le la les est et des du une pour avec sont dans il elle qui au aux donc chaque réponse font coûte "
              "coûtent reste total".split()),
    "es": set("el los las es y por para una del con cada son hay cuesta cuestan respuesta entonces quedan".split()),
    "pt": set("o os é do da dos das um uma com não são cada resposta então custa custam ficam".split()),
    "de": set("der das und ist sind ein eine mit für von dem im jede jeder kostet kosten antwort insgesamt "
              "bleiben wir sie nicht auch gibt".split()),
    "it": set("il lo gli è di della sono che ogni costa costano risposta quindi rimangono".split()),
}
_ENGLISH = set("the is are and of to in so we that it this for with each then there has have was were".split())
_ANSWER_WORDS = {"réponse", "respuesta", "resposta", "antwort", "risposta"}
# a lone word that is also a common word of its language: "sei" (you are), "neuf" (new)
_AMBIGUOUS = {"it": {"sei"}, "fr": {"neuf"}}
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")  # a word; a hyphenated compound is one


def language_of(text: str) -> str | None:
    """The language ``text`` is written in, when its short words show one (two of them, or the word for
    "answer"): ``"fr"``, ``"es"``, ``"pt"``, ``"de"`` or ``"it"``; None for English (as many English short
    words), or where two languages score alike or too few words show one."""
    # a letter beside math is a variable, not a word: "y^{2} = −5x + 44" has no Spanish "y"
    text = re.sub(r"(?<![^\W\d_])[^\W\d_](?=[ \t]?[=^+\-−*/(<>≤≥_²³⁴])|(?<=[=^+\-−*/(<>≤≥])[ \t]?[^\W\d_](?![^\W\d_])|"
                  r"(?<=\d)[^\W\d_](?![^\W\d_])", " ", text)  # "25y", "y +", "= y"
    words = [w.lower() for w in _WORD.findall(text)]
    # the word for "answer" counts twice: "Respuesta: seis días" is Spanish
    scores = {lang: sum((w in stop) * (1 + (w in _ANSWER_WORDS)) for w in words) for lang, stop in _STOPWORDS.items()}
    best = max(scores.values())
    leaders = [lang for lang, score in scores.items() if score == best]
    english = sum(w in _ENGLISH for w in words)
    return leaders[0] if best >= 2 and len(leaders) == 1 and best > english else None


# Russian cardinals in the nominative (and the feminine одна / две), by the part of a number each word is
_RUSSIAN = {**dict(zip("ноль один одна одно два две три четыре пять шесть семь восемь девять".split(),
                       [0, 1, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9])),
            **dict(zip("десять одиннадцать двенадцать тринадцать четырнадцать пятнадцать шестнадцать семнадцать "
                       "восемнадцать девятнадцать".split(), range(10, 20))),
            **dict(zip("двадцать тридцать сорок пятьдесят шестьдесят семьдесят восемьдесят девяносто".split(),
                       range(20, 100, 10))),
            **dict(zip("сто двести триста четыреста пятьсот шестьсот семьсот восемьсот девятьсот".split(),
                       range(100, 1000, 100)))}


def _russian_number(words: str) -> int:
    """The number Russian cardinal words spell ("восемьдесят" -> 80, "сто двадцать пять" -> 125, "две тысячи
    триста" -> 2300): each group of hundreds, tens and units in falling order, times a thousand before
    "тысяча"/"тысячи"/"тысяч". Raises ValueError for anything else, as text2num does."""
    total, group, last = 0, 0, 1000
    for word in words.lower().split():
        if word in ("тысяча", "тысячи", "тысяч"):
            if total:
                raise ValueError(words)
            total, group, last = (group or 1) * 1000, 0, 1000
            continue
        value = _RUSSIAN.get(word)
        if value is None:
            raise ValueError(words)
        size = 100 if value >= 100 else 10 if value >= 10 else 1
        if size >= last or (size == 1 and group % 10) or (size == 10 and group % 100):
            raise ValueError(words)  # "двадцать тридцать", "пять шесть": no number
        group, last = group + value, size if value >= 20 or value < 10 else 1
    return total + group


def _foreign_digits(text: str, lang: str) -> str:
    """``text`` with each longest run of words that text2num reads as a cardinal number in ``lang``
    replaced by its digits ("quatre-vingt-dix km/h" -> "90 km/h", "treinta y dos" -> "32"); a lone word
    for one stays (it is an article as often: "un train", "una manzana"), and so does a lone word that
    is also a common word of the language ("sei", "neuf"). Ordinals stay: text2num reads none."""
    words = list(_WORD.finditer(text))
    out, written, i = [], 0, 0
    while i < len(words):
        longest = None  # (index of the run's last word, its value)
        for j in range(i, min(i + 8, len(words))):
            if j > i and text[words[j - 1].end():words[j].start()].strip(" \t"):
                break  # a run has only spaces between its words
            try:
                run = text[words[i].start():words[j].end()]
                longest = (j, _russian_number(run) if lang == "ru" else text2num(run, lang))
            except ValueError:
                if j == i:
                    break  # "vingt et" is no number, "vingt et un" is: only a first word that fails ends the run
        lone = longest and longest[0] == i
        if longest is None or (lone and (longest[1] == 1 or words[i].group(0).lower() in _AMBIGUOUS.get(lang, ()))):
            i += 1
            continue
        out += [text[written:words[i].start()], str(longest[1])]
        written, i = words[longest[0]].end(), longest[0] + 1
    return "".join(out) + text[written:]


# a number in Chinese numerals at the start of an answer: "二", "八份" (eight portions), "一百零五"
_CHINESE_NUMBER = re.compile(r"^[零〇一二两三四五六七八九十百千万亿]+(?=[\u4e00-\u9fff]{0,3}[。．.！!]?\s*$)")


def chinese_digits(answer: str) -> str:
    """``answer`` (the text after "答案是") with the Chinese numerals it is made of as digits, read by cn2an:
    ``"二"`` -> ``"2"``, ``"八份"`` -> ``"8份"``; anything else unchanged (a numeral inside a word, "一共",
    is no answer of its own)."""
    m = _CHINESE_NUMBER.match(answer.strip())
    if not m:
        return answer
    import cn2an  # only here: its import takes a tenth of a second, and few answers need it

    try:
        value = cn2an.cn2an(m.group(0), "smart")
    except ValueError:
        return answer
    return str(int(value)) + answer.strip()[m.end():]


# an amount in dollars and cents: "5 dollars and 40 cents" (from "five dollars and forty cents") is 5.40 dollars
_DOLLARS_AND_CENTS = re.compile(r"\b(\d+)[ \t]+dollars?,?[ \t]+and[ \t]+(\d{1,2})[ \t]+cents?\b", re.IGNORECASE)


def digits_for_words(text: str, lang: str | None = None) -> str:
    """``text`` with every run of number words that spells a number replaced by its digits
    ("makes eighteen dollars" -> "makes 18 dollars"); a lone "one" stays (it is a pronoun as often:
    "one of them", "the one") unless a word of quantity comes before it ("exactly one of them") or a
    comparative after it ("she needs one more dollar"), and
    so does a number that picks items out ("the first two terms", "the other three"); dollars and cents
    are one amount ("five dollars and forty cents" -> "5.40 dollars"). Numbers of another language are read
    in ``lang`` (``"fr"``, ...), else in the language the text shows (:func:`language_of`; Russian by its
    script, read by :func:`_russian_number`: text2num has no Russian)."""
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
    lang = lang or language_of(text) or ("ru" if re.search(r"[а-яё]{3}", text, re.IGNORECASE) else None)
    if lang:  # a sentence in another language: its numbers, compounds too ("vingt et un", "dreiundzwanzig")
        text = _foreign_digits(text, lang)
    else:  # no language shown: only the one-word numbers that no language reads otherwise
        text = _FOREIGN_RUN.sub(lambda m: str(_FOREIGN[m.group(0).lower()]), text)
    text = _DOLLARS_AND_CENTS.sub(lambda m: f"{m.group(1)}.{int(m.group(2)):02d} dollars", text)
    return re.sub(r"\b(?:minus|negative)[ \t]+(?=\d)", "-", text, flags=re.IGNORECASE)  # "minus three" -> -3
