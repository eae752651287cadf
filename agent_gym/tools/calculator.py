"""A safe calculator tool: exact arithmetic over a restricted Python-expression grammar.

Expressions are parsed with :mod:`ast` (never ``eval``) and evaluated over
:class:`fractions.Fraction`, so ``0.1 + 0.2`` is exactly ``0.3`` and ``1/3*3``
is exactly ``1``. Only numeric literals, ``+ - * / // % **``, unary ``+``/``-``,
parentheses and a few named functions (``abs``, ``min``, ``max``, ``round``,
``sqrt``) are accepted. Limits on the expression's length, nesting depth,
exponent size and result size are checked *before* any expensive work, so
``9**9**9`` or ``10**1000`` are refused instantly instead of freezing the
process.

Example:
    >>> evaluate("(3 + 4.5) * 2")
    Fraction(15, 1)
    >>> format_number(evaluate("10 / 4"))
    '2.5'
    >>> CalculatorTool().call({"expression": "9**9**9"}).ok
    False
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from agent_gym.core.history import ToolResult
from agent_gym.core.tool import Tool, ToolContext

__all__ = [
    "CalculatorError",
    "CalculatorLimits",
    "CalculatorTool",
    "count_operations",
    "evaluate",
    "format_number",
    "parse_expression",
    "parse_number",
]

# Symbols a model may write for the ASCII operators; ``^`` means power, as on a calculator.
_SYMBOLS = {"×": "*", "·": "*", "÷": "/", "−": "-", "^": "**"}
_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: lambda a, b: a % b,
}


class CalculatorError(ValueError):
    """The expression is not allowed, not valid, or exceeds a limit (the message says which)."""


@dataclass(frozen=True)
class CalculatorLimits:
    """Bounds that keep every evaluation cheap.

    Attributes:
        max_length: Longest accepted expression, in characters.
        max_depth: Deepest accepted nesting of parentheses and operators.
        max_exponent: Largest accepted ``|exponent|`` of ``**``.
        max_bits: Largest accepted bit length of any intermediate numerator or
            denominator (2**1024 is about 1.8e308).
    """

    max_length: int = 500
    max_depth: int = 40
    max_exponent: int = 1_000
    max_bits: int = 1_024

    def __post_init__(self) -> None:
        for name in ("max_length", "max_depth", "max_exponent", "max_bits"):
            if getattr(self, name) < 1:
                raise ValueError(f"CalculatorLimits.{name} must be >= 1 (got {getattr(self, name)})")


def _check_size(value: Fraction, limits: CalculatorLimits) -> Fraction:
    if value.numerator.bit_length() > limits.max_bits or value.denominator.bit_length() > limits.max_bits:
        raise CalculatorError(f"a result is too large (more than {limits.max_bits} bits)")
    return value


def _power(base: Fraction, exponent: Fraction, limits: CalculatorLimits) -> Fraction:
    """``base ** exponent`` with its size bounded before it is computed."""
    if exponent.denominator != 1:
        if base < 0:
            raise CalculatorError("a negative number to a fractional power is not a real number")
        estimate = float(exponent) * math.log2(max(float(base), 1e-300)) if base else 0.0
        if abs(estimate) > limits.max_bits:
            raise CalculatorError(f"a power is too large (about 2**{estimate:.0f})")
        return Fraction(float(base) ** float(exponent))
    e = exponent.numerator
    if abs(e) > limits.max_exponent:
        raise CalculatorError(f"exponent {e} is too large (limit {limits.max_exponent})")
    if base == 0 and e < 0:
        raise CalculatorError("division by zero (0 to a negative power)")
    bits = max(base.numerator.bit_length(), base.denominator.bit_length())
    if bits * abs(e) > limits.max_bits + abs(e):
        raise CalculatorError(f"a power is too large (more than {limits.max_bits} bits)")
    return base**e


def _sqrt(x: Fraction) -> Fraction:
    if x < 0:
        raise CalculatorError("sqrt of a negative number")
    n, d = math.isqrt(x.numerator), math.isqrt(x.denominator)
    if n * n == x.numerator and d * d == x.denominator:
        return Fraction(n, d)
    return Fraction(math.sqrt(x))


def _round(x: Fraction, digits: Fraction = Fraction(0)) -> Fraction:
    if digits.denominator != 1 or not -20 <= digits <= 20:
        raise CalculatorError("round() takes a whole number of digits between -20 and 20")
    return Fraction(round(x, int(digits)))


def _smallest(*values: Fraction) -> Fraction:
    return min(values)  # the builtin's one-argument form would iterate its argument: min(5) raises


def _largest(*values: Fraction) -> Fraction:
    return max(values)


_FUNCTIONS: dict[str, tuple[Callable[..., Fraction], int, int]] = {
    # name: (function, min args, max args)
    "abs": (abs, 1, 1),
    "sqrt": (_sqrt, 1, 1),
    "round": (_round, 1, 2),
    "min": (_smallest, 1, 10),
    "max": (_largest, 1, 10),
}


def _literal(node: ast.Constant) -> Fraction:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"only numbers are allowed, not {type(value).__name__} {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError(f"the number {value!r} is not finite")
        return Fraction(repr(value))  # exact decimal of the literal as written: 0.1 -> 1/10
    return Fraction(value)


def _eval(node: ast.AST, limits: CalculatorLimits, depth: int) -> Fraction:
    if depth > limits.max_depth:
        raise CalculatorError(f"the expression is nested too deeply (limit {limits.max_depth})")
    if isinstance(node, ast.Constant):
        return _check_size(_literal(node), limits)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand, limits, depth + 1)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, limits, depth + 1)
        right = _eval(node.right, limits, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right, limits), limits)
        op = _BINARY.get(type(node.op))
        if op is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed; use + - * / // % **")
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise CalculatorError("division by zero")
        return _check_size(op(left, right), limits)
    if isinstance(node, ast.Call):
        return _call(node, limits, depth)
    if isinstance(node, ast.Name):
        raise CalculatorError(f"unknown name {node.id!r}; functions: {', '.join(sorted(_FUNCTIONS))}")
    raise CalculatorError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def _call(node: ast.Call, limits: CalculatorLimits, depth: int) -> Fraction:
    if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS or node.keywords:
        raise CalculatorError(f"only these functions may be called, by name: {', '.join(sorted(_FUNCTIONS))}")
    fn, low, high = _FUNCTIONS[node.func.id]
    if not low <= len(node.args) <= high:
        takes = f"{low} argument" if low == high == 1 else f"{low} to {high} arguments"
        raise CalculatorError(f"{node.func.id}() takes {takes} (got {len(node.args)})")
    args = [_eval(a, limits, depth + 1) for a in node.args]
    return _check_size(fn(*args), limits)


def _paren_depth(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch in "([":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]":
            depth -= 1
    return deepest


def parse_expression(expression: str, limits: CalculatorLimits | None = None) -> ast.Expression:
    """Check ``expression`` against the limits and parse it (nothing is evaluated).

    Raises:
        CalculatorError: The text is not a string, is too long or too deeply
            nested, has characters other than printable ASCII, or is not valid syntax.
    """
    limits = limits or CalculatorLimits()
    if not isinstance(expression, str):
        raise CalculatorError(f"the expression must be a string, got {type(expression).__name__}")
    text = expression.strip()
    for symbol, ascii_op in _SYMBOLS.items():
        text = text.replace(symbol, ascii_op)
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > limits.max_length:
        raise CalculatorError(f"the expression is {len(text)} characters long (limit {limits.max_length})")
    bad = sorted({ch for ch in text if not (ch.isascii() and (ch.isprintable() or ch in " \t"))})
    if bad:
        raise CalculatorError(f"unsupported characters {''.join(bad)!r}; use ASCII digits and + - * / // % ** ( )")
    if _paren_depth(text) > limits.max_depth:
        raise CalculatorError(f"the expression is nested too deeply (limit {limits.max_depth})")
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"invalid expression: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise CalculatorError(f"invalid expression ({type(exc).__name__})") from None


def evaluate(expression: str, limits: CalculatorLimits | None = None) -> Fraction:
    """The exact value of an arithmetic expression.

    Args:
        expression: E.g. ``"(12 * 3.5 - 4) / 2"``; ``^``, ``×``, ``÷`` and ``−``
            are read as ``**``, ``*``, ``/`` and ``-``.
        limits: Size bounds; defaults to :class:`CalculatorLimits()`.

    Returns:
        The value as a :class:`~fractions.Fraction`.

    Raises:
        CalculatorError: For anything that is not a small, valid arithmetic
            expression. No other exception escapes.
    """
    limits = limits or CalculatorLimits()
    tree = parse_expression(expression, limits)
    try:
        return _eval(tree.body, limits, 0)
    except (OverflowError, ZeroDivisionError, RecursionError) as exc:
        raise CalculatorError(f"cannot evaluate: {type(exc).__name__}: {exc}") from None


def count_operations(expression: str) -> int:
    """How many operators and function calls ``expression`` has (0 for a bare number or invalid text)."""
    try:
        tree = parse_expression(expression, CalculatorLimits(max_length=10**6, max_depth=10**6))
    except CalculatorError:
        return 0
    return sum(isinstance(n, ast.BinOp | ast.Call) for n in ast.walk(tree))


def format_number(value: Fraction, digits: int = 12) -> str:
    """Show a value exactly when that is short, else approximately.

    ``42``, ``-2.5``, ``7/3 (~2.33333333333)``; values with huge denominators
    (e.g. ``sqrt(2)``, which is computed in floating point) as ``~1.41421356237``.
    """
    if value.denominator == 1:
        return str(value.numerator)
    approx = f"~{float(value):.{digits}g}"
    for scale in range(1, 13):  # a short terminating decimal: print it exactly
        scaled = value * 10**scale
        if scaled.denominator == 1:
            sign = "-" if value < 0 else ""
            text = str(abs(scaled.numerator)).rjust(scale + 1, "0")
            return f"{sign}{text[:-scale]}.{text[-scale:]}"
    if value.denominator < 10**6:
        return f"{value.numerator}/{value.denominator} ({approx})"
    return approx


def parse_number(text: str) -> Fraction | None:
    """Read one number as written in an answer: ``1,234.5``, ``$12``, ``-3/4``, ``50%`` -> ``1/2``.

    Returns ``None`` unless ``text`` is exactly one number (with optional
    currency sign, thousands separators, trailing ``%`` or ``.``).
    """
    s = text.strip().rstrip(".").replace(",", "").replace("$", "").replace("€", "").replace("£", "").strip()
    percent = s.endswith("%")
    s = s.rstrip("%").strip()
    if not s or len(s) > 60:
        return None
    try:
        value = Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return value / 100 if percent else value


class CalculatorTool(Tool):
    """The ``calculator`` tool: exact arithmetic on one expression.

    Result metadata: ``value`` (the exact result as ``"p/q"`` or ``"n"``) and
    ``operations`` (how many operators and function calls it has; a bare
    number has 0).
    """

    name = "calculator"
    description = (
        "Evaluate an arithmetic expression exactly. Supports numbers, + - * / // % ** (or ^), parentheses "
        "and abs, min, max, round, sqrt. Example: (12 * 3.5 - 4) / 2"
    )
    parameters = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "The arithmetic expression to evaluate."}},
        "required": ["expression"],
        "additionalProperties": False,
    }

    def __init__(self, limits: CalculatorLimits | None = None):
        super().__init__()
        self.limits = limits or CalculatorLimits()

    def __reduce__(self) -> tuple[object, ...]:
        # rebuilt from its limits: the base class's schema validator holds closures that do not pickle
        return (type(self), (self.limits,))

    def run(self, ctx: ToolContext, expression: str) -> ToolResult:
        try:
            value = evaluate(expression, self.limits)
        except CalculatorError as exc:
            return ToolResult.error(str(exc), reason="calculator_error")
        metadata = {"value": str(value), "operations": count_operations(expression)}
        return ToolResult(format_number(value), metadata=metadata)
