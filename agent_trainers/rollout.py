"""Multi-turn rollouts over N environments, token in, token out.

Per turn, every live episode is generated in one batch; the env steps of the
turn then run concurrently in a thread pool with a per-call time-out. Token
bookkeeping is exact:

* the model's ids are kept exactly as sampled (``loss_mask`` 1, with their
  sampling log-probs) - they are never decoded and re-encoded;
* only environment text is tokenized, as the *delta* of the chat template:
  ``render(chat + env messages)`` minus the text the tokens so far stand for
  (``render(chat before the turn, generation prompt) + decode(model ids)``).
  That delta holds the assistant turn's closing (``<|im_end|>\\n``, or only
  ``\\n`` when the model itself emitted ``<|im_end|>``), the env's messages and
  the next ``<|im_start|>assistant\\n``; it gets ``loss_mask`` 0. The whole
  history is never re-tokenized.

A template whose rendering of earlier turns changes later (not prefix-stable)
cannot be used token-exactly; :class:`TemplateDriftError` says so. The shipped
ChatML tool template (:func:`agent_trainers.models.tool_chat_template`) is.

Example:
    >>> policy = TransformersPolicy(*load_smollm2())  # doctest: +SKIP
    >>> trajs = rollout(policy, "AgentR1/HotpotQA-v0", task_indices=[0, 1], config=RolloutConfig(group_size=4))
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the environment ids)
from agent_trainers.policies import Generation, Policy, end_token_ids

__all__ = ["RolloutConfig", "TemplateDriftError", "Trajectory", "TurnSpan", "rollout", "stop_strings_for"]


class TemplateDriftError(RuntimeError):
    """The chat template rendered earlier turns differently once new messages came."""


@dataclass
class TurnSpan:
    """One model turn inside ``completion_ids``.

    Attributes:
        start: First model token of the turn (index into ``completion_ids``).
        end: One past its last model token.
        env_end: One past the env tokens that follow it (``== end`` if none).
        reward: Env reward of the step this turn caused (0.0 if never stepped).
        reward_terms: The weighted reward terms of that step.
    """

    start: int
    end: int
    env_end: int
    reward: float = 0.0
    reward_terms: dict[str, float] = field(default_factory=dict)


@dataclass
class Trajectory:
    """One episode as token ids, masks, log-probs and rewards.

    Attributes:
        env_id: The Gymnasium id played.
        env_kwargs: Constructor kwargs passed to ``gymnasium.make``.
        seed: The ``reset`` seed.
        task_id: The task's id (``info["task_id"]``).
        task_index: The task's index (``options={"task_index": ...}``).
        group_id: Index of the task within the rollout call; group members share it.
        prompt_ids: Chat-templated system+user prompt incl. the generation prompt.
        completion_ids: Everything after the prompt: model and env tokens interleaved.
        loss_mask: Per completion token: 1 model-generated, 0 env. Empty in text mode.
        logprobs: Per completion token: the sampling log-prob for model tokens,
            0.0 for env tokens. Empty in text mode.
        turns: The model turns, in order.
        messages: The final chat history (``info["messages"]``), plus the last
            model turn if it never reached the env (token budget, time-out).
        metrics: ``info["metrics"]`` at the end (empty unless terminated).
        stop_reason: ``"answer"``, ``"max_turns"``, ``"token_budget"``,
            ``"tool_timeout"``, ``"env_error"`` or the env's own.
        terminated: The task ended (an answer was given).
        truncated: A budget or failure cut the episode.
        tools: Tool schemas passed to the chat template (empty when, as by
            default, the env's system prompt lists the tools itself).
        error: What went wrong for ``"env_error"`` / ``"tool_timeout"`` endings.
    """

    env_id: str
    env_kwargs: dict[str, Any]
    seed: int
    task_id: str
    task_index: int
    group_id: int
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[TurnSpan] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    stop_reason: str = ""
    terminated: bool = False
    truncated: bool = False
    tools: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    @property
    def total_reward(self) -> float:
        """Sum of the turn rewards."""
        return float(sum(t.reward for t in self.turns))

    @property
    def turn_rewards(self) -> list[float]:
        """The reward of each turn, in order."""
        return [t.reward for t in self.turns]


@dataclass
class RolloutConfig:
    """How rollouts are played."""

    max_turns: int | None = None
    """Turn limit (``max_episode_steps``); ``None`` keeps the env's registered limit."""
    max_new_tokens_per_turn: int = 256
    """Most tokens the model may generate in one turn."""
    max_total_tokens: int = 2048
    """Token budget per trajectory (prompt + completion); exceeding it ends the episode ("token_budget")."""
    temperature: float = 1.0
    """Sampling temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    tool_workers: int = 8
    """Threads that run env steps (tool calls) concurrently."""
    tool_timeout_s: float = 30.0
    """Per-step time-out; a step that takes longer ends its episode ("tool_timeout", truncated)."""
    group_size: int = 1
    """G rollouts per task (GRPO groups); group members are adjacent in the output."""
    same_noise_in_group: bool = False
    """Reset all members of a group with the same seed (same tool noise) instead of distinct seeds."""
    render_tools: bool = False
    """Pass ``info["tools"]`` to the chat template as ``tools=``. Off by default: a ToolEnv's
    system prompt already lists its tools, and listing them twice wastes context."""

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 or None (got {self.max_turns})")
        for name in ("max_new_tokens_per_turn", "max_total_tokens", "tool_workers", "group_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p})")
        if self.tool_timeout_s <= 0:
            raise ValueError(f"tool_timeout_s must be > 0 (got {self.tool_timeout_s})")


def stop_strings_for(env: gym.Env) -> list[str]:
    """Stop strings that end a turn for ``env``'s action format.

    ``"tool_call"``: ``</tool_call>`` and ``</answer>``; ``"tags"``: each tool
    tag's closing tag (e.g. ``</search>``) and ``</answer>``.
    """
    base = env.unwrapped
    parser = getattr(base, "parser", None)
    tags = getattr(parser, "tags", None)
    if tags:
        return [f"</{t}>" for t in tags] + ["</answer>"]
    if str(getattr(base, "action_format", "tool_call")) == "tool_call":
        return ["</tool_call>", "</answer>"]
    return ["</answer>"]


# ---------------------------------------------------------------- concurrency
@dataclass
class _Call:
    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    started: float | None = None
    value: Any = None
    error: BaseException | None = None
    released: bool = False


def run_with_timeouts(fns: Sequence[Callable[[], Any]], workers: int, timeout_s: float) -> list[tuple[str, Any]]:
    """Run ``fns`` on at most ``workers`` daemon threads; never waits past each call's time-out.

    Each call's clock starts when it starts running. Returns, per call,
    ``("ok", value)``, ``("error", exception)`` or ``("timeout", None)``. A
    timed-out call keeps its (daemon) thread until it returns by itself; the
    caller must not use its object again.
    """
    calls = [_Call(fn) for fn in fns]
    gate, lock = threading.Semaphore(workers), threading.Lock()

    def release(c: _Call) -> None:
        with lock:
            if not c.released:
                c.released = True
                gate.release()

    def work(c: _Call) -> None:
        gate.acquire()
        c.started = time.monotonic()
        try:
            c.value = c.fn()
        except BaseException as exc:  # reported to the caller as an episode-ending error
            c.error = exc
        finally:
            c.done.set()
            release(c)

    for c in calls:
        threading.Thread(target=work, args=(c,), daemon=True).start()
    results: list[tuple[str, Any] | None] = [None] * len(calls)
    while any(r is None for r in results):
        for i, c in enumerate(calls):
            if results[i] is not None:
                continue
            if c.done.is_set():
                results[i] = ("error", c.error) if c.error is not None else ("ok", c.value)
            elif c.started is not None and time.monotonic() - c.started > timeout_s:
                results[i] = ("timeout", None)
                release(c)  # the hung call's slot goes to the next call
        if any(r is None for r in results):
            time.sleep(0.002)
    return [r for r in results if r is not None]


# ------------------------------------------------------------------ episodes
class _Episode:
    """The mutable bookkeeping of one live episode (internal)."""

    def __init__(self, env: gym.Env, traj: Trajectory, renderer: _Renderer):
        self.env, self.traj, self.renderer = env, traj, renderer
        self.chat: list[dict[str, Any]] = []
        self.text = ""  # exactly what prompt_ids + completion_ids stand for
        self.done = False
        self.pending: Generation | None = None

    @property
    def length(self) -> int:
        return len(self.traj.prompt_ids) + len(self.traj.completion_ids)

    def start(self, info: dict[str, Any]) -> None:
        self.chat = [dict(m) for m in info["messages"]]
        self.traj.messages = [dict(m) for m in info["messages"]]
        self.traj.task_id = str(info.get("task_id", ""))
        self.text = self.renderer.render(self.chat, generation_prompt=True, tools=self.traj.tools)
        self.traj.prompt_ids = self.renderer.encode(self.text)

    def add_model_turn(self, gen: Generation) -> str:
        """Append the model's ids; return the action text given to the env."""
        t = self.traj
        start = len(t.completion_ids)
        t.completion_ids.extend(gen.token_ids)
        t.loss_mask.extend([1] * len(gen.token_ids))
        t.logprobs.extend(float(x) for x in gen.logprobs)
        t.turns.append(TurnSpan(start=start, end=len(t.completion_ids), env_end=len(t.completion_ids)))
        ids = gen.token_ids
        content_ids = ids[:-1] if ids and ids[-1] in self.renderer.end_ids else ids
        self.text += self.renderer.decode(ids)
        action = self.renderer.decode(content_ids)
        self.chat.append({"role": "assistant", "content": action})
        return action

    def finish(self, stop_reason: str, *, truncated: bool, error: str = "") -> None:
        self.done = True
        self.traj.stop_reason, self.traj.truncated, self.traj.error = stop_reason, truncated, error
        if self.chat and self.chat[-1]["role"] == "assistant" and len(self.traj.messages) < len(self.chat):
            self.traj.messages.append(dict(self.chat[-1]))  # a model turn the env never saw

    def apply_step(self, step: tuple[Any, float, bool, bool, dict[str, Any]], budget: int) -> None:
        """Record an env step's reward and append the env's tokens (the template delta)."""
        _obs, reward, terminated, truncated, info = step
        turn = self.traj.turns[-1]
        turn.reward, turn.reward_terms = float(reward), {k: float(v) for k, v in info.get("reward_terms", {}).items()}
        new = list(info.get("new_messages", []))
        if new and new[0].get("role") == "assistant":
            self.chat[-1] = {**new[0], "content": self.chat[-1]["content"]}
            new = new[1:]
        self.chat.extend(dict(m) for m in new)
        self.traj.messages = [dict(m) for m in info["messages"]]
        over = bool(terminated or truncated)
        full = self.renderer.render(self.chat, generation_prompt=not over, tools=self.traj.tools)
        if not full.startswith(self.text):
            raise TemplateDriftError(_drift_message(self.text, full))
        env_ids = self.renderer.encode(full[len(self.text) :])
        if self.length + len(env_ids) <= budget:
            self._append_env(env_ids, full)
        elif not over:
            self.finish("token_budget", truncated=True)
            return
        if over:
            self.traj.terminated = bool(terminated)
            self.traj.metrics = {k: float(v) for k, v in info.get("metrics", {}).items()} if terminated else {}
            reason = info.get("stop_reason") or ("answer" if terminated else "max_turns")
            self.finish(str(reason), truncated=bool(truncated) and not terminated)

    def _append_env(self, env_ids: list[int], full: str) -> None:
        t = self.traj
        t.completion_ids.extend(env_ids)
        t.loss_mask.extend([0] * len(env_ids))
        t.logprobs.extend([0.0] * len(env_ids))
        t.turns[-1].env_end = len(t.completion_ids)
        self.text = full


def _drift_message(before: str, after: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), min(len(before), len(after)))
    return (
        "the chat template is not prefix-stable: re-rendering the conversation changed earlier text at "
        f"character {at} ({before[max(0, at - 40) : at + 40]!r} became {after[max(0, at - 40) : at + 40]!r}); "
        "use agent_trainers.models.tool_chat_template()"
    )


@dataclass
class _Renderer:
    """Chat-template rendering and env-text tokenization for one tokenizer."""

    tokenizer: Any

    def __post_init__(self) -> None:
        self.end_ids = end_token_ids(self.tokenizer)

    def render(self, messages: list[dict[str, Any]], *, generation_prompt: bool, tools: list[dict[str, Any]]) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, tokenize=False, add_generation_prompt=generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


# ------------------------------------------------------------------- engine
def rollout(
    policy: Policy,
    env_id: str,
    *,
    task_indices: Sequence[int],
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    config: RolloutConfig | None = None,
) -> list[Trajectory]:
    """Play ``len(task_indices) * group_size`` episodes of ``env_id`` with ``policy``.

    Args:
        policy: A :class:`~agent_trainers.policies.Policy`, or a text-only one
            (``policy.text_only``, e.g. :class:`~agent_trainers.policies.OpenAIPolicy`).
        env_id: A registered Gymnasium id (``import agent_gym`` registers ours).
        task_indices: Tasks to pose (``options={"task_index": i}``).
        seed: Base seed. Task ``p`` of the call, member ``g``, resets with
            ``seed + p`` if ``same_noise_in_group`` else ``seed + p * G + g``.
        env_kwargs: Passed to ``gymnasium.make``.
        config: How to play (default :class:`RolloutConfig()`).

    Returns:
        Trajectories ordered task by task, group members adjacent.
    """
    cfg = config if config is not None else RolloutConfig()
    kwargs = dict(env_kwargs or {})
    episodes = _make_episodes(policy, env_id, task_indices, seed, kwargs, cfg)
    try:
        if getattr(policy, "text_only", False):
            _play_text(policy, episodes, cfg)
        else:
            _play_tokens(policy, episodes, cfg)
    finally:
        for ep in episodes:
            if ep.traj.stop_reason != "tool_timeout":
                ep.env.close()
    return [ep.traj for ep in episodes]


def _make_episodes(
    policy: Policy, env_id: str, task_indices: Sequence[int], seed: int, kwargs: dict[str, Any], cfg: RolloutConfig
) -> list[_Episode]:
    renderer = _Renderer(policy.tokenizer) if policy.tokenizer is not None else None
    make_kwargs = dict(kwargs) | ({"max_episode_steps": cfg.max_turns} if cfg.max_turns is not None else {})
    episodes = []
    for p, index in enumerate(task_indices):
        for g in range(cfg.group_size):
            ep_seed = seed + p if cfg.same_noise_in_group else seed + p * cfg.group_size + g
            env = gym.make(env_id, **make_kwargs)
            traj = Trajectory(env_id, dict(kwargs), ep_seed, "", int(index), p)
            _obs, info = env.reset(seed=ep_seed, options={"task_index": int(index)})
            traj.tools = list(info.get("tools", [])) if cfg.render_tools else []
            ep = _Episode(env, traj, renderer)  # type: ignore[arg-type]
            if renderer is not None:
                ep.start(info)
            else:
                ep.chat = [dict(m) for m in info["messages"]]
                traj.messages, traj.task_id = [dict(m) for m in info["messages"]], str(info.get("task_id", ""))
            episodes.append(ep)
    return episodes


def _play_tokens(policy: Policy, episodes: list[_Episode], cfg: RolloutConfig) -> None:
    stop = stop_strings_for(episodes[0].env) if episodes else []
    while live := [ep for ep in episodes if not ep.done]:
        by_limit: dict[int, list[_Episode]] = {}
        for ep in live:
            room = cfg.max_total_tokens - ep.length
            if room <= 0:
                ep.finish("token_budget", truncated=True)
            else:
                by_limit.setdefault(min(cfg.max_new_tokens_per_turn, room), []).append(ep)
        stepping: list[tuple[_Episode, str]] = []
        for limit, group in by_limit.items():
            gens = policy.generate(
                [ep.traj.prompt_ids + ep.traj.completion_ids for ep in group],
                max_new_tokens=limit,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                stop=stop,
            )
            for ep, gen in zip(group, gens, strict=True):
                action = ep.add_model_turn(gen)
                if gen.finish_reason == "length" and limit < cfg.max_new_tokens_per_turn:
                    ep.finish("token_budget", truncated=True)  # the budget, not the turn limit, cut it
                else:
                    stepping.append((ep, action))
        _step_all(stepping, cfg, lambda ep, step: ep.apply_step(step, cfg.max_total_tokens))


def _step_all(stepping: list[tuple[_Episode, str]], cfg: RolloutConfig, apply: Callable[[_Episode, Any], None]) -> None:
    """Step the envs of a turn in parallel; time-outs and errors end only their own episode."""
    fns = [lambda ep=ep, a=a: ep.env.step(a) for ep, a in stepping]
    for (ep, _), (status, value) in zip(
        stepping, run_with_timeouts(fns, cfg.tool_workers, cfg.tool_timeout_s), strict=True
    ):
        if status == "ok":
            apply(ep, value)
        elif status == "timeout":
            ep.finish("tool_timeout", truncated=True, error=f"env step took longer than {cfg.tool_timeout_s} s")
        else:
            ep.finish("env_error", truncated=True, error=f"{type(value).__name__}: {value}")


def _play_text(policy: Any, episodes: list[_Episode], cfg: RolloutConfig) -> None:
    """Text mode (evaluation through chat endpoints): messages in, text out, no token ids."""
    stop = stop_strings_for(episodes[0].env) if episodes else []
    while live := [ep for ep in episodes if not ep.done]:
        gens = policy.generate_chat(
            [ep.chat for ep in live],
            max_new_tokens=cfg.max_new_tokens_per_turn,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            stop=stop,
        )
        for ep, gen in zip(live, gens, strict=True):
            ep.chat.append({"role": "assistant", "content": gen.text or ""})
            ep.traj.turns.append(TurnSpan(0, 0, 0))
        _step_all([(ep, ep.chat[-1]["content"]) for ep in live], cfg, _apply_text_step)


def _apply_text_step(ep: _Episode, step: tuple[Any, float, bool, bool, dict[str, Any]]) -> None:
    _obs, reward, terminated, truncated, info = step
    turn = ep.traj.turns[-1]
    turn.reward, turn.reward_terms = float(reward), {k: float(v) for k, v in info.get("reward_terms", {}).items()}
    ep.chat = [dict(m) for m in info["messages"]]
    ep.traj.messages = [dict(m) for m in info["messages"]]
    if terminated or truncated:
        ep.traj.terminated = bool(terminated)
        ep.traj.metrics = {k: float(v) for k, v in info.get("metrics", {}).items()} if terminated else {}
        reason = info.get("stop_reason") or ("answer" if terminated else "max_turns")
        ep.finish(str(reason), truncated=bool(truncated) and not terminated)


# ---------------------------------------------------------------------- CLI
def run_rollout_cli(args: Sequence[str] | argparse.Namespace | None = None) -> int:
    """Entry point of ``python -m agent_trainers.rollout`` / ``agent-r1 rollout``.

    See :func:`agent_trainers.rollout_cli.run_rollout_cli` (``--help`` lists the options).
    """
    from agent_trainers.rollout_cli import run_rollout_cli as run

    return run(args)


if __name__ == "__main__":
    raise SystemExit(run_rollout_cli())
