"""``AgentR1/Bandit-v0``: a multi-armed bandit posed as a one-tool text task - a fast toy for checking that RL learns.

Every task shows the same arms (four slot machines named by colour) in its own
order and asks which one pays. In a task family (``task_seed``) exactly one arm
pays: answering it scores 1 (``em``), any other arm 0. The ``pull`` tool plays
one arm once and reports its payout, a coin flip with that arm's win rate
(``win_rate`` for the paying arm, ``1 - win_rate`` for the others) drawn from
the env's ``np_random`` - so an agent can explore in context, and a policy can
learn the paying arm across episodes. The paying arm is the same for every
task of a family: a policy that has learned it needs no pull.

Rewards (``"process"`` preset): ``+1`` for the paying arm, ``-0.1`` for a
malformed action, ``-0.01`` for each pull (step cost). A uniformly random
chooser earns ``1 / len(arms)`` on average, so a rising mean reward is easy to
read. Episodes are one to three turns and prompts are short: a tiny model
trains on it in seconds per step.

Example:
    >>> import gymnasium as gym, agent_gym
    >>> env = gym.make("AgentR1/Bandit-v0")
    >>> obs, info = env.reset(seed=0, options={"task_index": 5})
    >>> _, reward, terminated, _, _ = env.step("<answer>" + env.unwrapped.paying_arm + "</answer>")
    >>> reward, terminated
    (1.0, True)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent_gym.core.history import ToolResult
from agent_gym.core.tool import Tool, ToolContext
from agent_gym.envs.procedural import ProceduralEnv

__all__ = ["ARMS", "BanditEnv", "BanditTask", "PullTool"]

ARMS = ("red", "green", "blue", "gold")
"""The arms' names (each one token in SmolLM2's vocabulary after ``<answer>``)."""


@dataclass(frozen=True)
class BanditTask:
    """One task: the arms in the order the question lists them.

    Attributes:
        id: ``bandit-<task_seed>-<index>``.
        order: The arms, in the order shown.
        paying: The arm that pays (the same for every task of a family).
    """

    id: str
    order: tuple[str, ...]
    paying: str


class PullTool(Tool):
    """Plays one arm once: a payout of 1 with the arm's win rate, else 0 (drawn from the env's generator).

    Args:
        arms: The arm names (the schema's ``enum``).
        paying: The paying arm.
        win_rate: Its win rate; the other arms win with ``1 - win_rate``.
    """

    name = "pull"
    description = "Play one slot machine once and see whether it paid out (1) or not (0)."

    def __init__(self, arms: Sequence[str], paying: str, win_rate: float):
        self.arms, self.paying, self.win_rate = tuple(arms), paying, float(win_rate)
        self.parameters = {
            "type": "object",
            "properties": {"arm": {"type": "string", "enum": list(self.arms), "description": "The machine's colour."}},
            "required": ["arm"],
            "additionalProperties": False,
        }
        super().__init__()

    def __reduce__(self) -> tuple[Any, ...]:
        return (PullTool, (self.arms, self.paying, self.win_rate))

    def run(self, ctx: ToolContext, arm: str) -> ToolResult:
        rate = self.win_rate if arm == self.paying else 1.0 - self.win_rate
        payout = int(ctx.rng.random() < rate)
        return ToolResult(f"The {arm} machine paid {payout}.", metadata={"arm": arm, "payout": payout})


class BanditEnv(ProceduralEnv[BanditTask]):
    """A bandit over :data:`ARMS` (or your own arm names) as a text task with a ``pull`` tool.

    Args:
        arms: Arm names (at least 2, distinct, no whitespace).
        win_rate: Win rate of the paying arm's pulls, in ``[0.5, 1]``; the others win with ``1 - win_rate``.
        num_tasks: Distinct tasks (arm orders).
        task_seed: Selects the family: which arm pays, and the orders.
        **kwargs: Passed to :class:`~agent_gym.envs.procedural.ProceduralEnv` (``reward``,
            ``reward_weights``, ``action_format``, ...). The answer is scored by ``em``. Tasks have
            no gold evidence, so ``shaping_gamma`` is refused.

    Raises:
        ValueError: Bad arms or win rate, or a ``shaping_gamma``.
    """

    id_prefix = "bandit"

    def __init__(
        self,
        *,
        arms: Sequence[str] = ARMS,
        win_rate: float = 0.8,
        num_tasks: int = 64,
        answer_metric: str = "em",
        **kwargs: Any,
    ):
        arms = tuple(str(a) for a in arms)
        if len(arms) < 2 or len(set(arms)) != len(arms) or any(not a or a.split() != [a] for a in arms):
            raise ValueError(f"arms must be at least 2 distinct names without whitespace (got {arms!r})")
        if not 0.5 <= win_rate <= 1.0:
            raise ValueError(f"win_rate must lie in [0.5, 1] (got {win_rate})")
        if answer_metric != "em":
            raise ValueError(f"Bandit-v0 scores answers by 'em' only (got answer_metric={answer_metric!r})")
        if kwargs.get("shaping_gamma") is not None:
            raise ValueError(
                "Bandit-v0 has no gold evidence, so there is no potential to shape (got "
                f"shaping_gamma={kwargs['shaping_gamma']!r}; leave it None)"
            )
        super().__init__(num_tasks=num_tasks, answer_metric=answer_metric, **kwargs)
        self.arms, self.win_rate = arms, float(win_rate)
        self.paying_arm = random.Random(f"bandit/{self.task_seed}").choice(arms)

    def load_task(self, index: int) -> BanditTask:
        order = list(self.arms)
        random.Random(f"bandit/{self.task_seed}/{index}").shuffle(order)
        return BanditTask(f"bandit-{self.task_seed}-{index}", tuple(order), self.paying_arm)

    def make_tools(self, task: BanditTask) -> Sequence[Tool]:
        return [PullTool(self.arms, task.paying, self.win_rate)]

    def user_prompt(self, task: BanditTask) -> str:
        return (
            f"Slot machines: {', '.join(task.order)}. One of them pays. You may pull a machine to see one payout. "
            "Answer with the colour of the machine that pays, inside <answer></answer>."
        )

    def score_answer(self, task: BanditTask, answer: str) -> dict[str, float]:
        """``em``: the answer names the paying arm; ``f1`` is the same number (a choice is right or wrong)."""
        right = float(answer.strip().lower() == task.paying)
        return {"em": right, "f1": right}

    def oracle_action(self) -> str:
        """The expert knows the paying arm: it pulls it once (a demonstration of the tool), then answers it."""
        state = self.state
        assert state is not None, "call reset() first"
        if not state.seen_calls:
            return self.parser.format_call("pull", {"arm": state.task.paying})
        return self.parser.format_answer(state.task.paying)
