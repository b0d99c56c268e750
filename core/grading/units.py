"""Units of measure: how an answer's unit is spelt, and which unit a problem's question asks for.

An answer may carry a unit (``5 m``, ``1.25 kilometers``, ``864 inches^2``). The grader drops it when
the gold has none, but a unit of measure other than the one the question asks for is another
quantity: "How many miles did she walk?" is not answered by ``1.25 kilometers`` even when the gold
is ``1.25``. :func:`asked_unit` reads the unit a question names ("How many miles", "in dollars",
"(in cm)"), :func:`unit_key` spells units alike (``meters`` = ``m`` = ``metre``), and
:data:`MEASURES` holds the units of measure (length, time, mass, volume, money, angle) that may be
compared at all, and :func:`rate_key` a rate of two of them (``75 m/s`` answers no "speed in km/h?"); any other word after a number (``apples``, ``units``) is a count's noun and is never
held against an answer.
"""

from __future__ import annotations

import re
from fractions import Fraction

from .question import question_of

__all__ = ["DIMENSIONS", "MEASURES", "SHORT_UNITS", "asked_unit", "compound_values", "english_units", "measure_after", "named_units", "rate_key", "unit_key", "unit_word"]

# Units of one or two letters; longer words (dollars, inches, apples) count as units anyway.
SHORT_UNITS = frozenset("""m cm mm km nm g kg mg s ms h hr hrs min ft in yd mi mph kph lb lbs oz l L ml mL
    K V W J N Hz kW kJ cc pt qt gal ha ac""".split())
# Names of the same unit, keyed by their symbol (the plural and case do not matter: see unit_key).
_SYNONYMS = {name: symbol for symbol, names in {
    "m": "meter metre", "cm": "centimeter centimetre", "mm": "millimeter millimetre", "km": "kilometer kilometre",
    "g": "gram gramme", "kg": "kilogram kilo", "mg": "milligram", "s": "second sec secs",
    "h": "hour hr hrs", "min": "minute mins", "ft": "foot feet", "in": "inch", "yd": "yard", "mi": "mile",
    "l": "liter litre", "ml": "milliliter millilitre", "lb": "pound lbs", "oz": "ounce", "deg": "degree",
    "cent": "cents", "dollar": "dollars", "day": "days", "week": "weeks", "month": "months", "year": "years",
    "gal": "gallon", "ton": "tons tonne tonnes", "cup": "cups", "qt": "quart", "pt": "pint", "rad": "radian",
}.items() for name in [symbol, *names.split()]}
# Units of measure by their symbol (unit_word's result): a value in one of them is not the same
# value in another.
MEASURES = frozenset("""m cm mm km ft in yd mi s min h day week month year g kg mg lb oz ton l ml gal qt pt cup
    cent dollar deg rad""".split())
# What each unit of measure measures: a unit the problem never names, where it names another of the same
# dimension, is a different quantity from the problem's ("4 seconds" when the problem's rates are per minute).
DIMENSIONS = {**dict.fromkeys("m cm mm km ft in yd mi".split(), "length"),
              **dict.fromkeys("s min h day week month year".split(), "time"),
              **dict.fromkeys("g kg mg lb oz ton".split(), "mass"),
              **dict.fromkeys("l ml gal qt pt cup".split(), "volume"),
              **dict.fromkeys("cent dollar".split(), "money"), **dict.fromkeys("deg rad".split(), "angle")}
# Unit words that are also common English words or letters, never read as a unit in prose ("in total").
_AMBIGUOUS = frozenset("in m s h g l pt min".split())


def unit_word(word: str) -> str:
    """One unit word by its symbol (meters -> m, Feet -> ft), else lowercased without a plural ending."""
    w = word.lower()
    for candidate in (w, w[:-1] if w.endswith("s") else None, w[:-2] if w.endswith("es") else None):
        if candidate in _SYNONYMS:
            return _SYNONYMS[candidate]
    if len(w) > 3 and w.endswith("s"):
        return w[:-2] if re.search(r"(?:ch|sh|x|s|z)es$", w) else w[:-1]
    return w


def unit_key(unit: str) -> str:
    """Units compared without spaces, braces, case, plural endings or spelling (``cm^{2}`` = ``CM^2``,
    inch = inches, m = meters = metre, square inches = inches^2, cubic feet = ft^3)."""
    u = re.sub(r"\s*\^\s*", "^", re.sub(r"[{}]", "", unit))
    # square inches = inches squared = inches^2, cubic feet = feet^3
    u = re.sub(r"\b(?:square|sq\.?)\s+([A-Za-z]+)|\b([A-Za-z]+)\s+squared\b", lambda m: (m.group(1) or m.group(2)) + "^2",
               u, flags=re.IGNORECASE)
    u = re.sub(r"\bcubic\s+([A-Za-z]+)|\b([A-Za-z]+)\s+cubed\b", lambda m: (m.group(1) or m.group(2)) + "^3", u,
               flags=re.IGNORECASE)
    rate = rate_key(u)
    if rate:
        return rate
    u = re.sub(r"[A-Za-z]+", lambda m: unit_word(m.group(0)), u.replace("\\cdot", "*"))
    return re.sub(r"\s+", "", u)


# a rate written out: "km/h", "meters per second", "miles an hour", "km / hr"
_RATE_WORDS = r"[A-Za-z]+(?:[ \t]*/[ \t]*|[ \t]+per[ \t]+|[ \t]+an?[ \t]+)[A-Za-z]+"
_RATE = re.compile(r"([A-Za-z]+)(?:[ \t]*/[ \t]*|[ \t]+per[ \t]+|[ \t]+an?[ \t]+)([A-Za-z]+)", re.IGNORECASE)
# rates written as one word
_RATE_SYMBOLS = {"mph": "mi/h", "kph": "km/h", "kmh": "km/h", "kmph": "km/h", "fps": "ft/s", "mpg": "mi/gal"}


def rate_key(unit: str) -> str | None:
    """A rate of two units of measure by their symbols (``km/h`` for "kilometers per hour", "km/hr",
    "kph"; ``m/s`` for "meters per second"), else None (one unit, or a word that measures nothing:
    "apples per box")."""
    u = unit.strip()
    if u.lower() in _RATE_SYMBOLS:
        return _RATE_SYMBOLS[u.lower()]
    m = _RATE.fullmatch(u)
    if not m:
        return None
    top, per = unit_word(m.group(1)), unit_word(m.group(2))
    if m.group(1).lower() in ("per", "a", "an") or top not in MEASURES or per not in MEASURES:
        return None
    return f"{top}/{per}"


# one unit of measure written out, perhaps square or cubic: "miles", "square feet", "cm", "cubic inches"
_MEASURE_WORDS = r"(?:(?:square|sq\.?|cubic)[ \t]+)?[A-Za-z]+"
# what makes a unit compound, so not one unit of measure: "miles per hour", "feet/second", "km an hour"
_COMPOUND = re.compile(r"[ \t]*(?:/|per\b|an?[ \t]+(?:hour|minute|second|day|week|month|year)\b)", re.IGNORECASE)


def _measure(words: str) -> str | None:
    """The key of ``words`` when they are one unit of measure written out, else None."""
    if words.split()[-1] in _AMBIGUOUS:
        return None
    key = unit_key(words)
    return key if key.split("^")[0] in MEASURES else None


def measure_after(text: str) -> str | None:
    """The unit of measure ``text`` starts with, as written (``" kilometers."`` -> ``"kilometers"``), when
    it is one unit (not ``miles per hour``), else None; spaces before it are skipped."""
    rate = re.match(r"[ \t]*(" + _RATE_WORDS + r"|[A-Za-z]+)(?![A-Za-z0-9^/])", text)
    if rate and rate_key(rate.group(1)):
        return rate.group(1)  # "75 m/s", "60 miles per hour", "50 mph"
    m = re.match(r"[ \t]*(" + _MEASURE_WORDS + r")(?![A-Za-z0-9^])", text)
    if not m or _COMPOUND.match(text, m.end()) or not _measure(m.group(1)):
        return None
    smaller = re.match(r"[ \t,]+(?:and[ \t]+)?(\d+(?:\.\d+)?)[ \t]*([A-Za-z]+)(?![A-Za-z0-9^])", text[m.end():])
    if smaller and _in_base(f"1 {smaller.group(2)}") and _in_base(f"1 {m.group(1)}") and \
            _in_base(f"1 {smaller.group(2)}")[1] == _in_base(f"1 {m.group(1)}")[1]:
        return m.group(1) + smaller.group(0)  # "2 hours 40 minutes", "5 feet 3 inches": one quantity
    return m.group(1)


# units of time and dollars in the languages the grader reads, and the "and" between two of them
_FOREIGN_UNITS = {"hours": r"horas|heures|stunden|ore|часа|часов|घंटे|ساعات|小时|小時|時間|시간",
                  "hour": r"hora|heure|stunde|ora|час|घंटा|ساعة",
                  "minutes": r"minutos|minuten|minuti|минуты|минут|मिनट|دقائق|دقيقة|分钟|分鐘|分|분",
                  "minute": r"minuto|minute|минута", "seconds": r"segundos|secondes|sekunden|secondi|секунд|सेकंड|ثوان|秒|초",
                  "days": r"días|dias|jours|tage|giorni|дней|дня|दिन|أيام|天|日|일",
                  "dollars": r"dólares|dollari|долларов|доллара|доллар|đô la|đô|dolarów|dolary|dolar|دولارات|دولار|डॉलर|"
                             r"美元|ドル|달러"}
_FOREIGN_UNIT = re.compile(r"(?<=\d)([ \t]*)(" + "|".join(_FOREIGN_UNITS.values()) + r")(?![^\W\d_])(?=(\d)?)", re.IGNORECASE)
_FOREIGN_AND = re.compile(r"(?<=[a-z])[ \t]+(?:y|e|et|und|и|और|و)[ \t]+(?=\d)")


def english_units(answer: str) -> str:
    """An answer with its units of time and its dollars written in English: ``7 घंटे 32 मिनट`` -> ``7 hours 32
    minutes``, ``1520 đô la`` -> ``1520 dollars``,
    ``4 Stunden und 10 Minuten`` -> ``4 hours and 10 minutes``, ``3小时20分钟`` -> ``3 hours 20 minutes``, so that
    a value in two units compares (:func:`compound_values`); any other answer as it is."""
    def english(m: re.Match) -> str:
        name = next(name for name, words in _FOREIGN_UNITS.items() if re.fullmatch(words, m.group(2), re.IGNORECASE))
        return " " + name + (" " if m.group(3) else "")

    out = _FOREIGN_UNIT.sub(english, answer)
    return _FOREIGN_AND.sub(" and ", out) if out != answer else answer


# each unit as a multiple of its dimension's base unit, where one value may be written in two units
_FACTORS = {"s": (1, "s"), "min": (60, "s"), "h": (3600, "s"), "day": (86400, "s"), "week": (604800, "s"),
            "in": (1, "in"), "ft": (12, "in"), "yd": (36, "in"), "mi": (63360, "in"),
            "mm": (Fraction(1, 1000), "m"), "cm": (Fraction(1, 100), "m"), "m": (1, "m"), "km": (1000, "m"),
            "oz": (1, "oz"), "lb": (16, "oz"), "mg": (Fraction(1, 1000), "g"), "g": (1, "g"), "kg": (1000, "g")}


def _in_base(quantity: str) -> tuple[Fraction, str] | None:
    """``(value in the base unit, base unit)`` for ``"40 minutes"`` -> ``(2400, "s")``, else None."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*", quantity)
    factor = m and _FACTORS.get(unit_word(m.group(2)))
    return (Fraction(m.group(1)) * factor[0], factor[1]) if factor else None


def compound_values(answer: str) -> dict[str, Fraction] | None:
    """A value written in two units of one dimension, as the value in each of them: ``2 hours 40
    minutes`` -> ``{"h": 8/3, "min": 160}``; None for any other answer."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?\s*[A-Za-z]+)[\s,]+(?:and\s+)?(\d+(?:\.\d+)?\s*[A-Za-z]+)\s*", answer)
    parts = m and [_in_base(m.group(1)), _in_base(m.group(2))]
    if not parts or None in parts or parts[0][1] != parts[1][1]:
        return None
    total = parts[0][0] + parts[1][0]
    units = [unit_word(re.search(r"[A-Za-z]+", m.group(k)).group(0)) for k in (1, 2)]
    return {u: total / _FACTORS[u][0] for u in units}


# where a question names the unit of its answer: "How many miles", "how much longer, in minutes,",
# "(in cm)", "in square feet?"
_ASKS = re.compile(r"\bhow[ \t]+(?:many|much)[ \t]+(?:more[ \t]+|fewer[ \t]+|less[ \t]+|total[ \t]+|extra[ \t]+)?"
                   r"(" + _MEASURE_WORDS + r")(?![A-Za-z])|\bin[ \t]+(?:terms[ \t]+of[ \t]+)?(" + _MEASURE_WORDS +
                   r")(?=[ \t]*[,.?)]|[ \t]*$)", re.IGNORECASE)
# where a question names a rate as the unit of its answer: "How many miles per hour", "in km/h?", "(in m/s)"
_ASKS_RATE = re.compile(r"\bhow[ \t]+(?:many|much)[ \t]+(" + _RATE_WORDS + r"|mph|kph)(?![A-Za-z])|\bin[ \t]+(" + _RATE_WORDS +
                        r"|mph|kph)(?=[ \t]*[,.?)]|[ \t]*$)", re.IGNORECASE)
# a second unit named beside the first: "How many feet and inches", "in hours or minutes"
_ANOTHER = re.compile(r"[ \t]*(?:,[ \t]*(?:and|or)?|and|or)[ \t]+(" + _MEASURE_WORDS + r")(?![A-Za-z])", re.IGNORECASE)


def asked_unit(problem: str | None) -> str | None:
    """The key (:func:`unit_key`) of the one unit of measure the problem's question asks its answer in,
    else None (no statement, no such unit, a compound unit such as miles per hour, or two units named).

    The question is :func:`core.grading.question.question_of`'s: the last sentence that ends in ``?``
    and what follows it ("Express your answer in degrees."), else the statement's last sentence.
    """
    if not problem:
        return None
    question = question_of(problem)
    rates = {rate_key(m.group(1) or m.group(2)) for m in _ASKS_RATE.finditer(question)} - {None}
    if rates:
        return rates.pop() if len(rates) == 1 else None  # "What is its speed in km/h?": km/h
    keys = set()
    for m in _ASKS.finditer(question):
        words = m.group(1) or m.group(2)
        another = _ANOTHER.match(question, m.end())
        if _COMPOUND.match(question, m.end()) or (another and _measure(another.group(1))):
            return None
        key = _measure(words)
        if key:
            keys.add(key)
    return keys.pop() if len(keys) == 1 else None


def named_units(problem: str | None) -> frozenset[str]:
    """The units of measure a problem statement names anywhere, by symbol (``{"mi", "ft", "min"}`` for
    "3 miles ... 440 feet per minute"); a ``$`` before a number names dollars. Empty without a statement."""
    if not problem:
        return frozenset()
    found = {unit_word(w).split("^")[0] for w in re.findall(r"[A-Za-z]+", problem) if w not in _AMBIGUOUS}
    if re.search(r"\\?\$\s*\d", problem):
        found.add("dollar")
    return frozenset(found & MEASURES)
