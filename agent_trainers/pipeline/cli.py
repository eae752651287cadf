"""The ``agent-r1`` command line.

Sub-commands::

    agent-r1 envs                          list registered environments
    agent-r1 train --config FILE [--resume | --overwrite] [--print-config] [-v] [--set algorithm=rloo ...]
    agent-r1 eval  --env ID [--data-path P] [--method closed-book|naive-rag|base-tool-call|agent] [--model M]
                   [--base-url URL] [--limit N] [--out DIR] [--max-new-tokens-per-turn N ...]
                   (resumable; the rollout options are RolloutConfig's; see agent_trainers.pipeline.eval_commands)
    agent-r1 report DIR... [--out DIR]     the paper's Table 3 (Markdown + CSV) from eval folders
    agent-r1 view FILE.jsonl -o view.html  a self-contained HTML trajectory viewer
    agent-r1 serve-retrieval --corpus PATH [--backend bm25|lucene|dense] [--host H] [--port P]
    agent-r1 rollout ...                   the rollout engine's CLI (see `agent-r1 rollout --help`)
    agent-r1 demo [--quick]                cold-start SFT + GRPO on HotpotQA with SmolLM2, before/after table
    agent-r1 sweep NAME [--plan]           a sweep of runs on seeds, dev choices, the test set once
                                           (the command above this layer: :mod:`agent_trainers.cli`)

Configuration and argument errors print one line (``agent-r1 train: error: ...``)
and exit with status 2; they never show a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_trainers.errors import EnvFailureError, NonFiniteTrainingError, missing_extra, one_line
from agent_trainers.pipeline.eval_commands import (
    add_parsers,
    run_eval_cli,
    run_report_command,
    run_serve_retrieval,
    run_view_command,
)

__all__ = ["Command", "build_parser", "main", "parse_set"]

Command = tuple[Callable[[Any], None], Callable[[argparse.Namespace], int]]
"""A sub-command a layer above adds: ``(add its parser to the sub-parsers, run it)``."""


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as ``{key: value}`` (each value read as YAML, else kept as text).

    Raises:
        ValueError: An item without ``=``.
    """
    from agent_trainers.pipeline.config_files import YAMLTooLarge, load_yaml  # late: only some commands read configs

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE (got {item!r})")
        try:
            out[key] = load_yaml(value, f"--set {key}")
        except YAMLTooLarge:
            raise
        except ValueError:
            out[key] = value  # not YAML: the text itself
    return out


def _version() -> str:
    """The installed distribution's version (``agent-r1-gym``), or a note when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agent-r1-gym")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def build_parser(extra: Mapping[str, Command] | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``agent-r1`` (with the sub-commands of the layers above: ``extra``)."""
    parser = argparse.ArgumentParser(prog="agent-r1", description="Train LLM agents with RL on multi-turn tool tasks.")
    parser.add_argument("--version", action="version", version=f"agent-r1 {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("envs", help="list registered environments")
    train = sub.add_parser("train", help="run SFT and/or RL from a config file")
    train.add_argument(
        "--config", required=True, help="a YAML or TOML config file, or a packaged config by name (e.g. tiny)"
    )
    train.add_argument(
        "--resume", action="store_true", help="continue the run in the config's output_dir (it must have its settings)"
    )
    train.add_argument(
        "--overwrite", action="store_true", help="clear another run's outputs from the config's output_dir first"
    )
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    train.add_argument(
        "--print-config", action="store_true", help="print the resolved config (defaults filled in) and exit"
    )
    train.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print the trainers' dict of every logged value per step and the known-harmless warnings "
        "(= --set verbose=true)",
    )
    sub.add_parser("rollout", help="play episodes and save trajectories (rollout engine CLI)", add_help=False)
    demo = sub.add_parser("demo", help="the HotpotQA job: SFT + GRPO, then five methods on 30 held-aside questions")
    demo.add_argument("--config", default=None, help="config file (default: the packaged demo.yaml)")
    demo.add_argument("--output-dir", default=None, help="where to write the run")
    demo.add_argument("--quick", action="store_true", help="a much shorter run (smoke test)")
    demo.add_argument("--resume", action="store_true", help="continue the run in the output folder")
    demo.add_argument("--overwrite", action="store_true", help="clear another run's outputs from the folder first")
    demo.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    add_parsers(sub)
    for add, _ in (extra or {}).values():
        add(sub)
    return parser


def _cmd_envs() -> int:
    import agent_gym

    for env_id, description in agent_gym.list_envs():
        print(f"{env_id:32s} {description}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    import yaml

    from agent_trainers.pipeline.config import load_config, preflight

    overrides = parse_set(args.set) | ({"verbose": True} if args.verbose else {})
    config = load_config(args.config, overrides)  # no torch, TRL or transformers before this passes
    if args.print_config:  # what the run would use, every default filled in; nothing runs, nothing is written
        print(yaml.safe_dump(config.to_dict(), sort_keys=False), end="")
        return 0
    preflight(config)  # env sections, device, logger: still before the heavy imports and before any file

    from agent_trainers.pipeline.processes import is_main_process
    from agent_trainers.pipeline.report import print_table
    from agent_trainers.pipeline.train import run_training

    result = run_training(config, resume=args.resume, overwrite=args.overwrite, checked=True)
    if not is_main_process():
        return 0
    print_table(result.evals, title=f"{config.env.id}, {config.algorithm} ({config.output_dir})")
    if result.plot:
        print(f"plot: {result.plot}")
    return 0


def main(argv: Sequence[str] | None = None, extra: Mapping[str, Command] | None = None) -> int:
    """The ``agent-r1`` command line (the console script is :func:`agent_trainers.cli.main`, which adds the
    commands of the layers above this one as ``extra``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _dispatch(argv, extra or {})
        sys.stdout.flush()  # here, where a reader that went away is caught below
        return code
    except ModuleNotFoundError as err:  # a command of an extra in an install without it: one line, which extra
        if (err.name or "").split(".")[0] in ("agent_trainers", "agent_gym"):
            raise  # our own module missing is a bug, not an install choice
        command = " ".join(a for a in argv[:1] if not a.startswith("-"))
        print(f"agent-r1{' ' + command if command else ''}: error: {missing_extra(err)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`agent-r1 sweep NAME --plan | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit cannot fail
        return 0


def _dispatch(argv: list[str], extra: Mapping[str, Command]) -> int:
    if argv and argv[0] == "rollout":
        from agent_trainers.rollout.cli import run_rollout_cli

        return run_rollout_cli(argv[1:])
    if argv and argv[0] == "serve-retrieval":  # its own parser (agent_gym.retrieval.server)
        try:
            return run_serve_retrieval(argv[1:])
        except (ValueError, FileNotFoundError) as err:
            print(f"agent-r1 serve-retrieval: error: {one_line(err)}", file=sys.stderr)
            return 2
    if argv and argv[0] == "eval":  # its own parser, made from RolloutConfig when this command runs
        return run_eval_cli(argv[1:])
    commands = {"report": run_report_command, "view": run_view_command} | {k: run for k, (_, run) in extra.items()}
    args = build_parser(extra).parse_args(argv)
    try:
        if args.command == "envs":
            return _cmd_envs()
        if args.command == "train":
            return _cmd_train(args)
        if args.command in commands:
            return commands[args.command](args)
        from agent_trainers.pipeline.demo import run_demo

        return run_demo(
            config_path=args.config,
            output_dir=args.output_dir,
            quick=args.quick,
            resume=args.resume,
            overrides=parse_set(args.set),
            overwrite=args.overwrite,
        )
    except (ValueError, FileNotFoundError, KeyError, NonFiniteTrainingError, EnvFailureError) as err:
        print(f"agent-r1 {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
