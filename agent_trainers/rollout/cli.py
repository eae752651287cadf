"""Command line of the rollout engine: ``python -m agent_trainers.rollout`` / ``agent-r1 rollout``.

Plays episodes with a local model (loaded by :func:`agent_trainers.policies.load_model`),
checks every trajectory token-exact and writes them as JSONL. The rollout
options (``--max-turns``, ``--temperature``, ...) are made from the fields of
:class:`~agent_trainers.rollout.RolloutConfig`, so they are the same settings as
the ``rollout:`` section of an ``agent-r1`` config. Example (real SmolLM2 on
real HotpotQA data, CPU)::

    python -m agent_trainers.rollout --env AgentR1/HotpotQA-v0 \\
        --data-path ../shared/data/hotpotqa/dev_distractor_sample_a_300.jsonl --episodes 4 --out runs/rollout.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import yaml

from agent_trainers.errors import one_line
from agent_trainers.policies.threads import apply_threads, parse_threads
from agent_trainers.rollout.config import RolloutConfig

if TYPE_CHECKING:
    from pydantic._internal._dataclasses import PydanticDataclass

__all__ = ["add_rollout_options", "build_parser", "rollout_config_from_args", "run_rollout_cli"]


def add_rollout_options(parser: argparse.ArgumentParser, defaults: RolloutConfig | None = None) -> None:
    """Add one ``--option`` per :class:`RolloutConfig` field: its name, its docstring as help, its default.

    Values are read as YAML scalars (``--max-turns null``, ``--render-tools true``) and checked by
    :class:`RolloutConfig` itself in :func:`rollout_config_from_args`, so the options are exactly the
    ``rollout:`` section of an ``agent-r1`` config.

    Args:
        parser: The parser to add the option group to.
        defaults: The defaults shown and used (e.g. ``RolloutConfig(temperature=0.0)`` for greedy
            evaluation); the type's own defaults when None.
    """
    group = parser.add_argument_group("rollout settings (the `rollout:` section of an agent-r1 config)")
    defaults = RolloutConfig() if defaults is None else defaults
    # pydantic's decorator adds __pydantic_fields__, which type checkers do not see on the class
    fields = cast("type[PydanticDataclass]", RolloutConfig).__pydantic_fields__
    for f in dataclasses.fields(RolloutConfig):
        info = fields[f.name]
        default = getattr(defaults, f.name)
        group.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f"rollout_{f.name}",
            default=None,
            metavar=type(default).__name__.upper() if default is not None else "N",
            help=f"{info.description} (default: {default})",
        )


def rollout_config_from_args(ns: argparse.Namespace, defaults: RolloutConfig | None = None) -> RolloutConfig:
    """The :class:`RolloutConfig` of the options :func:`add_rollout_options` added: ``defaults`` with the
    options given replaced (pydantic checks them; a bad value raises ``ValueError`` naming the field)."""
    given: dict[str, Any] = {}
    for f in dataclasses.fields(RolloutConfig):
        raw = getattr(ns, f"rollout_{f.name}")
        if raw is not None:
            given[f.name] = yaml.safe_load(raw)
    return RolloutConfig(**given) if defaults is None else dataclasses.replace(defaults, **given)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the rollout CLI."""
    p = argparse.ArgumentParser(
        prog="agent-r1 rollout",
        description="Play episodes with a local model, check them token-exact, save them as JSONL.",
    )
    p.add_argument("--env", required=True, help="environment id, e.g. AgentR1/HotpotQA-v0")
    p.add_argument("--data-path", help="passed to the env as data_path= (e.g. a HotpotQA jsonl file)")
    p.add_argument("--env-kwargs", default="{}", help="more env kwargs as a JSON object")
    p.add_argument("--episodes", type=int, default=4, help="trajectories to play (tasks x group size)")
    p.add_argument("--group-size", type=int, default=1, help="rollouts per task")
    p.add_argument("--first-task", type=int, default=0, help="index of the first task")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="smollm2", help="'smollm2', 'tiny-random', a checkpoint folder or a HF id")
    p.add_argument("--device", default="auto", help="auto (a GPU when present), cpu or cuda")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per generate call")
    p.add_argument(
        "--threads",
        type=parse_threads,
        default=1,
        help="torch CPU threads (0: torch's default; auto: the cores idle at start). Default 1: on a busy 2-core "
        "machine torch's default of 2 threads made a SmolLM2 decode step ~100x slower (8 s vs 0.08 s)",
    )
    p.add_argument(
        "--no-kv-reuse",
        action="store_true",
        help="re-run the model over each whole prompt every turn instead of keeping each episode's KV cache",
    )
    p.add_argument("--out", default="runs/rollout.jsonl")
    add_rollout_options(p)
    return p


def _check_all(trajs: Sequence[Any], tok: Any) -> int:
    from agent_trainers.rollout.checker import TrajectoryError, check_trajectory

    failures = 0
    for i, t in enumerate(trajs):
        try:
            check_trajectory(t, tok)
            verdict = "token-exact"
        except TrajectoryError as exc:
            failures, verdict = failures + 1, f"CHECK FAILED: {exc}"
        print(
            f"[{i}] task {t.task_id} seed {t.seed}: {len(t.turns)} turns, stop={t.stop_reason}, "
            f"reward={t.total_reward:.3f}, {sum(t.loss_mask)} model / {len(t.completion_ids)} completion tokens, "
            f"metrics={t.metrics}, {verdict}"
        )
    return failures


def run_rollout_cli(args: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m agent_trainers.rollout`` / ``agent-r1 rollout``.

    Plays the episodes with a progress bar (episode-turns, model tokens/s, ETA), runs
    :func:`~agent_trainers.rollout.check_trajectory` on each, writes them with
    :func:`~agent_trainers.rollout.save_jsonl` and prints a summary.

    Returns:
        0; 1 when a trajectory fails the check; 2 on bad arguments (one-line message).
    """
    ns = build_parser().parse_args(args)
    try:
        config = rollout_config_from_args(ns)
        env_kwargs = json.loads(ns.env_kwargs) | ({"data_path": ns.data_path} if ns.data_path else {})
        if ns.episodes < 1 or ns.group_size < 1 or ns.episodes % ns.group_size:
            raise ValueError(
                f"--episodes must be a positive multiple of --group-size (got {ns.episodes}, {ns.group_size})"
            )
        _check_env_id(ns.env)
        return _run(ns, config, env_kwargs)
    except (ValueError, FileNotFoundError) as err:
        print(f"agent-r1 rollout: error: {one_line(err)}", file=sys.stderr)
        return 2


def _check_env_id(env_id: str) -> None:
    """Resolve ``--env`` before a model loads: a ``module:`` id imports its module (from the working directory
    too, as ``agent-r1 train`` and ``eval`` do); an unknown id or a module that does not import is one line.

    Raises:
        ValueError: Naming the id and what went wrong (Gymnasium's "did you mean", the missing module).
    """
    import gymnasium as gym

    import agent_gym  # noqa: F401 - registers the built-in ids
    from agent_gym.registration import import_env_module

    try:
        gym.spec(import_env_module(env_id))
    except (gym.error.Error, ImportError) as exc:
        raise ValueError(f"--env {env_id!r}: {' '.join(str(exc).split())}") from None


def _run(ns: argparse.Namespace, config: RolloutConfig, env_kwargs: dict[str, Any]) -> int:
    from agent_trainers.policies import TransformersPolicy, load_model
    from agent_trainers.rollout.engine import rollout
    from agent_trainers.rollout.export import save_jsonl

    apply_threads(ns.threads)
    model, tok = load_model(ns.model, device=ns.device, seed=ns.seed)
    tasks = list(range(ns.first_task, ns.first_task + ns.episodes // ns.group_size))
    start = time.perf_counter()
    policy = TransformersPolicy(model, tok, batch_size=ns.batch_size, seed=ns.seed, reuse_kv_cache=not ns.no_kv_reuse)
    trajs = rollout(
        policy,
        ns.env,
        task_indices=tasks,
        group_size=ns.group_size,
        seed=ns.seed,
        env_kwargs=env_kwargs,
        config=config,
        progress=True,
    )
    wall = time.perf_counter() - start
    failures = _check_all(trajs, tok)
    path = save_jsonl(trajs, ns.out)
    model_tokens = sum(sum(t.loss_mask) for t in trajs)
    print(
        f"{len(trajs)} trajectories, {model_tokens} model tokens in {wall:.1f} s "
        f"({model_tokens / wall:.1f} model tokens/s); {failures} failed the check; {path}"
    )
    return 1 if failures else 0
