"""Tests for core.io: the problem reader, the answers writer, trace files, the example files."""

from __future__ import annotations

import hashlib

import io
import os
import sys
from pathlib import Path

import orjson
import pytest

from core.io.problems import Problem, ProblemError, read_problems
from core.io.writers import AnswerWriter, safe_filename, write_trace

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def write_lines(path: Path, lines: list[bytes | str | dict]) -> Path:
    """Write each item as one line: dicts as JSON, str as UTF-8, bytes unchanged."""
    out = []
    for item in lines:
        if isinstance(item, dict):
            out.append(orjson.dumps(item))
        elif isinstance(item, str):
            out.append(item.encode("utf-8"))
        else:
            out.append(item)
    path.write_bytes(b"\n".join(out) + b"\n")
    return path


def only(items: list, cls: type) -> list:
    return [x for x in items if isinstance(x, cls)]


# ---------------------------------------------------------------- read_problems: good input


def test_good_records_fields_and_extra(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [
        {"id": "a", "problem": "1+1?", "answer": "2", "solution": "s", "level": 3},
        {"id": "b", "problem": "2+2?"},
    ])
    items = list(read_problems(f))
    assert items == [
        Problem(id="a", problem="1+1?", answer="2", line=1, extra={"solution": "s", "level": 3}),
        Problem(id="b", problem="2+2?", answer=None, line=2, extra={}),
    ]


def test_question_field_used_when_problem_absent(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [{"id": "q", "question": "What?", "answer": "x"}])
    (p,) = read_problems(f)
    assert isinstance(p, Problem)
    assert p.problem == "What?"
    assert "question" not in p.extra


def test_custom_field_names(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [{"uid": 7, "prompt": "Go", "target": "ok"}])
    (p,) = read_problems(f, problem_fields=("prompt",), answer_field="target", id_field="uid")
    assert (p.id, p.problem, p.answer, p.extra) == ("7", "Go", "ok", {})


def test_numeric_answers_converted_to_str(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [
        {"id": "i", "problem": "x", "answer": 18},
        {"id": "f", "problem": "x", "answer": 0.15},
        {"id": "n", "problem": "x", "answer": -3},
        {"id": "z", "problem": "x", "answer": None},
    ])
    answers = [p.answer for p in read_problems(f)]
    assert answers == ["18", "0.15", "-3", None]


def test_missing_id_made_up_and_numeric_id_converted(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [
        {"problem": "first"},
        "",
        {"id": 42, "problem": "second"},
        {"id": None, "problem": "third"},
    ])
    items = list(read_problems(f))
    assert [(p.id, p.line) for p in items] == [("line-1", 1), ("42", 3), ("line-4", 4)]
    assert all(isinstance(p, Problem) for p in items)


def test_blank_lines_skipped_and_line_numbers_kept(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_bytes(b'\n   \n{"id":"a","problem":"p"}\n\t\r\n\n{"id":"b","problem":"q"}\n\n')
    items = list(read_problems(f))
    assert [(p.id, p.line) for p in items] == [("a", 3), ("b", 6)]


def test_crlf_line_endings_and_missing_final_newline(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_bytes(b'{"id":"a","problem":"p"}\r\n{"id":"b","problem":"q"}')
    assert [p.id for p in read_problems(f)] == ["a", "b"]


def test_utf8_bom_on_first_line_is_ignored(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"id":"a","problem":"p"}\n')
    (p,) = read_problems(f)
    assert isinstance(p, Problem) and p.id == "a"


def test_non_ascii_text_round_trips(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [{"id": "é", "problem": "Janet’s ducks: π ≈ 3"}])
    (p,) = read_problems(f)
    assert p.problem == "Janet’s ducks: π ≈ 3" and p.id == "é"


def test_empty_file_yields_nothing(tmp_path):
    f = tmp_path / "empty.jsonl"
    f.write_bytes(b"")
    assert list(read_problems(f)) == []
    f.write_bytes(b"\n\n  \n")
    assert list(read_problems(f)) == []


def test_accepts_str_path(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [{"id": "a", "problem": "p"}])
    assert [p.id for p in read_problems(str(f))] == ["a"]


def test_dash_reads_stdin(monkeypatch):
    data = b'{"id":"a","problem":"p"}\nnot json\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    items = list(read_problems("-"))
    assert isinstance(items[0], Problem) and items[0].id == "a"
    assert isinstance(items[1], ProblemError) and items[1].source == "<stdin>"
    assert items[1].describe().startswith("<stdin>:2: ")


class _OneLineThenFail(io.RawIOBase):
    """A stream that serves one line and fails the test if anything reads further."""

    def __init__(self, line: bytes) -> None:
        self._line = line
        self.served = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self.served:
            raise AssertionError("reader read past the first record")
        self.served = True
        buf[: len(self._line)] = self._line
        return len(self._line)


def test_reading_is_lazy(monkeypatch):
    """Records come out as lines are read, not after the whole input has been read."""
    raw = _OneLineThenFail(b'{"id":"a","problem":"p"}\n')
    fake_stdin = type("FakeStdin", (), {"buffer": io.BufferedReader(raw)})()
    monkeypatch.setattr(sys, "stdin", fake_stdin)
    it = read_problems("-")
    assert raw.served is False  # opening reads nothing
    first = next(it)
    assert isinstance(first, Problem) and first.id == "a"
    with pytest.raises(AssertionError, match="past the first record"):
        next(it)


# ---------------------------------------------------------------- read_problems: bad input


def test_invalid_json_reports_orjson_reason(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", ['{"id": "a", "problem": "p"', ])
    (e,) = read_problems(f)
    assert isinstance(e, ProblemError)
    assert e.line == 1 and e.field is None and e.id is None
    # orjson's own reason, with the column inside the line (not orjson's "line 2" past the \n).
    with pytest.raises(orjson.JSONDecodeError) as info:
        orjson.loads('{"id": "a", "problem": "p"')
    assert e.message == f"invalid JSON: {info.value.msg} (column 27)"


@pytest.mark.parametrize("line", ['{"a": 1,}', "nope", '{"problem": "p"} trailing', "{'problem': 'p'}"])
def test_various_invalid_json(tmp_path, line):
    f = write_lines(tmp_path / "p.jsonl", [line, {"id": "ok", "problem": "p"}])
    e, p = read_problems(f)
    assert isinstance(e, ProblemError) and e.message.startswith("invalid JSON: ")
    assert isinstance(p, Problem) and p.line == 2


def test_non_utf8_bytes(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [
        {"id": "a", "problem": "before"},
        b"\xff\xfe",
        b'{"id": "b", "problem": "caf\xe9"}',
        {"id": "c", "problem": "after"},
    ])
    items = list(read_problems(f))
    assert [type(x) for x in items] == [Problem, ProblemError, ProblemError, Problem]
    e1, e2 = items[1], items[2]
    assert e1.line == 2 and e1.field is None
    assert "UTF-8" in e1.message and "0xff" in e1.message
    assert e2.line == 3 and "UTF-8" in e2.message and "0xe9" in e2.message
    assert [p.id for p in only(items, Problem)] == ["a", "c"]


@pytest.mark.parametrize("line, kind", [
    ("[1, 2]", "array"),
    ('"just a string"', "string"),
    ("42", "number"),
    ("null", "null"),
    ("true", "boolean"),
])
def test_line_not_an_object(tmp_path, line, kind):
    f = write_lines(tmp_path / "p.jsonl", [line])
    (e,) = read_problems(f)
    assert isinstance(e, ProblemError)
    assert e.field is None and e.line == 1
    assert e.message == f"expected a JSON object, got {kind}"


@pytest.mark.parametrize("record", [
    {"id": "x"},
    {"id": "x", "problem": ""},
    {"id": "x", "problem": "   \n"},
    {"id": "x", "problem": None},
])
def test_problem_missing_or_empty(tmp_path, record):
    f = write_lines(tmp_path / "problems.jsonl", [record])
    (e,) = read_problems(f)
    assert isinstance(e, ProblemError)
    assert (e.id, e.line, e.field) == ("x", 1, "problem")
    absent = "missing (also looked for 'question'); fields present: id; choose the field with --problem-field"
    assert e.message == (absent if "problem" not in record else "missing or empty")


@pytest.mark.parametrize("value, kind", [(5, "number"), (["a"], "array"), ({"t": 1}, "object"),
                                         (True, "boolean")])
def test_problem_not_a_string(tmp_path, value, kind):
    f = write_lines(tmp_path / "p.jsonl", [{"id": "x", "problem": value}])
    (e,) = read_problems(f)
    assert isinstance(e, ProblemError)
    assert e.field == "problem" and e.message == f"must be a string, got {kind}"


def test_problem_field_is_first_present_alias(tmp_path):
    # "problem" is present (though empty), so it is the field checked, not the "question" fallback.
    f = write_lines(tmp_path / "p.jsonl", [
        {"id": "x", "problem": "", "question": "Q?"},
        {"id": "y", "question": 3},
    ])
    e1, e2 = read_problems(f)
    assert isinstance(e1, ProblemError) and e1.field == "problem"
    assert isinstance(e2, ProblemError) and e2.field == "question"
    assert e2.message == "must be a string, got number"


@pytest.mark.parametrize("value, kind", [([1], "array"), ({"v": 1}, "object"), (False, "boolean")])
def test_answer_wrong_type(tmp_path, value, kind):
    f = write_lines(tmp_path / "p.jsonl", [{"id": "x", "problem": "p", "answer": value}])
    (e,) = read_problems(f)
    assert isinstance(e, ProblemError)
    assert (e.id, e.field) == ("x", "answer")
    assert e.message == f"must be a string or a number, got {kind}"


@pytest.mark.parametrize("value, message", [
    ("", "empty"),
    ([1], "must be a string or a number, got array"),
    (True, "must be a string or a number, got boolean"),
])
def test_bad_id(tmp_path, value, message):
    f = write_lines(tmp_path / "p.jsonl", [{"id": value, "problem": "p"}])
    (e,) = read_problems(f)
    assert isinstance(e, ProblemError)
    assert (e.id, e.field, e.message) == (None, "id", message)


def test_duplicate_id_names_first_line(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [
        {"id": "a", "problem": "p1"},
        {"id": "b", "problem": "p2"},
        "",
        {"id": "a", "problem": "p3"},
        {"id": "a", "problem": "p4"},
    ])
    items = list(read_problems(f))
    assert [type(x) for x in items] == [Problem, Problem, ProblemError, ProblemError]
    for e, line in zip(items[2:], (4, 5)):
        assert (e.id, e.line, e.field) == ("a", line, "id")
        assert e.message == "duplicate id 'a' (first seen on line 1)"


def test_duplicate_between_numeric_and_string_id(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [{"id": 3, "problem": "p"}, {"id": "3", "problem": "q"}])
    p, e = read_problems(f)
    assert isinstance(p, Problem) and isinstance(e, ProblemError)
    assert "first seen on line 1" in e.message


def test_made_up_id_collides_with_explicit_id(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [{"id": "line-2", "problem": "p"}, {"problem": "q"}])
    p, e = read_problems(f)
    assert isinstance(p, Problem) and isinstance(e, ProblemError)
    assert e.id == "line-2" and e.field == "id"


def test_good_lines_around_bad_ones_all_yielded_in_order(tmp_path):
    f = write_lines(tmp_path / "mixed.jsonl", [
        {"id": "g1", "problem": "p"},
        "{not json",
        {"id": "g2", "problem": "p", "answer": 7},
        b"\xff\xfe",
        "",
        "[1]",
        {"id": "g3", "problem": ""},
        {"id": "g4", "question": "q"},
        {"id": "g1", "problem": "dup"},
        {"id": "g5", "problem": "p", "answer": {"x": 1}},
        {"problem": "last"},
    ])
    items = list(read_problems(f))
    assert len(items) == 10  # 11 lines, one blank
    assert [x.line for x in items] == [1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    good = only(items, Problem)
    assert [p.id for p in good] == ["g1", "g2", "g4", "line-11"]
    assert good[1].answer == "7"
    bad = only(items, ProblemError)
    assert [(e.line, e.field) for e in bad] == [
        (2, None), (4, None), (6, None), (7, "problem"), (9, "id"), (10, "answer")]
    assert all(e.source == str(f) for e in bad)


def test_describe_format():
    e = ProblemError(id="x", line=7, field="problem", message="missing or empty",
                     source="problems.jsonl")
    assert e.describe() == "problems.jsonl:7: field 'problem': missing or empty"
    e2 = ProblemError(id=None, line=2, field=None, message="invalid JSON: oops", source="a.jsonl")
    assert e2.describe() == "a.jsonl:2: invalid JSON: oops"


def test_describe_from_reader(tmp_path):
    f = write_lines(tmp_path / "problems.jsonl", [
        {"id": "a", "problem": "p"}, {"id": "b", "problem": " "}])
    _, e = read_problems(f)
    assert e.describe() == f"{f}:2: field 'problem': missing or empty"
    assert "\n" not in e.describe()


# ---------------------------------------------------------------- read_problems: unreadable file


def test_missing_file_raises_at_call_naming_path(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError) as info:
        read_problems(missing)  # raises before iteration starts
    assert str(missing) in str(info.value)
    assert "not found" in str(info.value)


def test_directory_raises(tmp_path):
    with pytest.raises(IsADirectoryError) as info:
        read_problems(tmp_path)
    assert str(tmp_path) in str(info.value)


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0,
                    reason="root (and Windows) can read files without permission bits")
def test_unreadable_file_raises(tmp_path):
    f = write_lines(tmp_path / "p.jsonl", [{"problem": "p"}])
    f.chmod(0)
    try:
        with pytest.raises(PermissionError) as info:
            read_problems(f)
        assert str(f) in str(info.value)
    finally:
        f.chmod(0o644)


def test_permission_error_reworded_even_as_root(tmp_path, monkeypatch):
    import core.io.problems as problems

    def deny(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    f = write_lines(tmp_path / "p.jsonl", [{"problem": "p"}])
    monkeypatch.setattr(problems, "open", deny, raising=False)
    with pytest.raises(PermissionError) as info:
        read_problems(f)
    assert str(f) in str(info.value) and "not readable" in str(info.value)


def test_file_closed_after_exhaustion(tmp_path, monkeypatch):
    import builtins

    import core.io.problems as problems

    handles = []

    def tracking_open(*args, **kwargs):
        handles.append(builtins.open(*args, **kwargs))
        return handles[-1]

    monkeypatch.setattr(problems, "open", tracking_open, raising=False)
    f = write_lines(tmp_path / "p.jsonl", [{"problem": "p"}, "bad"])
    it = read_problems(f)
    assert len(handles) == 1 and not handles[0].closed
    assert len(list(it)) == 2
    assert handles[0].closed


# ---------------------------------------------------------------- AnswerWriter


def read_jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_answer_writer_writes_lines_and_creates_dir(tmp_path):
    out = tmp_path / "run" / "nested"
    with AnswerWriter(out) as w:
        w.write({"id": "a", "answer": "18", "correct": True})
        # Visible on disk before close: a killed run keeps what was written.
        assert read_jsonl(out / "answers.jsonl") == [{"id": "a", "answer": "18", "correct": True}]
        w.write({"id": "b", "answer": None, "score": 0.5})
    assert w.closed
    raw = (out / "answers.jsonl").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 2
    assert read_jsonl(out / "answers.jsonl")[1] == {"id": "b", "answer": None, "score": 0.5}


def test_answer_writer_appends_across_reopen(tmp_path):
    with AnswerWriter(tmp_path) as w:
        w.write({"id": "a"})
    with AnswerWriter(tmp_path) as w:
        w.write({"id": "b"})
    assert [r["id"] for r in read_jsonl(tmp_path / "answers.jsonl")] == ["a", "b"]


def test_answer_writer_fsyncs_every_record(tmp_path, monkeypatch):
    import os

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    with AnswerWriter(tmp_path) as w:
        before = len(synced)
        w.write({"id": "a"})
        w.write({"id": "b"})
        assert len(synced) - before == 2


def test_answer_writer_recovers_from_torn_last_line(tmp_path):
    (tmp_path / "answers.jsonl").write_bytes(b'{"id":"a"}\n{"id":"b","ans')
    with AnswerWriter(tmp_path) as w:
        w.write({"id": "c"})
    lines = (tmp_path / "answers.jsonl").read_bytes().split(b"\n")
    assert lines == [b'{"id":"a"}', b'{"id":"b","ans', b'{"id":"c"}', b""]


def test_answer_writer_bad_record_writes_nothing(tmp_path):
    with AnswerWriter(tmp_path) as w:
        with pytest.raises(TypeError):
            w.write({"id": "a", "x": object()})
        w.write({"id": "b"})
    assert read_jsonl(tmp_path / "answers.jsonl") == [{"id": "b"}]


def test_answer_writer_closed(tmp_path):
    w = AnswerWriter(tmp_path)
    w.close()
    w.close()  # idempotent
    with pytest.raises(ValueError):
        w.write({"id": "a"})


# ---------------------------------------------------------------- safe_filename / write_trace


@pytest.mark.parametrize("pid, readable", [
    ("test/precalculus/807.json", "test_precalculus_807"),
    ("test/counting_and_probability/190.json", "test_counting_and_probability_190"),
    ("a b:c\\d*?", "a_b_c_d__"),
    ("x.JSON", "x"),
    ("..", "_."),
    ("../../etc/passwd", "_._.._etc_passwd"),
    ("", "_"),
    ("con", "_con"),
])
def test_safe_filename_changed_ids_get_a_hash(pid, readable):
    digest = hashlib.sha256(pid.encode()).hexdigest()[:8]
    assert safe_filename(pid) == f"{readable}-{digest}.json"


@pytest.mark.parametrize("pid", ["gsm8k-test-0000", "line-3", "c.json.x"])
def test_safe_filename_keeps_safe_ids(pid):
    assert safe_filename(pid) == pid + ".json"


def test_safe_filename_never_collides():
    ids = ["a/b", "a_b", "c.json", "c", "a b", "a:b"]
    assert len({safe_filename(i) for i in ids}) == len(ids)


def test_safe_filename_properties():
    for pid in ["test/precalculus/807.json", "../x", "é/ü", "a\x00b", "x" * 1000, ".hidden"]:
        name = safe_filename(pid)
        assert "/" not in name and "\\" not in name and "\x00" not in name
        assert name.endswith(".json") and not name.endswith(".json.json")
        assert not name.startswith(".")
        assert len(name.encode()) <= 255
    # Long ids keep distinct names thanks to the hash suffix.
    assert safe_filename("x" * 1000) != safe_filename("x" * 999)


def test_write_trace_round_trip(tmp_path):
    trace = {"id": "test/precalculus/807.json", "steps": [{"text": "π/2", "score": 0.9}],
             "answer": "\\left( 3, \\frac{\\pi}{2} \\right)"}
    path = write_trace(tmp_path, "test/precalculus/807.json", trace)
    assert path.name.startswith("test_precalculus_807-") and path.suffix == ".json"
    assert path.parent == tmp_path / "traces"
    assert orjson.loads(path.read_bytes()) == trace
    # The `trace` command finds the file from the id alone.
    assert (tmp_path / "traces" / safe_filename(trace["id"])).exists()


def test_write_trace_replaces_and_leaves_no_temp_files(tmp_path):
    write_trace(tmp_path, "p1", {"v": 1})
    path = write_trace(tmp_path, "p1", {"v": 2})
    assert orjson.loads(path.read_bytes()) == {"v": 2}
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["p1.json"]


def test_write_trace_bad_trace_keeps_old_file(tmp_path):
    path = write_trace(tmp_path, "p1", {"v": 1})
    with pytest.raises(TypeError):
        write_trace(tmp_path, "p1", {"v": object()})
    assert orjson.loads(path.read_bytes()) == {"v": 1}
    assert [p.name for p in (tmp_path / "traces").iterdir()] == ["p1.json"]


# ---------------------------------------------------------------- example files


@pytest.mark.parametrize("name", ["gsm8k_sample.jsonl", "math500_sample.jsonl"])
def test_example_files_have_ten_valid_problems(name):
    items = list(read_problems(EXAMPLES / name))
    assert len(items) == 10
    assert all(isinstance(p, Problem) for p in items), [
        x.describe() for x in items if isinstance(x, ProblemError)]
    assert all(p.answer and p.answer.strip() for p in items)
    assert all(p.extra.get("solution") for p in items)
    assert len({p.id for p in items}) == 10


def test_examples_are_valid_and_varied():
    gsm8k = list(read_problems(EXAMPLES / "gsm8k_sample.jsonl"))
    assert [p.id for p in gsm8k] == [f"gsm8k-test-{i:04d}" for i in range(10)]
    assert all(isinstance(p, Problem) and p.answer and p.extra["solution"] for p in gsm8k)
    items = list(read_problems(EXAMPLES / "math500_sample.jsonl"))
    assert len(items) == 10 and all(isinstance(p, Problem) and p.answer for p in items)
    subjects = {p.extra["subject"] for p in items}
    assert len(subjects) == 7
    assert all(1 <= p.extra["level"] <= 3 for p in items)


def test_iter_lines_reads_a_giant_line_in_pieces():
    from core.io.problems import iter_lines

    data = b'{"a": 1}\n' + b"x" * 5000 + b"\n" + b"\n" + b'{"b": 2}'
    got = list(iter_lines(io.BytesIO(data), max_bytes=100))
    assert got == [(1, b'{"a": 1}\n', 9), (2, None, 5001), (3, b"\n", 1), (4, b'{"b": 2}', 8)]
    # a line exactly at the limit (its newline included) is kept
    assert list(iter_lines(io.BytesIO(b"y" * 99 + b"\n"), max_bytes=100)) == [(1, b"y" * 99 + b"\n", 100)]
