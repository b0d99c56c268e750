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

import functools
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
    "pt": set("o os é do da dos das um uma com não são cada resposta então custa custam ficam tem têm em ao pelo pela".split()),
    "de": set("der das und ist sind ein eine mit für von dem im jede jeder kostet kosten antwort insgesamt "
              "bleiben wir sie nicht auch gibt hat zu auf nach bei wird".split()),
    "it": set("il lo gli è di della sono che ogni costa costano risposta quindi rimangono".split()),
    "nl": set("het een en van zijn voor op niet elke kost kosten antwoord dus totaal blijven er".split()),
    "pl": set("jest się że na w z do nie każdy kosztuje odpowiedź więc razem zostaje łącznie".split()),
    "tr": set("ve bir bu için ile olarak cevap yani toplam her kaç kalır eder".split()),
    "id": set("dan yang adalah dari untuk dengan ini itu jadi jawaban setiap ada tidak maka jumlah dua tiga "
              "empat".split()),
    "vi": set("là của và có các cho được này với thì vậy mỗi người đáp tổng số còn".split()),
    "sv": set("och är det som för med till av på inte varje svar så totalt kostar blir vi".split()),
    "cs": set("je se na že to do pro jsou odpověď tedy celkem každý stojí máme".split()),
}
# ("in" is no English word here: German, Dutch, Italian and Indonesian write it too)
_ENGLISH = set("the is are and of to so we that it this for with each then there has have was were".split())
_ANSWER_WORDS = {"réponse", "respuesta", "resposta", "antwort", "risposta", "antwoord", "odpowiedź", "cevap", "jawaban",
                 "đáp", "svar", "odpověď"}
# a lone word that is also a common word of its language: "sei" (you are), "neuf" (new), "năm" (year), "bin"
# (get on)
_AMBIGUOUS = {"it": {"sei"}, "fr": {"neuf"}, "vi": {"năm", "tư", "mốt", "lăm"}, "tr": {"bin"}}
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")  # a word; a hyphenated compound is one


def language_of(text: str) -> str | None:
    """The language ``text`` is written in, when its short words show one (two of them, or the word for
    "answer"): ``"fr"``, ``"es"``, ``"pt"``, ``"de"``, ``"it"``, ``"nl"``, ``"pl"``, ``"tr"``, ``"id"``,
    ``"vi"``, ``"sv"`` or ``"cs"``; None for English (as many English short words), or where two languages score alike or too
    few words show one."""
    # a letter beside math is a variable, not a word: "y^{2} = −5x + 44" has no Spanish "y"
    text = re.sub(r"(?<![^\W\d_])[^\W\d_](?=[ \t]?[=^+\-−*/(<>≤≥_²³⁴])|(?<=[=^+\-−*/(<>≤≥])[ \t]?[^\W\d_](?![^\W\d_])|"
                  r"(?<=\d)[^\W\d_](?![^\W\d_])", " ", text)  # "25y", "y +", "= y"
    words = [w.lower() for w in _WORD.findall(text)]
    # the word for "answer" counts twice: "Respuesta: seis días" is Spanish
    scores = {lang: sum((w in stop) * (1 + (w in _ANSWER_WORDS)) for w in words) for lang, stop in _STOPWORDS.items()}
    best = max(scores.values())
    leaders = [lang for lang, score in scores.items() if score == best]
    english = sum(w in _ENGLISH for w in words)
    # one such word is enough where no English word is there at all ("Total yang dibayar: tiga puluh ...")
    return leaders[0] if (best >= 2 or not english) and best and len(leaders) == 1 and best > english else None


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


# the languages whose number words text2num reads; those of _NUM2WORDS_LANGUAGES are read back from how
# num2words spells each number (neither library reads the other's: text2num has no Vietnamese, num2words
# reads no words)
_TEXT2NUM_LANGUAGES = {"en", "fr", "es", "pt", "de", "it", "nl"}
_NUM2WORDS_LANGUAGES = {"vi", "id", "tr", "pl", "ar", "ko", "sv", "cs"}
# Korean's native numbers to 99 (num2words spells the Sino-Korean ones only: 사십): tens, units, and the
# forms they take before a counter ("열한 개", "스무 살")
_KOREAN_TENS = dict(zip("열 스물 서른 마흔 쉰 예순 일흔 여든 아흔".split(), range(10, 100, 10)))
_KOREAN_UNITS = dict(zip("하나 둘 셋 넷 다섯 여섯 일곱 여덟 아홉 한 두 세 네".split(), [*range(1, 10), 1, 2, 3, 4]))
# Korean words that spell a number and mean something else as often: 이만 ("this much"), 이천 (a city)
_KOREAN_WORDS = {"이만", "이천"}


def _key(words: str) -> str:
    """``words`` as a key of :func:`_spelled_table`: lower case, without spaces, hyphens and Arabic vowel marks
    ("tujuh belas" and "tujuhbelas", "تسعة و سبعون" and "تسعة وسبعون" are one key)."""
    return re.sub(r"[\s\-\u064b-\u0652]+", "", words.lower())


@functools.lru_cache(maxsize=None)
def _spelled_table(lang: str) -> dict[str, int]:
    """Each whole number to 999 (to 9 999 in Korean), and each thousand to 999 000, keyed by how num2words
    spells it in ``lang`` (:func:`_key`), for a language of ``_NUM2WORDS_LANGUAGES``: Vietnamese also with its
    other words for a thousand and for "no tens" (ngàn, linh); Korean also with its native numbers, and without
    one-syllable words (일 is also "day", 이 "this"). Built once per language, in 0.1 s or less."""
    from num2words import num2words  # only here: few texts are in these languages

    table: dict[str, int] = {}
    # Korean writes 1 000 as one syllable (천), which the table leaves out: its numbers to 9 999 are there whole;
    # elsewhere a number over 999 is read as its thousands and the rest (:func:`_table_number`)
    whole = 10000 if lang == "ko" else 1000
    for n in [*range(whole), *range(whole, 1000000, 1000)]:
        words = num2words(n, lang=lang)
        table.setdefault(_key(words), n)
        if lang == "vi":
            table.setdefault(_key(words.replace("nghìn", "ngàn").replace("lẻ", "linh")), n)
    if lang == "sv":  # num2words writes "etttusen"
        table.update({"tusen": 1000, "ettusen": 1000})
    if lang == "ko":
        table.update(_KOREAN_TENS)
        table.update({u: v for u, v in _KOREAN_UNITS.items() if u not in table})
        table.update({t + u: tens + units for t, tens in _KOREAN_TENS.items() for u, units in _KOREAN_UNITS.items()})
        table["스무"] = 20
        table = {k: v for k, v in table.items() if len(k) >= 2 and k not in _KOREAN_WORDS}
    return table


def _table_number(words: str, lang: str) -> int:
    """The number ``words`` spell in ``lang`` (a language of ``_NUM2WORDS_LANGUAGES``): "ba mươi hai" -> 32,
    "tiga puluh delapan" -> 38, "ثمانية عشر" -> 18, "열일곱" -> 17; thousands then the rest, "bốn mươi
    nghìn năm trăm" -> 40500. Raises ValueError for anything else, as text2num does."""
    table = _spelled_table(lang)
    key = _key(words)
    if key in table:
        return table[key]
    for cut in range(len(key) - 1, 0, -1):
        head = table.get(key[:cut])
        if head and head >= 1000 and head % 1000 == 0:
            tail = table.get(key[cut:])
            if tail is None:  # "... ألفاً و خمسمائة": "and" before the rest
                tail = table.get(re.sub(r"^(?:و|và|dan|ve|i)", "", key[cut:]))
            if tail is not None and 0 < tail < 1000:
                return head + tail
    raise ValueError(words)


def cardinal(words: str, lang: str) -> int:
    """The whole number ``words`` spell in ``lang`` (an ISO 639-1 code): text2num's reading for English,
    French, Spanish, Portuguese, German, Italian and Dutch; :func:`_russian_number` for Russian;
    :func:`_table_number` for Vietnamese, Indonesian, Turkish, Polish, Arabic, Korean, Swedish and Czech. Raises
    ValueError where the words spell no number or the language has no reader (Hindi)."""
    if lang == "ru":
        return _russian_number(words)
    if lang in _TEXT2NUM_LANGUAGES:
        return text2num(words, lang)
    if lang in _NUM2WORDS_LANGUAGES:
        return _table_number(words, lang)
    raise ValueError(f"no reader of number words in {lang!r}")


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
                longest = (j, cardinal(run, lang))
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


# a number in Chinese numerals at the start of an answer: "二", "八份" (eight portions), "一百零五", "四です"
_CHINESE_NUMBER = re.compile(r"^[零〇一二两三四五六七八九十百千万亿]+(?=[\u3040-\u30ff\u4e00-\u9fff]{0,3}[。．.！!]?\s*$)")


def _with_leading_one(numerals: str) -> str:
    """Numerals as cn2an reads them: a hundred or a thousand without its "one" gets it ("百四十" -> "一百四十",
    140, as Japanese writes it)."""
    return "一" + numerals if numerals[0] in "百千" else numerals


def chinese_digits(answer: str) -> str:
    """``answer`` (the text after "答案是") with the Chinese numerals it is made of as digits, read by cn2an:
    ``"二"`` -> ``"2"``, ``"八份"`` -> ``"8份"``; anything else unchanged (a numeral inside a word, "一共",
    is no answer of its own)."""
    m = _CHINESE_NUMBER.match(answer.strip())
    if not m:
        return answer
    import cn2an  # only here: its import takes a tenth of a second, and few answers need it

    try:
        value = cn2an.cn2an(_with_leading_one(m.group(0)), "smart")
    except ValueError:
        return answer
    return str(int(value)) + answer.strip()[m.end():]


# the scripts a text may be written in, other than the Latin alphabet, and the language each stands for
_SCRIPTS = {"ko": re.compile(r"[\uac00-\ud7a3]"), "ja": re.compile(r"[\u3040-\u30ff]"),
            "zh": re.compile(r"[\u4e00-\u9fff]"), "ru": re.compile(r"[а-яё]", re.IGNORECASE),
            "ar": re.compile(r"[\u0620-\u064a]"), "hi": re.compile(r"[\u0900-\u097f]")}


def document_language(text: str) -> str | None:
    """The language a whole solution is written in: by its script where more of its letters are in one
    other script than in the Latin alphabet (Hangul ``"ko"``, kana ``"ja"``, Han without kana ``"zh"``,
    Cyrillic ``"ru"``, Arabic ``"ar"``, Devanagari ``"hi"``), else Vietnamese by the letters only it writes
    (three of them), else by its short words (:func:`language_of`); None for English."""
    latin = len(re.findall(r"[A-Za-zÀ-ɏ]", text))
    counts = {lang: len(script.findall(text)) for lang, script in _SCRIPTS.items()}
    if counts["ja"]:
        counts["ja"] += counts.pop("zh")  # kanji are written among kana
    lang, count = max(counts.items(), key=lambda item: item[1])
    if count > latin:
        return lang
    # the letters only Vietnamese writes (ơ, ư, đ and the stacked tone marks: "Năm nay anh ấy đọc 36 cuốn sách.")
    if len(re.findall(r"[ơưđƠƯĐ\u1ea0-\u1ef9]", text)) >= 3:
        return "vi"
    return language_of(text)


# what a Korean number may carry after it: the copula, particles and counters ("열일곱이다", "다섯 개" is apart)
_KOREAN_SUFFIX = re.compile(r"(?:입니다|이에요|이다|예요|이야|이며|이고|이므로|개|명|살|마리|권|번|장|이|가|은|는|을|를|의|와|과|도)$")


def _korean_digits(text: str) -> str:
    """``text`` with each Korean word that spells a number, Sino-Korean or native, as its digits, its
    particle kept ("답은 열일곱이다" -> "답은 17이다", "사십 명" -> "40 명"); one (한, 하나) stays, as
    an article does elsewhere."""
    def replace(m: re.Match) -> str:
        word = m.group(0)
        suffix = _KOREAN_SUFFIX.search(word)
        for stem, rest in ([(word[:suffix.start()], suffix.group(0))] if suffix else []) + [(word, "")]:
            value = _spelled_table("ko").get(stem)
            if value is not None and value != 1:
                return f"{value}{rest}"
        return word
    return re.sub(_SCRIPTS["ko"].pattern + "{2,}", replace, text)


# Chinese (and Japanese) numerals in a sentence: a run of two or more ("三百一十条腿", "十二个"). One numeral
# alone stays: it counts what the sentence is about as often ("三个人一共进了一百七十五个球")
_CJK_NUMERAL_RUN = re.compile(r"[零〇一二两三四五六七八九十百千万亿]{2,}")


def _chinese_numerals(text: str) -> str:
    """``text`` with the Chinese numerals in its sentences as digits (cn2an): "合计三百一十条腿" ->
    "合计310条腿"; a run cn2an does not read stays."""
    import cn2an

    def replace(m: re.Match) -> str:
        try:
            return str(int(cn2an.cn2an(_with_leading_one(m.group(0)), "smart")))
        except ValueError:
            return m.group(0)
    return _CJK_NUMERAL_RUN.sub(replace, text)


def digits_in_document(text: str, lang: str | None) -> str:
    """``text``, a solution in ``lang`` (:func:`document_language`; None for English), with the numbers its
    prose spells in that language as digits: on each line without LaTeX, runs of number words
    (:func:`_foreign_digits`: "La parte de Betsy duró cincuenta y ocho minutos." -> "... 58 minutos."),
    Korean words (:func:`_korean_digits`) and Chinese numerals (:func:`_chinese_numerals`). English text
    is left to the sentence readers (:func:`digits_for_words`), which know when "one" is a pronoun."""
    if lang is None or lang == "hi":
        return text
    convert = {"ko": _korean_digits, "zh": _chinese_numerals, "ja": _chinese_numerals}.get(
        lang, lambda line: _foreign_digits(line, lang))
    return "\n".join(line if "\\" in line else convert(line) for line in text.split("\n"))


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
