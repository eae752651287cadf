"""The ``agent-r1`` command: every layer's sub-commands (:mod:`agent_trainers.pipeline.cli`) and, from the layer
above the pipeline, ``agent-r1 sweep`` (:mod:`agent_trainers.experiments.sweep`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from agent_trainers.errors import one_line
from agent_trainers.pipeline import cli as pipeline_cli

__all__ = ["build_parser", "main"]


def _add_sweep(sub: Any) -> None:
    from agent_trainers.experiments.sweep import add_sweep_parser

    add_sweep_parser(sub)


def _run_sweep(args: argparse.Namespace) -> int:
    from agent_trainers.experiments.sweep import run_sweep_command

    try:
        return run_sweep_command(args, pipeline_cli.parse_set)
    except RuntimeError as err:  # a run failed: its own output above says why
        print(f"agent-r1 sweep: error: {one_line(err)}", file=sys.stderr)
        return 1


COMMANDS: dict[str, pipeline_cli.Command] = {"sweep": (_add_sweep, _run_sweep)}
"""The sub-commands of the layers above the pipeline."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``agent-r1``, every sub-command included."""
    return pipeline_cli.build_parser(COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agent-r1`` console script."""
    return pipeline_cli.main(argv, extra=COMMANDS)


if __name__ == "__main__":
    raise SystemExit(main())
