"""Hostile data files (issue 10 point 8): every one raises DatasetFormatError naming the file and record/byte."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.datasets import DatasetFormatError, embedded_path, load_qa
from agent_gym.retrieval import load_corpus

DEEP = 100_000  # far beyond the JSON decoder's recursion limit
HUGE_INT = "1" + "0" * 5000  # over Python's 4,300-digit int-string limit


def _musique_lines() -> list[str]:
    return embedded_path("musique").read_text(encoding="utf-8").splitlines()


def _hotpot_records() -> list[dict]:
    return json.loads(embedded_path("hotpotqa").read_text(encoding="utf-8"))


def _write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _musique_with(tmp_path: Path, record_index: int, raw_record: str) -> Path:
    lines = _musique_lines()[:4]
    lines[record_index] = raw_record
    return _write(tmp_path, "m.jsonl", "\n".join(lines))


QA_CASES = {
    # name: (file name, bytes-or-text builder, expected message pattern)
    "deep JSON line": (
        "d.jsonl",
        lambda: _musique_lines()[0] + "\n" + "[" * DEEP + "]" * DEEP,
        r"d\.jsonl: record 1 \(line 2\): JSON nested too deeply",
    ),
    "deep JSON list element": (
        "d.json",
        lambda: "[" + json.dumps(_hotpot_records()[0]) + ", " + "[" * DEEP + "]" * DEEP + "]",
        r"d\.json: record 1: JSON nested too deeply",
    ),
    "deep object value": (
        "v.jsonl",
        lambda: '{"question": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}",
        r"v\.jsonl: record 0 \(line 1\): JSON nested too deeply",
    ),
    "huge integer line": (
        "h.jsonl",
        lambda: _musique_lines()[0] + '\n{"id": ' + HUGE_INT + "}",
        r"h\.jsonl: record 1 \(line 2\): undecodable JSON value \(Exceeds the limit",
    ),
    "huge integer in list": (
        "h.json",
        lambda: '[{"_id": ' + HUGE_INT + "}]",
        r"h\.json: record 0: undecodable JSON value \(Exceeds the limit",
    ),
    "non-UTF-8 bytes": (
        "u.jsonl",
        lambda: ("\n".join(_musique_lines()[:2]) + "\n").encode() + b'{"id": "\xff\xfe"}\n',
        r"u\.jsonl: not UTF-8 text \(invalid start byte at byte \d+, line 3\)",
    ),
    "empty file": ("e.jsonl", lambda: b"", r"e\.jsonl: the file is empty"),
    "whitespace only": ("w.json", lambda: " \n\t\n", r"w\.json: the file is empty"),
    "empty JSON list": ("l.json", lambda: "[ ]", r"l\.json: holds no records"),
    "top-level scalar": ("s.json", lambda: "42", r"s\.json: record 0: a record must be a JSON object, got int"),
}


@pytest.mark.parametrize("case", list(QA_CASES))
def test_hostile_qa_files_name_file_and_record(tmp_path: Path, case: str) -> None:
    name, build, pattern = QA_CASES[case]
    path = _write(tmp_path, name, build())
    with pytest.raises(DatasetFormatError, match=pattern):
        load_qa(path)


MUSIQUE_FIELD_CASES = {
    "idx 1e999": (
        lambda r: r["paragraphs"][0].update(idx=1e999),
        r"record 2: paragraphs\[0\]\.idx must be an integer, got inf",
    ),
    "idx NaN": (
        lambda r: r["paragraphs"][1].update(idx=float("nan")),
        r"record 2: paragraphs\[1\]\.idx must be an integer",
    ),
    "idx string": (lambda r: r["paragraphs"][0].update(idx="3"), r"paragraphs\[0\]\.idx must be an integer, got '3'"),
    "idx bool": (lambda r: r["paragraphs"][0].update(idx=True), r"paragraphs\[0\]\.idx must be an integer, got True"),
    "support idx 1e999": (
        lambda r: r["question_decomposition"][0].update(paragraph_support_idx=1e999),
        r"question_decomposition\[0\]\.paragraph_support_idx must be an integer",
    ),
    "paragraph text list": (
        lambda r: r["paragraphs"][0].update(paragraph_text=["a"]),
        r"'paragraph_text' must be a str",
    ),
    "paragraphs of strings": (lambda r: r.update(paragraphs=["a", "b"]), r"paragraphs\[0\] must be an object"),
    "decomposition dict": (
        lambda r: r.update(question_decomposition={"a": 1}),
        "question_decomposition must be a list",
    ),
    "answer dict": (lambda r: r.update(answer={"text": "x"}), "field 'answer' must be a string or a list"),
    "aliases string": (lambda r: r.update(answer_aliases="x"), "'answer_aliases' must be a list of strings"),
    "id float": (lambda r: r.update(id=1.5), "field 'id' must be a str or int"),
}


@pytest.mark.parametrize("case", list(MUSIQUE_FIELD_CASES))
def test_wrong_types_in_musique_records(tmp_path: Path, case: str) -> None:
    mutate, pattern = MUSIQUE_FIELD_CASES[case]
    record = json.loads(_musique_lines()[2])
    mutate(record)
    path = _musique_with(tmp_path, 2, json.dumps(record))
    with pytest.raises(DatasetFormatError, match=rf"m\.jsonl: .*{pattern}"):
        load_qa(path)


def test_idx_1e999_literal_in_the_file(tmp_path: Path) -> None:
    """The literal text ``1e999`` (not a Python float written back) decodes to inf: refused, not OverflowError."""
    raw = _musique_lines()[1].replace('"idx": 0,', '"idx": 1e999,', 1)
    assert "1e999" in raw
    with pytest.raises(
        DatasetFormatError, match=r"m\.jsonl: record 1: paragraphs\[0\]\.idx must be an integer, got inf"
    ):
        load_qa(_musique_with(tmp_path, 1, raw))


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, "bom.json", b"\xef\xbb\xbf" + embedded_path("hotpotqa").read_bytes())
    assert load_qa(path) == load_qa(embedded_path("hotpotqa"))


CORPUS_CASES = {
    "not gzip": (
        "c.jsonl.gz",
        lambda: b'{"id": "a", "contents": "A\\nx"}\n',
        r"c\.jsonl\.gz: not a complete gzip file \(BadGzipFile",
    ),
    "truncated gzip": (
        "t.jsonl.gz",
        lambda: gzip.compress(b'{"id": "a", "contents": "A\\nx"}\n' * 500)[:-40],
        r"t\.jsonl\.gz: not a complete gzip file \(EOFError",
    ),
    "non-UTF-8 gzip": (
        "u.jsonl.gz",
        lambda: gzip.compress(b'{"id": "a", "contents": "\xc3\x28"}\n'),
        r"u\.jsonl\.gz: not UTF-8 text \(invalid continuation byte at byte 25, line 1\)",
    ),
    "deep JSON": (
        "d.jsonl",
        lambda: '{"id": "a", "text": "x"}\n' + "[" * DEEP,
        r"d\.jsonl: record 1 \(line 2\): JSON nested too deeply",
    ),
    "huge id": (
        "h.jsonl",
        lambda: '{"id": ' + HUGE_INT + ', "text": "x"}',
        r"h\.jsonl: record 0 \(line 1\): undecodable JSON",
    ),
    "id 1e999": (
        "i.jsonl",
        lambda: '{"id": 1e999, "text": "x"}',
        r"i\.jsonl: record 0: field 'id' must be a string, got float",
    ),
    "text list": (
        "l.json",
        lambda: '[{"title": "A", "text": "x"}, {"title": "B", "text": ["y"]}]',
        r"l\.json: record 1: field 'text'",
    ),
    "empty": ("e.jsonl", lambda: b"", r"e\.jsonl: the file is empty"),
}


@pytest.mark.parametrize("case", list(CORPUS_CASES))
def test_hostile_corpus_files_name_file_and_record(tmp_path: Path, case: str) -> None:
    name, build, pattern = CORPUS_CASES[case]
    path = _write(tmp_path, name, build())
    with pytest.raises(DatasetFormatError, match=pattern):
        load_corpus(path)


CSV_HEADER = "Question,Answer\n"


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        (CSV_HEADER + "a,b\nonly one field\n", r"q\.csv: record 1 \(line 3\): 1 fields, the header has 2"),
        (
            CSV_HEADER + 'a,b\n"' + "x" * 200_000 + '",y\n',
            r"q\.csv: line \d+: malformed CSV \(field larger than field limit",
        ),
        ("Title,Body\nx,y\n", r"q\.csv: record 0: unknown record layout"),
    ],
)
def test_bad_csv_files(tmp_path: Path, body: str, pattern: str) -> None:
    with pytest.raises(DatasetFormatError, match=pattern):
        load_qa(_write(tmp_path, "q.csv", body))


_VALID_JSONL = "\n".join(_musique_lines()[:2]).encode()
_VALID_LIST = json.dumps(_hotpot_records()[:2]).encode()


@given(
    base=st.sampled_from([_VALID_JSONL, _VALID_LIST]),
    cut=st.integers(0, 10**6),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
)
def test_any_damage_to_a_valid_file_is_a_dataset_format_error_or_loads(tmp_path_factory, base, cut, flips) -> None:
    """Truncating a valid file anywhere and overwriting bytes: only DatasetFormatError may escape."""
    data = bytearray(base[: cut % (len(base) + 1)])
    for pos, value in flips:
        if data:
            data[pos % len(data)] = value
    path = tmp_path_factory.mktemp("fuzz") / "f.jsonl"
    path.write_bytes(bytes(data))
    for load in (load_qa, load_corpus):
        try:
            load(path)
        except DatasetFormatError as exc:
            assert "f.jsonl" in str(exc)
