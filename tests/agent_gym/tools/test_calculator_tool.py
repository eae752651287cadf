import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.tools.calculator import (
    CalculatorError,
    CalculatorLimits,
    CalculatorTool,
    count_operations,
    evaluate,
    format_number,
    parse_number,
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("(3 + 4.5) * 2", Fraction(15)),
        ("0.1 + 0.2", Fraction(3, 10)),
        ("1/3 * 3", Fraction(1)),
        ("7 // 2", Fraction(3)),
        ("-7 % 3", Fraction(2)),
        ("2 ^ 10", Fraction(1024)),
        ("3 × 4 ÷ 6 − 1", Fraction(1)),
        ("sqrt(16/9)", Fraction(4, 3)),
        ("round(2.567, 2)", Fraction(257, 100)),
        ("max(1, -2, 3) + min(4, 5) + abs(-6)", Fraction(13)),
        ("2 ** -2", Fraction(1, 4)),
    ],
)
def test_exact_values(expression, expected):
    assert evaluate(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9**9**9", "exponent"),
        ("10**1000", "too large"),
        ("1e308*1e308", "too large"),
        ("1e309", "not finite"),
        ("(" * 10_000 + "1" + ")" * 10_000, "characters long"),
        ("-" * 10_000 + "1", "characters long"),
        ("٣ + 1", "unsupported characters"),
        ("１２", "unsupported characters"),
        ("1/0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("(-8) ** (1/3)", "not a real number"),
        ("__import__('os').system('ls')", "only these functions"),
        ("().__class__", "not allowed"),
        ("x + 1", "unknown name"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("1 if 1 else 2", "not allowed"),
        ("[1, 2]", "not allowed"),
        ("1 << 1000", "operator"),
        ("1 +", "invalid expression"),
        ("", "empty"),
        ("sqrt(-1)", "negative"),
        ("max()", "arguments"),
    ],
)
def test_hostile_or_invalid_inputs_are_refused_with_a_reason(expression, message):
    with pytest.raises(CalculatorError, match=message):
        evaluate(expression)
    result = CalculatorTool().call({"expression": expression})
    assert not result.ok and message in result.content


def test_depth_limit_applies_to_operators_too():
    deep = "1" + "+1" * 60
    with pytest.raises(CalculatorError, match="nested too deeply"):
        evaluate(deep)
    assert evaluate(deep, CalculatorLimits(max_depth=100)) == 61
    with pytest.raises(CalculatorError, match="nested too deeply"):
        evaluate("(" * 50 + "1" + ")" * 50, CalculatorLimits(max_length=1_000))


def test_limits_validate():
    with pytest.raises(ValueError, match="max_bits"):
        CalculatorLimits(max_bits=0)
    tight = CalculatorLimits(max_length=1, max_depth=1, max_exponent=1, max_bits=1)  # 1 is the smallest limit
    assert evaluate("1", tight) == 1


def test_tool_result_metadata_and_schema_errors():
    tool = CalculatorTool()
    result = tool.call({"expression": "10 / 4"})
    assert result.ok and result.content == "2.5"
    assert result.metadata == {"value": "5/2", "operations": 1}
    assert tool.call({"expression": "7"}).metadata["operations"] == 0
    assert not tool.call({"expr": "1"}).ok
    assert not tool.call({"expression": 3}).ok


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(42), "42"),
        (Fraction(-5, 2), "-2.5"),
        (Fraction(1, 20), "0.05"),
        (Fraction(7, 3), "7/3 (~2.33333333333)"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


def test_parse_number_forms():
    assert parse_number("$1,234.50") == Fraction(246_900, 200)
    assert parse_number("50%") == Fraction(1, 2)
    assert parse_number("-3/4") == Fraction(-3, 4)
    assert parse_number("12.") == 12
    assert parse_number("twelve") is None and parse_number("1 2") is None and parse_number("1/0") is None


def test_count_operations():
    assert count_operations("-5") == 0
    assert count_operations("2 * (3 + 4)") == 2
    assert count_operations("sqrt(4)") == 1
    assert count_operations("((") == 0


# ---------------------------------------------------------------- property tests
_OPS = ["+", "-", "*", "/"]


def _trees():
    leaf = st.integers(-50, 50).map(lambda n: (str(n), Fraction(n))) | st.decimals(
        -100, 100, places=2, allow_nan=False, allow_infinity=False
    ).map(lambda d: (str(d), Fraction(d)))

    def extend(children):
        binary = st.tuples(st.sampled_from(_OPS), children, children).map(_combine)
        power = st.tuples(children, st.integers(0, 3)).map(lambda t: (f"({t[0][0]}) ** {t[1]}", _pow(t[0][1], t[1])))
        neg = children.map(lambda c: (f"-({c[0]})", None if c[1] is None else -c[1]))
        return binary | power | neg

    return st.recursive(leaf, extend, max_leaves=12)


def _pow(base, exponent):
    return None if base is None else base**exponent


def _combine(t):
    op, (ltext, lval), (rtext, rval) = t
    text = f"({ltext}) {op} ({rtext})"
    if lval is None or rval is None or (op == "/" and rval == 0):
        return text, None  # None: a division by zero somewhere below
    return text, {"+": lval + rval, "-": lval - rval, "*": lval * rval, "/": lval / rval if rval else None}[op]


@given(_trees())
def test_random_expression_trees_match_fraction_arithmetic(tree):
    text, expected = tree
    limits = CalculatorLimits(max_length=10_000, max_depth=200, max_bits=100_000)
    if expected is None:
        with pytest.raises(CalculatorError, match="division by zero"):
            evaluate(text, limits)
    else:
        assert evaluate(text, limits) == expected


@given(st.text(max_size=200) | st.text(alphabet="0123456789+-*/%().^ e", max_size=60))
def test_any_text_gives_a_value_or_a_calculator_error(text):
    try:
        value = evaluate(text)
    except CalculatorError as exc:
        assert str(exc)
    else:
        assert isinstance(value, Fraction)
        assert value.numerator.bit_length() <= CalculatorLimits().max_bits


@given(st.integers(-(10**12), 10**12), st.integers(0, 6), st.integers(0, 6))
def test_terminating_decimals_round_trip(numerator, twos, fives):
    value = Fraction(numerator, 2**twos * 5**fives)
    assert parse_number(format_number(value)) == value


# ---------------------------------------------------------------- every function at every arity (issue 10 point 11)
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("min(5)", Fraction(5)),
        ("max(-3)", Fraction(-3)),
        ("min(3, 1/2, 2)", Fraction(1, 2)),
        ("max(" + ", ".join(map(str, range(10))) + ")", Fraction(9)),
        ("abs(-2.5)", Fraction(5, 2)),
        ("round(7.5)", Fraction(8)),
        ("round(-2.5)", Fraction(-2)),  # half to even, as Python rounds
        ("round(1234.5678, -2)", Fraction(1200)),
        ("sqrt(0)", Fraction(0)),
    ],
)
def test_each_function_at_its_arities(expression, expected):
    assert evaluate(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("min()", "min() takes 1 to 10 arguments (got 0)"),
        ("max(" + ", ".join(["1"] * 11) + ")", "max() takes 1 to 10 arguments (got 11)"),
        ("abs()", "abs() takes 1 argument (got 0)"),
        ("abs(1, 2)", "abs() takes 1 argument (got 2)"),
        ("sqrt(4, 9)", "sqrt() takes 1 argument (got 2)"),
        ("round()", "round() takes 1 to 2 arguments (got 0)"),
        ("round(1, 2, 3)", "round() takes 1 to 2 arguments (got 3)"),
        ("round(1, 0.5)", "whole number of digits"),
        ("round(1, 21)", "whole number of digits"),
        ("min(x=1)", "only these functions"),
        ("min(*[1])", "not allowed"),
        ("sqrt(2 ** 1023 * 2 ** 1023)", "too large"),
        ("0 ** -0.5", "cannot evaluate"),
    ],
)
def test_wrong_arities_and_types_are_refused_with_a_reason(expression, message):
    with pytest.raises(CalculatorError, match=re.escape(message)):
        evaluate(expression)


_NAMES = st.sampled_from(["abs", "min", "max", "round", "sqrt", "pow", "x", "__import__"])
_ATOMS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["0", "0.0", "-0.5", "1e308", "1e-320", "2**1023", "(1/3)", "9" * 40, "True", "'a'", "[1]"]),
)


def _expressions():
    return st.recursive(
        _ATOMS,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "^", "<<", "<"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            st.tuples(_NAMES, st.lists(inner, max_size=12)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
            inner.map(lambda e: f"-{e}"),
        ),
        max_leaves=12,
    )


@given(_expressions() | st.text(max_size=80))
def test_fuzzed_calls_give_a_tool_result_never_an_exception(expression):
    try:
        value = evaluate(expression)
    except CalculatorError as exc:
        assert str(exc)
    else:
        assert isinstance(value, Fraction)
    result = CalculatorTool().call({"expression": expression})
    assert result.metadata.get("reason") != "exception", result.content
    assert result.ok or result.content.startswith("Error: ")
