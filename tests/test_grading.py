import json
import threading
from pathlib import Path

import pytest

from core.grading.equivalence import answers_equivalent, canonical_answer, grade
from core.grading.extract import extract_answer, final_boxes, gsm8k_hash_answer, last_boxed, leading_expression

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FIXTURES = Path(__file__).resolve().parent / "data"


def _examples(name: str) -> list[dict]:
    """The bundled example problems (with reference solutions) of ``examples/``."""
    with (EXAMPLES / name).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _fixture_answers() -> list[dict]:
    """The 500 MATH-500 gold answers (id + answer), see tests/data/README.md."""
    with (FIXTURES / "math500_answers.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --- extraction -------------------------------------------------------------


def test_last_boxed_nested():
    assert last_boxed(r"so $\boxed{\frac{1}{2}}$.") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{\left( 3, \frac{\pi}{2} \right)}") == r"\left( 3, \frac{\pi}{2} \right)"


def test_last_boxed_last_wins():
    assert last_boxed(r"first \boxed{1} then \boxed{2}, finally \boxed{3}") == "3"


def test_last_boxed_fbox_and_bare_token():
    assert last_boxed(r"answer: \fbox{7}") == "7"
    assert last_boxed(r"answer: $\boxed 5$") == "5"
    assert last_boxed(r"answer: \boxed 12.") == "12"


def test_last_boxed_escaped_braces():
    assert last_boxed(r"\boxed{\{1,2\}}") == r"\{1,2\}"


def test_last_boxed_absent_or_unbalanced():
    assert last_boxed("no answer here") is None
    assert last_boxed("") is None
    assert last_boxed(r"\boxed{\frac{1}{2}") is None


def test_gsm8k_hash_answer():
    assert gsm8k_hash_answer("blah\n#### 1,234") == "1234"
    assert gsm8k_hash_answer("#### 18.") == "18"
    assert gsm8k_hash_answer("#### 1 \n#### 2,125\nfooter") == "2125"
    assert gsm8k_hash_answer("no hashes") is None


def test_extract_answer_order_and_phrases():
    assert extract_answer("The answer is 42.") == "42"
    assert extract_answer("so the final answer is $3.5$.\n") == "3.5"
    assert extract_answer("The answer is 1. Then the final answer is 2.") == "2"
    assert extract_answer("**The final answer is: 7**") == "7"
    assert extract_answer(r"The answer is 5, i.e. \boxed{6}") == "6"
    assert extract_answer("work\n#### 1,234") == "1234"
    assert extract_answer("I do not know") is None
    assert extract_answer("") is None


# --- equivalence ------------------------------------------------------------


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("0.5", r"\frac{1}{2}"),
        (r"\dfrac{14}{3}", r"\frac{14}{3}"),
        ("18.0", "18"),
        ("(3,\\frac{\\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)"),
        ("C", r"\text{(C)}"),
        ("p-q", "p - q"),
        ("-10", "-10"),
        ("2,125", "2125"),
        ("4.", "4"),
        (r"\$18", "18"),
        ("Evelyn", r"\text{Evelyn}"),
        ("5, 3, 7", "3, 5, 7"),
        # math_verify compares an equation's right-hand side to a bare value.
        ("5", "x=5"),
    ],
)
def test_equivalent_true(pred, gold):
    assert answers_equivalent(pred, gold) is True


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("18", "19"),
        (r"(\frac{\pi}{2},3)", r"\left( 3, \frac{\pi}{2} \right)"),
        ("0.333", r"\frac{1}{3}"),
        ("(D)", r"\text{(C)}"),
        ("12", "1,2"),
    ],
)
def test_equivalent_false(pred, gold):
    assert answers_equivalent(pred, gold) is False


def test_equivalent_none_and_empty():
    assert answers_equivalent(None, "1") is False
    assert answers_equivalent("1", None) is False
    assert answers_equivalent(None, None) is False
    assert answers_equivalent("", "") is False


def test_equivalent_garbage_does_not_raise():
    for junk in [r"garbage }}{{ \frac", "\\", "$$", r"\begin{pmatrix", "x" * 5000, "{{{{"]:
        assert answers_equivalent(junk, "1") is False


def test_equivalent_off_main_thread():
    results = []
    t = threading.Thread(target=lambda: results.append(answers_equivalent("0.5", r"\frac{1}{2}")))
    t.start()
    t.join(timeout=30)
    assert results == [True]


def test_canonical_answer():
    assert canonical_answer(r"\left( 3, \dfrac{\pi}{2} \right)") == r"(3,\frac{\pi}{2})"
    assert canonical_answer(r"$\text{(C)}$") == "(C)"
    assert canonical_answer("18.0") == "18"
    assert canonical_answer("1.50") == "1.5"
    assert canonical_answer("1,234.") == "1234"
    assert canonical_answer("1, 2") == "1,2"
    assert canonical_answer(r"90^\circ") == "90"
    assert canonical_answer(r"10\!000") == "10000"


# --- reference solutions round-trip -----------------------------------------


def test_math500_reference_solutions():
    rows = _examples("math500_sample.jsonl")
    misses = [
        (r["id"], extract_answer(r["solution"]), r["answer"])
        for r in rows
        if not answers_equivalent(extract_answer(r["solution"]), r["answer"], r["problem"])
    ]
    assert misses == []


def test_gsm8k_reference_solutions():
    rows = _examples("gsm8k_sample.jsonl")
    misses = [
        (r["id"], extract_answer(r["solution"]), r["answer"])
        for r in rows
        if not answers_equivalent(extract_answer(r["solution"]), r["answer"])
    ]
    assert misses == []


def test_math500_distinct_answers_not_equivalent():
    # Guards against false positives on the symbolic path: neighbouring MATH-500 golds with
    # different keys (and no equation, whose sides math-verify may compare) are never equivalent.
    answers = [r["answer"] for r in _fixture_answers()]
    wrong = [
        (a, b)
        for a, b in zip(answers, answers[1:])
        if canonical_answer(a) != canonical_answer(b)
        and "=" not in a + b
        and answers_equivalent(a, b)
    ]
    assert wrong == []


@pytest.mark.parametrize("text, expected", [
    ("The answer is 2 * 1 = 2 bolts cut.", "2"),
    ("So the answer is 18 dollars.", "\\$18"),  # an amount keeps its currency: dollars are not cents
    ("The answer is 1,234.", "1234"),
    ("The final answer is -3.5 meters", "-3.5 meters"),  # a unit of measure stays: the question may ask another
    ("the answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("The answer is yes.", "yes"),
])
def test_answer_phrase_takes_the_number_from_prose(text, expected):
    assert extract_answer(text) == expected



# --- issue 15: answers found on real inputs ----------------------------------------------------
# (completion text, answer extracted, gold, graded correct). The extracted forms are the answers
# whole: a list stays a list, an expression an expression, a prose quantity loses its unit.
EXTRACT_AND_GRADE = [
    # lists and tuples are not one number
    ("The final answer is $69, 84$.", "69, 84", "69, 84", True),
    ("The final answer is $69, 84$.", "69, 84", "6984", False),
    ("The answer is (2,4).", "(2,4)", "(2,4)", True),
    ("The answer is (2,4).", "(2,4)", "24", False),
    ("The answer is 1, 3, 5.", "1, 3, 5", "1, 3, 5", True),
    ("The answer is 1, 3, 5.", "1, 3, 5", "135", False),
    ("The answer is 5, 1, 3.", "5, 1, 3", "1, 3, 5", True),
    ("The answer is −7.", "−7", "-7", True),
    # thousands separators still give one number
    ("The answer is 1,000.", "1000", "1000", True),
    ("The answer is 12,345,678.", "12345678", "12,345,678", True),
    # math between $...$ or \(...\), and expressions in prose, are taken whole
    ("The final answer is $2^{1009}$.", "2^{1009}", "2^{1009}", True),
    ("The final answer is $2^{1009}$.", "2^{1009}", "1009", False),
    ("The final answer is $2n-2$.", "2n-2", "2n-2", True),
    ("The final answer is $2n-2$.", "2n-2", "-2", False),
    ("The answer is \\(2n - 2\\).", "2n - 2", "2(n-1)", True),
    ("The answer is x^2+1.", "x^2+1", "1+x^2", True),
    ("The answer is x^2+1.", "x^2+1", "1", False),
    ("The answer is 3x+2.", "3x+2", "3x+2", True),
    ("The answer is 3x+2.", "3x+2", "2", False),
    ("The answer is 10^6.", "10^6", "1000000", True),
    ("The answer is 10^6.", "10^6", "6", False),
    ("The answer is 4e-3.", "4e-3", "0.004", True),
    ("The answer is 4e-3.", "4e-3", "-3", False),
    # a prose quantity keeps its value, not the unit's exponent
    ("The answer is 25 cm^2.", "25", "25", True),
    ("The answer is 25 cm^2.", "25", "2", False),
    ("The answer is 5 m/s^2.", "5", "5", True),
    ("The answer is 5 m/s^2.", "5", "2", False),
    # several boxes on the last line are one list
    ("So $a = \\boxed{69}$ and $b = \\boxed{84}$.", "69, 84", "69, 84", True),
    ("So $a = \\boxed{69}$ and $b = \\boxed{84}$.", "69, 84", "84", False),
    ("First $\\boxed{3}$.\nSo the answer is \\boxed{7}.", "7", "7", True),
    # percent golds: the same reading on both sides
    ("The final answer is $4.2\\%$.", "4.2\\%", "4.2", True),
    ("The final answer is $4.2\\%$.", "4.2\\%", "4.2\\%", True),
    ("The answer is 62.5.", "62.5", "62.5\\%", True),
    ("The answer is 62.5.", "62.5", "6.25\\%", False),
    # units: dropped when the gold has none or the same one
    ("The final answer is $5 \\text{ dollars}$.", "5 \\text{ dollars}", "5", True),
    ("The final answer is $864 \\text{ inches}^2$.", "864 \\text{ inches}^2", "864 \\mbox{ inches}^2", True),
    ("The final answer is $5 \\text{ cm}$.", "5 \\text{ cm}", "5 \\text{ m}", False),
    # scientific notation
    ("The answer is 1e3.", "1e3", "1000", True),
    ("The final answer is $1.5e2$.", "1.5e2", "150", True),
    # golds that do not parse never accept a parsed 0
    ("The answer is 0.", "0", "$t(0,4]$.", False),
    ("The answer is 0.", "0", "t(0,4]", False),
    ("The answer is 0.", "0", "m_{\\max}=n^2-n-1", False),
    ("The final answer is $n^2-n-1$.", "n^2-n-1", "m_{\\max}=n^2-n-1", True),
    ("The answer is 0.", "0", "$5$.", False),
    ("The answer is 5.", "5", "$5$.", True),
    ("The answer is 0.", "0", "all even numbers", False),
    ("The answer is 0.", "0", "x > 0 for all x", False),
    ("The answer is 0.", "0", "\\text{no solution}", False),
    # case: N is not n
    ("The final answer is $N$.", "N", "N=n", False),
    ("The final answer is $n$.", "n", "N=n", True),
    # a multi-answer gold needs every answer
    ("The final answer is $-2$.", "-2", "-2, -2", False),
    ("The final answer is $-2, -2$.", "-2, -2", "-2, -2", True),
]


@pytest.mark.parametrize("text, extracted, gold, correct", EXTRACT_AND_GRADE)
def test_extract_and_grade_table(text, extracted, gold, correct):
    assert extract_answer(text) == extracted
    assert answers_equivalent(extracted, gold) is correct


# a letter the problem uses as a variable is never dropped as a unit
PROBLEM_WITH_M = "The line $y = mx + 3$ passes through $(1, 9)$. Find $m$ and then $m^2 - 30$."
PROBLEM_IN_METERS = "A rope is $6$ meters long. How long is it, in m?"


@pytest.mark.parametrize("pred, gold, problem, correct", [
    ("6", "6m", PROBLEM_WITH_M, False),
    ("6m", "6m", PROBLEM_WITH_M, True),
    ("6", "6m", None, False),  # without the problem no single letter is taken for a unit
    ("6", "6 m", PROBLEM_IN_METERS, True),
    ("6 m", "6", PROBLEM_IN_METERS, True),
    ("6 m", "6", PROBLEM_WITH_M, False),
    ("5 dollars", "5", PROBLEM_WITH_M, True),
    ("5 dollars", "5", None, True),
])
def test_units_and_variables(pred, gold, problem, correct):
    assert answers_equivalent(pred, gold, problem) is correct


@pytest.mark.parametrize("gold, parsed", [
    ("t(0,4]", {"as": "text", "value": "t(0,4]"}),
    ("$t(0,4]$.", {"as": "text", "value": "t(0,4]"}),
    ("m_{\\max}=n^2-n-1", {"as": "math", "value": "n**2 - n - 1"}),
    ("$5$.", {"as": "math", "value": "5"}),
    ("62.5\\%", {"as": "math", "value": "62.5000000000000"}),
    ("\\text{Evelyn}", {"as": "text", "value": "Evelyn"}),
    ("x > 0 for all x", {"as": "text", "value": "x > 0 for all x"}),
    ("\\sin x + 1", {"as": "math", "value": "sin(x) + 1"}),
    ("-2, -2", {"as": "list", "items": [{"as": "math", "value": "-2"}, {"as": "math", "value": "-2"}]}),
    ("6m", {"as": "math", "value": "6*m"}),
])
def test_gold_parsed_records_how_the_gold_was_read(gold, parsed):
    result = grade("0", gold)
    assert result.correct is False and result.timed_out is False
    assert result.gold_parsed == parsed


def test_leading_expression_and_final_boxes():
    assert leading_expression("2(n-1) apples") == "2(n-1)"
    assert leading_expression("a multiple of 3") is None
    assert leading_expression("(3,4] exactly") == "(3,4]"
    assert leading_expression("dollars") is None
    assert final_boxes("\\boxed{1}\nthen \\boxed{2} and \\boxed{3}.") == "2, 3"
    assert final_boxes("\\boxed{\\boxed{5}}") == "\\boxed{5}"
    assert final_boxes("cut off \\boxed{\\frac{1}{2}") is None


# --- gold vs gold: every MATH-500 gold, written as a model would, grades correct against itself ---
GOLD_FORMS = {
    "boxed": lambda g: "We simplify step by step, so the answer is \\boxed{" + g + "}",
    "final-answer-dollars": lambda g: "We simplify step by step.\nThe final answer is $" + g + "$.",
}


@pytest.mark.parametrize("form", sorted(GOLD_FORMS))
def test_math500_gold_vs_gold(form):
    rows = _fixture_answers()
    assert len(rows) == 500
    misses = []
    for r in rows:
        pred = extract_answer(GOLD_FORMS[form](r["answer"]))
        result = grade(pred, r["answer"])
        if not result.correct:
            misses.append((r["id"], r["answer"], pred))
    assert misses == []


@pytest.mark.parametrize("completion, gold, problem, expected", [
    # a path cut off while it restates the question answers nothing, though the expression equals the gold
    ("To solve 2 + 3, we need to follow a set of logical", "5", "What is 2 + 3?", False),
    ("To compute $\\dbinom{8}{4}$, we use", "70", "Compute $\\dbinom{8}{4}$.", False),
    ("We want to evaluate $\\sqrt{49} + 3^2$", "16", "Evaluate $\\sqrt{49} + 3^2$.", False),
    ("First, I will simplify $\\frac{84}{144}$ by finding", "\\frac{7}{12}", "Simplify $\\frac{84}{144}$.", False),
    ("The answer is $\\sqrt{32}$.", "4\\sqrt{2}", "Simplify $\\sqrt{32}$.", False),
    # ... while an answer the problem happens to contain, or one worked out, is still right
    ("So the answer is $5$.", "5", "What is 2 + 3?", True),
    ("The quotient is $x+1$.", "x+1", "Divide $x^2+2x+1$ by $x+1$.", True),
    ("The answer is $\\frac{1}{2}$.", "\\frac12", "Heads has probability $\\frac{1}{2}$. Find P(tails).", True),
    ("The side is $\\sqrt{32}$.", "4\\sqrt{2}", "A square has area 32. Find its side.", True),
    ("So the answer is $\\frac{7}{12}$.", "\\frac{7}{12}", "Simplify $\\frac{84}{144}$.", True),
])
def test_an_answer_restating_the_problem_is_wrong(completion, gold, problem, expected):
    assert grade(extract_answer(completion), gold, problem).correct is expected


@pytest.mark.parametrize("problem, unit", [
    ("Janet walks 3 km. How many miles did she walk?", "mi"),
    ("How much money, in dollars, does she make every day?", "dollar"),
    ("How long, in minutes, does the trip take?", "min"),
    ("What is the area of the rectangle (in cm)?", "cm"),
    ("What is the area in square feet?", "ft^2"),
    ("What is angle ABC? Express your answer in degrees.", "deg"),
    ("He runs 3 miles in 30 minutes. How many minutes will 5 miles take?", "min"),
    # a rate asked, by its two units' symbols
    ("How many miles per hour did he drive?", "mi/h"),
    ("The car goes 60 miles an hour. How many miles an hour is that?", "mi/h"),
    ("A train covers 300 km in 4 hours. What is its speed in km/h?", "km/h"),
    ("How fast does the water flow, in liters per minute?", "l/min"),
    ("How fast does she type, in words per minute?", None),
    # no one unit of measure asked: two units, a count's noun, no question of units
    ("How many feet and inches tall is he?", None),
    ("How many apples does she have?", None),
    ("In how many ways can 4 people sit in a row?", None),
    ("How much does it cost in total?", None),
    ("", None),
])
def test_asked_unit_reads_the_unit_a_question_names(problem, unit):
    from core.grading.units import asked_unit

    assert asked_unit(problem) == unit


@pytest.mark.parametrize("completion, gold, problem, right", [
    ("She walks 1.25 miles.", "1.25", "How many miles does she walk?", True),
    ("She walks 1.25 kilometers.", "1.25", "How many miles does she walk?", False),
    ("So Tom needs **75 seconds** more.", "75", "How many more minutes does Tom need?", False),
    ("The answer is $\\boxed{6}$ weeks.", "6", "How many days does the bag last?", False),
    ("The area is 24 feet.", "24", "What is its area, in square feet?", True),  # "square" left out: a slip
    ("He drives 50 mph.", "50", "How many miles per hour does he drive?", True),
    ("She has 1.25 apples.", "1.25", "How many miles does she walk?", True),  # a noun, no unit of measure
    ("It is 1.25 kilometers.", "1.25", None, True),  # no question to hold it against
    ("It is 1.25 kilometers.", "1.25\\text{ km}", "How many miles does she walk?", True),  # the gold's own unit
])
def test_a_unit_of_measure_other_than_the_asked_one_is_wrong(completion, gold, problem, right):
    assert answers_equivalent(extract_answer(completion), gold, problem) is right


@pytest.mark.parametrize("answer, interval", [
    ("x > -1 and x < 6", "(-1,6)"),
    ("x > -1 and x \\le 6", "(-1,6]"),
    ("x \\ge 2 and x \\ge 3", "[3,\\infty)"),
    # at an end both share, the open one is the tighter
    ("x < 6 and x \\le 6", "(-\\infty,6)"),
    ("x > 1 and x \\ge 1", "(1,\\infty)"),
    ("-2 < x and x < 0", "(-2,0)"),
    # no interval: empty, one point, two variables, no inequalities, three parts
    ("x < 2 and x > 5", None), ("x \\le 3 and x \\ge 3", None), ("x > 1 and y < 2", None), ("2 and 5", None),
    ("x > 0 and x < 5 and x < 4", None),
])
def test_inequalities_joined_by_and_are_their_intersection(answer, interval):
    from core.grading.intervals import as_intersection

    assert as_intersection(answer) == interval
