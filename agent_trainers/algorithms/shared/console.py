"""What training prints: the project's one-line step summary (:func:`.diagnostics.step_line`) by default;
transformers' print of every logged dict, and messages known to be harmless, only when asked for.

A transformers ``Trainer`` (TRL's ``GRPOTrainer`` and ``SFTTrainer`` among them) prints each ``log()`` call's dict
beside its progress bar (``ProgressCallback.on_log``; ``PrinterCallback`` with ``disable_tqdm``): about 40 keys a
GRPO step, every one of which ``metrics.jsonl`` and the step line hold too. :func:`progress_bar_only` keeps the bar
and drops that print. :func:`harmless_messages_hidden` hides the messages of :data:`HARMLESS` alone, each matched
by its text, never a whole category.

Example:
    >>> with harmless_messages_hidden():
    ...     warnings.warn("You are using 'rollout_func', which is an experimental feature.", UserWarning)
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from transformers import PrinterCallback, ProgressCallback

__all__ = ["HARMLESS", "HarmlessMessage", "ProgressBarOnly", "harmless_messages_hidden", "progress_bar_only"]


@dataclass(frozen=True)
class HarmlessMessage:
    """A message a training run prints that needs nothing from the user."""

    logger: str | None
    """The logger that logs it; ``None``: a Python warning (``warnings.warn``, a ``UserWarning``)."""
    pattern: str
    """A regular expression its text matches (``re.search``)."""
    why: str
    """Why it is harmless here."""


HARMLESS: tuple[HarmlessMessage, ...] = (
    HarmlessMessage(
        None,
        r"You are using 'rollout_func', which is an experimental feature",
        "TRL's GRPOTrainer says so whenever it is given a rollout_func: the seam this project trains through, "
        "tested against the one TRL release it allows (trl==1.16.0)",
    ),
    HarmlessMessage(
        "accelerate.utils.other",
        r"Removed shared tensor .* while saving",
        "PPO's checkpoints (accelerate's save_state) leave out the lm_head weight that is tied to the embeddings; "
        "loading ties it again (a resumed PPO run equals the uninterrupted one: tests/.../test_resume.py)",
    ),
)
"""The messages hidden unless ``verbose: true`` (``agent-r1 train -v``)."""


class _DropMatching(logging.Filter):
    """Drops the log records whose text matches one of ``patterns``."""

    def __init__(self, patterns: list[str]):
        super().__init__()
        self.patterns = [re.compile(p) for p in patterns]

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(p.search(record.getMessage()) for p in self.patterns)


@contextlib.contextmanager
def harmless_messages_hidden(messages: tuple[HarmlessMessage, ...] = HARMLESS) -> Iterator[None]:
    """Hide ``messages`` (warnings and log records matched by their text) inside the block; nothing else."""
    loggers: dict[str, list[str]] = {}
    for message in messages:
        if message.logger is not None:
            loggers.setdefault(message.logger, []).append(message.pattern)
    filters = {name: _DropMatching(patterns) for name, patterns in loggers.items()}
    with warnings.catch_warnings():
        for message in messages:
            if message.logger is None:
                warnings.filterwarnings("ignore", message=f".*{message.pattern}", category=UserWarning)
        for name, drop in filters.items():
            logging.getLogger(name).addFilter(drop)
        try:
            yield
        finally:
            for name, drop in filters.items():
                logging.getLogger(name).removeFilter(drop)


class ProgressBarOnly(ProgressCallback):
    """transformers' training progress bar, without its print of every logged dict."""

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Print nothing: the step line and ``metrics.jsonl`` hold the figures."""


def progress_bar_only(trainer: Any) -> None:
    """Stop a transformers ``Trainer`` printing each logged dict: its ``ProgressCallback`` becomes
    :class:`ProgressBarOnly`, its ``PrinterCallback`` (``disable_tqdm``) goes. A notebook's progress table stays."""
    for callback in list(trainer.callback_handler.callbacks):
        if type(callback) is ProgressCallback:
            trainer.remove_callback(callback)
            trainer.add_callback(ProgressBarOnly(max_str_len=callback.max_str_len))
        elif type(callback) is PrinterCallback:
            trainer.remove_callback(callback)
