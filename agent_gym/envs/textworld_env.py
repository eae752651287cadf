"""``AgentR1/TextWorld-v0``: household text games (the family ALFWorld is built on), played with a ``command`` tool.

Task ``i`` is a game that the ``textworld`` package generates locally from
``(task_seed, i)`` and the game settings (:mod:`agent_gym.envs.textworld_games`:
made once, about 2 s, then read from the disk cache), so it is the same game on
every machine. The first message states the quest and describes the first
room; each ``command`` call sends one text command (``go east``, ``take key
from table``, ``unlock chest with key``, ``look``, ``inventory``) and returns
the game's reply. The episode ends (``terminated``) when the game is won or
lost - it ends as an answer does: ``stop_reason`` ``"answer"`` and answer
scores ``em`` = ``f1`` = ``won`` - or when the agent writes an answer, which
stops the game unwon (giving up). The registry's turn limit is 50.

Rewards (``"process"`` preset, weights in brackets): ``format`` (0.1; -1 for a
malformed action), ``score`` (0.2; the share of the game's maximum score the
step earned: TextWorld's points, held as the task's gold evidence, so
``shaping_gamma`` shapes with Φ = score / max score), ``progress`` (0.05; the
game's intermediate reward: +1 when the step's commands shortened the winning
policy, -1 when they lengthened it), ``step_cost`` (0.01 for every step that does
not end the game) and ``won`` (1.0; 1 when the game is won). ``"outcome"`` is
Agent-R1's outcome reward with ``won`` as the answer score.

Bad input never crashes the game: a command must start with one of
:data:`GAME_VERBS` (TextWorld's verbs such as ``go``, ``take``, ``open``, and their
usual short forms), so meta and debug commands (``restart``, ``undo``, ``save``,
``enable print state option``, ``restrict commands``, ``tw-print ...``, ``help``)
are refused with an error result, as are several commands in one (``.``, ``,``,
``;``, ``then``) and other characters; the game itself answers the commands it
does not understand. With ``tool_noise``, a failure or time-out
hides the game's reply; the command still ran, as with a lost network reply.

Example:
    >>> import gymnasium as gym, agent_gym
    >>> env = gym.make("AgentR1/TextWorld-v0")  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0, options={"task_index": 3})  # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from agent_gym.core.env import EpisodeState
from agent_gym.core.history import ToolCall, ToolResult
from agent_gym.core.parsing import ParsedAction
from agent_gym.core.rubric import RewardTerm, Rubric, Transition
from agent_gym.core.tool import Tool, ToolContext
from agent_gym.envs.procedural import ProceduralEnv
from agent_gym.envs.textworld_games import (
    GameFiles,
    GameSettings,
    clean_feedback,
    load_game,
    require_textworld,
    start_game,
)
from agent_gym.rewards import (
    AnswerMetric,
    answer_score,
    evidence_gain,
    format_penalty,
    outcome_agent_r1,
    shaping,
    step_cost,
)

__all__ = [
    "GAME_VERBS",
    "GameRef",
    "GameTool",
    "TextWorldEnv",
    "TextWorldTask",
    "command_problem",
    "game_progress",
    "game_seed",
    "textworld_rubric",
]

MAX_COMMAND_LENGTH = 200
_WORDS = re.compile(r"[A-Za-z0-9'\- ]+")
_TEXTWORLD_VERBS = "close drop eat examine go insert inventory lock look open put take unlock".split()
"""TextWorld's verbs: the first words of its knowledge base's command templates (the game's ``help`` lists them)."""

GAME_VERBS = frozenset(_TEXTWORLD_VERBS) | frozenset("l i inv x get pick north south east west n s e w".split())
"""The words a command may start with (an allow-list): TextWorld's verbs and Inform's usual short forms of the same
actions (``x`` examines, ``get`` and ``pick up`` take, ``n`` goes north, ...). Anything else is refused unsent:
Inform's out-of-world verbs (``restart``, ``undo``, ``save``, ``quit``, ...), which would take the game out of step
with TextWorld's quest tracking, and TextWorld's debug and meta commands (``enable print state option`` prints
every room, container and key and the score after each command; ``restrict commands``, ``tw-print ...``, ``help``,
``goal``), which would leak the game's privileged state."""


def game_seed(task_seed: int, index: int) -> int:
    """The generator seed of task ``index`` (a stable hash: the same on every machine)."""
    digest = hashlib.sha256(f"textworld/{task_seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 65_536  # tw-make draws its seeds below 65,536 too


def command_problem(command: str) -> str | None:
    """Why ``command`` (whitespace already collapsed) cannot be sent to the game, or ``None``."""
    if not command:
        return "the command is empty; write one, e.g. 'look'"
    if len(command) > MAX_COMMAND_LENGTH:
        return f"the command is {len(command)} characters long; the limit is {MAX_COMMAND_LENGTH}"
    words = command.lower().split()
    if not _WORDS.fullmatch(command) or "then" in words:
        return (
            "a command is one action in words (letters, digits, spaces, - and '), e.g. 'take key from table'; "
            "send several actions as several calls"
        )
    if words[0] not in GAME_VERBS:
        return (
            f"{words[0]!r} is not a game command here (meta and debug commands are refused); "
            f"start a command with one of: {', '.join(_TEXTWORLD_VERBS)}"
        )
    return None


@dataclass(frozen=True)
class GameRef:
    """What makes a game again anywhere: its settings, its seed and the cache folder (``None``: the default)."""

    settings: GameSettings
    seed: int
    cache_dir: str | None = None

    def load(self) -> GameFiles:
        return load_game(self.settings, self.seed, self.cache_dir)


@dataclass(frozen=True)
class TextWorldTask:
    """One game.

    Attributes:
        id: ``tw-<task_seed>-<index>``.
        ref: How to make the game again (settings, seed, cache).
        files: The game in the cache (objective, first room, walkthrough, max score).
    """

    id: str
    ref: GameRef
    files: GameFiles


class GameTool(Tool):
    """Plays one game: each call sends one command and returns the game's reply.

    The game starts at the first call. The tool pickles and deep-copies as its game and the commands sent so far:
    the copy plays them again (about 30 ms to start plus 2 ms a command), building the game first where the
    cache lacks it.
    """

    name = "command"
    description = (
        "Send one command to the text game and read its reply, e.g. 'go east', 'open door', 'take key from table', "
        "'unlock chest with key', 'put apple on table', 'look', 'inventory'."
    )
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "One game command, e.g. 'open the door'."}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def __init__(self, ref: GameRef, files: GameFiles):
        super().__init__()
        self.ref, self.files = ref, files
        self.commands: list[str] = []
        self.score, self.won, self.lost = 0, False, False
        self.policy: tuple[str, ...] = files.walkthrough
        self._game: Any = None

    @property
    def over(self) -> bool:
        """The game was won or lost."""
        return self.won or self.lost

    def next_command(self) -> str | None:
        """The first command of the current winning policy (``None`` when the game is over or cannot be won)."""
        return None if self.over or not self.policy else self.policy[0]

    def run(self, ctx: ToolContext, text: str) -> ToolResult:
        if self.over:
            return ToolResult.error("the game is over; it takes no more commands", reason="game_over")
        command = " ".join(text.split())
        problem = command_problem(command)
        if problem is not None:
            return ToolResult.error(problem, reason="bad_command")
        return self._send(command)

    def _send(self, command: str) -> ToolResult:
        if self._game is None:  # the first call, or the first after close(): replay what was sent before
            self._game = start_game(self.files)
            for earlier in self.commands:
                self._game.step(earlier)
        state, score, _ = self._game.step(command)
        self.commands.append(command)
        gained, self.score = int(score) - self.score, int(score)
        self.won, self.lost = bool(state["won"]), bool(state["lost"])
        self.policy = tuple(state["policy_commands"] or ())
        meta = {
            "score": self.score, "max_score": self.files.max_score, "gained": gained,
            "progress": int(state["intermediate_reward"]), "won": self.won, "lost": self.lost,
        }  # fmt: skip
        return ToolResult(clean_feedback(str(state["feedback"])) or "(no reply)", metadata=meta)

    def close(self) -> None:
        """Stop the game's emulator (a later call starts it again and replays the commands sent so far)."""
        if self._game is not None:
            self._game.close()
            self._game = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_replayed, (self.ref, tuple(self.commands)))


def _replayed(ref: GameRef, commands: Sequence[str]) -> GameTool:
    """A tool that has sent ``commands`` to a fresh copy of the game (how a pickled tool comes back)."""
    tool = GameTool(ref, ref.load())
    for command in commands:
        tool._send(command)
    return tool


# ---------------------------------------------------------------------------- rewards
def game_progress(t: Transition) -> float:
    """The game's intermediate reward of the step: its commands' (+1 closer to winning, -1 farther) summed, clipped."""
    total = sum(int(r.metadata.get("progress", 0)) for c, r in t.results if c.name == GameTool.name)
    return float(max(-1, min(1, total)))


def textworld_rubric(reward: str = "process", shaping_gamma: float | None = None) -> Rubric:
    """The rubric of a preset: ``"process"`` or ``"outcome"`` (see the module's docstring), plus optional shaping.

    A game can end on a command (won), so unlike the answer-only presets of :mod:`agent_gym.rewards`
    the score, progress and shaping terms may be non-zero on a final step.

    Raises:
        ValueError: Another preset, or ``shaping_gamma`` not a number in (0, 1].
    """
    zero = (0.0, 0.0)
    if reward == "process":
        terms = [
            RewardTerm("format", format_penalty, 0.1, (-1.0, 0.0)),
            RewardTerm("score", evidence_gain, 0.2, (0.0, 1.0)),
            RewardTerm("progress", game_progress, 0.05, (-1.0, 1.0)),
            RewardTerm("step_cost", step_cost, 0.01, (-1.0, 0.0), final_bounds=zero, nonfinal_bounds=(-1.0, -1.0)),
            RewardTerm("won", partial(answer_score, metric=AnswerMetric.EM), 1.0, (0.0, 1.0), nonfinal_bounds=zero),
        ]
    elif reward == "outcome":
        outcome = partial(outcome_agent_r1, metric=AnswerMetric.EM)
        terms = [RewardTerm("outcome", outcome, 1.0, (-1.0, 1.0), nonfinal_bounds=zero)]
    else:
        raise ValueError(f"TextWorld-v0's reward presets are 'process' and 'outcome' (got reward={reward!r})")
    if shaping_gamma is not None:
        if isinstance(shaping_gamma, bool) or not isinstance(shaping_gamma, int | float) or not 0 < shaping_gamma <= 1:
            raise ValueError(f"shaping_gamma must be a number in (0, 1] or None (got {shaping_gamma!r})")
        gamma = float(shaping_gamma)
        terms.append(RewardTerm("shaping", partial(shaping, gamma=gamma), 0.2, (gamma - 1.0, gamma)))
    return Rubric(terms)


# ---------------------------------------------------------------------------- the env
class TextWorldEnv(ProceduralEnv[TextWorldTask]):
    """TextWorld household games played through a ``command`` tool.

    Args:
        world_size: Rooms per game (``tw-make custom --world-size``).
        nb_objects: Objects per game, at least (``--nb-objects``).
        quest_length: Actions the quest takes (``--quest-length``), exactly the walkthrough's length; the long
            variant is ``quest_length=20``.
        cache_dir: Where games are cached (default ``$AGENT_R1_CACHE/textworld``, else
            ``~/.cache/agent-r1/textworld``).
        num_tasks: How many distinct games (each made on first use, about 2 s, then cached).
        task_seed: Selects a different family of ``num_tasks`` games.
        reward: ``"process"`` or ``"outcome"`` (see the module's docstring).
        answer_metric: ``"em"`` or ``"f1"``: both are ``won`` here.
        shaping_gamma: Add potential-based shaping with this γ, Φ = score / max score (``None``: off).
        reward_weights: Override rubric term weights by name.
        rubric: A complete rubric, replacing the preset.
        **kwargs: Passed to :class:`~agent_gym.core.env.ToolEnv` (``action_format``, ``context``, ...).

    Raises:
        ImportError: textworld is not installed (``pip install 'agent-r1-gym[textworld]'``).
        ValueError: A bad setting.
    """

    id_prefix = "tw"

    def __init__(
        self,
        *,
        world_size: int = 5,
        nb_objects: int = 10,
        quest_length: int = 5,
        cache_dir: str | Path | None = None,
        num_tasks: int = 1_000,
        reward: str = "process",
        answer_metric: str = "em",
        shaping_gamma: float | None = None,
        reward_weights: dict[str, float] | None = None,
        rubric: Rubric | None = None,
        **kwargs: Any,
    ):
        require_textworld()  # fail at make time, with the install hint
        if answer_metric not in ("em", "f1"):
            raise ValueError(f"answer_metric must be 'em' or 'f1' (got {answer_metric!r})")
        self.settings = GameSettings(world_size, nb_objects, quest_length)
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        rubric = rubric if rubric is not None else textworld_rubric(reward, shaping_gamma)
        if not isinstance(rubric, Rubric):
            raise TypeError(f"rubric must be a Rubric, got {type(rubric).__name__}")
        rubric = rubric.with_weights(**reward_weights) if reward_weights else rubric
        super().__init__(num_tasks=num_tasks, rubric=rubric, **kwargs)

    def load_task(self, index: int) -> TextWorldTask:
        ref = GameRef(self.settings, game_seed(self.task_seed, index), self.cache_dir)
        return TextWorldTask(f"tw-{self.task_seed}-{index}", ref, ref.load())

    def make_tools(self, task: TextWorldTask) -> Sequence[Tool]:
        return [GameTool(task.ref, task.files)]

    def user_prompt(self, task: TextWorldTask) -> str:
        return (
            f"{task.files.objective}\n\n{task.files.intro}\n\n"
            "Play this text game with the command tool: one command per call, e.g. 'go north', 'open door', "
            "'take key from table', 'look', 'inventory'. The game ends when you complete the quest. "
            "To stop without completing it, write any text inside <answer></answer>."
        )

    def gold_evidence(self, task: TextWorldTask) -> frozenset[str]:
        """The game's points, ``point:1`` ... ``point:<max score>``."""
        return frozenset(f"point:{i}" for i in range(1, task.files.max_score + 1))

    def revealed_evidence(self, call: ToolCall, result: ToolResult, state: EpisodeState[TextWorldTask]) -> set[str]:
        """The points of the score the result shows (the score never goes down)."""
        if not result.ok or call.name != GameTool.name:
            return set()
        return {f"point:{i}" for i in range(1, int(result.metadata.get("score", 0)) + 1)}

    def score_answer(self, task: TextWorldTask, answer: str) -> dict[str, float]:
        """``em`` = ``f1`` = ``won``: whether the game is won (an answer is a stop, whatever its text)."""
        game = self._game_tool()
        won = float(game is not None and game.won)
        return {"em": won, "f1": won, "won": won}

    def oracle_action(self) -> str:
        """The next command of the game's winning policy (its walkthrough, kept up to date by TextWorld's
        quest tracking, so it recovers from detours); an answer when the game cannot be won any more."""
        game = self._game_tool()
        assert game is not None, "call reset() first"
        command = game.next_command()
        if command is None:
            return self.parser.format_answer("give up")
        return self.parser.format_call(GameTool.name, {"text": command})

    def close(self) -> None:
        game = self._game_tool()
        if game is not None:
            game.close()
        super().close()

    # ------------------------------------------------------------ the game ends the episode
    def _transition(self, parsed: ParsedAction, raw_results: list[tuple[ToolCall, ToolResult]]) -> Transition:
        """The base transition; when a command won or lost the game, the episode ends there, scored as an answer."""
        transition = super()._transition(parsed, raw_results)
        game, state = self._game_tool(), self.state
        if transition.terminated or game is None or state is None or not game.over:
            return transition
        state.done = True
        state.answer_scores = self.score_answer(state.task, "")
        return replace(transition, terminated=True, answer_scores=dict(state.answer_scores))

    def _game_tool(self) -> GameTool | None:
        tool = self._tools.get(GameTool.name)
        return tool if isinstance(tool, GameTool) else None
