"""Token-exactness checks for trajectories (product code: run it on your rollouts).

The engine assembles chats incrementally (:mod:`agent_trainers.rollout.chat`);
this module is the slow reference that re-renders whole chats with the same
primitives. :func:`check_trajectory` verifies, for one
:class:`~agent_trainers.rollout.Trajectory`:

1. shapes: ``loss_mask`` and ``logprobs`` have one entry per completion token;
   turns tile the completion (model span, then env span, turn after turn);
   the mask is 1 exactly on model spans; model log-probs are finite and <= 0,
   env log-probs are 0.0;
2. model text: per turn, ``decode(completion_ids[start:end])`` equals the
   assistant message the env recorded - after removing a final end-of-turn id
   (``<|im_end|>`` / EOS) which the model emitted but which is not content;
3. env text: ``prompt_ids`` decode to the rendered system+user prompt, and each
   turn's env tokens are exactly ``tokenize(render(messages up to the next
   turn) minus render(messages before the turn, with generation prompt) minus
   the model's text)``; the last turn's env span may also be empty (a token
   budget dropped it) or lack the generation prompt (the episode ended); env
   content holding a special token's text is spelt out as text, so env tokens
   hold exactly the control tokens the template puts there (a passage with
   ``<|im_end|><|im_start|>assistant`` in it cannot forge a turn);
4. prefix stability: the template renders ``messages[:k]`` as a prefix of
   ``messages[:k+1]`` for every k.

Any failure raises :class:`TrajectoryError` naming the turn, the token range
and the first differing text.
"""

from __future__ import annotations

import math
from typing import Any

from transformers import PreTrainedTokenizerBase

from agent_trainers.rollout.chat import ChatTokenizer
from agent_trainers.rollout.types import Trajectory

__all__ = ["TrajectoryError", "check_prefix_stable", "check_trajectory"]


class TrajectoryError(ValueError):
    """A trajectory is not token-exact; the message says where and how."""


def _diff(expected: str, got: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), min(len(expected), len(got)))
    return f"first difference at character {at}: expected {expected[at : at + 60]!r}, got {got[at : at + 60]!r}"


def check_prefix_stable(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], tools: list[dict] | None = None
) -> None:
    """Raise :class:`TrajectoryError` unless ``render(messages[:k])`` prefixes ``render(messages[:k+1])``."""
    chat = ChatTokenizer(tokenizer, check=False)
    prev = ""
    for k in range(1, len(messages) + 1):
        cur = chat.render(messages[:k], generation_prompt=False, tools=tools)
        if not cur.startswith(prev):
            raise TrajectoryError(f"template is not prefix-stable at message {k - 1}: {_diff(prev, cur[: len(prev)])}")
        prev = cur


def _check_shapes(traj: Trajectory) -> None:
    n = len(traj.completion_ids)
    if len(traj.loss_mask) != n or len(traj.logprobs) != n:
        raise TrajectoryError(
            f"{n} completion ids but {len(traj.loss_mask)} loss-mask and {len(traj.logprobs)} log-prob entries"
        )
    pos = 0
    for k, t in enumerate(traj.turns):
        if not (t.start == pos and t.start <= t.end <= t.env_end):
            raise TrajectoryError(f"turn {k} span [{t.start}, {t.end}, {t.env_end}) does not continue at token {pos}")
        pos = t.env_end
    if pos != n:
        raise TrajectoryError(f"turns cover {pos} of {n} completion tokens")
    for k, t in enumerate(traj.turns):
        for i in range(t.start, t.env_end):
            model = i < t.end
            if traj.loss_mask[i] != int(model):
                kind = "model" if model else "env"
                raise TrajectoryError(f"turn {k}: token {i} is a {kind} token but loss_mask is {traj.loss_mask[i]}")
            lp = traj.logprobs[i]
            if model and not (math.isfinite(lp) and lp <= 1e-4):
                raise TrajectoryError(f"turn {k}: model token {i} has log-prob {lp} (must be finite and <= 0)")
            if not model and lp != 0.0:
                raise TrajectoryError(f"turn {k}: env token {i} has log-prob {lp} (must be 0.0)")


def _check_ids(chat: ChatTokenizer, where: str, ids: list[int], want: list[int], text: str) -> None:
    """``ids`` (which decode to ``text``) must be ``want``; say so first when env text became control tokens."""
    if ids == want:
        return
    got_control, want_control = chat.count_control(ids), chat.count_control(want)
    if got_control > want_control:
        raise TrajectoryError(
            f"{where} hold {got_control} control tokens where the chat template puts {want_control}: "
            "env text (a tool result or question) was tokenized into special tokens, which can forge a chat turn"
        )
    raise TrajectoryError(f"{where} are not the tokenization of {text!r}")


def _assistant_positions(traj: Trajectory) -> list[int]:
    pos = [i for i, m in enumerate(traj.messages) if m.get("role") == "assistant"]
    if len(pos) != len(traj.turns):
        raise TrajectoryError(f"{len(traj.turns)} model turns but {len(pos)} assistant messages")
    return pos


def _check_turn(traj: Trajectory, chat: ChatTokenizer, k: int, pos: list[int]) -> None:
    t, msgs, tools = traj.turns[k], traj.messages, traj.tools
    model_ids = traj.completion_ids[t.start : t.end]
    content, _ = chat.split_turn(model_ids)
    recorded = msgs[pos[k]].get("content") or ""
    if content != recorded:
        raise TrajectoryError(
            f"turn {k}: model tokens [{t.start}, {t.end}) decode differently from the recorded assistant message; "
            + _diff(recorded, content)
        )
    before = chat.render(msgs[: pos[k]], generation_prompt=True, tools=tools) + chat.decode(model_ids)
    last = k == len(traj.turns) - 1
    upto = msgs if last else msgs[: pos[k + 1]]
    options = [chat.render(upto, generation_prompt=not last, tools=tools)]
    if last:
        options.append(chat.render(upto, generation_prompt=True, tools=tools))
    env_ids = traj.completion_ids[t.end : t.env_end]
    got = chat.decode(env_ids)
    expected = []
    for full in options:
        if not full.startswith(before):
            raise TrajectoryError(f"turn {k}: template re-renders the model's turn differently; {_diff(before, full)}")
        expected.append(full[len(before) :])
    if last and not env_ids:
        return
    if got in expected:
        gen_prompt = not last if got == expected[0] else True
        new = msgs[pos[k] + 1 : len(upto)]
        want = chat.env_ids(chat.decode(model_ids), content, new, generation_prompt=gen_prompt, tools=tools)
        _check_ids(chat, f"turn {k}: env tokens [{t.end}, {t.env_end})", env_ids, want, got)
        return
    raise TrajectoryError(
        f"turn {k}: env tokens [{t.end}, {t.env_end}) do not match the env text; {_diff(expected[0], got)}"
    )


def check_trajectory(traj: Trajectory, tokenizer: PreTrainedTokenizerBase) -> None:
    """Check that ``traj`` is token-exact (see the module docstring).

    Args:
        traj: A trajectory from :func:`agent_trainers.rollout.rollout` or
            :func:`agent_trainers.rollout.load_jsonl`.
        tokenizer: The tokenizer (with the chat template) the rollout used.

    Raises:
        TrajectoryError: The first violated property, precisely located.
    """
    if not traj.prompt_ids and not traj.completion_ids:  # text mode (eval through a chat endpoint)
        if traj.loss_mask or traj.logprobs:
            raise TrajectoryError("text-mode trajectory (no token ids) must have empty loss_mask and logprobs")
        _assistant_positions(traj)
        return
    chat = ChatTokenizer(tokenizer, check=False)
    _check_shapes(traj)
    pos = _assistant_positions(traj)
    first = pos[0] if pos else len(traj.messages)
    prompt = chat.render(traj.messages[:first], generation_prompt=True, tools=traj.tools)
    if chat.decode(traj.prompt_ids) != prompt:
        raise TrajectoryError(
            "prompt_ids do not decode to the rendered prompt; " + _diff(prompt, chat.decode(traj.prompt_ids))
        )
    want = chat.prompt_ids(traj.messages[:first], traj.tools)
    _check_ids(chat, "prompt_ids", list(traj.prompt_ids), want, prompt)
    for k in range(len(traj.turns)):
        _check_turn(traj, chat, k, pos)
    check_prefix_stable(tokenizer, traj.messages, traj.tools)
