"""An ``environment_factory`` for TRL's own tool loop, generated from an env id.

TRL's :class:`~trl.GRPOTrainer` can run tools itself: it takes a zero-argument
class whose instances have ``reset(**row)``, one public method per tool (TRL
derives each tool's JSON schema from the method's signature and Google-style
docstring) and optionally ``get_reward()``. :func:`make_environment_factory`
builds such a class for any registered environment:

* one method per tool of the env, named after it, with a typed signature and
  an ``Args:`` docstring generated from the tool's JSON schema;
* an ``answer(answer)`` method that submits the final answer;
* ``reset(**row)`` poses the row's ``task_index`` (or ``task_id``) and returns
  the question, which TRL appends to the row's last prompt message. Where the
  env's text asks for ``<answer>`` tags, the question asks for the ``answer``
  tool instead (TRL's loop only runs tool calls);
* ``get_reward()`` is the sum of the env's rubric rewards over the episode
  (process terms included; an episode that never calls ``answer`` earns no
  outcome term).

:func:`trl_dataset_rows` makes the matching dataset: a system message with the
env's task description and the ``answer``-tool instruction. The tokenizer from
:func:`agent_trainers.policies.load_tokenizer` already carries what TRL needs
to parse tool calls (a ``response_template``), so plain TRL usage works::

    tok = load_tokenizer("smollm2")
    trainer = GRPOTrainer(model=model, processing_class=tok, args=GRPOConfig(...),
                          train_dataset=Dataset.from_list(trl_dataset_rows(range(8), env_id=env_id)),
                          environment_factory=make_environment_factory(env_id))

Use it when you prefer TRL's loop; :class:`~agent_trainers.algorithms.AgentGRPOTrainer`
drives the same envs through our rollout engine (exact token ids, per-turn rewards).
"""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the environments)
from agent_gym.core.env import EpisodeOverError, ToolEnv

__all__ = ["ANSWER_METHOD", "ANSWER_TOOL_INSTRUCTION", "TRLEnvironment", "make_environment_factory", "trl_dataset_rows"]

ANSWER_METHOD = "answer"
"""Name of the generated method that submits the final answer."""

ANSWER_TOOL_INSTRUCTION = (
    "Use the tools to find what you need. When you know the final answer, call the `answer` tool with it; "
    "the episode ends there."
)
"""What the system message of :func:`trl_dataset_rows` asks for (instead of ``<answer>`` tags)."""

_TAG_PHRASE = re.compile(r"\s*(?:inside|in|within)\s+<answer>\s*</answer>(?:\s+tags)?", re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?\n]*<answer>[^.!?\n]*[.!?]?")


def for_answer_tool(text: str) -> str:
    """Rewrite an env's request for ``<answer>`` tags into one for the ``answer`` tool.

    Example:
        >>> for_answer_tool("Give the final number (no units) inside <answer></answer>.")
        'Give the final number (no units) with the `answer` tool.'
    """
    text = _TAG_PHRASE.sub(" with the `answer` tool", text)
    return _SENTENCE.sub("", text).strip() if "<answer>" in text else text


_PY_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


class TRLEnvironment:
    """Base of the generated classes: one env instance played through tool methods.

    Subclasses are made by :func:`make_environment_factory`, which sets the
    class attributes below and adds one method per tool.

    Attributes:
        env_id: The registered environment id.
        env_kwargs: Keyword arguments for ``gymnasium.make``.
        base_seed: Episode ``k`` of an instance is reset with seed ``base_seed + k``.
    """

    env_id: str = ""
    env_kwargs: Mapping[str, Any] = {}
    base_seed: int = 0
    _instances = itertools.count()

    def __init__(self) -> None:
        self.env = gym.make(self.env_id, **dict(self.env_kwargs))
        self._episodes = 0
        self._instance = next(self._instances)
        self.total_reward = 0.0
        self.done = False
        self.reward_terms: list[dict[str, float]] = []

    def reset(self, **row: Any) -> str:
        """Start the episode a dataset row asks for; return the question.

        Args:
            **row: The dataset row. ``task_index`` (int) or ``task_id`` (str)
                selects the task; ``seed`` (int), if present, seeds the env.
        """
        options: dict[str, Any] = {}
        if row.get("task_index") is not None:
            options["task_index"] = int(row["task_index"])
        elif row.get("task_id") is not None:
            options["task_id"] = str(row["task_id"])
        seed = row.get("seed")
        if seed is None:
            seed = self.base_seed + 1_000_003 * self._instance + self._episodes
        self._episodes += 1
        _, info = self.env.reset(seed=int(seed), options=options)
        self.total_reward = 0.0
        self.done = False
        self.reward_terms = []
        users = [m["content"] for m in info["messages"] if m["role"] == "user"]
        return for_answer_tool(users[-1]) if users else ""

    def get_reward(self) -> float:
        """The sum of the env's rewards over the episode so far."""
        return self.total_reward

    def _act(self, action: str) -> str:
        """Step the env with ``action``; return what the agent sees next."""
        if self.done:
            return "Error: the episode is over; no further tool calls are run."
        try:
            _, reward, terminated, truncated, info = self.env.step(action)
        except EpisodeOverError as err:
            self.done = True
            return f"Error: {err}"
        self.total_reward += float(reward)
        self.reward_terms.append(dict(info["reward_terms"]))
        self.done = bool(terminated or truncated)
        shown = [m["content"] for m in info["new_messages"] if m["role"] in ("tool", "user")]
        if terminated:
            shown.append("Answer recorded; the episode is over.")
        elif truncated:
            shown.append("The turn limit was reached; the episode is over.")
        return "\n".join(shown)


def _docstring(description: str, params: Mapping[str, Any], returns: str) -> str:
    lines = [description.strip() or "Call the tool.", "", "Args:"]
    for name, spec in params.items():
        text = str(spec.get("description", "")).strip() or f"The {name}."
        lines.append(f"    {name}: {' '.join(text.split())}")
    lines += ["", "Returns:", f"    {returns}"]
    return "\n".join(lines)


def _tool_method(name: str, schema: Mapping[str, Any]) -> Callable[..., str]:
    """A method ``name(self, **arguments) -> str`` that calls tool ``name`` through the env."""
    props: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    ordered = [p for p in props if p in required] + [p for p in props if p not in required]
    for pname in ordered:
        hint = _PY_TYPES.get(str(props[pname].get("type")), str)
        if pname not in required:
            hint = hint | None
        default = inspect.Parameter.empty if pname in required else None
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        annotations[pname] = hint
    annotations["return"] = str

    def method(self: TRLEnvironment, **arguments: Any) -> str:
        arguments = {k: v for k, v in arguments.items() if v is not None or k in required}
        parser = cast(ToolEnv[Any], self.env.unwrapped).parser
        return self._act(parser.format_call(name, arguments))

    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


def _answer_method() -> Callable[..., str]:
    def answer(self, answer: str) -> str:  # self unannotated: TRL derives the schema from the hints
        """Submit the final answer and end the episode.

        Args:
            answer: The final answer, as short as possible (e.g. a name or a date).

        Returns:
            A confirmation that the answer was recorded.
        """
        return self._act(self.env.unwrapped.parser.format_answer(answer))

    return answer


def make_environment_factory(
    env_id: str, *, env_kwargs: Mapping[str, Any] | None = None, seed: int = 0
) -> type[TRLEnvironment]:
    """A TRL ``environment_factory`` class for the registered env ``env_id``.

    The env is probed once (reset on task 0) to read its tool schemas; every
    task of an env must offer the same tools.

    Args:
        env_id: A registered id, e.g. ``"AgentR1/HotpotQA-v0"``.
        env_kwargs: Keyword arguments for ``gymnasium.make`` (e.g. ``split``).
        seed: Base seed of the episodes (rows may carry their own ``seed``).

    Returns:
        A zero-argument class to pass as ``GRPOTrainer(environment_factory=...)``.
    """
    kwargs = dict(env_kwargs or {})
    probe = gym.make(env_id, **kwargs)
    try:
        _, info = probe.reset(seed=seed, options={"task_index": 0})
    finally:
        probe.close()
    namespace: dict[str, Any] = {"env_id": env_id, "env_kwargs": kwargs, "base_seed": int(seed)}
    for entry in info["tools"]:
        fn = entry["function"]
        if not str(fn["name"]).isidentifier() or fn["name"] == ANSWER_METHOD or fn["name"].startswith("_"):
            raise ValueError(
                f"tool name {fn['name']!r} of {env_id} cannot be a TRL tool method "
                f"(must be a public identifier other than {ANSWER_METHOD!r})"
            )
        method = _tool_method(fn["name"], fn.get("parameters", {}))
        props = fn.get("parameters", {}).get("properties", {})
        method.__doc__ = _docstring(fn.get("description", ""), props, "The tool's result, or an error message.")
        namespace[fn["name"]] = method
    namespace[ANSWER_METHOD] = _answer_method()
    class_name = "".join(ch for ch in env_id.split("/")[-1].split("-")[0] if ch.isalnum()) + "TRLEnvironment"
    return type(class_name, (TRLEnvironment,), namespace)


def _task_description(env_id: str, env_kwargs: Mapping[str, Any]) -> str:
    """The env's system prompt without its action-format instructions (which ask for tags)."""
    env = gym.make(env_id, **dict(env_kwargs))
    try:
        env.reset(seed=0, options={"task_index": 0})
        base = cast(ToolEnv[Any], env.unwrapped)
        tools = list(base.tools.values())
        assert base.state is not None  # the reset above started an episode
        full = base.system_prompt(base.state.task, tools)
        return for_answer_tool(full.replace(base.parser.instructions(tools), "")).strip()
    finally:
        env.close()


def trl_dataset_rows(
    task_indices: Sequence[int], *, env_id: str, env_kwargs: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Dataset rows for the ``environment_factory`` path.

    Each row's prompt is a system message (the env's task description and
    :data:`ANSWER_TOOL_INSTRUCTION`) and an empty user message: TRL appends the
    question that ``reset`` returns to it.

    Args:
        task_indices: Tasks to pose, one row each.
        env_id: The environment (its task description goes into the system message).
        env_kwargs: Keyword arguments for ``gymnasium.make``.

    Returns:
        Rows with ``prompt``, ``task_index`` and ``env_id``.
    """
    description = _task_description(env_id, env_kwargs or {})
    system = f"{description}\n\n{ANSWER_TOOL_INSTRUCTION}" if description else ANSWER_TOOL_INSTRUCTION
    prompt = [{"role": "system", "content": system}, {"role": "user", "content": ""}]
    return [{"prompt": [dict(m) for m in prompt], "task_index": int(i), "env_id": env_id} for i in task_indices]
