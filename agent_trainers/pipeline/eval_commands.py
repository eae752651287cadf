"""``agent-r1 eval``, ``report``, ``view`` and ``serve-retrieval``: their options and what they run.

::

    agent-r1 eval --env AgentR1/HotpotQA-v0 --data-path ../shared/data/hotpotqa/dev_distractor_sample_a_300.jsonl \\
        --method naive-rag --limit 100 --out runs/eval/hotpotqa-naive-rag       # run it again to continue it
    agent-r1 eval --method agent --model runs/demo/final ...                  # or --base-url http://host:8000/v1
    agent-r1 report runs/eval/* --out runs/table3                             # Table 3: Markdown + CSV
    agent-r1 view runs/eval/hotpotqa-naive-rag/episodes.jsonl -o view.html   # self-contained HTML viewer
    agent-r1 serve-retrieval --corpus wiki.jsonl --backend bm25 --port 8000   # Search-R1 /retrieve server
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_trainers.errors import one_line

if TYPE_CHECKING:
    from agent_trainers.pipeline.config import TrainConfig
    from agent_trainers.rollout import RolloutConfig

__all__ = [
    "DATA_KWARGS",
    "EvalSettings",
    "add_parsers",
    "build_eval_parser",
    "env_kwargs_from_args",
    "eval_rollout",
    "eval_settings",
    "run_config",
    "run_eval_cli",
    "run_eval_command",
    "run_report_command",
    "run_view_command",
]


EVAL_HELP = "evaluate a method (closed-book, naive-rag, base-tool-call, agent) on a dataset"


def build_eval_parser() -> argparse.ArgumentParser:
    """The parser of ``agent-r1 eval``. Its rollout options are :class:`~agent_trainers.rollout.RolloutConfig`'s
    fields (:func:`~agent_trainers.rollout.cli.add_rollout_options`), with :func:`eval_rollout`'s defaults."""
    from agent_trainers.policies.threads import parse_threads
    from agent_trainers.rollout.cli import add_rollout_options

    ev = argparse.ArgumentParser(prog="agent-r1 eval", description=EVAL_HELP + ".")
    ev.add_argument(
        "--settings-from",
        metavar="RUN",
        help="evaluate as training run RUN evaluated (its folder or config.yaml): its env, env kwargs, rollout "
        "limits, batch size, seeds and precision; options given here win (see `Evaluating a trained agent elsewhere`)",
    )
    ev.add_argument("--env", help="environment id (see `agent-r1 envs`; default AgentR1/HotpotQA-v0 or RUN's)")
    ev.add_argument("--data-path", help="a data file or folder (the env's data_path=; a folder must not mix splits)")
    ev.add_argument("--data-files", help="with a folder --data-path: a glob choosing its files (one split)")
    ev.add_argument("--env-kwargs", default="{}", help="more gymnasium.make kwargs as a JSON object")
    ev.add_argument(
        "--split", default="auto", help="env split= ('auto': 'test' for the embedded sample, none with --data-path)"
    )
    methods = ["closed-book", "naive-rag", "base-tool-call", "agent"]
    ev.add_argument("--method", default="agent", choices=methods, help="(default agent)")
    ev.add_argument("--model", default="smollm2", help="'smollm2', 'tiny-random', a checkpoint folder or a HF id")
    ev.add_argument("--base-url", help="an OpenAI-compatible server (e.g. http://127.0.0.1:8000/v1) instead of --model")
    ev.add_argument("--api-model", help="with --base-url: the request's model name (default: --model)")
    ev.add_argument("--api-key-env", default="OPENAI_API_KEY", help="with --base-url: env variable holding the key")
    ev.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        help="with --base-url: total deadline of one completion, retries, headers and body included (default 60)",
    )
    ev.add_argument("--limit", "--tasks", type=int, default=None, help="evaluate the first N questions (default all)")
    ev.add_argument("--first-task", type=int, default=0, help="index of the first question evaluated (default 0)")
    ev.add_argument("--out", help="output folder (default runs/eval/<env>-<label>); running again continues it")
    ev.add_argument("--overwrite", action="store_true", help="start over instead of continuing --out")
    ev.add_argument("--label", help="row name in tables (default: the method, or 'agent (MODEL)')")
    ev.add_argument("--seed", type=int, help="the env's and the sampler's seed (default 0, or RUN's)")
    ev.add_argument("--device", default="auto", help="auto (a GPU when present), cpu or cuda")
    ev.add_argument("--bf16", action="store_true", help="generate in bf16 (as a model trained with bf16: true)")
    ev.add_argument(
        "--threads",
        type=parse_threads,
        default=1,
        help="torch CPU threads (0: torch's default; auto: the cores idle at start)",
    )
    ev.add_argument("--batch-size", type=int, help="prompts per generate call (default 8, or RUN's eval.batch_size)")
    ev.add_argument("--chunk-size", type=int, help="questions played together (default 16, or RUN's eval.batch_size)")
    add_rollout_options(ev, eval_rollout())
    return ev


def eval_rollout() -> RolloutConfig:
    """The rollout defaults of ``agent-r1 eval``: :class:`~agent_trainers.rollout.RolloutConfig`'s, but greedy
    (temperature 0, as the ``eval:`` section of a config defaults to)."""
    from agent_trainers.rollout import RolloutConfig

    return RolloutConfig(temperature=0.0)


def add_parsers(sub: Any) -> None:
    """Add the ``eval``, ``report``, ``view`` and ``serve-retrieval`` sub-commands to ``agent-r1``'s parser.

    ``eval`` is a stub here: ``agent-r1 eval`` runs :func:`run_eval_cli`, whose parser reads
    ``RolloutConfig`` (and so imports torch) only when that command runs.
    """
    sub.add_parser("eval", help=EVAL_HELP, add_help=False)
    rep = sub.add_parser("report", help="the paper's Table 3 from several `agent-r1 eval` folders")
    rep.add_argument("folders", nargs="+", help="evaluation folders (each with summary.json and episodes.jsonl)")
    rep.add_argument("--metric", default="em", help="em (default), f1, substring, answer_rate, ...")
    rep.add_argument("--in-domain", default="hotpotqa,2wikimultihopqa", help="datasets marked in-domain (comma list)")
    rep.add_argument("--out", help="folder for table3.md and table3.csv")
    view = sub.add_parser("view", help="a self-contained HTML viewer of a trajectory / episode JSONL file")
    view.add_argument("file", help="rollout JSONL or an evaluation's episodes.jsonl")
    view.add_argument("-o", "--out", help="the HTML file (default: FILE with .html)")
    view.add_argument("--tokenizer", default="smollm2", help="decodes token ids for the loss-mask view ('none': skip)")
    view.add_argument("--title", help="page title")
    sub.add_parser("serve-retrieval", help="serve a corpus over Search-R1's /retrieve API", add_help=False)


def _accepts(env_id: str, name: str) -> bool:
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    import agent_gym  # noqa: F401
    from agent_trainers.pipeline.env_settings import import_env_module

    try:
        spec = gym.spec(import_env_module(env_id))  # a ``module:Name-vN`` id imports its module first
    except (gym.error.Error, ImportError) as exc:  # an unknown namespace, name or version: one line, not a traceback
        raise ValueError(f"--env {env_id}: {exc}") from None
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    if not callable(creator):  # a vector-only spec (no entry point): nothing to inspect
        return name in spec.kwargs
    params = inspect.signature(creator).parameters
    return name in params or name in spec.kwargs


DEFAULT_ENV = "AgentR1/HotpotQA-v0"
DATA_KWARGS = ("data_path", "data_files", "split")
"""The env kwargs that choose the data: a run's are left out where ``--env`` names another env or
``--data-path`` / ``--data-files`` give other data."""


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """What ``agent-r1 eval`` runs with, its options and ``--settings-from RUN`` resolved (:func:`eval_settings`).

    Attributes:
        env: The environment id.
        env_kwargs: The ``gymnasium.make`` kwargs.
        rollout: The rollout settings.
        env_seed: The evaluation's env seed (``EvalSpec.seed``).
        policy_seed: The sampler's seed (and torch's).
        batch_size: Prompts per generate call.
        chunk_size: Questions played together.
        bf16: bf16 asked for (checked against the device when the model loads).
    """

    env: str
    env_kwargs: dict[str, Any]
    rollout: RolloutConfig
    env_seed: int
    policy_seed: int
    batch_size: int
    chunk_size: int
    bf16: bool


def run_config(run: str) -> TrainConfig:
    """The config of training run ``run``: its folder (the ``config.yaml`` that ``agent-r1 train`` writes there),
    a config file or a packaged config's name.

    Raises:
        FileNotFoundError: A folder without ``config.yaml``, or no such file or packaged config.
        ValueError: The config does not validate.
    """
    from agent_trainers.pipeline.config import load_config

    path = Path(run)
    if path.is_dir():
        if not (path / "config.yaml").is_file():
            raise FileNotFoundError(f"--settings-from {run}: no config.yaml there (agent-r1 train writes one)")
        path = path / "config.yaml"
    return load_config(path)


def eval_settings(args: argparse.Namespace) -> EvalSettings:
    """Resolve ``agent-r1 eval``'s options. Without ``--settings-from`` they are the options' own defaults. With
    ``--settings-from RUN`` the defaults are what RUN's own evaluations used
    (:func:`agent_trainers.pipeline.stages.evaluate_model`): its env and ``env.eval_kwargs`` (less
    :data:`DATA_KWARGS` where other data is named), its ``rollout:`` at ``eval.temperature``, ``eval.batch_size``,
    its seeds and its precision; every option given on the command line wins, ``--env-kwargs`` key by key.

    Raises:
        FileNotFoundError, ValueError: RUN has no valid config; ``--env-kwargs`` is not a JSON object.
    """
    from agent_trainers.pipeline.stages import EVAL_SEED
    from agent_trainers.rollout.cli import rollout_config_from_args

    run = None if args.settings_from is None else run_config(args.settings_from)
    env = args.env or (run.env.id if run is not None else DEFAULT_ENV)
    base: dict[str, Any] = {}
    rollout = eval_rollout()
    if run is not None:
        base = dict(run.env.eval_kwargs)
        if env != run.env.id or args.data_path or args.data_files:
            base = {k: v for k, v in base.items() if k not in DATA_KWARGS}
        rollout = dataclasses.replace(run.rollout, temperature=run.eval.temperature)

    def pick(given: Any, default: Any, from_run: Any) -> Any:
        return given if given is not None else (from_run if run is not None else default)

    return EvalSettings(
        env=env,
        env_kwargs=env_kwargs_from_args(args, base=base, env=env),
        rollout=rollout_config_from_args(args, rollout),
        env_seed=pick(args.seed, 0, EVAL_SEED),
        policy_seed=pick(args.seed, 0, run.seed if run else None),
        batch_size=pick(args.batch_size, 8, run.eval.batch_size if run else None),
        chunk_size=pick(args.chunk_size, 16, run.eval.batch_size if run else None),
        bf16=bool(args.bf16 or (run is not None and run.bf16)),
    )


def env_kwargs_from_args(
    args: argparse.Namespace, *, base: dict[str, Any] | None = None, env: str | None = None
) -> dict[str, Any]:
    """``gymnasium.make`` kwargs from ``--env-kwargs``, ``--data-path``, ``--data-files`` and ``--split``, on top
    of ``base`` (a run's, :func:`eval_settings`) for env ``env`` (default ``--env``, or the default env).

    Raises:
        ValueError: ``--env-kwargs`` is not a JSON object.
    """
    env = env or args.env or DEFAULT_ENV
    try:
        given = json.loads(args.env_kwargs)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--env-kwargs must be a JSON object ({exc})") from exc
    except RecursionError:  # json's decoder recurses once per nesting level
        raise ValueError("--env-kwargs is nested too deeply to read (env kwargs are a flat JSON object)") from None
    if not isinstance(given, dict):
        raise ValueError(f"--env-kwargs must be a JSON object (got {args.env_kwargs!r})")
    kwargs = {**(base or {}), **given}
    if args.data_path:
        kwargs["data_path"] = args.data_path
    if args.data_files:
        kwargs["data_files"] = args.data_files
    if args.split != "auto" and "split" not in given:  # --split beats a run's split, --env-kwargs beats --split
        kwargs["split"] = args.split
    elif "split" not in kwargs and "data_path" not in kwargs and _accepts(env, "split"):
        kwargs["split"] = "test"  # the embedded sample's held-aside part
    return {k: v for k, v in kwargs.items() if v != ""}


def _policy(args: argparse.Namespace, settings: EvalSettings) -> Any:
    if args.base_url:
        from agent_trainers.policies import OpenAIPolicy

        return OpenAIPolicy(
            args.base_url,
            args.api_model or args.model,
            api_key=os.environ.get(args.api_key_env),
            timeout_s=args.timeout_s,
        )
    from agent_trainers.pipeline.train import seed_everything
    from agent_trainers.policies import TransformersPolicy, load_model
    from agent_trainers.policies.threads import apply_threads

    seed_everything(settings.policy_seed)
    apply_threads(args.threads)
    from agent_trainers.policies.device import bf16_enabled

    bf16 = bf16_enabled(args.device, True) if settings.bf16 else False  # refused on a CPU without native bf16
    model, tok = load_model(args.model, device=args.device, seed=settings.policy_seed)
    model.eval()
    return TransformersPolicy(model, tok, batch_size=settings.batch_size, seed=settings.policy_seed, bf16=bf16)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower()


def run_eval_cli(argv: Sequence[str]) -> int:
    """``agent-r1 eval ARGS``: parse them and run :func:`run_eval_command`.

    Returns:
        0; 2 on bad arguments or settings (one line: ``agent-r1 eval: error: ...``).
    """
    from agent_trainers.policies.openai_policy import EndpointError

    args = build_eval_parser().parse_args(list(argv))
    try:
        return run_eval_command(args)
    except (ValueError, FileNotFoundError, KeyError, EndpointError) as err:  # the folder's records are kept: rerun
        print(f"agent-r1 eval: error: {one_line(err)}", file=sys.stderr)
        return 2


def run_eval_command(args: argparse.Namespace) -> int:
    """Run ``agent-r1 eval``: evaluate, write the folder, print the summary table."""
    from agent_trainers.evaluation import EvalSpec, Method, run_eval

    settings = eval_settings(args)
    model = args.base_url + (f" ({args.api_model})" if args.api_model else "") if args.base_url else args.model
    spec = EvalSpec(
        settings.env,
        Method(args.method),
        model=model,
        env_kwargs=settings.env_kwargs,
        limit=args.limit,
        start=args.first_task,
        seed=settings.env_seed,
        rollout=settings.rollout,
        label=args.label,
        chunk_size=settings.chunk_size,
    )
    out = args.out or f"runs/eval/{_slug(settings.env.split('/')[-1])}-{_slug(spec.name)}"
    if Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"--out {out} is a file: give a folder (the evaluation writes several files into it)")
    result = run_eval(spec, _policy(args, settings), out, resume=not args.overwrite)
    print((Path(out) / "summary.md").read_text(encoding="utf-8"))
    print(f"{result.summary['episodes']} questions in {result.summary['wall_s']} s; written to {out}/")
    return 0


def run_report_command(args: argparse.Namespace) -> int:
    """Run ``agent-r1 report``: print the table, and write Markdown and CSV with ``--out``."""
    from agent_trainers.evaluation.report import build_report

    in_domain = tuple(d.strip() for d in args.in_domain.split(",") if d.strip())
    report = build_report(args.folders, metric=args.metric, in_domain=in_domain)
    text = report.to_markdown()
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        from agent_gym.core.files import write_atomic

        write_atomic(out / "table3.md", text)
        write_atomic(out / "table3.csv", report.to_csv())
        print(f"written: {out / 'table3.md'}, {out / 'table3.csv'}")
    return 0


def run_view_command(args: argparse.Namespace) -> int:
    """Run ``agent-r1 view``: write the HTML viewer of a JSONL file (no torch or transformers imported, unless a
    tokenizer has no ``tokenizer.json`` to read: see :func:`agent_trainers.policies.decoder.load_decoder`)."""
    if not Path(args.file).is_file():  # before any import or tokenizer: a mistyped name is one line at once
        raise FileNotFoundError(f"{args.file}: no such file")
    from agent_trainers.evaluation.viewer import write_viewer

    tokenizer = None
    if args.tokenizer.lower() != "none":
        from agent_trainers.policies.decoder import load_decoder

        tokenizer = load_decoder(args.tokenizer)
    out = args.out or str(Path(args.file).with_suffix(".html"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        path = write_viewer(args.file, out, tokenizer=tokenizer, title=args.title)
    for w in caught:  # e.g. a last line cut short, dropped: one line each, not Python's warning format
        print(f"agent-r1 view: warning: {w.message}", file=sys.stderr)
    print(f"viewer: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


def run_serve_retrieval(argv: Sequence[str]) -> int:
    """``agent-r1 serve-retrieval ARGS``: :func:`agent_gym.retrieval.server.main` with the same arguments."""
    from agent_gym.retrieval.server import main as serve

    return serve(list(argv))
