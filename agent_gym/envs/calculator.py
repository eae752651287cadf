"""``AgentR1/Calculator-v0``: multi-step arithmetic word problems solved with a calculator tool.

Each task is generated from its index (and ``task_seed``): a short word
problem (shopping, savings, fencing, a factory, splitting a bill, a trip, a
bulk discount) whose solution takes 2-4 arithmetic steps. The gold
intermediate values are the task's gold evidence: a calculator result equal to
one of them (from an expression with at least one operation, so typing a bare
number does not count) reveals it, which feeds the ``evidence`` process reward
and potential-based shaping. The final answer is compared numerically and
exactly (``em``); ``close`` (relative error below 1e-6) is reported as a metric.

Example:
    >>> import gymnasium as gym, agent_gym
    >>> env = gym.make("AgentR1/Calculator-v0")
    >>> obs, info = env.reset(seed=0, options={"task_index": 3})
    >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from agent_gym.core.env import EpisodeState
from agent_gym.core.history import ToolCall, ToolResult
from agent_gym.core.tool import Tool
from agent_gym.envs.procedural import ProceduralEnv
from agent_gym.tools.calculator import CalculatorLimits, CalculatorTool, evaluate, format_number, parse_number

__all__ = ["ArithmeticTask", "CalculatorEnv", "Step", "generate_arithmetic_task"]

_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?(?:/\d+)?%?")
_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kofi", "Lena", "Mira", "Noor")
_ITEMS = ("notebooks", "pens", "apples", "mugs", "batteries", "candles", "tickets", "plants", "stamps", "towels")


@dataclass(frozen=True)
class Step:
    """One gold arithmetic step.

    Attributes:
        expression: What to type into the calculator (numbers only).
        value: Its exact value.
    """

    expression: str
    value: Fraction


@dataclass(frozen=True)
class ArithmeticTask:
    """A generated word problem.

    Attributes:
        id: ``calc-<task_seed>-<index>``.
        template: Which kind of problem it is.
        question: The problem text.
        steps: The gold solution, step by step (the last value is the answer).
        answer: The exact answer.
    """

    id: str
    template: str
    question: str
    steps: tuple[Step, ...]
    answer: Fraction

    @property
    def evidence(self) -> frozenset[str]:
        """Gold evidence ids: ``value:<p/q>`` of each distinct step value."""
        return frozenset(_evidence_id(s.value) for s in self.steps)


def _evidence_id(value: Fraction) -> str:
    return f"value:{value}"


class _Solution:
    """Builds gold steps; each value is computed by the calculator itself, as the oracle will."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def __call__(self, expression: str) -> str:
        value = evaluate(expression)
        self.steps.append(Step(expression, value))
        return format_number(value)


def _money(rng: random.Random, low: int, high: int) -> str:
    return f"{rng.randint(low, high)}.{rng.choice(['00', '25', '50', '75', '99', '49'])}"


_BILLS = (20, 50, 100, 200, 500)


def _shopping(rng: random.Random, s: _Solution) -> str:
    name, (a, b) = rng.choice(_NAMES), rng.sample(_ITEMS, 2)
    n1, n2, p1, p2 = rng.randint(2, 9), rng.randint(2, 9), _money(rng, 1, 12), _money(rng, 1, 12)
    total = s(f"{s(f'{n1} * {p1}')} + {s(f'{n2} * {p2}')}")
    # totals reach 2 * 9 * 12.99 = 233.82: the smallest note that covers it, else whole hundreds
    bill = next((b for b in _BILLS if b >= float(total)), 100 * math.ceil(float(total) / 100))
    s(f"{bill} - {total}")
    return (
        f"{name} buys {n1} {a} at ${p1} each and {n2} {b} at ${p2} each, paying with a ${bill} bill. How much "
        f"change, in dollars, does {name} get?"
    )


def _savings(rng: random.Random, s: _Solution) -> str:
    name, weekly, weeks = rng.choice(_NAMES), rng.randint(5, 60), rng.randint(4, 30)
    pct = rng.choice([10, 15, 20, 25, 40])
    saved = s(f"{weekly} * {weeks}")
    spent = s(f"{saved} * {pct} / 100")
    s(f"{saved} - {spent}")
    return (
        f"{name} saves ${weekly} every week for {weeks} weeks, then spends {pct}% of the savings on a bike. "
        "How many dollars are left?"
    )


def _fence(rng: random.Random, s: _Solution) -> str:
    length, width, gate = rng.randint(6, 40), rng.randint(4, 30), rng.randint(1, 3)
    cost = _money(rng, 3, 15)
    perimeter = s(f"2 * ({length} + {width})")
    fenced = s(f"{perimeter} - {gate}")
    s(f"{fenced} * {cost}")
    return (
        f"A rectangular garden is {length} m long and {width} m wide. A fence goes all around it except for a "
        f"{gate} m gate. Fencing costs ${cost} per metre. What does the fence cost, in dollars?"
    )


def _factory(rng: random.Random, s: _Solution) -> str:
    pct = rng.choice([2, 4, 5, 10, 20, 25])
    rate, hours, days = rng.randint(10, 90), rng.randint(4, 12), rng.randint(2, 7)
    while rate * hours * days * pct % 100:  # whole parts only
        rate += 1
    per_day = s(f"{rate} * {hours}")
    total = s(f"{per_day} * {days}")
    bad = s(f"{total} * {pct} / 100")
    s(f"{total} - {bad}")
    return (
        f"A machine makes {rate} parts per hour and runs {hours} hours a day for {days} days. {pct}% of the "
        "parts are defective. How many parts are not defective?"
    )


def _split_bill(rng: random.Random, s: _Solution) -> str:
    people, pct = rng.randint(2, 8), rng.choice([10, 15, 18, 20])
    bill = f"{rng.randint(4, 40) * people * 5}.00"
    tip = s(f"{bill} * {pct} / 100")
    total = s(f"{bill} + {tip}")
    s(f"{total} / {people}")
    return (
        f"{people} friends share a restaurant bill of ${bill} and add a {pct}% tip. They split the total "
        "equally. How many dollars does each friend pay?"
    )


def _trip(rng: random.Random, s: _Solution) -> str:
    v1, t1 = rng.randint(40, 120), rng.choice([1.5, 2, 2.5, 3])
    v2, t2 = rng.randint(30, 110), rng.choice([0.5, 2, 4])
    d1, d2 = s(f"{v1} * {t1}"), s(f"{v2} * {t2}")
    done = s(f"{d1} + {d2}")
    goal = int(float(done)) + rng.randint(10, 300)
    s(f"{goal} - {done}")
    return (
        f"A bus drives at {v1} km/h for {t1} hours, then at {v2} km/h for {t2} hours. Its destination is "
        f"{goal} km from the start. How many km are left to drive?"
    )


def _discount(rng: random.Random, s: _Solution) -> str:
    item, price, n = rng.choice(_ITEMS), _money(rng, 2, 30), rng.randint(12, 60)
    pct = rng.choice([5, 10, 20, 25, 30])
    total = s(f"{n} * {price}")
    off = s(f"{total} * {pct} / 100")
    s(f"{total} - {off}")
    return (
        f"A shop sells {item} at ${price} each and gives {pct}% off orders of 10 or more. A school orders {n} "
        f"{item}. How many dollars does the school pay?"
    )


_TEMPLATES: dict[str, Callable[[random.Random, _Solution], str]] = {
    "shopping": _shopping,
    "savings": _savings,
    "fence": _fence,
    "factory": _factory,
    "split_bill": _split_bill,
    "trip": _trip,
    "discount": _discount,
}


def _is_cents(value: Fraction) -> bool:
    return value >= 0 and 100 % value.denominator == 0


def generate_arithmetic_task(index: int, task_seed: int = 0) -> ArithmeticTask:
    """The task at ``index``: the same for the same ``(index, task_seed)`` on every machine.

    Numbers are redrawn (deterministically) until every step's value is a
    non-negative amount with at most two decimals, so answers are exact.
    """
    rng = random.Random(f"calculator/{task_seed}/{index}")
    name = list(_TEMPLATES)[index % len(_TEMPLATES)]
    for _ in range(100):
        solution = _Solution()
        question = _TEMPLATES[name](rng, solution)
        if all(_is_cents(step.value) for step in solution.steps):
            break
    else:  # never happens for task_seed 0 (every index is checked by a test); loud rather than a bad task
        raise RuntimeError(f"no valid {name!r} problem in 100 draws for task {index} (task_seed {task_seed})")
    steps = tuple(solution.steps)
    return ArithmeticTask(f"calc-{task_seed}-{index}", name, question, steps, steps[-1].value)


def _read_answer(answer: str) -> Fraction | None:
    value = parse_number(answer)
    if value is not None:
        return value
    tokens = _NUMBER.findall(answer)
    return parse_number(tokens[0]) if len(tokens) == 1 else None


class CalculatorEnv(ProceduralEnv[ArithmeticTask]):
    """Arithmetic word problems with an exact ``calculator`` tool.

    Args:
        num_tasks: How many distinct tasks (generated lazily from the index).
        task_seed: Selects a different family of ``num_tasks`` tasks.
        reward: ``"gated"`` (the default: step penalties, and the evidence - gold intermediate values
            computed - paid on the answer), ``"process"`` (evidence paid as it is found) or ``"outcome"``
            (Agent-R1's outcome reward).
        answer_metric: ``"em"`` (exact value; also reported as ``f1``).
        shaping_gamma: Add potential-based shaping with this γ (``None``: off).
        reward_weights: Override rubric term weights by name.
        limits: Calculator limits (a :class:`CalculatorLimits` or a dict of its fields).
        **kwargs: Passed to :class:`~agent_gym.core.env.ToolEnv`
            (``action_format``, ``tool_noise``, ``render_mode``, ...).
    """

    id_prefix = "calc"

    def __init__(self, *, limits: CalculatorLimits | Mapping[str, Any] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.limits = limits if isinstance(limits, CalculatorLimits) else CalculatorLimits(**dict(limits or {}))

    def load_task(self, index: int) -> ArithmeticTask:
        return generate_arithmetic_task(index, self.task_seed)

    def make_tools(self, task: ArithmeticTask) -> Sequence[Tool]:
        return [CalculatorTool(self.limits)]

    def user_prompt(self, task: ArithmeticTask) -> str:
        return (
            f"{task.question}\nUse the calculator tool for each arithmetic step. "
            "Give the final number (no units) inside <answer></answer>."
        )

    def gold_evidence(self, task: ArithmeticTask) -> frozenset[str]:
        return task.evidence

    def revealed_evidence(self, call: ToolCall, result: ToolResult, state: EpisodeState[ArithmeticTask]) -> set[str]:
        """A computed (not merely typed) value, shown in full, equal to a gold step value."""
        if not result.ok or call.name != "calculator" or result.metadata.get("operations", 0) < 1:
            return set()
        value = Fraction(str(result.metadata["value"]))
        return {_evidence_id(value)} if result.content == format_number(value) else set()

    def score_answer(self, task: ArithmeticTask, answer: str) -> dict[str, float]:
        value = _read_answer(answer)
        exact = float(value is not None and value == task.answer)
        close = float(
            value is not None and abs(value - task.answer) <= Fraction(1, 10**6) * max(Fraction(1), abs(task.answer))
        )
        return {"em": exact, "f1": exact, "close": close}

    def oracle_action(self) -> str:
        """Type the next gold step not yet computed; answer once all are."""
        state = self.state
        assert state is not None, "call reset() first"
        for step in state.task.steps:
            if _evidence_id(step.value) not in state.found:
                return self.parser.format_call("calculator", {"expression": step.expression})
        return self.parser.format_answer(format_number(state.task.answer))

    def flawed_oracle_action(self) -> str:
        """A hasty demonstrator: the oracle, except that it answers one step early.

        Once every gold step but the last is computed it answers with the
        second-to-last step's value (a plausible, wrong answer) instead of
        making the final calculation; otherwise (before that, or when the
        answer equals an earlier step's value) it acts as :meth:`oracle_action`. A
        stand-in for demonstrations from a weaker model, whose systematic flaw
        cloning copies and an outcome reward can correct (``sft.flawed_share``).
        """
        state = self.state
        assert state is not None, "call reset() first"
        *before, last = state.task.steps
        done = [_evidence_id(s.value) in state.found for s in before]
        if before and all(done) and _evidence_id(last.value) not in state.found:
            return self.parser.format_answer(format_number(before[-1].value))
        return self.oracle_action()
