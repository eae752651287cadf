"""Cold-start SFT: teach the policy to call tools from oracle trajectories.

Small instruct models never emit a tool call by themselves (SmolLM2-135M: 0
in 9 greedy tries), so RL has nothing to reinforce. We first play each
training task with the env's oracle (``env.unwrapped.oracle_action()``),
then fine-tune with TRL's :class:`~trl.SFTTrainer` on the assistant tokens
only (:class:`~agent_trainers.algorithms.sft.trainer.AgentSFTTrainer`: on a CPU
its LM head runs on those tokens alone).

The chats are tokenized by the rollout layer's incremental tokenizer
(:func:`agent_trainers.rollout.tokenize_chat`): each message is rendered once,
and each assistant turn becomes ``encode(content) + [<|im_end|>]`` (mask 1) -
exactly the ids a model writing it emits in a rollout - while template and env
text get mask 0. The rows go to ``SFTTrainer`` pre-tokenized (``input_ids`` +
``assistant_masks``), so the trainer never re-renders them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import gymnasium as gym
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl import SFTConfig

import agent_gym  # noqa: F401  (registers the environments)
from agent_trainers.algorithms.sft.trainer import AgentSFTTrainer
from agent_trainers.algorithms.shared.console import progress_bar_only
from agent_trainers.algorithms.shared.diagnostics import StopOnNonFinite
from agent_trainers.algorithms.shared.settings import ReportTo, device_args
from agent_trainers.policies.loader import Device
from agent_trainers.rollout.chat import ChatTokenizer, tokenize_chat

__all__ = ["OracleEpisode", "make_sft_config", "oracle_episodes", "run_sft", "tokenize_episode"]


class _Demonstrators(Protocol):
    """An env's demonstrators: its oracle, and (some envs) a flawed one; each returns the next action."""

    def oracle_action(self) -> str: ...

    def flawed_oracle_action(self) -> str: ...


@dataclass
class OracleEpisode:
    """One expert episode.

    Attributes:
        task_index: The task played.
        messages: The chat history (system, user, assistant, tool, ...).
        total_reward: Sum of the env rewards.
        metrics: ``info["metrics"]`` at the end (empty if it never answered).
    """

    task_index: int
    messages: list[dict[str, Any]]
    total_reward: float
    metrics: dict[str, float]


def oracle_episodes(
    env_id: str,
    task_indices: Sequence[int],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    require_success: bool = True,
    flawed_share: float = 0.0,
) -> list[OracleEpisode]:
    """Play each task with the env's oracle policy.

    Args:
        env_id: A registered env whose unwrapped env implements ``oracle_action()``.
        task_indices: Tasks to play.
        env_kwargs: Keyword arguments for ``gymnasium.make``.
        seed: Episode ``k`` is reset with ``seed + k``.
        require_success: Keep only episodes that end with an answer.
        flawed_share: Share of the episodes played by the env's flawed demonstrator
            (``env.unwrapped.flawed_oracle_action()``) instead of its oracle; episode ``k`` is flawed when
            a draw of ``random.Random(seed + k)`` falls below it, so the choice is the same on every run.

    Returns:
        The episodes, in task order.
    """
    if not 0.0 <= flawed_share <= 1.0:
        raise ValueError(f"flawed_share must lie in [0, 1], got {flawed_share}")
    env = gym.make(env_id, **dict(env_kwargs or {}))
    out = []
    try:
        if flawed_share > 0 and not callable(getattr(env.unwrapped, "flawed_oracle_action", None)):
            raise ValueError(f"{env_id} has no flawed demonstrator (flawed_oracle_action()); set flawed_share to 0")
        for k, index in enumerate(task_indices):
            _, info = env.reset(seed=seed + k, options={"task_index": int(index)})
            flawed = random.Random(seed + k).random() < flawed_share
            demonstrators = cast(_Demonstrators, env.unwrapped)  # a flawed one is checked for above
            act = demonstrators.flawed_oracle_action if flawed else demonstrators.oracle_action
            total, done, terminated = 0.0, False, False
            while not done:
                action = act()
                _, reward, terminated, truncated, info = env.step(action)
                total += float(reward)
                done = terminated or truncated
            if terminated or not require_success:
                messages = [_plain(m) for m in info["messages"]]
                out.append(OracleEpisode(int(index), messages, total, dict(info.get("metrics", {}))))
    finally:
        env.close()
    return out


def _plain(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as the rollout shows it: assistant turns are their raw text (no structured tool_calls)."""
    return {"role": message["role"], "content": message["content"]}


def tokenize_episode(messages: Sequence[Mapping[str, Any]], tokenizer: PreTrainedTokenizerBase) -> dict[str, list[int]]:
    """Token ids and assistant mask of a chat, laid out as a rollout would be.

    Returns:
        ``{"input_ids": [...], "assistant_masks": [...]}`` of equal length.

    Raises:
        TemplateDriftError: The tokenizer's template is not context-free.
    """
    row = tokenize_chat(ChatTokenizer(tokenizer), messages)
    return {"input_ids": row.input_ids, "assistant_masks": row.assistant_masks}


def run_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    episodes: Sequence[OracleEpisode],
    args: SFTConfig,
    *,
    print_logs: bool = True,
) -> AgentSFTTrainer:
    """Fine-tune ``model`` on the assistant tokens of ``episodes`` with TRL's SFTTrainer (:class:`AgentSFTTrainer`).

    Args:
        model: The policy (trained in place).
        tokenizer: Its tokenizer, carrying the ChatML tool template.
        episodes: Expert episodes from :func:`oracle_episodes`.
        args: TRL's ``SFTConfig`` (e.g. from :func:`~agent_trainers.algorithms.make_sft_config`).
        print_logs: Print each logged dict beside the progress bar, as transformers does; ``False`` keeps the
            bar alone (:func:`~agent_trainers.algorithms.shared.console.progress_bar_only`).

    Returns:
        The trainer, after ``train()``.

    Raises:
        ValueError: If there are no episodes.
        NonFiniteTrainingError: A step's loss or gradient norm was NaN or infinite (training stopped there).
    """
    from datasets import Dataset

    if not episodes:
        raise ValueError("run_sft needs at least one oracle episode (did every oracle episode fail?)")
    chat = ChatTokenizer(tokenizer)
    rows = []
    for e in episodes:
        row = tokenize_chat(chat, e.messages)
        rows.append({"input_ids": row.input_ids, "assistant_masks": row.assistant_masks})
    trainer = AgentSFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[StopOnNonFinite("sft")],
    )
    if not print_logs:
        progress_bar_only(trainer)
    trainer.train()
    return trainer


def make_sft_config(
    *,
    device: Device | str = Device.AUTO,
    bf16: bool | None = None,
    report_to: ReportTo | str = "none",
    **overrides: Any,
) -> SFTConfig:
    """An ``SFTConfig`` with the device, precision and logger rules of every trainer (override any field)."""
    defaults: dict[str, Any] = {"logging_steps": 1, "logging_nan_inf_filter": False, "save_strategy": "no"}
    return SFTConfig(**(defaults | device_args(device, bf16, report_to) | overrides))
