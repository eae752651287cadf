"""``agent-r1 demo``: the HotpotQA job (the main job, ``scripts/run.sh``, is the learning recipe: docs/learning.md).

SmolLM2-135M-Instruct on CPU, multi-hop QA (``AgentR1/HotpotQA-v0``):

1. cold-start SFT on oracle trajectories of the training questions;
2. GRPO with turn-level advantages (train reward per step is printed);
3. on the same held-aside questions: closed-book, naive RAG and the base
   model with tools (base tool call) against the agent after SFT and after
   RL, each with bootstrap 95% intervals, and one plain line on what SFT and
   RL each changed (paired comparisons on the same questions);
4. a self-contained HTML page of the final agent's episodes.

Real data when ``../shared/data`` is present (train: the 100 official
HotpotQA train questions; eval: the first questions of dev distractor sample
a), else the embedded sample (train split / 8 held-aside test questions).
The settings are read from :data:`DEMO_CONFIG`, a file of the package
(``configs/demo.yaml`` in a checkout links to it), so a pip install runs it too.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import resource
import time
from pathlib import Path
from typing import Any

import yaml

from agent_gym.core.files import write_atomic
from agent_trainers.pipeline.config import TrainConfig, config_from_dict, load_config, set_dotted

__all__ = [
    "DEMO_CONFIG",
    "DEMO_SETTINGS",
    "QUICK_OVERRIDES",
    "SHARED_PREFIX",
    "demo_settings",
    "resolve_data",
    "run_demo",
]

SHARED_PREFIX = "../shared/data/"
"""Data paths of the demo start with this; they resolve against ``$AGENT_R1_SHARED_DATA``, the working
directory, or the repository root (in that order)."""

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
"""The demo's settings file: ``agent_trainers/configs/demo.yaml``, package data of the wheel."""

DEMO_SETTINGS: dict[str, Any] = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
"""The demo's configuration, as read from :data:`DEMO_CONFIG` (copy it before changing it)."""

QUICK_OVERRIDES: dict[str, Any] = {
    "sft": {"episodes": 4, "epochs": 1.0},
    "rl": {"steps": 1, "num_generations": 2, "prompts_per_step": 1, "save_steps": 1},
    "grpo": {"micro_batch": 2},
    "eval": {"tasks": 4, "every": 0},
}
"""``--quick``: a smoke run of a few minutes."""

ROWS = ("closed-book", "naive-rag", "before", "after_sft", "final")
"""The demo table's rows: the folders under ``<output_dir>/eval``, in order."""


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def _shared_file(path: str) -> Path | None:
    rest = path.removeprefix(SHARED_PREFIX)
    roots = [Path(os.environ["AGENT_R1_SHARED_DATA"])] if os.environ.get("AGENT_R1_SHARED_DATA") else []
    roots += [Path.cwd() / SHARED_PREFIX, Path(__file__).resolve().parents[2] / SHARED_PREFIX]
    return next(((root / rest).resolve() for root in roots if (root / rest).exists()), None)


def resolve_data(settings: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Point ``../shared/data/...`` paths at the files, or fall back to the embedded sample.

    Returns:
        The settings to run and a line saying which data they use.
    """
    env = settings["env"]
    paths = {k: env[k].get("data_path") for k in ("train_kwargs", "eval_kwargs")}
    shared = {k: p for k, p in paths.items() if isinstance(p, str) and p.startswith(SHARED_PREFIX)}
    if not shared:
        return settings, "data: as configured"
    found = {k: _shared_file(p) for k, p in shared.items()}
    if all(found.values()):
        out = _merge(settings, {"env": {k: {"data_path": str(f)} for k, f in found.items()}})
        return out, "data: " + ", ".join(f"{k.removesuffix('_kwargs')} {f}" for k, f in found.items())
    embedded = {"train_kwargs": {"split": "train"}, "eval_kwargs": {"split": "test"}}
    out = copy.deepcopy(settings)
    for k, extra in embedded.items():
        out["env"][k] = {**{a: b for a, b in env[k].items() if a != "data_path"}, **extra}
    missing = next(p for k, p in shared.items() if found[k] is None)
    return out, f"data: {missing} not found; using the embedded HotpotQA sample (train split / test split)"


def _baselines(config: TrainConfig, resume: bool) -> None:
    """Closed-book and naive RAG with the base model, on the held-aside questions of the stage evaluations."""
    from agent_trainers.evaluation import EvalSpec, Method, run_eval
    from agent_trainers.pipeline.stages import EVAL_SEED
    from agent_trainers.policies import TransformersPolicy, load_model

    model, tok = load_model(config.model.name, device=config.device, seed=config.seed)
    model.eval()
    from agent_trainers.policies.device import bf16_enabled

    bf16 = bf16_enabled(config.device, config.bf16)
    policy = TransformersPolicy(model, tok, batch_size=config.eval.batch_size, seed=config.seed, bf16=bf16)
    rollout = dataclasses.replace(config.rollout, temperature=config.eval.temperature)
    for method in (Method.CLOSED_BOOK, Method.NAIVE_RAG):
        spec = EvalSpec(
            config.env.id,
            method,
            model=config.model.name,
            env_kwargs=dict(config.env.eval_kwargs),
            limit=config.eval.tasks,
            start=config.eval.first_task,
            seed=EVAL_SEED,
            rollout=rollout,
            label={Method.CLOSED_BOOK: "closed-book", Method.NAIVE_RAG: "naive RAG"}[method],
            chunk_size=config.eval.batch_size,
        )
        run_eval(spec, policy, Path(config.output_dir) / "eval" / str(method), resume=resume)


def _report(config: TrainConfig) -> list[str]:
    """Print the table and what SFT and RL changed; write ``eval/table.md`` and ``view.html``. Returns the lines."""
    from rich.console import Console
    from rich.table import Table

    from agent_trainers.evaluation.compare import change_statement, comparison_markdown, comparison_rows, load_run
    from agent_trainers.evaluation.viewer import write_viewer
    from agent_trainers.pipeline.plots import read_jsonl

    out = Path(config.output_dir)
    runs = {name: load_run(out / "eval" / name) for name in ROWS if (out / "eval" / name / "summary.json").is_file()}
    rows = comparison_rows(list(runs.values()))
    table = Table(title=f"{config.env.id}: held-aside questions, mean [bootstrap 95% interval]")
    for col in rows[0]:
        table.add_column(col, justify="left" if col == "method" else "right")
    for row in rows[1:]:
        table.add_row(*row)
    Console(width=200).print(table)
    lines = []
    if "after_sft" in runs and "before" in runs:
        lines.append(change_statement("SFT", runs["after_sft"], runs["before"]))
    if "final" in runs and ("after_sft" in runs or "before" in runs):
        base = runs.get("after_sft") or runs["before"]
        lines.append(change_statement(f"RL ({config.rl.steps} {config.algorithm} steps)", runs["final"], base))
    steps = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("stage") == "rl" and "reward" in r]
    if steps:
        lines.append("RL train reward per step: " + ", ".join(f"{r['step']}: {r['reward']:.3f}" for r in steps))
    times = [r["step_time"] for r in steps if "step_time" in r]
    if times:
        lines.append(
            f"RL step wall time: mean {sum(times) / len(times):.1f} s/step over {len(times)} steps "
            f"(min {min(times):.1f}, max {max(times):.1f})"
        )
    for line in lines:
        print(line)
    text = comparison_markdown(list(runs.values())) + "\n" + "\n".join(f"- {line}" for line in lines) + "\n"
    write_atomic(out / "eval" / "table.md", text)
    if "final" in runs:
        from agent_trainers.policies import load_tokenizer

        page = write_viewer(runs["final"].folder / "episodes.jsonl", out / "view.html", load_tokenizer(out / "final"))
        print(f"viewer: {page}")
    return lines


def demo_settings(
    config_path: str | None = None,
    output_dir: str | None = None,
    quick: bool = False,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The main job's settings: :data:`DEMO_SETTINGS` (or a config file), then ``--quick``, ``--output-dir``
    and ``--set`` overrides (dotted keys, e.g. ``{"threads": 1}``), in that order. A new dict each call."""
    settings = load_config(config_path).to_dict() if config_path is not None else copy.deepcopy(DEMO_SETTINGS)
    if quick:
        settings = _merge(settings, QUICK_OVERRIDES)
    if output_dir is not None:
        settings = _merge(settings, {"output_dir": output_dir})
    for dotted, value in (overrides or {}).items():
        set_dotted(settings, dotted, value)
    return settings


def run_demo(
    config_path: str | None = None,
    output_dir: str | None = None,
    quick: bool = False,
    resume: bool = False,
    overrides: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> int:
    """Run the main job: train, evaluate every method on the same held-aside questions, print the table.

    Args:
        config_path: A config file to use instead of :data:`DEMO_SETTINGS`.
        output_dir: Overrides the config's ``output_dir``.
        quick: Apply :data:`QUICK_OVERRIDES`.
        resume: Continue an interrupted run (training and the baseline evaluations).
        overrides: Dotted keys to set last (``agent-r1 demo --set threads=1``).
        overwrite: Clear another run's outputs from the output folder first (without it, or ``resume``, a folder
            holding another run is refused).

    Returns:
        The process exit status (0).
    """
    from agent_trainers.pipeline.train import run_training

    start, cpu_start = time.perf_counter(), time.process_time()
    settings = demo_settings(config_path, output_dir, quick, overrides)
    settings, data_line = resolve_data(settings)
    print(data_line)
    config = config_from_dict(copy.deepcopy(settings))
    run_training(config, resume=resume, overwrite=overwrite)
    trained = time.perf_counter() - start
    _baselines(config, resume)
    _report(config)
    total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    print(
        f"total time {total / 60:.1f} min (training and its evaluations {trained / 60:.1f} min); "
        f"this process used {cpu / 60:.1f} min of CPU, peak memory {peak_mb:,.0f} MB; "
        f"load average {load} on {os.cpu_count()} cores"
    )
    print(f"metrics: {Path(config.output_dir) / 'metrics.jsonl'}; tables: {Path(config.output_dir) / 'eval'}")
    return 0
