"""JSON lines are split at "\\n" only (agent_gym.core.files): Unicode line breaks inside a record's text stay in it."""

from __future__ import annotations

import json

import pytest

from agent_gym.core.files import iter_records, json_lines
from agent_gym.datasets import embedded_path, load_qa

BREAKS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"
"""Every character ``str.splitlines()`` splits at besides ``\\n`` and ``\\r``; a JSON string may hold the first
three raw (``json.dumps(..., ensure_ascii=False)`` writes them so), the control characters only escaped."""


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("", []),
        ("a", ["a"]),
        ("a\n", ["a"]),
        ("a\nb", ["a", "b"]),
        ("a\r\nb\r\n", ["a", "b"]),
        ("a\n\nb\n\n", ["a", "", "b", ""]),
        (f"x{BREAKS}y\nz", [f"x{BREAKS}y", "z"]),
    ],
)
def test_json_lines_splits_at_newlines_only(text, lines):
    assert json_lines(text) == lines


def test_a_json_lines_file_whose_records_hold_unicode_line_breaks_reads_back_whole(tmp_path):
    records = [{"id": n, "text": f"line{ch}break"} for n, ch in enumerate(BREAKS)]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")  # written raw, as the package's writers do
    assert [value for _, value in iter_records(path)] == records


def test_a_musique_dataset_with_a_line_separator_in_a_question_loads(tmp_path):
    lines = embedded_path("musique").read_text(encoding="utf-8").split("\n")[:2]
    first = json.loads(lines[0])
    first["question"] = first["question"].replace(" ", "\u2028", 1)
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(first, ensure_ascii=False) + "\n" + lines[1] + "\n", encoding="utf-8")
    tasks = load_qa(path)
    assert len(tasks) == 2 and "\u2028" in tasks[0].question
