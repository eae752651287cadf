"""The calculator's exact messages, inclusive limits and number formats (issue 16: numbers where they are known).

The agent reads these messages as observations and the limits decide what it may compute, so both are stated
exactly, at and one past every boundary.
"""

import math
from fractions import Fraction

import pytest

from agent_gym.tools.calculator import (
    CalculatorError,
    CalculatorLimits,
    CalculatorTool,
    count_operations,
    evaluate,
    format_number,
    parse_number,
)

FUNCTIONS = "abs, max, min, round, sqrt"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 | 2", "operator BitOr is not allowed; use + - * / // % **"),
        ("1 % 0", "division by zero"),
        ("x + 1", f"unknown name 'x'; functions: {FUNCTIONS}"),
        ("foo(1)", f"only these functions may be called, by name: {FUNCTIONS}"),
        ("1 < 2", "Compare is not allowed in an arithmetic expression"),
        ("'a'", "only numbers are allowed, not str 'a'"),
        ("(-8) ** 0.5", "a negative number to a fractional power is not a real number"),
        ("0 ** -1", "division by zero (0 to a negative power)"),
        ("round(1.5, 21)", "round() takes a whole number of digits between -20 and 20"),
        ("round(1.5, -21)", "round() takes a whole number of digits between -20 and 20"),
        ("sqrt(-1)", "sqrt of a negative number"),
        ("1 ** 1001", "exponent 1001 is too large (limit 1000)"),
        ("4 ** 600.5", "a power is too large (about 2**1201)"),  # estimate = 600.5 * log2(4)
        ("0.5 ** 2000.25", "a power is too large (about 2**-2000)"),  # too small counts too: 2000.25 * -1
    ],
)
def test_refusals_are_exact(expression, message):
    with pytest.raises(CalculatorError) as caught:
        evaluate(expression)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("+5", Fraction(5)),
        ("1 ** 1000", Fraction(1)),  # the exponent limit is inclusive
        ("round(1.25, 20)", Fraction(5, 4)),
        ("round(12345, -20)", Fraction(0)),
        ("4 ** 0.5", Fraction(2)),  # a fractional power is computed in floating point
        ("2 ** 0.5", Fraction(math.sqrt(2))),
        ("0 ** 3000.5", Fraction(0)),  # 0 to any positive power: no size estimate needed
        ("sqrt(2/9)", Fraction(math.sqrt(2 / 9))),  # a square denominator alone is not enough for an exact root
        ("sqrt(2)", Fraction(math.sqrt(2))),
    ],
)
def test_values_at_the_edges(expression, value):
    assert evaluate(expression) == value


def test_nesting_depth_counts_every_operator_and_call():
    limits = CalculatorLimits(max_depth=3)
    for ok in ("---1", "1+(1+(1+1))", "abs(--1)"):  # the number sits at depth 3
        assert evaluate(ok, limits) in (Fraction(-1), Fraction(4), Fraction(1))
    for deep in ("----1", "1+(1+(1+(1+1)))", "abs(---1)"):  # at depth 4
        with pytest.raises(CalculatorError) as caught:
            evaluate(deep, limits)
        assert str(caught.value) == "the expression is nested too deeply (limit 3)"


def test_parenthesis_depth_is_checked_before_parsing():
    limits = CalculatorLimits(max_depth=3)
    assert evaluate("(((1)))", limits) == 1
    with pytest.raises(CalculatorError, match=r"^the expression is nested too deeply \(limit 3\)$"):
        evaluate("((((1))))", limits)
    assert evaluate("((1))+((2))", limits) == 3  # depth is nesting, not a count of parentheses


def test_result_size_limit_is_inclusive_for_numerators_and_denominators():
    big = "(2**1000 * 2**23)"  # 2**1023 (an exponent over 1,000 is refused)
    assert evaluate(f"({big} - 1) * 2 + 1") == 2**1024 - 1  # 1,024 bits
    assert evaluate(f"1 / {big}") == Fraction(1, 2**1023)  # a 1,024-bit denominator
    for too_big in (f"{big} * 2", f"1 / {big} / 2"):
        with pytest.raises(CalculatorError) as caught:
            evaluate(too_big)
        assert str(caught.value) == "a result is too large (more than 1024 bits)"


@pytest.mark.parametrize(
    ("expression", "outcome"),
    [
        ("2**5", 32),
        ("2**9", 512),  # 10 bits
        ("2**10", "a result is too large (more than 10 bits)"),  # the power's estimate lets 11 bits through
        ("2**11", "a power is too large (more than 10 bits)"),  # 2 bits x 11 > 10 + 11: refused before computing
    ],
)
def test_the_power_estimate_and_the_result_check_share_the_bit_limit(expression, outcome):
    limits = CalculatorLimits(max_bits=10)
    if isinstance(outcome, int):
        assert evaluate(expression, limits) == outcome
    else:
        with pytest.raises(CalculatorError) as caught:
            evaluate(expression, limits)
        assert str(caught.value) == outcome


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(1, 10**12), "0.000000000001"),  # up to 12 decimal places are shown exactly
        (Fraction(1, 10**13), "~1e-13"),
        (Fraction(-1, 8), "-0.125"),
        (Fraction(1, 61), f"1/61 (~{1 / 61:.12g})"),
        (Fraction(1, 999_983), f"1/999983 (~{1 / 999_983:.12g})"),  # denominators below a million as fractions
        (Fraction(1, 1_000_003), f"~{1 / 1_000_003:.12g}"),
    ],
)
def test_number_formats(value, text):
    assert format_number(value) == text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3.", Fraction(3)),  # a sentence's full stop
        (".5", Fraction(1, 2)),
        ("€12", Fraction(12)),
        ("£3.50", Fraction(7, 2)),
        ("12X", None),
        ("1" * 60, Fraction(int("1" * 60))),
        ("1" * 61, None),  # longer than 60 characters: not a number an answer would hold
        ("", None),
    ],
)
def test_parse_number_edges(text, value):
    assert parse_number(text) == value


def test_count_operations_reads_long_and_deep_expressions_up_to_its_own_caps():
    assert count_operations("+".join(["1"] * 300)) == 299  # 599 characters: over the tool's 500, still counted
    assert count_operations("(" * 61 + "1+1" + ")" * 61) == 1  # deeper than the tool's 40
    assert count_operations("1" + " " * 999_997 + "+1") == 1  # 1,000,000 characters
    assert count_operations("1" + " " * 999_998 + "+1") == 0  # one more: over the cap


def test_the_tool_applies_its_own_limits_and_names_the_error_reason():
    tool = CalculatorTool(CalculatorLimits(max_length=5))
    assert tool.call({"expression": "1+2+3"}).content == "6"
    refused = tool.call({"expression": "1+2+34"})
    assert refused.content == "Error: the expression is 6 characters long (limit 5)"
    assert refused.metadata == {"reason": "calculator_error"}


@pytest.mark.parametrize(
    ("expression", "limits", "message"),
    [
        (5, None, "the expression must be a string, got int"),
        ("  ", None, "the expression is empty"),
        ("١٢", None, "unsupported characters '١٢'; use ASCII digits and + - * / // % ** ( )"),
        ("-" * 100_000 + "1", {"max_length": 300_000, "max_depth": 300_000}, "invalid expression (MemoryError)"),
        # a number the size check allows, whose floating-point square root does not exist
        (
            "sqrt((2**1000 * 2**23 - 1) * 2 + 1)",
            None,
            "cannot evaluate: OverflowError: integer division result too large for a float",
        ),
    ],
)
def test_more_refusals_are_exact(expression, limits, message):
    with pytest.raises(CalculatorError) as caught:
        evaluate(expression, CalculatorLimits(**limits) if limits else None)
    assert str(caught.value) == message


def test_nesting_is_counted_on_brackets_only():
    with pytest.raises(CalculatorError) as caught:
        evaluate("X" * 41)  # a long name is not nesting
    assert str(caught.value) == f"unknown name {'X' * 41!r}; functions: {FUNCTIONS}"
    with pytest.raises(CalculatorError, match=r"^the expression is nested too deeply \(limit 40\)$"):
        evaluate("(" + "X*(" * 40 + "1" + ")" * 41)  # names between the brackets do not close them
    # closing a bracket goes back one level: (1)+((1)) is 2 deep
    assert evaluate("(1)+((1))", CalculatorLimits(max_depth=2)) == 2
    with pytest.raises(CalculatorError, match=r"^the expression is nested too deeply \(limit 1\)$"):
        evaluate("(1)+((1))", CalculatorLimits(max_depth=1))
    # deep text is refused by the bracket count before Python's parser sees it
    with pytest.raises(CalculatorError, match=r"^the expression is nested too deeply \(limit 40\)$"):
        evaluate("(1+" * 2000 + "1" + ")" * 2000, CalculatorLimits(max_length=10**5))


def test_tabs_are_whitespace_and_a_sentence_percentage_parses():
    assert evaluate("1\t+\t2") == 3
    assert parse_number("50%.") == Fraction(1, 2)


def test_smallest_limits_are_valid_and_zero_is_named():
    assert CalculatorLimits(max_length=1, max_depth=1, max_exponent=1, max_bits=1).max_depth == 1
    with pytest.raises(ValueError) as caught:
        CalculatorLimits(max_bits=0)
    assert str(caught.value) == "CalculatorLimits.max_bits must be >= 1 (got 0)"
