"""Multi-turn rollouts over N environments, token in, token out: :func:`rollout`.

Per turn, every live episode is generated in one batch; the env steps of the
turn then run concurrently in a thread pool with a per-call time-out. Token
bookkeeping is exact:

* the model's ids are kept exactly as sampled (``loss_mask`` 1, with their
  sampling log-probs) - they are never decoded and re-encoded;
* only environment text is tokenized, as the delta of the chat template after
  the model's turn (:meth:`agent_trainers.rollout.chat.ChatTokenizer.env_ids`),
  with ``loss_mask`` 0. The history is never re-rendered or re-tokenized.

Under a context policy other than ``"append"`` (``env_kwargs={"context": "window"}``,
:mod:`agent_gym.core.context`) the env decides what the agent sees next: each
turn's prompt is the env's view (``info["messages"]``) rendered with the chat
template, recorded as it was fed in ``Trajectory.step_prompts`` (per-step
samples), while ``prompt_ids + completion_ids`` still record the whole history
(the model's ids exactly as sampled, the env's as template deltas).
``max_total_tokens`` then bounds each step's prompt and generation, not the
history.

A policy that keeps per-episode state (a :class:`~agent_trainers.policies.SessionPolicy`,
e.g. ``TransformersPolicy`` with its KV cache) is told which episode each
prompt belongs to, and each episode's state is freed as soon as it ends.

Example:
    >>> from agent_trainers.policies import TransformersPolicy, load_model
    >>> policy = TransformersPolicy(*load_model("smollm2"))  # doctest: +SKIP
    >>> trajs = rollout(policy, "AgentR1/HotpotQA-v0", task_indices=[0, 1], group_size=4)  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the environment ids)
from agent_gym.core.info import ResetInfo, StepInfo
from agent_trainers.policies.sampling import ChatPolicy, FinishReason, Generation, SessionPolicy, TokenPolicy
from agent_trainers.rollout.chat import ChatTokenizer
from agent_trainers.rollout.concurrency import run_with_timeouts
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.progress import RolloutProgress
from agent_trainers.rollout.types import StopReason, Trajectory, TurnSpan

__all__ = ["rollout", "stop_strings_for"]

Step = tuple[Any, float, bool, bool, StepInfo]


def stop_strings_for(env: gym.Env) -> list[str]:
    """Stop strings that end a turn for ``env``'s action format.

    ``"tool_call"``: ``</tool_call>`` and ``</answer>``; ``"tags"``: each tool
    tag's closing tag (e.g. ``</search>``) and ``</answer>``.
    """
    base = env.unwrapped
    tags = getattr(getattr(base, "parser", None), "tags", None)
    if tags:
        return [f"</{t}>" for t in tags] + ["</answer>"]
    if str(getattr(base, "action_format", "tool_call")) == "tool_call":
        return ["</tool_call>", "</answer>"]
    return ["</answer>"]


def _context_name(env: Any) -> str:
    """The name of ``env``'s context policy; ``"append"`` for an env without one."""
    context = getattr(getattr(env, "unwrapped", env), "context", "append")
    return str(getattr(context, "name", context))


class _Episode:
    """The mutable bookkeeping of one live episode (internal)."""

    def __init__(self, env: gym.Env, traj: Trajectory, chat: ChatTokenizer | None):
        self.env, self.traj, self.chat = env, traj, chat
        self.messages: list[dict[str, Any]] = []  # the conversation as the policy sees it
        self.done = False
        self.turn_text = ("", "")  # (content, text) of the latest model turn
        self.unstepped = False  # the latest model turn never reached the env
        self.view_mode = _context_name(env) != "append"  # each turn's prompt is then the env's view, rendered anew
        self.view_prompt: list[int] = []

    @property
    def length(self) -> int:
        """Tokens the next generation continues: the whole episode, or in view mode the step's prompt."""
        if self.view_mode:
            return len(self.view_prompt)
        return len(self.traj.prompt_ids) + len(self.traj.completion_ids)

    def next_prompt(self) -> list[int]:
        """The ids the model is fed for its next turn."""
        if self.view_mode:
            return list(self.view_prompt)
        return self.traj.prompt_ids + self.traj.completion_ids

    def start(self, info: ResetInfo) -> None:
        self.messages = [dict(m) for m in info["messages"]]
        self.traj.messages = [dict(m) for m in info.get("history", info["messages"])]
        self.traj.task_id = str(info["task_id"])
        self.traj.evidence_total = int(info["evidence_total"])
        if self.chat is not None:
            self.traj.prompt_ids = self.chat.prompt_ids(self.messages, self.traj.tools)
            self.view_prompt = list(self.traj.prompt_ids)

    def add_model_turn(self, gen: Generation) -> str:
        """Append the model's ids; return the action text given to the env."""
        assert self.chat is not None
        t = self.traj
        if self.view_mode:
            t.step_prompts.append(list(self.view_prompt))
        self.unstepped = True
        start = len(t.completion_ids)
        t.completion_ids.extend(gen.token_ids)
        t.loss_mask.extend([1] * len(gen.token_ids))
        t.logprobs.extend(float(x) for x in gen.logprobs)
        cut = gen.finish_reason == FinishReason.LENGTH
        t.turns.append(TurnSpan(start=start, end=len(t.completion_ids), env_end=len(t.completion_ids), cut=cut))
        self.turn_text = self.chat.split_turn(gen.token_ids)
        self.messages.append({"role": "assistant", "content": self.turn_text[0]})
        return self.turn_text[0]

    def add_text_turn(self, gen: Generation) -> str:
        """Text mode: record a model turn that has no token ids."""
        self.messages.append({"role": "assistant", "content": gen.text or ""})
        self.traj.turns.append(TurnSpan(0, 0, 0, cut=gen.finish_reason == FinishReason.LENGTH))
        self.unstepped = True
        return gen.text or ""

    def finish(self, stop_reason: str, *, truncated: bool, error: str = "") -> None:
        self.done = True
        self.traj.stop_reason, self.traj.truncated, self.traj.error = str(stop_reason), truncated, error
        if self.unstepped:
            self.traj.messages.append(dict(self.messages[-1]))  # a model turn the env never saw
            self.unstepped = False

    def record_step(self, step: Step) -> tuple[list[dict[str, Any]], bool]:
        """Store the step's reward and messages; return the env's new messages and whether the episode is over."""
        _obs, reward, terminated, truncated, info = step
        turn = self.traj.turns[-1]
        turn.reward, turn.reward_terms = float(reward), {k: float(v) for k, v in info["reward_terms"].items()}
        turn.format_errors = [str(e) for e in info["format_errors"]]
        self.traj.evidence_found = int(info["evidence_found"])
        self.traj.evidence_total = int(info["evidence_total"])
        new = [dict(m) for m in info["new_messages"]]
        if new and new[0]["role"] == "assistant":
            new = new[1:]
        self.unstepped = False
        self.messages = [dict(m) for m in info["messages"]]
        self.traj.messages = [dict(m) for m in info.get("history", info["messages"])]
        if terminated:
            self.traj.terminated = True
            self.traj.metrics = {k: float(v) for k, v in info["metrics"].items()}  # a terminated step carries them
        return new, bool(terminated or truncated)

    def end_if_over(self, step: Step) -> None:
        _obs, _reward, terminated, truncated, info = step
        if terminated or truncated:
            reason = info["stop_reason"] or (StopReason.ANSWER if terminated else StopReason.MAX_TURNS)
            self.finish(str(reason), truncated=bool(truncated) and not terminated)

    def apply_step(self, step: Step, budget: int) -> None:
        """Record an env step and append the env's tokens (the template delta after the turn)."""
        assert self.chat is not None
        new, over = self.record_step(step)
        content, text = self.turn_text
        env_ids = self.chat.env_ids(text, content, new, generation_prompt=not over, tools=self.traj.tools)
        if self.view_mode:  # the history records every token; the budget bounds the next step's prompt
            self._add_env_tokens(env_ids)
            if not over:
                self.view_prompt = self.chat.prompt_ids(self.messages, self.traj.tools)
                if len(self.view_prompt) >= budget:
                    self.finish(StopReason.TOKEN_BUDGET, truncated=True)
                    return
        elif self.length + len(env_ids) <= budget:
            self._add_env_tokens(env_ids)
        elif not over:
            self.finish(StopReason.TOKEN_BUDGET, truncated=True)
            return
        self.end_if_over(step)

    def _add_env_tokens(self, env_ids: list[int]) -> None:
        """Append env ids to the completion (loss mask 0, log-prob 0.0) as the latest turn's env span."""
        t = self.traj
        t.completion_ids.extend(env_ids)
        t.loss_mask.extend([0] * len(env_ids))
        t.logprobs.extend([0.0] * len(env_ids))
        t.turns[-1].env_end = len(t.completion_ids)

    def apply_text_step(self, step: Step) -> None:
        self.record_step(step)
        self.end_if_over(step)


def rollout(
    policy: TokenPolicy | ChatPolicy,
    env_id: str,
    *,
    task_indices: Sequence[int],
    group_size: int = 1,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    config: RolloutConfig | None = None,
    on_episode_end: Callable[[Trajectory], None] | None = None,
    progress: bool | RolloutProgress = False,
    make_env: Callable[..., Any] | None = None,
) -> list[Trajectory]:
    """Play ``len(task_indices) * group_size`` episodes of ``env_id`` with ``policy``.

    Args:
        policy: A :class:`~agent_trainers.policies.TokenPolicy`, or a
            :class:`~agent_trainers.policies.ChatPolicy` (text mode: no token ids).
        env_id: A registered Gymnasium id (``import agent_gym`` registers ours).
        task_indices: Tasks to pose (``options={"task_index": i}``).
        group_size: G rollouts per task (GRPO groups); members are adjacent in the output.
        seed: Base seed. Task ``p`` of the call, member ``g``, resets with
            ``seed + p`` if ``config.same_noise_in_group`` else ``seed + p * G + g``.
        env_kwargs: Passed to ``gymnasium.make``.
        config: How to play (default :class:`RolloutConfig()`).
        on_episode_end: Called with each trajectory as soon as it ends.
        progress: Show a progress bar (episode-turns, model tokens/s, ETA; see
            :class:`~agent_trainers.rollout.progress.RolloutProgress`), or update the one given.
        make_env: Builds each env as ``make_env(env_id, **kwargs)`` instead of ``gymnasium.make``
            (e.g. :meth:`agent_trainers.rollout.ray_pool.RayEnvPool.make`: envs in Ray actors); by
            default ``config.env_actors > 0`` uses the process's shared pool of that many actors.

    Returns:
        Trajectories ordered task by task, group members adjacent.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1 (got {group_size})")
    cfg = config if config is not None else RolloutConfig()
    chat: ChatTokenizer | None = None
    if isinstance(policy, TokenPolicy):
        chat = ChatTokenizer(policy.tokenizer)
    elif not isinstance(policy, ChatPolicy):
        raise TypeError(f"policy must have generate(prompts, params) or generate_chat(...) (got {type(policy)})")
    if make_env is None and cfg.env_actors:
        from agent_trainers.rollout.ray_pool import shared_pool

        make_env = shared_pool(cfg.env_actors).make
    episodes = _make_episodes(
        chat, env_id, task_indices, group_size, seed, dict(env_kwargs or {}), cfg, make_env or gym.make
    )
    bar = _progress_bar(episodes) if progress is True else progress
    done = _Notifier(episodes, on_episode_end, bar if isinstance(bar, RolloutProgress) else None)
    try:
        if isinstance(policy, TokenPolicy):
            _play_tokens(policy, episodes, cfg, done)
        else:
            _play_text(policy, episodes, cfg, done)
    finally:
        _clean_up(policy, episodes, bar if progress is True else None)
    return [ep.traj for ep in episodes]


def _progress_bar(episodes: list[_Episode]) -> RolloutProgress:
    """A bar over the episodes' turns (the turn limit from the env's spec, when it has one)."""
    spec = getattr(episodes[0].env, "spec", None) if episodes else None
    return RolloutProgress(len(episodes), spec.max_episode_steps if spec is not None else None)


def _clean_up(policy: Any, episodes: list[_Episode], own_bar: Any) -> None:
    """Free the policy's sessions, close every env (not one whose tool timed out: its thread may still run it)."""
    if isinstance(policy, SessionPolicy):
        policy.end_sessions(episodes)
    for ep in episodes:
        if ep.traj.stop_reason != StopReason.TOOL_TIMEOUT:
            try:
                ep.env.close()
            except Exception as exc:  # a close that fails loses nothing: the trajectories are already whole
                warnings.warn(f"closing the env of {ep.traj.task_id} failed: {type(exc).__name__}: {exc}", stacklevel=2)
    if isinstance(own_bar, RolloutProgress):
        own_bar.close()


class _Notifier:
    """Reports progress: generated turns to the bar; each ended episode once to the bar and ``on_episode_end``."""

    def __init__(
        self,
        episodes: list[_Episode],
        callback: Callable[[Trajectory], None] | None,
        bar: RolloutProgress | None = None,
    ):
        self.episodes, self.callback, self.bar, self.seen = episodes, callback, bar, set[int]()

    def generated(self, gens: Sequence[Generation]) -> None:
        if self.bar is not None:
            self.bar.generated(len(gens), sum(len(g.token_ids) for g in gens))

    def __call__(self) -> None:
        for i, ep in enumerate(self.episodes):
            if ep.done and i not in self.seen:
                self.seen.add(i)
                if self.bar is not None:
                    self.bar.ended(ep.traj)
                if self.callback is not None:
                    self.callback(ep.traj)


def _make_episodes(
    chat: ChatTokenizer | None,
    env_id: str,
    task_indices: Sequence[int],
    group_size: int,
    seed: int,
    kwargs: dict[str, Any],
    cfg: RolloutConfig,
    make_env: Callable[..., Any],
) -> list[_Episode]:
    make_kwargs = dict(kwargs) | ({"max_episode_steps": cfg.max_turns} if cfg.max_turns is not None else {})
    episodes = []
    for p, index in enumerate(task_indices):
        for g in range(group_size):
            ep_seed = seed + p if cfg.same_noise_in_group else seed + p * group_size + g
            env = make_env(env_id, **make_kwargs)
            traj = Trajectory(env_id, dict(kwargs), ep_seed, "", int(index), p)
            _obs, info = env.reset(seed=ep_seed, options={"task_index": int(index)})
            traj.tools = list(info["tools"]) if cfg.render_tools else []
            traj.task_type = info.get("task_type")
            ep = _Episode(env, traj, chat)
            ep.start(info)
            episodes.append(ep)
    return episodes


def _play_tokens(policy: TokenPolicy, episodes: list[_Episode], cfg: RolloutConfig, notify: _Notifier) -> None:
    stop = stop_strings_for(episodes[0].env) if episodes else []
    session_policy = policy if isinstance(policy, SessionPolicy) else None  # the same policy, typed as taking sessions
    while live := [ep for ep in episodes if not ep.done]:
        by_limit: dict[int, list[_Episode]] = {}
        for ep in live:
            room = cfg.max_total_tokens - ep.length
            if room <= 0:
                ep.finish(StopReason.TOKEN_BUDGET, truncated=True)
            else:
                by_limit.setdefault(min(cfg.max_new_tokens_per_turn, room), []).append(ep)
        stepping: list[tuple[_Episode, str]] = []
        for limit, group in by_limit.items():
            prompts = [ep.next_prompt() for ep in group]
            params = cfg.sampling(stop, limit)
            gens = (
                session_policy.generate(prompts, params, sessions=group)
                if session_policy is not None
                else policy.generate(prompts, params)
            )
            notify.generated(gens)
            for ep, gen in zip(group, gens, strict=True):
                action = ep.add_model_turn(gen)
                if gen.finish_reason == "length" and limit < cfg.max_new_tokens_per_turn:
                    ep.finish(StopReason.TOKEN_BUDGET, truncated=True)  # the budget, not the turn limit, cut it
                else:
                    stepping.append((ep, action))
        _step_all(stepping, cfg, lambda ep, step: ep.apply_step(step, cfg.max_total_tokens))
        if session_policy is not None:
            session_policy.end_sessions([ep for ep in live if ep.done])  # free their KV caches now
        notify()


def _step_all(
    stepping: list[tuple[_Episode, str]], cfg: RolloutConfig, apply: Callable[[_Episode, Step], None]
) -> None:
    """Step the envs of a turn in parallel; time-outs and errors end only their own episode."""
    fns = [lambda ep=ep, a=a: ep.env.step(a) for ep, a in stepping]
    results = run_with_timeouts(fns, cfg.tool_workers, cfg.tool_timeout_s)
    for (ep, _), (status, value) in zip(stepping, results, strict=True):
        if status == "ok":
            apply(ep, value)
        elif status == "timeout":
            ep.finish(
                StopReason.TOOL_TIMEOUT, truncated=True, error=f"env step took longer than {cfg.tool_timeout_s} s"
            )
        else:
            ep.finish(StopReason.ENV_ERROR, truncated=True, error=f"{type(value).__name__}: {value}")


def _play_text(policy: ChatPolicy, episodes: list[_Episode], cfg: RolloutConfig, notify: _Notifier) -> None:
    """Text mode (evaluation through chat endpoints): messages in, text out, no token ids."""
    params = cfg.sampling(stop_strings_for(episodes[0].env) if episodes else [])
    while live := [ep for ep in episodes if not ep.done]:
        gens = policy.generate_chat([ep.messages for ep in live], params)
        notify.generated(gens)
        stepping = [(ep, ep.add_text_turn(gen)) for ep, gen in zip(live, gens, strict=True)]
        _step_all(stepping, cfg, _Episode.apply_text_step)
        notify()
