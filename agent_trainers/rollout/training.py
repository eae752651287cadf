"""The training tasks and their episodes: rows, the order steps play them in, :class:`EnvRollouts`, metrics.

* :func:`task_rows` makes one row per task: the env's own opening
  messages as ``prompt`` plus ``task_index`` and ``env_id`` (the rows of every trainer);
* :func:`task_schedule` - which tasks each RL step plays: slices of one seeded permutation per epoch (the same
  for every trainer, so a run resumed in any epoch plays what one that never stopped plays);
* :class:`EnvRollouts` plays ``G`` episodes of each of a step's tasks with
  :func:`agent_trainers.rollout.rollout`, with seeds derived from its call
  counter, which is saved in each checkpoint and restored on resume
  (:meth:`EnvRollouts.state_dict`). PPO calls :meth:`EnvRollouts.play_step`;
  the TRL adapter's :class:`~agent_trainers.algorithms.trl_adapter.rollout_func.EnvRolloutFunc`
  is one, called by TRL as its ``rollout_func``;
* :func:`episode_metrics` - the means over episodes that every trainer logs.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the environments)
from agent_trainers.policies.sampling import TokenPolicy
from agent_trainers.policies.transformers_policy import TransformersPolicy
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.engine import rollout
from agent_trainers.rollout.types import Trajectory

__all__ = [
    "EnvRollouts",
    "Task",
    "check_episodes",
    "episode_metrics",
    "prompt_key",
    "returns_tie",
    "settings_differences",
    "task_rows",
    "task_schedule",
]

Task = tuple[str, int]
"""A task: ``(env_id, task_index)``."""

_T = TypeVar("_T")


REFILL_FACTOR = 2
"""Dynamic sampling plays this many fresh groups per tied slot in each refill round."""


def returns_tie(group: Sequence[Trajectory]) -> bool:
    """Whether every rollout of a group earned the same return (within 1e-9): no signal for a group baseline."""
    returns = [t.total_reward for t in group]
    return max(returns) - min(returns) <= 1e-9


def prompt_key(prompt: Any) -> str:
    """A canonical string of a prompt (messages or text), used to find its task."""
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def task_rows(
    env_id: str, task_indices: Sequence[int], *, env_kwargs: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One dataset row per task: the env's opening messages and the task index.

    Returns:
        Rows with ``prompt`` (system and user messages), ``task_index`` and ``env_id``.
    """
    env = gym.make(env_id, **dict(env_kwargs or {}))
    rows = []
    try:
        for index in task_indices:
            _, info = env.reset(seed=0, options={"task_index": int(index)})
            prompt = [{"role": m["role"], "content": m["content"]} for m in info["messages"]]
            rows.append({"prompt": prompt, "task_index": int(index), "env_id": env_id})
    finally:
        env.close()
    return rows


def task_schedule(tasks: Sequence[_T], per_step: int, steps: int, seed: int) -> list[list[_T]]:
    """The tasks (or any items) of each of ``steps`` RL steps: consecutive slices of ``per_step`` of a seeded
    permutation of ``tasks``, a new permutation each epoch; an epoch's last slice shorter than ``per_step`` is
    left out.

    Epoch ``e``'s permutation is ``torch.randperm(len(tasks))`` from a generator seeded with
    ``seed * 1_000_003 + e``, so any step's tasks follow from ``(seed, step)`` alone (TRL's ``RepeatSampler``
    reseeded per epoch draws the same order).

    Raises:
        ValueError: Fewer tasks than ``per_step``.

    Example:
        >>> [len(s) for s in task_schedule([("E", i) for i in range(5)], 2, 3, seed=0)]
        [2, 2, 2]
    """
    import torch

    if per_step < 1 or len(tasks) < per_step:
        raise ValueError(f"a step plays {per_step} tasks, more than the {len(tasks)} training tasks")
    out: list[list[_T]] = []
    epoch = 0
    while len(out) < steps:
        order = torch.randperm(len(tasks), generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
        picks = [tasks[int(i)] for i in order]
        out += [picks[s : s + per_step] for s in range(0, len(picks) - per_step + 1, per_step)]
        epoch += 1
    return out[:steps]


def settings_differences(saved: Mapping[str, Any], current: Mapping[str, Any], limit: int = 4) -> list[str]:
    """The settings that differ between two nested settings dicts, as ``"rl.learning_rate: 0.01 then, 0.001 now"``
    (at most ``limit``, then how many more). A key only one side has is no difference (a setting added or removed
    by another version of this package).

    Example:
        >>> settings_differences({"rl": {"lr": 0.1, "steps": 3}}, {"rl": {"lr": 0.2, "steps": 3, "new": 1}})
        ['rl.lr: 0.1 then, 0.2 now']
    """
    out: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for key in sorted(set(a) & set(b), key=str):
                walk(a[key], b[key], f"{where}.{key}" if where else str(key))
        elif a != b:
            out.append(f"{where}: {a!r} then, {b!r} now")

    walk(saved, current, "")
    return out[:limit] + ([f"and {len(out) - limit} more"] if len(out) > limit else [])


def check_episodes(trajectories: Sequence[Trajectory], max_env_errors: float = 0.5) -> None:
    """Stop training on an env that fails: every step reward must be finite, and at most ``max_env_errors`` of
    the episodes may end in an env error (the env's ``step`` raised: ``stop_reason`` ``env_error``).

    Raises:
        EnvFailureError: One line naming the env and the reward term that was not finite (or the step reward, when
            no term was), or the share of env errors and the first error.
    """
    from agent_trainers.errors import EnvFailureError

    for t in trajectories:
        for k, turn in enumerate(t.turns):
            if math.isfinite(turn.reward):
                continue
            bad = [f"{name} = {value}" for name, value in turn.reward_terms.items() if not math.isfinite(value)]
            what = f"reward term {', '.join(bad)}" if bad else f"step reward {turn.reward} (its terms are finite)"
            raise EnvFailureError(
                f"{t.env_id}: {what} at turn {k + 1} of task {t.task_index} (seed {t.seed}); a reward must be a "
                "finite number"
            )
    failed = [t for t in trajectories if t.stop_reason == "env_error"]
    if trajectories and len(failed) > max_env_errors * len(trajectories):
        raise EnvFailureError(
            f"{failed[0].env_id}: {len(failed)} of {len(trajectories)} episodes ended in an env error (its step "
            f"raised; more than {max_env_errors:.0%} stops training: rl.max_env_errors), e.g. task "
            f"{failed[0].task_index}: {failed[0].error}"
        )


def episode_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Means over episodes of what they report; a metric no episode reports is omitted (never 0.0).

    Keys: ``rollout/turns`` (model turns, over every episode), ``rollout/answered``
    (fraction that ended with an answer), ``rollout/stop/<reason>`` fractions,
    ``rollout/evidence`` (share of the gold evidence found, over the episodes whose task has some),
    ``rollout/format_errors`` (share of model turns the env refused as malformed), ``groups/tied``
    (share of groups whose returns all tie: no signal for a group baseline), ``groups/reward_std``
    (the mean spread of returns within a group), ``tokens/model`` and ``tokens/total`` (model tokens,
    and prompt plus completion tokens, summed), and ``episode/<name>`` for each env metric averaged over
    the episodes that report it (envs report metrics only when an episode ends by itself). Where the env names
    its tasks' types (``Trajectory.task_type``), ``by_type/<type>/reward`` (mean return), ``.../answered``,
    ``.../turns``, ``.../groups`` (how many) and ``.../tied`` (their share whose returns all tie) for each type
    present: which kinds of problem carry a learning signal. Under dynamic sampling these are the kept groups;
    ``dynamic_sampling/by_type/<type>/groups_played`` and ``.../tied`` count every group played.
    """
    if not trajectories:
        return {}
    n = len(trajectories)
    out = {"rollout/turns": sum(len(t.turns) for t in trajectories) / n}
    out["rollout/answered"] = sum(t.answered for t in trajectories) / n
    with_evidence = [t for t in trajectories if t.evidence_total > 0]
    if with_evidence:
        out["rollout/evidence"] = sum(t.evidence_found / t.evidence_total for t in with_evidence) / len(with_evidence)
    turns = [turn for t in trajectories for turn in t.turns]
    if turns:
        out["rollout/format_errors"] = sum(bool(turn.format_errors) for turn in turns) / len(turns)
    groups = _groups(trajectories)
    out["groups/tied"] = _tied_share(groups)
    out["groups/reward_std"] = sum(statistics.pstdev(t.total_reward for t in g) for g in groups) / len(groups)
    out["tokens/model"] = float(sum(turn.end - turn.start for turn in turns))
    out["tokens/total"] = float(sum(len(t.prompt_ids) + len(t.completion_ids) for t in trajectories))
    for name in sorted({k for t in trajectories for k in t.metrics}):
        values = [float(t.metrics[name]) for t in trajectories if name in t.metrics]
        finite = [v for v in values if math.isfinite(v)]
        if finite:
            out[f"episode/{name}"] = sum(finite) / len(finite)
    for reason in sorted({t.stop_reason for t in trajectories}):
        out[f"rollout/stop/{reason}"] = sum(t.stop_reason == reason for t in trajectories) / n
    for kind, members in _by_type(trajectories).items():
        kind_groups = _groups(members)
        out[f"by_type/{kind}/reward"] = sum(t.total_reward for t in members) / len(members)
        out[f"by_type/{kind}/answered"] = sum(t.answered for t in members) / len(members)
        out[f"by_type/{kind}/turns"] = sum(len(t.turns) for t in members) / len(members)
        out[f"by_type/{kind}/groups"] = float(len(kind_groups))
        out[f"by_type/{kind}/tied"] = _tied_share(kind_groups)
    return out


def _groups(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """The groups (the episodes of one task in one call), in order of first appearance."""
    groups: dict[tuple[str, int, int], list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault((t.env_id, t.group_id, t.task_index), []).append(t)
    return list(groups.values())


def _tied_share(groups: Sequence[Sequence[Trajectory]]) -> float:
    """The share of ``groups`` whose returns all tie (:func:`returns_tie`)."""
    return sum(returns_tie(g) for g in groups) / len(groups)


def _type_name(t: Trajectory) -> str | None:
    """The episode's task type as a metric name level (``/``, which separates levels, becomes ``_``)."""
    return None if t.task_type is None else t.task_type.replace("/", "_")


def _by_type(trajectories: Sequence[Trajectory]) -> dict[str, list[Trajectory]]:
    """The episodes of each task type, by :func:`_type_name`; episodes whose env names no type are in none."""
    out: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        if (kind := _type_name(t)) is not None:
            out.setdefault(kind, []).append(t)
    return dict(sorted(out.items()))


@dataclass
class EnvRollouts:
    """Plays the training tasks' episodes with the rollout engine, seeded per call (every trainer's rollouts).

    Attributes:
        rows: The training (and eval) dataset rows: the tasks dynamic sampling draws from, and a map from prompts to
            tasks for callers that pass only prompts.
        env_kwargs: Keyword arguments for ``gymnasium.make``.
        config: Rollout settings (the TRL adapter takes ``temperature`` and ``top_p`` from
            the trainer at each call: TRL's loss uses the same temperature).
        seed: Base seed; call ``k`` plays with seeds derived from ``seed`` and ``k``.
        batch_size: Generation batch size of the default policy. The pipeline decodes a step's episodes
            together (``rl.num_generations * rl.prompts_per_step``): on a CPU a decoding step of 32 sequences
            costs about twice one of 8, so four batches of 8 take twice as long as one of 32.
        loss_mask: Keep env tokens out of the policy loss (``env_mask``); False
            puts them in (the paper's ablation).
        policy_factory: Builds the policy from ``(model, tokenizer, seed)``; default
            :class:`~agent_trainers.policies.TransformersPolicy` on the trainer's
            model; pass one for a scripted policy in tests.
        dynamic_sampling: Drop groups whose returns all tie and refill their slots with fresh tasks
            (:meth:`refill`; ``rl.dynamic_sampling``).
        dynamic_sampling_tries: The most refill rounds per call.
        bf16: Generate under bf16 autocast (the default policy), as the trainer trains with ``bf16``.
        calls: Rollout calls made so far (saved in checkpoints).
        run_settings: The settings of the run these rollouts train (the pipeline's config, less what may change on
            a resume), saved in each checkpoint with the call counter: a checkpoint of other settings is refused
            on resume, naming what differs. Empty: nothing is compared.
        max_env_errors: The largest share of a call's episodes that may end in an env error (the env's ``step``
            raised); more stops training with :class:`~agent_trainers.errors.EnvFailureError` naming the env and
            the error (:func:`check_episodes`, which also refuses a reward that is not finite).
        last_stats: What the last call's dynamic sampling did (``dynamic_sampling/*``; empty when off), with
            ``asynchronous`` the call's ``async/*`` figures, and (set by the trainers) ``time/rollout``: the
            seconds the trainer spent in the call (generating, or waiting for the generation worker).
        asynchronous: With ``rl.async_rollouts``, the
            :class:`~agent_trainers.rollout.async_worker.AsyncRollouts` whose worker plays the
            training calls ahead of time (its pending results go into each checkpoint); None: played in the trainer.
    """

    rows: Sequence[Mapping[str, Any]]
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    config: RolloutConfig = field(default_factory=RolloutConfig)
    seed: int = 0
    batch_size: int = 8
    loss_mask: bool = True
    policy_factory: Callable[[Any, Any, int], TokenPolicy] | None = None
    dynamic_sampling: bool = False
    dynamic_sampling_tries: int = 3
    bf16: bool = False
    calls: int = 0
    run_settings: Mapping[str, Any] = field(default_factory=dict)
    max_env_errors: float = 0.5
    last_stats: dict[str, float] = field(default_factory=dict, repr=False)
    asynchronous: Any = field(default=None, repr=False, compare=False)
    _index: dict[str, list[Task]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for row in self.rows:
            task = (str(row["env_id"]), int(row["task_index"]))
            tasks = self._index.setdefault(prompt_key(row["prompt"]), [])
            if task not in tasks:
                tasks.append(task)

    @property
    def tasks(self) -> list[Task]:
        """Every task of :attr:`rows`, once each, in row order (tasks may share a prompt: a bandit's arms, a
        question asked twice)."""
        return [t for tasks in self._index.values() for t in tasks]

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must keep for an exact resume (and the run's settings, to check it on resume)."""
        return {"calls": self.calls, "seed": self.seed, "settings": dict(self.run_settings)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            ValueError: The checkpoint was made with another seed, or other :attr:`run_settings` (the message
                names what differs).
        """
        if int(state["seed"]) != self.seed:
            raise ValueError(f"checkpoint was made with rollout seed {state['seed']}, this run uses {self.seed}")
        saved = state.get("settings") or {}
        if saved and self.run_settings:
            differences = settings_differences(saved, self.run_settings)
            if differences:
                raise ValueError(
                    f"the checkpoint belongs to a run with other settings: {'; '.join(differences)} (--resume "
                    "continues a run with its own settings; --overwrite starts this one afresh)"
                )
        self.calls = int(state["calls"])

    def _policy(self, model: Any, tokenizer: Any, trainer: Any = None) -> TokenPolicy:
        if self.policy_factory is not None:
            return self.policy_factory(model, tokenizer, self.seed + self.calls)
        return TransformersPolicy(
            model,
            tokenizer,
            batch_size=self.batch_size,
            seed=self.seed + self.calls,
            bf16=self.bf16,
            decoder=self.config.decoder,
        )

    def play(self, tasks: list[Task], group: int, policy: TokenPolicy, config: RolloutConfig) -> list[Trajectory]:
        """Play ``group`` episodes of each ``(env_id, task_index)``, in the order given (refilled when
        ``dynamic_sampling`` is on)."""
        trajectories = self._play_tasks(tasks, group, policy, config, self.seed + 100_003 * self.calls)
        self.last_stats = {}
        if self.dynamic_sampling:
            trajectories = self.refill(tasks, trajectories, group, policy, config)
        return trajectories

    def refill(
        self,
        tasks: list[Task],
        trajectories: list[Trajectory],
        group: int,
        policy: TokenPolicy,
        config: RolloutConfig,
    ) -> list[Trajectory]:
        """DAPO's dynamic sampling: replace each group whose returns all tie by a fresh task's group that varies.

        Fresh tasks are drawn without replacement from the rows not played in this call (seeded by the
        call counter, so a resumed run draws the same); each round plays :data:`REFILL_FACTOR` fresh groups
        per tied slot in one batched call (a batch of several groups costs far less than as many calls), for
        at most ``dynamic_sampling_tries`` rounds; a slot still tied after them keeps its first group, and
        groups beyond the tied slots are left out. The kept groups are renumbered to their slots. Sets
        :attr:`last_stats`: ``groups_played``, ``dropped`` (share of the groups played that were left out:
        tied, or surplus), ``rounds``, ``kept_tied`` (tied groups left in the batch) and, for each task type
        named, ``by_type/<type>/groups_played`` and ``by_type/<type>/tied``: how many of that type's groups were
        played, and the share of them whose returns tied.
        """
        slots = [trajectories[k * group : (k + 1) * group] for k in range(len(tasks))]
        every_group = list(slots)
        tied = [k for k, g in enumerate(slots) if returns_tie(g)]
        played, dropped, rounds = len(slots), 0, 0
        used = set(tasks)
        pool = [t for t in self.tasks if t not in used]
        draw = random.Random(f"{self.seed}/{self.calls}/dynamic-sampling")
        while tied and rounds < self.dynamic_sampling_tries and pool:
            rounds += 1
            wanted = REFILL_FACTOR * len(tied)  # one batched call of several groups beats several calls
            fresh = [pool.pop(draw.randrange(len(pool))) for _ in range(min(wanted, len(pool)))]
            seed = self.seed + 100_003 * self.calls + 7_919 * rounds
            new = self._play_tasks(fresh, group, policy, config, seed)
            played += len(fresh)
            for k in range(len(fresh)):
                candidate = new[k * group : (k + 1) * group]
                every_group.append(candidate)
                if returns_tie(candidate) or not tied:  # tied, or every slot is filled already
                    dropped += 1
                    continue
                dropped += 1  # the tied group this one replaces
                slots[tied.pop(0)] = candidate
        out = []
        for k, g in enumerate(slots):
            for t in g:
                t.group_id = k
            out += g
        self.last_stats = {
            "dynamic_sampling/groups_played": float(played),
            "dynamic_sampling/dropped": dropped / played,
            "dynamic_sampling/rounds": float(rounds),
            "dynamic_sampling/kept_tied": float(len(tied)),
        }
        kinds: dict[str, list[bool]] = {}
        for g in every_group:
            if (kind := _type_name(g[0])) is not None:
                kinds.setdefault(kind, []).append(returns_tie(g))
        for kind, ties in sorted(kinds.items()):
            self.last_stats[f"dynamic_sampling/by_type/{kind}/groups_played"] = float(len(ties))
            self.last_stats[f"dynamic_sampling/by_type/{kind}/tied"] = sum(ties) / len(ties)
        return out

    def _play_tasks(
        self, tasks: list[Task], group: int, policy: TokenPolicy, config: RolloutConfig, seed: int
    ) -> list[Trajectory]:
        """Play ``group`` episodes of each task, in the order given; an env that fails stops here
        (:func:`check_episodes`), whether the call is a step's first or a dynamic-sampling refill."""
        trajectories: list[Trajectory] = []
        for env_id in dict.fromkeys(e for e, _ in tasks):
            indices = [i for e, i in tasks if e == env_id]
            trajectories += rollout(
                policy,
                env_id,
                task_indices=indices,
                group_size=group,
                seed=seed,
                env_kwargs=dict(self.env_kwargs),
                config=config,
            )
        if len({e for e, _ in tasks}) > 1:  # restore the prompt order across envs
            order = {t: k for k, t in enumerate(tasks)}
            trajectories.sort(key=lambda t: order[(t.env_id, t.task_index)])
        check_episodes(trajectories, self.max_env_errors)
        return trajectories

    def play_step(self, tasks: list[Task], group: int, model: Any, tokenizer: Any) -> list[Trajectory]:
        """One rollout call outside TRL (PPO): play ``tasks`` with ``model`` (in eval mode), then count the call."""
        trajectories = self.play(tasks, group, self._policy(model, tokenizer), self.config)
        self.calls += 1
        return trajectories
