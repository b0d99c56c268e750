"""The table of answer forms (tests/data/grading_table.jsonl, issue 25): completions as models write
them, each with a gold and whether it is right; about half are right in many forms, the other half
near misses that a careless grader accepts. Every row must get its verdict from
``grade(extract_answer(completion), gold, problem)``. ``tools/bench-grading`` runs the same table
through plain math-verify beside ours."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from core.grading.equivalence import grade
from core.grading.extract import drop_thousands_separators, extract_answer, normalise_unicode

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "tests" / "data" / "grading_table.jsonl"
# the kinds of answer form of issue 25, and everyday forms
KINDS = {"labelled-line", "gsm8k-runon", "colon", "unicode", "unit-outside", "exact", "sets-lists", "intervals",
         "pm-and", "degrees-units", "rhs", "roots-powers", "forms",
         # no answer marker: the answer the last sentence states; a made-up next question after "the answer is"
         "closing", "runon-question",
         # a check line or an explanation after the answer, an approximation, a.m. and p.m.
         "check-explain", "approximate", "half-day",
         # numbers in words; what a chat model writes after its answer (offers, notes, a next turn,
         # a corrected label); symbols and words of one answer (∪, ¢ against $, \sqrt13, articles)
         "number-words", "after-answer", "symbols-words",
         # a $ that is money (and thousands in spaces or {,}); two values named, or one contrasted with
         # another; a bare last line or a choice letter with its option; display math over lines, an
         # equation whole, a sentence under a label; mixed numbers, repeating decimals, bases, dashes,
         # square units, "or" unions; exercises, offers and asides after the answer, a list of boxed cases
         "money-signs", "hedges", "bare-final", "displays-equations", "number-forms", "follow-ups",
         # scale words, "below zero", intervals and function kinds in words; a check block, an answer
         # heading after a rule, a column sum, an approximation in brackets, "the correct answer is", a named set
         "words-for-numbers", "checks-layouts",
         # an end-of-text token, a box repeated, "=" chains, more footers, $210K, a vector as a tuple,
         # "exactly one", numbers in Chinese prose, \, in a box, "2.7 dollars" against cents, who has the most
         "ends-chains-names",
         # boxes across sentences, an Instruction/Response run-on, "minus four", $55k, a reason after the
         # answer, bare LaTeX, P(...) = p, set-builder sets, "either ... or", choice letters, units after 12\pi,
         # "(that is, ...)", a Tip after the answer
         "boxes-hedges-sets",
         # a value in a unit of measure other than the one the question asks for (kilometers for miles)
         "asked-unit",
         # among a closing sentence's numbers, the one that counts what "How many ..." asks (a premise clause first)
         "counted-noun",
         # a choice letter whose option gives the value; a conclusion after the last "gives", French elision;
         # a value in two units (2 hours 40 minutes), a unit the problem never names beside one it does
         "choice-values", "conclusions", "two-units",
         # bold closing the last sentence, premise clauses within a sentence or after a ";", a unit after a root,
         # display math continued in lower case, "either X or words", "the first two terms" of a cut-off path
         "clauses-bold",
         # a bracket equation is no aside, "that's" / "works out to" state, "which is the answer" restates, "Reason:",
         # a number the question gives, a retraction after the answer, Greek variables, a glossed word, a list's count
         "retractions-givens",
         # an answer restated explicitly after "i.e." / "that is" (a plain value keeps, without its gloss), a matrix
         # as its rows' list, a check put after the value (", making 63·14 = 882"), "giving", a retraction after
         # "the answer is" with the new answer alone in bold, a generation loop cut off mid-way (no answer)
         "restatements-loops",
         # functions written out (cos x / sin x, log_3 x), inequalities in plain text joined by "or" / "and"
         # (an "and" is their intersection), <= and >=
         "plain-functions-relations",
         # a path or generation that stops mid-sentence or at a bare step heading states no answer; a value
         # after "=" that counts something else gives way to a later number of what the question counts
         "cut-off",
         # a step under a label ("Extra widgets: 15 × 720 = ...") is no exercise, a percentage is one term of a hedge,
         # "was" and "meaning" state, ∴, "one more", a rounding after the exact value, "Mrs." ends no sentence, a
         # choice with its option's word, a point's coordinates named x and y, a bold name answering "who", a pronoun
         "labels-points-names",
         # numbers in words of other languages (compounds: "quatre-vingt-dix"), a count then a verb and its value
         # under a label, decimal commas, bases as subscripts, sqrt(13), "all x with x > 5", an unsolved condition
         # is no interval, a few-shot pair after the work, "X or Y" hedges (a value restated is none), labels in
         # other languages, a choice quoting its option, roots named as expressions, dollars and cents, "2 k"
         "languages-hedges-solved",
         # "10,080", a computation as a sentence's subject, answer phrases, corrections and hedges in other languages,
         # "also a reasonable answer", the problem's expression restated, align displays, dots grouping thousands,
         # R$, choices after an arrow or as a bare letter, a pair in brackets, cents where the problem counts dollars
         "foreign-phrases-choices",
         # an answer in bold first, then "Here's why:"; "A) 72 km/h"; "for a total of 30+40 = 70 minutes"
         "totals-answer-first", "rates-restated",
         # "but it might also be 71", "could be 30 or 130", "(or possibly 1,360 ...)", a model that gives up,
         # "Here's the breakdown:", "This matches ...", \\text{negative three}
         "hedges-gives-up",
         # "30° or 150°"; "There are 76 degrees in $\\angle B$."; "**16 blue marbles.**" first; "b + c = 3.21" of a list
         "named-first-counts",
         # the answer put back in after it: "To verify, ...", "Substituting back, ...", "Plugging in: ...", "Alternatively, plug in"
         "substitution-checks",
         # a hedge after the answer ("12, unless ..., in which case 13", "(or 40 if ...)", "oder", "或") against a
         # restatement ("135 minutes, or 2 hours and 15 minutes", "$45, or 75% of the price"); a last paragraph
         # that does not decide; a box and an answer line that disagree; other scripts' digits, continental
         # numbers, units of time and labels in other languages, their retractions ("Attendez", "Moment,")
         "hedges-conditions", "undecided", "box-label-conflict", "scripts-locales",
         # a sentence that weighs two values ("I'd lean towards 60, but ...") against one that settles them; a
         # practice problem after the answer, a copy of the problem cut off, a #### line after a box, "X is the
         # final answer"; Turkish, Vietnamese and Indonesian labels, YAML keys, Russian conclusions
         "weighing-values", "followups-copies", "more-languages",
         # a label or sentence that holds the word for "answer" in any of the grader's languages ("Poprawiona
         # odpowiedź: 58", "修正后的答案：36", "Jawaban yang benar adalah 58"), "..., das ist meine Antwort"; a question
         # back, "no definitive answer", "not sure" in more languages; a bold answer restated after a dash ("**7
         # dozen eggs** — that's 84 eggs"), "### Problem 2", "Here's a similar problem ...", lists joined by "و"
         "named-labels", "undecided-questions", "restated-followups",
         # a text cut off after a verb that needs its object ("... to find"), boxes under conditions, a conditional
         # statement after another, a question back, a check in brackets, values set aside by what the question asks
         "conditions-cutoffs",
         # a value restated in another unit ("18 dollars, which is 1800 cents"; the question's unit wins), a multiple
         # of the identity or the zero matrix by name against the matrix written out, "1日に18ドル" (per one day)
         "conversions-matrices",
         # a bracket after the value that says where it is attained ("(attained at $x = 1$)") or glosses a count
         # ("(namely 1 and 3)"), a row vector transposed against a column, "**Area $= \\sqrt{45}$**"
         "asides-transposes",
         # money in brackets after money ("$14,400 a year ($1,200 a month)"), a gloss after a value with no verb
         # ("2 hours, i.e. 120 minutes"), words in brackets closing the sentence, a "Sanity check:", "Extension:" or
         # "💡 Tip:" paragraph after the answer; an interval without points, "0.666…", a ≤ f(x) ≤ b, named values then
         # their tuple, "greater than $2$", ⟨a, b, c⟩, {3, 5, 7}, "In base eight: 2516", a mantissa "1.736 × 10³" and
         # variables that are no Spanish "y"
         "money-asides-added", "sets-vectors-bases",
         # a sentence that lists values ("Naomi 68, Yuri 44, Brianna 85, and Jojo 54"): the one the question's noun,
         # money or label picks; values after the stating words of Chinese, Japanese and Korean ("的值为 47", "の値は 8
         # です"); a quantity derived after the answer (", which is 18% of her sales"), a bound offered instead of an
         # answer, a text cut off after "then"
         "listed-values", "cjk-stating", "derived-bounds",
         # "or" and "or about" in more languages, "5 or 6 days" (a unit shared), 16万8000, 需要 8 美元, conclusions and
         # reasons in other languages ("vậy", "vì"), a ";" inside an aside, "an average of about", "(= 12 hours)",
         # "**6** values", an aside with math, ", attained at", "can't pin down", "once", a loop of answer sentences cut off
         "hedges-locales-asides",
         # numbers in words read in the solution's own language where its last sentence shows none (Vietnamese,
         # Indonesian, Arabic, Korean by num2words' spellings; Chinese numerals in prose; "Resposta: um."),
         # 4만 달러, "đô la" as dollars, a lone numeral that counts the subject (三个人, "Hai người"), "năm" (year)
         "number-words-scripts",
         # a remark after the answer in its paragraph ("The sweet potatoes bring in the most ($20).", "would have
         # cost"), a recap paragraph after a bold answer, ", which is $10 more than", a check in brackets
         # ("(4 × 14 = 56)"), a number the question gives
         "remarks-recaps",
         # "left to be placed" (no "be" state), a rate in a unit the problem never names, "2 $y$-intercepts", a count
         # then its list, "defined when x < 2 or x > 3", または / lub / albo, "$7$, $5$ en $3$", "4 or −12", a number
         # the question gives in another language's sentence, 种可能 (no doubt)
         "counts-locales-hedges",
         # "Extra point for those over 20: ..." is a step, "#### 8 (that's 16 pencils in total)", "**24** — independent
         # of $r$", "2 $y$-intercepts, at $y = ...$", "24 or possibly something else"
         "steps-asides",
         # the first clause of a closing sentence states the answer and the rest elaborates ("He pays $31,800 a year:
         # $30,000 for the miles ..."), "For comparison, ...", "Happy to show ...", "Those gaps are consistent ...",
         # "6 h swimming + 3 h resting = 9 hours"
         "first-clause-answers",
         # giving up and asking which reading is meant in more languages, "或" after a word, "або", "залежно від",
         # dots grouping thousands in Dutch, Swedish and Czech number words, "(1{,}5;\ -13)", "(3;\,4\rangle", "四です"
         "locales-giveups",
         # "— the same number her son got", "— that's 315 kg in a week", "68 sq ft", a computation without its result,
         # "..., یعنی" cut off, "r = 4, 7/2" (an unnamed second value), "vagy" / "অথবা" / "หรือ" / "oder" between
         # answers, giving up in English phrasings, "(C) 또는 (B)", "jinak", French "]a; b]", "Pauline spent $75 ..."
         "endings-locales-2"}


def _rows() -> list[dict]:
    with TABLE.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


ROWS = _rows()


def test_the_table_covers_every_kind_with_right_and_wrong_answers():
    assert len(ROWS) >= 150
    assert {r["kind"] for r in ROWS} == KINDS
    counts = Counter((r["kind"], r["correct"]) for r in ROWS)
    for kind in KINDS - {"forms"}:
        assert counts[kind, True] >= 5 and counts[kind, False] >= 5, kind
    share = sum(r["correct"] for r in ROWS) / len(ROWS)
    assert 0.4 <= share <= 0.6


@pytest.mark.parametrize("row", ROWS, ids=[f"{i}-{r['kind']}-{'right' if r['correct'] else 'wrong'}"
                                           for i, r in enumerate(ROWS, 1)])
def test_table_row(row):
    pred = extract_answer(row["completion"], row.get("problem"))
    assert grade(pred, row["gold"], row.get("problem")).correct is row["correct"], pred


# --- the extraction rules, one by one -----------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    # the last stated answer wins, a labelled line included
    ("The answer is 15.\nWait, 15 - 3 = 12.\n**Answer:** 12", "12"),
    ("\\boxed{15}\nThe two ends were counted twice.\nFinal answer: 13", "13"),
    ("\\boxed{5}. Note that the answer is not 7.", "5"),
    ("**Final Answer**\n\nThe count is $15$.", "15"),
    # the first GSM8K answer line closes the solution; Markdown headings are no answer lines
    ("9 * 2 = 18\n#### 18\n\nQuestion: 5 + 2?\nAnswer: 7\n#### 7", "18"),
    ("#### 18\nProblem 2: ... \\boxed{24}", "18"),
    ("#### Step 1: eggs\n9 left\n#### 2. Money\n**Answer:** 18", "18"),
    # times and ratios, "and" lists, relations, Unicode
    ("The answer is 7:30.", "7:30"),
    ("The answer is 2 and 5.", "2 and 5"),
    ("The answer is 1, 3, and 5.", "1, 3, and 5"),
    ("The answer is 0 < t ≤ 4.", "0 < t ≤ 4"),
    ("The answer is （３，５）.", "(3,5)"),
    ("The answer is x² + 1.", "x^{2} + 1"),
    ("The answer is 3√2.", "3√2"),
    # a number in math keeps the unit after it; prose after it is no unit
    ("The answer is $5$ m.", "5 m"),
    ("The answer is $12$ square feet.", "12 square feet"),
    ("The answer is $5$ because it is prime.", "5"),
    # a run with a group of two digits is a list, not a number with thousands separators
    ("The answer is 27,54,108,135.", "27,54,108,135"),
    ("The answer is 12,345,678.", "12345678"),
])
def test_extraction_rules(text, expected):
    assert extract_answer(text) == expected


def test_unicode_and_thousands_helpers():
    assert normalise_unicode("－４\u00a0½ 3½ x⁻¹") == "-4 1/2 (3+1/2) x^{-1}"
    assert normalise_unicode("−4") == "−4"  # the minus sign stays for extraction; grading maps it
    assert drop_thousands_separators("1,000 and 27,54,108,135 and 2,125.5") == "1000 and 27,54,108,135 and 2125.5"


# --- gold vs gold on the bundled examples, as a model writes an answer --------------------------
GOLD_FORMS = {
    "boxed": lambda g: "We simplify step by step, so the answer is \\boxed{" + g + "}",
    "final-answer-dollars": lambda g: "We simplify step by step.\nThe final answer is $" + g + "$.",
}


@pytest.mark.parametrize("form", sorted(GOLD_FORMS))
@pytest.mark.parametrize("name", ["math500_sample.jsonl", "gsm8k_sample.jsonl"])
def test_example_golds_against_themselves(name, form):
    with (ROOT / "examples" / name).open(encoding="utf-8") as f:
        golds = [json.loads(line)["answer"] for line in f if line.strip()]
    misses = [g for g in golds if not grade(extract_answer(GOLD_FORMS[form](g)), g).correct]
    assert misses == []


def test_bench_grading_prints_ours_beside_math_verify(tmp_path):
    table = tmp_path / "table.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:2] + [r for r in ROWS if not r["correct"]][:2]))
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench-grading"), "--table", str(table), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["rows"] == 4
    assert out["ours"]["correct_accepted"] == out["ours"]["correct"] == 2
    assert out["ours"]["wrong_accepted"] == 0 and out["ours"]["wrong"] == 2
    assert set(out["math_verify"]) == set(out["ours"]) >= {"mean_s", "max_s"}


@pytest.mark.parametrize("words, value", [
    ("twenty-one", 21), ("One hundred twenty", 120), ("one hundred and five", 105), ("seventeen", 17),
    ("two million three thousand", 2003000), ("zero", 0),
    # not numbers: repeated tens, a teen after a ten, scales that do not fall, other words
    ("twenty twenty", None), ("ten eleven", None), ("thousand million", None), ("a dozen", None), ("half", None),
])
def test_spelled_numbers(words, value):
    from core.grading.number_words import spelled_number

    assert spelled_number(words) == value


@pytest.mark.parametrize("text, expected", [
    ("восемьдесят учеников", "80 учеников"), ("сто двадцать пять рыбок", "125 рыбок"), ("две тысячи триста", "2300"),
    ("двадцать один", "21"),
    # words in an order no number has are read one by one; a lone "один" is a pronoun as often
    ("пять шесть", "5 6"), ("двадцать тридцать", "20 30"), ("десять один", "10 один"), ("один из них", "один из них"),
])
def test_russian_number_words(text, expected):
    from core.grading.number_words import digits_for_words

    assert digits_for_words(text) == expected


@pytest.mark.parametrize("words, lang, value", [
    ("ba mươi hai", "vi", 32), ("bốn mươi nghìn năm trăm", "vi", 40500), ("một trăm linh năm", "vi", 105),
    ("tiga puluh delapan", "id", 38), ("on yedi", "tr", 17), ("kırk bin beş yüz", "tr", 40500),
    ("dwadzieścia jeden", "pl", 21), ("ثمانية عشر", "ar", 18), ("تسعة وسبعون", "ar", 79), ("열일곱", "ko", 17),
    ("스물다섯", "ko", 25), ("사십", "ko", 40), ("cincuenta y ocho", "es", 58), ("двадцать один", "ru", 21),
    ("negenentachtig", "nl", 89), ("một nghìn năm trăm hai mươi", "vi", 1520), ("천오백이십", "ko", 1520),
    ("ettusen femhundratjugo", "sv", 1520), ("två", "sv", 2), ("dvacet jedna", "cs", 21),
])
def test_cardinal_words(words, lang, value):
    from core.grading.number_words import cardinal

    assert cardinal(words, lang) == value


@pytest.mark.parametrize("words, lang", [
    ("hai mươi năm", "vi"),  # 20 years: 25 is "hai mươi lăm"
    ("사과", "ko"), ("이", "ko"),  # one syllable is no number (이 is "this")
    ("dua ratus kucing", "id"), ("दो", "hi"),  # Hindi has no reader
])
def test_cardinal_refuses(words, lang):
    from core.grading.number_words import cardinal

    with pytest.raises(ValueError):
        cardinal(words, lang)


@pytest.mark.parametrize("text, lang, expected", [
    ("La parte de Betsy duró cincuenta y ocho minutos, y el resto es de Donovan.", "es",
     "La parte de Betsy duró 58 minutos, y el resto es de Donovan."),
    ("Năm nay anh ấy đọc ba mươi sáu cuốn sách.", "vi", "Năm nay anh ấy đọc 36 cuốn sách."),
    ("답은 열일곱이다. 사과 12개", "ko", "답은 17이다. 사과 12개"),
    ("所以三个人一共进了一百七十五个球。", "zh", "所以三个人一共进了175个球。"),
    ("Total yang dibayar: tiga puluh delapan dolar.", "id", "Total yang dibayar: 38 dolar."),
    ("So the answer is twenty-one.", None, "So the answer is twenty-one."),  # English: the sentence readers' job
    ("La respuesta es tres: $\\frac{6}{2}$.", "es", "La respuesta es tres: $\\frac{6}{2}$."),  # a line of LaTeX stays
])
def test_digits_in_document(text, lang, expected):
    from core.grading.number_words import digits_in_document, document_language

    assert document_language(text) == lang
    assert digits_in_document(text, lang) == expected


@pytest.mark.parametrize("text, expected", [
    ("The answer is twenty-one.", "21"),
    ("Answer: three units", "3"),
    ("So Janet makes eighteen dollars every day.", "\\$18"),
    ("The answer is one.", "1"),
    ("So $\\alpha$ measures 145 degrees.", "145 degrees"),
    ("So the gcd is 12, and 12 + 11 = 23.\n\n**23**\n\n---\n*Note: generated in 0.42 seconds.*", "23"),
    ("There are $5 \\cdot 4 = 20$ ways.\n\nLet me know if you want 4 people (24 ways) too!", "20"),
    ("The answer is 32.\n\nUser: Billy sells 7 DVDs. How many?\n\nAssistant: The answer is 7.", "32"),
    ("The answer is 6.\n\nCorrected answer: 3", "3"),
])
def test_closing_and_after_answer_rules(text, expected):
    assert extract_answer(text) == expected
