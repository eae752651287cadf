"""One GRPO step on equal work: our ``rollout_func`` path vs TRL's own ``environment_factory`` tool loop.

Both paths train the same checkpoint on the same env with TRL's ``GRPOTrainer``,
one task per step, a group of ``G`` rollouts, and the same token caps:

* at most ``max_turns`` model turns per episode (TRL: ``max_tool_calling_iterations
  = max_turns - 1`` tool rounds after its first generation);
* at most ``max_new_tokens_per_turn`` tokens per model turn (TRL:
  ``generation_kwargs={"max_new_tokens": ...}``, used by every generate call of its loop);
* at most ``completion_budget`` completion tokens (model + tool tokens) per
  episode (TRL: ``max_completion_length``; ours: ``max_total_tokens`` = the task's
  own prompt length + the budget).

and the same episode rule: TRL's loop ends an episode at the first reply without
a tool call, so our env runs with ``on_no_action="end"`` (``--on-no-action
feedback`` plays our default instead: an error observation and another turn).
What each model then writes can still differ (TRL's turns end only at
``<|im_end|>``, ours also at ``</tool_call>`` / ``</answer>``), so tokens per
step and tokens/s are reported next to seconds per step.

* ours  - :class:`agent_trainers.algorithms.AgentGRPOTrainer` with
  :class:`~agent_trainers.algorithms.EnvRolloutFunc` (batched generation, per-episode
  KV caches across turns, concurrent env steps), forward/backward in micro-batches
  of ``micro_batch`` rollouts (default the whole group; TRL's own gradient accumulation:
  ``per_device_train_batch_size = micro_batch``, ``gradient_accumulation_steps =
  steps_per_generation = G / micro_batch``), log-probs by
  :func:`~agent_trainers.algorithms.shared.logprobs.shared_prompt_token_logprobs` (the
  group's prompt run once, each completion up to its last model token, the LM head
  on model tokens only; TRL scores with its fused, chunked LM head, so
  full-vocabulary logits are never built in either path);
* TRL's - ``GRPOTrainer(environment_factory=make_environment_factory(env_id))``
  with each layout in ``reference_micro_batches`` (0: TRL's default, the whole
  group in one forward).

Both paths take their ``GRPOConfig`` from ``make_grpo_config`` (``beta = 0``,
gradient checkpointing off); ``--gradient-checkpointing 1`` turns checkpointing
on for both, as TRL's own ``GRPOConfig`` default has it.

Each (checkpoint, path) runs in its own subprocess, so peak RSS (``ru_maxrss``)
is its own; "step extra" is the peak minus the RSS once the trainer is built.
Seconds per step: wall time from ``on_step_begin`` to ``on_step_end`` (optimizer
included), mean over ``steps`` steps after ``warmup``. The breakdown times, per
step: generation (``TransformersPolicy.generate`` / TRL's ``_generate_single_turn``),
env (resets and steps; ours: the thread-pooled turn, TRL: its serial tool calls),
scoring (``_calculate_rewards``), forward (``compute_loss``), backward, and the
rest (tokenization, padding, advantages, optimizer).

Checkpoints: ``runs/demo/sft`` is the main job's SFT stage (``bash scripts/run.sh``,
or ``agent-r1 train --config configs/demo.yaml --set rl.enabled=false``).

Run:
    .venv/bin/python benchmarks/grpo_step.py --models runs/demo/sft,smollm2 --steps 2
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tyro

PARTS = ("generation", "env", "scoring", "forward", "backward", "other")


@dataclass
class Args:
    """Benchmark settings (every field is a command-line flag)."""

    models: str = "runs/demo/sft,smollm2"
    """Comma-separated checkpoints, each benchmarked on both paths: ``smollm2``, ``tiny-random`` or a folder."""
    env_id: str = "AgentR1/HotpotQA-v0"
    """Environment played by both paths."""
    num_generations: int = 4
    """Rollouts per step (one task, a group of G)."""
    max_turns: int = 2
    """Model turns per episode, both paths."""
    max_new_tokens_per_turn: int = 64
    """Tokens per model turn, both paths."""
    completion_budget: int = 512
    """Completion tokens (model + tool tokens) per episode, both paths."""
    on_no_action: str = "end"
    """Ours: the env's ``on_no_action`` (``end``: TRL's rule, a reply without a tool call or answer ends it)."""
    micro_batch: int = 4
    """Ours: rollouts per forward/backward (must divide ``num_generations``; a whole group runs its prompt once)."""
    reference_micro_batches: str = "0,1"
    """TRL's layouts to measure: 0 is TRL's default (the group in one forward); others as ``micro_batch``."""
    gradient_checkpointing: int = 0
    """1: both paths train with gradient checkpointing (TRL's ``GRPOConfig`` default; ours keeps the shared prompt)."""
    warmup: int = 1
    """Steps run before measuring."""
    steps: int = 2
    """Measured steps."""
    seed: int = 0
    """Seed of every run."""
    threads: int = 1
    """torch CPU threads per run (1: faster than 2 on this project's busy 2-core machine)."""
    model: str = ""
    """Internal: the checkpoint of a single run."""
    path: str = ""
    """Internal: run only this path (``ours`` or ``trl``) and print JSON."""
    layout: int = 0
    """Internal: the micro-batch of a single run (0: the whole group)."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


# ------------------------------------------------------------------ one run (subprocess)
class Timers:
    """Wall time of wrapped callables, per key, reset at each step."""

    def __init__(self) -> None:
        self.acc: dict[str, float] = defaultdict(float)
        self.counts: dict[str, float] = defaultdict(float)

    def wrap(self, owner: Any, attr: str, key: str) -> None:
        """Replace ``owner.attr`` by a timed version adding its wall time to ``key``."""
        fn = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.acc[key] += time.perf_counter() - start

        setattr(owner, attr, timed)

    def take(self) -> tuple[dict[str, float], dict[str, float]]:
        acc, counts = dict(self.acc), dict(self.counts)
        self.acc.clear()
        self.counts.clear()
        return acc, counts


def _count_tokens(timers: Timers, trainer_cls: Any) -> None:
    """Count the tokens of each generation batch as the trainer lays it out."""
    original = trainer_cls._generate_and_score_completions

    def counted(self: Any, inputs: Any) -> Any:
        out = original(self, inputs)
        completion = out["completion_mask"]
        model_mask = completion * out["tool_mask"] if out.get("tool_mask") is not None else completion
        timers.counts["model_tokens"] += float(model_mask.sum())
        timers.counts["completion_tokens"] += float(completion.sum())
        timers.counts["trained_tokens"] += float(completion.sum() + out["prompt_mask"].sum())
        timers.counts["padded_tokens"] += float(out["prompt_ids"].numel() + out["completion_ids"].numel())
        return out

    trainer_cls._generate_and_score_completions = counted


def _instrument(timers: Timers, path: str) -> None:
    from trl import GRPOTrainer

    from agent_trainers.algorithms.trl_adapter.env_factory import TRLEnvironment
    from agent_trainers.algorithms.trl_adapter.grpo import AgentGRPOTrainer
    from agent_trainers.policies import TransformersPolicy
    from agent_trainers.rollout import engine

    timers.wrap(GRPOTrainer, "_calculate_rewards", "scoring")
    timers.wrap(GRPOTrainer, "compute_loss", "forward")
    if path == "ours":
        timers.wrap(TransformersPolicy, "generate", "generation")
        timers.wrap(engine, "_step_all", "env")
        timers.wrap(engine, "_make_episodes", "env")
        _count_tokens(timers, AgentGRPOTrainer)
    else:
        timers.wrap(GRPOTrainer, "_generate_single_turn", "generation")
        timers.wrap(TRLEnvironment, "_act", "env")
        timers.wrap(TRLEnvironment, "reset", "env")
        _count_tokens(timers, GRPOTrainer)


def _step_recorder(timers: Timers) -> Any:
    from transformers import TrainerCallback

    class StepRecorder(TrainerCallback):
        """Wall time and breakdown of each optimizer step."""

        def __init__(self) -> None:
            self.records: list[dict[str, float]] = []
            self.start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            timers.take()
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            wall = time.perf_counter() - self.start
            acc, counts = timers.take()
            record = {"wall": wall, **{k: acc.get(k, 0.0) for k in PARTS[:-1]}, **counts}
            record["other"] = wall - sum(acc.get(k, 0.0) for k in PARTS[:-1])
            self.records.append(record)

    return StepRecorder()


def _batch_args(args: Args) -> dict[str, Any]:
    """TRL's batch layout: the whole group in one forward (``layout`` 0) or micro-batches of ``layout`` rollouts."""
    from agent_trainers.algorithms.trl_adapter.trl_args import micro_batch_args

    g = args.num_generations
    return {**micro_batch_args(g, args.layout or g), "num_generations": g}


def _budgeted_rollout_func(rows: list[dict[str, Any]], tok: Any, args: Args) -> Any:
    """Our rollout function with ``max_total_tokens`` = each task's prompt length + the completion budget."""
    from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc
    from agent_trainers.rollout import ChatTokenizer, RolloutConfig

    chat = ChatTokenizer(tok)
    prompt_len = {(r["env_id"], r["task_index"]): len(chat.prompt_ids(r["prompt"])) for r in rows}

    class Budgeted(EnvRolloutFunc):
        def play(self, tasks: Any, group: int, policy: Any, config: Any) -> Any:
            out = []
            for task in tasks:  # one group per task
                cfg = replace(config, max_total_tokens=prompt_len[task] + args.completion_budget)
                out += super().play([task], group, policy, cfg)
            return out

    config = RolloutConfig(max_turns=args.max_turns, max_new_tokens_per_turn=args.max_new_tokens_per_turn)
    return Budgeted(rows, env_kwargs={"on_no_action": args.on_no_action}, config=config, seed=args.seed)


def _trainer(args: Args, model: Any, tok: Any) -> Any:
    from datasets import Dataset
    from trl import GRPOTrainer

    from agent_trainers.algorithms.shared.sections import GRPOSettings
    from agent_trainers.algorithms.trl_adapter.env_factory import make_environment_factory, trl_dataset_rows
    from agent_trainers.algorithms.trl_adapter.grpo import AgentGRPOTrainer
    from agent_trainers.algorithms.trl_adapter.rollout_func import env_reward
    from agent_trainers.algorithms.trl_adapter.trl_args import make_grpo_config
    from agent_trainers.rollout.training import task_rows

    tasks = list(range(args.warmup + args.steps))
    cfg = make_grpo_config(
        output_dir=tempfile.mkdtemp(prefix="grpo_bench_"),
        max_steps=len(tasks),
        seed=args.seed,
        shuffle_dataset=False,
        max_completion_length=args.completion_budget,
        gradient_checkpointing=bool(args.gradient_checkpointing),
        **_batch_args(args),
        **({} if args.path == "ours" else {"max_tool_calling_iterations": args.max_turns - 1}),
        **({} if args.path == "ours" else {"generation_kwargs": {"max_new_tokens": args.max_new_tokens_per_turn}}),
    )
    if args.path == "ours":
        rows = task_rows(args.env_id, tasks)
        return AgentGRPOTrainer(
            model=model,
            processing_class=tok,
            reward_funcs=[env_reward],
            args=cfg,
            train_dataset=Dataset.from_list(rows),
            rollout_func=_budgeted_rollout_func(rows, tok, args),
            settings=GRPOSettings(advantage="turn"),
        )
    return GRPOTrainer(
        model=model,
        processing_class=tok,
        args=cfg,
        train_dataset=Dataset.from_list(trl_dataset_rows(tasks, env_id=args.env_id)),
        environment_factory=make_environment_factory(args.env_id, seed=args.seed),
    )


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _run_path(args: Args) -> dict[str, Any]:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from agent_trainers.policies import load_model
    from agent_trainers.policies.threads import apply_threads

    apply_threads(args.threads)
    timers = Timers()
    _instrument(timers, args.path)
    model, tok = load_model(args.model, device="cpu")
    trainer = _trainer(args, model, tok)
    timers.wrap(trainer.accelerator, "backward", "backward")
    recorder = _step_recorder(timers)
    trainer.add_callback(recorder)
    built_mb = _rss_mb()
    trainer.train()
    measured = recorder.records[args.warmup :]
    keys = measured[0].keys() if measured else ()
    mean = {k: statistics.fmean(r.get(k, 0.0) for r in measured) for k in keys}
    return {"mean": mean, "steps": measured, "peak_rss_mb": _rss_mb(), "built_rss_mb": built_mb}


# ------------------------------------------------------------------ driver
def _subprocess(args: Args, model: str, path: str, layout: int) -> dict[str, Any]:
    argv = [sys.executable, __file__]
    for f in dataclasses.fields(Args):
        argv += [f"--{f.name.replace('_', '-')}", str(getattr(args, f.name))]
    argv += ["--model", model, "--path", path, "--layout", str(layout)]
    print(f"  running {path} (micro batch {layout or args.num_generations}) on {model} ...", flush=True)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not lines:
        sys.exit(f"{path} run on {model} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    print("  " + _row(f"{path} ({layout or args.num_generations})", result), flush=True)
    return result


def _row(label: str, res: dict[str, Any]) -> str:
    m = res["mean"]
    parts = " ".join(f"{m.get(k, 0.0):7.1f}" for k in PARTS)
    gen_rate = m.get("model_tokens", 0.0) / max(1e-9, m.get("generation", 0.0))
    step_rate = m.get("trained_tokens", 0.0) / m["wall"]
    extra = res["peak_rss_mb"] - res["built_rss_mb"]
    return (
        f"{label:30s} {m['wall']:7.1f} {parts} | {m.get('model_tokens', 0):6.0f} {gen_rate:7.1f} "
        f"{m.get('trained_tokens', 0):7.0f} {m.get('padded_tokens', 0):7.0f} {step_rate:7.1f} | "
        f"{res['peak_rss_mb']:7.0f} {extra:7.0f}"
    )


def _report(args: Args, model: str, ours: dict[str, Any], refs: dict[int, dict[str, Any]]) -> None:
    g = args.num_generations
    print(
        f"\nGRPO step on {model}: {args.env_id}, G={g}, <= {args.max_turns} model turns of <= "
        f"{args.max_new_tokens_per_turn} tokens, <= {args.completion_budget} completion tokens per episode "
        f"(both paths); gradient checkpointing {'on' if args.gradient_checkpointing else 'off'} (both paths); "
        f"ours on_no_action={args.on_no_action}"
    )
    head = " ".join(f"{k[:7]:>7s}" for k in PARTS)
    print(
        f"{'path (micro batch)':30s} {'s/step':>7s} {head} | {'model':>6s} {'gen':>7s} {'trained':>7s} "
        f"{'padded':>7s} {'trained':>7s} | {'peak':>7s} {'step'}"
    )
    print(
        f"{'':30s} {'':7s} {'(seconds per step)':^55s} | {'tok':>6s} {'tok/s':>7s} {'tok':>7s} {'tok':>7s} "
        f"{'tok/s':>7s} | {'RSS MB':>7s} {'extra MB'}"
    )
    print(_row(f"ours ({args.micro_batch})", ours))
    for layout, res in refs.items():
        print(_row(f"TRL environment_factory ({layout or g})", res))
    o = ours["mean"]
    for layout, res in refs.items():
        r = res["mean"]
        per_tok = (o["wall"] / max(1.0, o.get("model_tokens", 0))) / (r["wall"] / max(1.0, r.get("model_tokens", 0)))
        extra = (ours["peak_rss_mb"] - ours["built_rss_mb"]) / max(1.0, res["peak_rss_mb"] - res["built_rss_mb"])
        print(
            f"ratio ours / TRL ({layout or g}): time {o['wall'] / r['wall']:.2f}x (goal <= 0.5x), "
            f"peak memory {ours['peak_rss_mb'] / res['peak_rss_mb']:.2f}x (goal <= 0.5x), "
            f"step extra memory {extra:.2f}x, "
            f"time per generated model token {per_tok:.2f}x"
        )


def main() -> None:
    args = parse_args()
    if args.path:
        print("RESULT " + json.dumps(_run_path(args)))
        return
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for model in models:
        if model not in ("smollm2", "tiny-random") and not Path(model).is_dir():
            sys.exit(f"checkpoint {model!r} not found (runs/demo/sft comes from `bash scripts/run.sh`)")
    layouts = [int(x) for x in args.reference_micro_batches.split(",") if x.strip()]
    for model in models:
        ours = _subprocess(args, model, "ours", args.micro_batch)
        refs = {layout: _subprocess(args, model, "trl", layout) for layout in layouts}
        _report(args, model, ours, refs)


if __name__ == "__main__":
    main()
