"""The ``env:`` section of a training config: split defaults that fit the env, and its envs built before a run.

``env.train_kwargs`` / ``env.eval_kwargs`` left out of a config default to ``{split: train}`` /
``{split: test}`` when the env's constructor takes ``split`` (the built-in QA envs), and to ``{}`` otherwise
(the procedural envs, your own), so ``--set env.id=my_module:Me/MyEnv-v0`` needs nothing else.

An id of the form ``module:Namespace/Name-vN`` imports ``module`` first (Gymnasium's own form), which
registers the id; a module that is not importable from ``sys.path`` is looked for in the working directory
too (as ``uvicorn module:app`` does), so ``agent-r1 train`` run beside ``my_module.py`` finds it.

:func:`check_env_settings` builds the training and the evaluation env once, before the run writes anything
or loads a model, so that an unknown id or a keyword the env does not take is one line at once;
:func:`check_demonstrators` names then too an env that cannot play the SFT stage's demonstrations.

Training and evaluation pose one task list when their kwargs are equal (an env without splits, left at
``{}`` / ``{}``): :func:`split_tasks` then leaves the evaluation's tasks out of training, so that a run never
evaluates on a task it trained on.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

import agent_gym  # noqa: F401 - registers the built-in ids
from agent_gym.core.env import ToolEnv
from agent_gym.registration import import_env_module

__all__ = [
    "TaskSplit",
    "check_demonstrators",
    "check_env_settings",
    "default_kwargs",
    "env_spec",
    "import_env_module",
    "split_tasks",
    "takes_argument",
]

DEFAULT_SPLITS = {"train_kwargs": "train", "eval_kwargs": "test"}
"""The split each section defaults to, for envs that take ``split``."""


def env_spec(env_id: str) -> EnvSpec:
    """The registered spec of ``env_id`` (``module:`` ids import their module first).

    Raises:
        ValueError: One line: no such id (with Gymnasium's "did you mean"), or its module does not import.
    """
    try:
        return gym.spec(import_env_module(env_id))
    except (gym.error.Error, ImportError) as exc:
        raise ValueError(f"env.id {env_id!r}: {' '.join(str(exc).split())}") from None


def _accepted(creator: Callable[..., Any]) -> tuple[set[str], bool]:
    """Keyword names an env creator takes, following ``**kwargs`` up the classes' ``__init__`` s; and whether
    that list is complete (no ``**kwargs`` left unexplained)."""
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    inits = (
        [k.__dict__["__init__"] for k in creator.__mro__ if "__init__" in k.__dict__]
        if inspect.isclass(creator)
        else [creator]
    )
    names: set[str] = set()
    for init in inits:
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            return names, False
        names |= {n for n, p in params.items() if p.kind in keyword and n != "self"}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return names, True
    return names, False


def _arguments(env_id: str) -> tuple[str, set[str], bool]:
    """The creator's ``module:name``, the keywords ``gymnasium.make(env_id, ...)`` takes, and whether that is all."""
    spec = env_spec(env_id)
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    names, complete = _accepted(creator)  # type: ignore[arg-type]
    where = f"{getattr(creator, '__module__', '?')}:{getattr(creator, '__qualname__', '?')}"
    return where, names | set(_MAKE_KEYWORDS), complete


_MAKE_KEYWORDS = ("max_episode_steps", "disable_env_checker")
"""Keywords ``gymnasium.make`` itself reads."""


def takes_argument(env_id: str, name: str) -> bool:
    """Whether ``gymnasium.make(env_id, name=...)`` reaches a constructor parameter called ``name``.

    Read from the signatures (nothing is built): a ``**kwargs`` is followed to the base class's ``__init__``.
    """
    return name in _arguments(env_id)[1]


def default_kwargs(env_id: str, section: str) -> dict[str, Any]:
    """``{"split": "train"}`` / ``{"split": "test"}`` for ``train_kwargs`` / ``eval_kwargs`` where the env takes
    ``split``; else ``{}`` (also for an id that does not resolve: :func:`check_env_settings` names that)."""
    try:
        return {"split": DEFAULT_SPLITS[section]} if takes_argument(env_id, "split") else {}
    except ValueError:
        return {}


def check_env_settings(env_id: str, sections: Mapping[str, Mapping[str, Any]]) -> None:
    """Build (and close) the env of each section once; any failure is a one-line ``ValueError`` naming it.

    Args:
        env_id: ``env.id``.
        sections: ``{"train_kwargs": {...}, "eval_kwargs": {...}}``.

    Raises:
        ValueError: ``env.id`` is unknown, or ``gymnasium.make(env_id, **kwargs)`` fails for a section, e.g.
            ``env.train_kwargs {'split': 'train'}: DictionaryEnv.__init__() got an unexpected keyword
            argument 'split'``.
    """
    where, names, complete = _arguments(env_id)
    for section, kwargs in sections.items():
        unknown = sorted(set(kwargs) - names) if complete else []
        if unknown:
            close = difflib.get_close_matches(unknown[0], names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (it takes: {', '.join(sorted(names))})"
            if unknown[0] == "split":
                hint = f": it has no splits; leave env.{section} out, or set it to {{}}"
            raise ValueError(f"env.{section}: {env_id} ({where}) takes no argument {unknown[0]!r}{hint}")
        try:
            gym.make(env_id, **dict(kwargs)).close()
        except Exception as exc:  # any failure to build the env is this section's error
            raise ValueError(f"env.{section} {dict(kwargs)}: {type(exc).__name__}: {exc}") from None


def _env_type(env_id: str, kwargs: Mapping[str, Any]) -> tuple[type[Any], int]:
    """The class of the env ``gymnasium.make(env_id, **kwargs)`` builds (unwrapped), and its number of tasks."""
    env = gym.make(import_env_module(env_id), **dict(kwargs))
    try:
        return type(env.unwrapped), int(cast(ToolEnv[Any], env.unwrapped).num_tasks())
    finally:
        env.close()


def _implements(env_type: type[Any], method: str) -> bool:
    """Whether ``env_type`` has ``method`` of its own (``ToolEnv.oracle_action`` only raises)."""
    found = getattr(env_type, method, None)
    return callable(found) and found is not getattr(ToolEnv, method, None)


def check_demonstrators(env_id: str, kwargs: Mapping[str, Any], *, flawed: bool = False) -> None:
    """Refuse, in one line, an SFT stage the training env cannot play: cold-start SFT plays its demonstrations
    with the env's ``oracle_action()`` (and ``flawed_oracle_action()`` for ``sft.flawed_share`` > 0).

    Raises:
        ValueError: The env lacks the demonstrator; the message names both ways out.
    """
    env_type, _ = _env_type(env_id, kwargs)
    where = f"{env_id} ({env_type.__module__}:{env_type.__qualname__})"
    if not _implements(env_type, "oracle_action"):
        raise ValueError(
            f"sft.enabled: {where} has no oracle_action() to play the SFT demonstrations; train without SFT "
            "(--set sft.enabled=false, or sft: {enabled: false}) or implement oracle_action() (docs/custom_env.md)"
        )
    if flawed and not _implements(env_type, "flawed_oracle_action"):
        raise ValueError(
            f"sft.flawed_share: {where} has no flawed_oracle_action() to play flawed demonstrations; set "
            "sft.flawed_share to 0 (--set sft.flawed_share=0) or implement flawed_oracle_action()"
        )


@dataclass(frozen=True)
class TaskSplit:
    """Which task indices a run trains and evaluates on.

    Attributes:
        train: The training tasks (SFT's demonstrations and RL's episodes are drawn from these), in order.
        eval: The evaluation tasks (of the evaluation env).
        shared: Training and evaluation pose one task list (``env.train_kwargs == env.eval_kwargs``), so the
            evaluation tasks were left out of ``train``.
        total: How many tasks the training env poses.
    """

    train: list[int]
    eval: range
    shared: bool
    total: int

    def describe(self) -> str:
        """One line on what a shared task list means for this run (for the start of a run)."""
        held = range(self.eval.start, min(self.eval.stop, self.total))
        return (
            "training and evaluation pose one task list (env.train_kwargs == env.eval_kwargs): evaluation holds "
            f"{_spans(list(held))} aside, training uses {_spans(self.train)} (eval.first_task and eval.tasks choose "
            "the held-aside tasks)"
        )


def _spans(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"tasks 0-2, 5"``."""
    if not indices:
        return "no tasks"
    runs = [[indices[0], indices[0]]]
    for index in indices[1:]:
        if index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    spans = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)
    return f"tasks {spans}" if len(indices) > 1 else f"task {spans}"


def split_tasks(
    env_id: str,
    train_kwargs: Mapping[str, Any],
    eval_kwargs: Mapping[str, Any],
    *,
    train_tasks: int | None,
    eval_first: int,
    eval_tasks: int,
) -> TaskSplit:
    """The training and evaluation tasks of a run: evaluation takes ``eval_tasks`` tasks from ``eval_first``
    on; training the first ``train_tasks`` (None: all) of the training env's tasks, less the evaluation's
    when both envs pose one task list (equal kwargs, e.g. an env without splits), so that they never overlap.

    Raises:
        ValueError: One line: a shared task list that the held-aside tasks use up, leaving none to train on.

    Example:
        >>> split = split_tasks("AgentR1/Bandit-v0", {}, {}, train_tasks=None, eval_first=0, eval_tasks=2)
        >>> split.shared, split.train[:3], split.eval
        (True, [2, 3, 4], range(0, 2))
    """
    shared = dict(train_kwargs) == dict(eval_kwargs)
    _, total = _env_type(env_id, train_kwargs)
    held = range(eval_first, eval_first + eval_tasks)
    train = [i for i in range(total) if not (shared and i in held)]
    if train_tasks is not None:
        train = train[:train_tasks]
    if not train:
        raise ValueError(
            f"eval.tasks: training and evaluation pose one task list (env.train_kwargs == env.eval_kwargs) of "
            f"{total} tasks, and evaluation holds tasks {eval_first}-{eval_first + eval_tasks - 1} aside: none is "
            "left to train on; lower eval.tasks, or give evaluation tasks of its own (env.eval_kwargs)"
        )
    return TaskSplit(train, held, shared, total)
