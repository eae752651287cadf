"""The evaluation methods of the paper's Table 3, each played through the env as ``gymnasium.make`` returns it.

=================  ==================================================================
method             what the model sees, and how the episode goes
=================  ==================================================================
``closed-book``    the question only (no tools, no documents); its reply is the answer
``naive-rag``      the env's own ``search`` tool is called once with the question (top-k
                   and corpus are the env's settings: ``corpus=``, ``top_k=``, ``retriever=``);
                   the model reads those passages and answers in one turn
``base-tool-call`` the env's prompt and tools, multi-turn, with the untrained instruct model
``agent``          the same, with a trained model (a folder, or any OpenAI-compatible server)
=================  ==================================================================

The two baselines answer in one turn: their reply (the text inside
``<answer>`` tags when it wrote them, else the whole reply) is handed to the
env as the final answer, so every method is scored by the env's own metrics.
Their questions are generated in batches (one ``generate`` call per batch of
prompts); the agent methods batch every live episode's turn in the rollout
engine. Episode ``i`` resets with ``seed + i`` under every method.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the environment ids)
from agent_gym.core.env import ToolEnv
from agent_trainers.evaluation.records import EpisodeRecord, TaskInfo, answer_scores, record_from_trajectory
from agent_trainers.policies.sampling import ChatPolicy, SamplingParams, TokenPolicy
from agent_trainers.rollout.chat import ChatTokenizer
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.engine import rollout
from agent_trainers.rollout.export import trajectory_to_dict
from agent_trainers.rollout.progress import RolloutProgress
from agent_trainers.rollout.types import Trajectory, TurnSpan

__all__ = [
    "CLOSED_BOOK_PROMPT",
    "NAIVE_RAG_PROMPT",
    "Method",
    "MethodSettings",
    "baseline_answer",
    "play",
]

CLOSED_BOOK_PROMPT = (
    "Answer the question from what you know. Reply with only the answer: the exact entity, date, number, "
    "or yes/no, with no explanation."
)
NAIVE_RAG_PROMPT = (
    "Answer the question using the documents below. Reply with only the answer: the exact entity, date, "
    "number, or yes/no, with no explanation."
)
_TAGS = re.compile(r"</?answer>")
_INSIDE = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)


class Method(StrEnum):
    """How a question is put to the model."""

    CLOSED_BOOK = "closed-book"
    """No tools, no documents: the model answers from its weights."""
    NAIVE_RAG = "naive-rag"
    """Top-k passages retrieved once with the question, then one answer turn."""
    BASE_TOOL_CALL = "base-tool-call"
    """The untrained instruct model with the env's tools (multi-turn)."""
    AGENT = "agent"
    """A trained agent with the env's tools (multi-turn)."""

    @property
    def multi_turn(self) -> bool:
        """The model plays the env's own episode (tools, several turns)."""
        return self in (Method.BASE_TOOL_CALL, Method.AGENT)


@dataclass(frozen=True)
class MethodSettings:
    """What every method needs besides the policy.

    Attributes:
        env_id: The registered env id.
        env_kwargs: ``gymnasium.make`` kwargs (data, corpus, retriever, ...).
        rollout: Turn and token limits, temperature (0: greedy).
        seed: Episode ``i`` resets with ``seed + i``.
        score_names: The env's answer score names (``em``, ``f1``, ...).
    """

    env_id: str
    env_kwargs: dict[str, Any]
    rollout: RolloutConfig
    seed: int
    score_names: tuple[str, ...] = field(default=())


OnRecord = Callable[[EpisodeRecord], None]


def _runs(indices: Sequence[int]) -> list[list[int]]:
    """Consecutive runs of increasing indices: ``[0, 1, 2, 5, 6]`` -> ``[[0, 1, 2], [5, 6]]``."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def play_agent(
    policy: Any,
    s: MethodSettings,
    tasks: Sequence[TaskInfo],
    on_record: OnRecord,
    progress: RolloutProgress | None = None,
) -> None:
    """Play the env's own multi-turn episodes with the rollout engine (batched per turn), advancing
    ``progress`` (when given) after every batched turn."""
    by_index = {t.index: t for t in tasks}
    for run in _runs([t.index for t in tasks]):  # seeds stay seed + index however the list was cut
        rollout(
            policy,
            s.env_id,
            task_indices=run,
            seed=s.seed + run[0],
            env_kwargs=dict(s.env_kwargs),
            config=s.rollout,
            on_episode_end=lambda t: on_record(record_from_trajectory(t, by_index[t.task_index], s.score_names)),
            progress=progress if progress is not None else False,
        )


def baseline_answer(reply: str) -> str:
    """The answer in a baseline's reply: inside its last ``<answer>`` tags if it wrote any, else the reply.

    Example:
        >>> baseline_answer("I think <answer>Paris</answer>"), baseline_answer("  Paris. ")
        ('Paris', 'Paris.')
    """
    inside = _INSIDE.findall(reply)
    text = inside[-1] if inside else reply
    return _TAGS.sub("", text).strip()


@dataclass
class _Question:
    """One baseline episode in flight (internal)."""

    info: TaskInfo
    env: gym.Env
    seed: int
    messages: list[dict[str, Any]]
    reward: float = 0.0
    evidence: tuple[int, int] = (0, 0)
    tool_message: str = ""


def _open(s: MethodSettings, info: TaskInfo, retrieve: bool) -> _Question:
    env = gym.make(s.env_id, **s.env_kwargs)
    seed = s.seed + info.index
    _obs, reset_info = env.reset(seed=seed, options={"task_index": info.index})
    user = next(m["content"] for m in reset_info["messages"] if m["role"] == "user")
    q = _Question(info, env, seed, [], evidence=(0, int(reset_info["evidence_total"])))
    if not retrieve:
        q.messages = [{"role": "system", "content": CLOSED_BOOK_PROMPT}, {"role": "user", "content": user}]
        return q
    names = [t.get("function", t).get("name") for t in reset_info["tools"]]
    if "search" not in names:
        env.close()
        raise ValueError(f"naive-rag needs an env with a `search` tool; {s.env_id} has {names}")
    call = cast(ToolEnv[Any], env.unwrapped).parser.format_call("search", {"query": info.question})
    _obs, reward, _term, _trunc, step = env.step(call)  # the harness's search, through the env's own tool
    q.reward = float(reward)
    q.evidence = (int(step["evidence_found"]), int(step["evidence_total"]))
    q.tool_message = "\n".join(str(c["content"]) for c in step["tool_calls"])
    documents = f"Documents:\n{q.tool_message}\n\n{user}"
    q.messages = [{"role": "system", "content": NAIVE_RAG_PROMPT}, {"role": "user", "content": documents}]
    return q


def _generate(policy: Any, conversations: list[list[dict[str, Any]]], params: SamplingParams) -> list[dict[str, Any]]:
    """One reply per conversation: ``{"text", "prompt_ids", "ids", "logprobs"}`` (ids empty for chat backends)."""
    if isinstance(policy, TokenPolicy):
        chat = ChatTokenizer(policy.tokenizer)
        prompts = [chat.prompt_ids(c) for c in conversations]
        gens = policy.generate(prompts, params)
        return [
            {"text": chat.split_turn(g.token_ids)[0], "prompt_ids": p, "ids": g.token_ids, "logprobs": g.logprobs}
            for p, g in zip(prompts, gens, strict=True)
        ]
    if isinstance(policy, ChatPolicy):
        gens = policy.generate_chat(conversations, params)
        return [{"text": g.text or "", "prompt_ids": [], "ids": [], "logprobs": []} for g in gens]
    raise TypeError(f"policy must have generate(prompts, params) or generate_chat(...) (got {type(policy)})")


def _finish(q: _Question, reply: dict[str, Any], s: MethodSettings) -> EpisodeRecord:
    answer = baseline_answer(reply["text"])
    _obs, reward, terminated, truncated, step = q.env.step(
        cast(ToolEnv[Any], q.env.unwrapped).parser.format_answer(answer)
    )
    q.env.close()
    metrics = {k: float(v) for k, v in step.get("metrics", {}).items()}
    ids = list(reply["ids"])
    terms = {k: float(v) for k, v in step["reward_terms"].items()}
    turn = TurnSpan(0, len(ids), len(ids), float(reward), terms)
    turn.format_errors = [str(e) for e in step["format_errors"]]
    messages = [*q.messages, {"role": "assistant", "content": reply["text"]}]
    traj = Trajectory(s.env_id, dict(s.env_kwargs), q.seed, q.info.id, q.info.index, 0, list(reply["prompt_ids"]))
    traj.completion_ids, traj.loss_mask, traj.logprobs = ids, [1] * len(ids), [float(x) for x in reply["logprobs"]]
    traj.turns, traj.messages, traj.metrics = [turn], messages, metrics
    traj.stop_reason = str(step["stop_reason"] or ("answer" if terminated else "")) or "no_answer"
    traj.terminated, traj.truncated = bool(terminated), bool(truncated) and not terminated
    found = int(step["evidence_found"])
    traj.evidence_found, traj.evidence_total = found, q.evidence[1]
    return EpisodeRecord(
        task_index=q.info.index,
        task_id=q.info.id,
        question=q.info.question,
        gold=list(q.info.answers),
        question_type=q.info.question_type,
        answer=answer if traj.answered else None,
        answered=traj.answered,
        scores=answer_scores(metrics, traj.answered, s.score_names, q.info.id),
        model_turns=1,
        tool_calls=0,
        format_errors=None,
        evidence_recall=found / q.evidence[1] if q.evidence[1] else None,
        reward=q.reward + float(reward),
        stop_reason=traj.stop_reason,
        trajectory=trajectory_to_dict(traj),
    )


def play_baseline(
    policy: Any, s: MethodSettings, tasks: Sequence[TaskInfo], on_record: OnRecord, *, retrieve: bool
) -> None:
    """Closed-book (``retrieve=False``) or naive RAG: one batched answer turn per question."""
    questions = [_open(s, info, retrieve) for info in tasks]
    params = s.rollout.sampling(stop=["</answer>"])
    replies = _generate(policy, [q.messages for q in questions], params)
    for q, reply in zip(questions, replies, strict=True):
        on_record(_finish(q, reply, s))


def play(
    method: Method,
    policy: Any,
    s: MethodSettings,
    tasks: Sequence[TaskInfo],
    on_record: OnRecord,
    progress: RolloutProgress | None = None,
) -> None:
    """Evaluate ``tasks`` with ``method``; ``on_record`` gets each question's record as soon as it is done;
    a multi-turn method advances ``progress`` after every batched turn."""
    if method.multi_turn:
        play_agent(policy, s, tasks, on_record, progress)
    else:
        play_baseline(policy, s, tasks, on_record, retrieve=method is Method.NAIVE_RAG)
