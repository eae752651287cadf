"""The parser's building blocks: linear scanning, JSON depth before decoding, size-bounded decoding."""

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.core import scanning
from agent_gym.core.scanning import JsonLimits, count_blocks, decode_json, exceeds_depth, json_depth, scan_blocks


class CountingStr(str):
    """A str that counts the characters its ``find`` calls examine (a deterministic measure of work)."""

    scanned = 0
    calls = 0

    def find(self, sub, start=0, end=None):  # type: ignore[override]
        found = str.find(self, sub, start) if end is None else str.find(self, sub, start, end)
        stop = len(self) if found < 0 else found + len(sub)
        CountingStr.scanned += max(0, stop - start)
        CountingStr.calls += 1
        return found


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>" * 16_000,
        "<answer>" * 100_000,
        "<tool_call></tool_call>" * 40_000,
        "<tool_call>" * 8_000 + "</tool_call>" * 8_000,
        "</tool_call><tool_call>" * 20_000,
        "x" * 1_000_000,
    ],
)
@pytest.mark.parametrize(("open_tag", "close_tag"), [("<tool_call>", "</tool_call>"), ("<answer>", "</answer>")])
def test_scanning_work_is_linear_in_the_input(text, open_tag, close_tag):
    CountingStr.scanned = CountingStr.calls = 0
    scan_blocks(CountingStr(text), open_tag, close_tag)
    # every character is examined at most twice (once looking for an opening tag, once for a closing one)
    assert 1 <= CountingStr.calls and CountingStr.scanned <= 2 * len(text) + len(close_tag)
    assert CountingStr.calls <= 2 * text.count(open_tag) + 2


@given(st.lists(st.sampled_from(["<b>", "</b>", "x", "<b", "b>", "\n"]), max_size=30).map("".join))
def test_scan_blocks_finds_what_the_lazy_regex_finds(text):
    expected = [(m.start(), m.group(1)) for m in re.finditer(r"<b>(.*?)</b>", text, re.DOTALL)]
    assert scan_blocks(text, "<b>", "</b>") == expected


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("{}", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('{"a": "[[[[{{{{"}', 1),  # brackets inside strings do not count
        ('{"a": "\\"[[[["}', 1),  # nor after an escaped quote
        ('{"a": "[[[', 1),  # an unterminated string runs to the end
        ("[" * 980 + "]" * 980, 980),
        ("[" * 100_000, 100_000),
        ('"\\' * 1000, 0),
    ],
)
def test_json_depth(text, depth):
    assert json_depth(text) == depth


@given(st.recursive(st.integers() | st.text(max_size=5), lambda c: st.lists(c, max_size=3), max_leaves=20))
def test_json_depth_matches_the_decoded_nesting(value):
    def nesting(v):
        return 1 + max((nesting(x) for x in v), default=0) if isinstance(v, list) else 0

    assert json_depth(json.dumps(value)) == nesting(value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"n": ' + "9" * 4_301 + "}", "number literal of 4301 characters"),  # Python alone raises ValueError
        ('{"n": ' + "9" * 101 + "}", "number literal of 101 characters"),
        ('{"n": 1e999}', "out of range"),
        ('{"n": NaN}', "NaN is not a JSON number"),
        ('{"n": -Infinity}', "-Infinity is not a JSON number"),
        ("[" * 30_000 + "]" * 30_000, "JSON nested more than 32 deep"),  # Python alone raises RecursionError
        ("[" * 33 + "]" * 33, "JSON nested more than 32 deep"),
        ("[" * 100_000, "100000 characters of JSON (the limit is 65536)"),
        ("{oops", "invalid JSON"),
    ],
)
def test_decode_json_refuses_with_a_reason(text, problem):
    value, reason = decode_json(text)
    assert value is None and problem in reason


def test_decode_json_accepts_values_at_the_limits():
    assert decode_json("[" * 32 + "]" * 32)[1] is None
    assert decode_json('{"n": ' + "9" * 100 + "}") == ({"n": int("9" * 100)}, None)
    assert decode_json('{"x": -1.5e300}') == ({"x": -1.5e300}, None)
    assert decode_json("[[1]]", JsonLimits(max_depth=1))[1] == "JSON nested more than 1 deep"
    assert decode_json("[" * 70_000 + "]" * 70_000, JsonLimits(max_length=200_000, max_depth=80_000))[1] in (
        None,
        "JSON nested too deep",  # the safety net: Python's own recursion limit
    )


@pytest.mark.parametrize("pad", [0, 4_000, 5_000, 70_000, 200_000])
def test_exceeds_depth_sees_nesting_however_far_in(pad):
    text = '{"q": "' + "x" * pad + '", "z": ' + "[" * 33 + "]" * 33 + "}"
    assert exceeds_depth(text, 33) and not exceeds_depth(text, 34)


@given(st.text(alphabet='[]{}"\\ab', max_size=300), st.integers(1, 40))
def test_exceeds_depth_agrees_with_json_depth(text, limit):
    assert exceeds_depth(text, limit) == (json_depth(text) > limit)


def _reference_depth(text: str) -> int:
    """The documented rule, one character at a time."""
    depth = best = run = 0
    inside = False
    for ch in text:
        if ch == '"' and run % 2 == 0:
            inside = not inside
        elif not inside and ch in "[{":
            depth += 1
            best = max(best, depth)
        elif not inside and ch in "]}":
            depth -= 1
        run = run + 1 if ch == "\\" else 0
    return best


@given(st.text(alphabet='[]{}"\\a', max_size=300))
def test_json_depth_follows_the_documented_rule(text):
    assert json_depth(text) == _reference_depth(text)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
@pytest.mark.parametrize("name", ["max_length", "max_depth", "max_number_length"])
def test_json_limits_must_be_positive_ints(bad, name):
    with pytest.raises(ValueError, match=f"JsonLimits.{name} must be a positive int"):
        JsonLimits(**{name: bad})


@given(st.lists(st.sampled_from(["<b>", "</b>", "x", "<b", "b>", "\n"]), max_size=40).map("".join))
def test_count_blocks_counts_what_scan_blocks_finds(text):
    assert count_blocks(text, "<b>", "</b>") == len(scan_blocks(text, "<b>", "</b>"))
    assert scan_blocks(text, "<b>", "</b>", limit=2) == scan_blocks(text, "<b>", "</b>")[:2]


def test_count_blocks_only_regex_scans_up_to_the_last_closing_tag(monkeypatch):
    """Opening tags after the last closing tag never reach the lazy regex (which would rescan from each)."""
    seen: list[int] = []
    real = scanning._block_pattern

    class Spy:
        def __init__(self, pattern):
            self.pattern = pattern

        def subn(self, repl, text):
            seen.append(len(text))
            return self.pattern.subn(repl, text)

    monkeypatch.setattr(scanning, "_block_pattern", lambda o, c: Spy(real(o, c)))
    assert count_blocks("<b>1</b>" + "<b>" * 10_000, "<b>", "</b>") == 1
    assert count_blocks("<b>" * 10_000, "<b>", "</b>") == 0
    assert seen == [len("<b>1</b>")]
