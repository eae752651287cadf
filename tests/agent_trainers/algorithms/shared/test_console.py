"""What training prints: the known-harmless messages are hidden by their text, nothing else; the trainers' per-step
dict goes, their progress bar stays."""

from __future__ import annotations

import logging
import warnings

import pytest
from transformers import PrinterCallback, ProgressCallback, Trainer, TrainingArguments

from agent_trainers.algorithms.shared.console import ProgressBarOnly, harmless_messages_hidden, progress_bar_only
from agent_trainers.policies.loader import load_model

TRL_NOTE = (
    "You are using 'rollout_func', which is an experimental feature. This API may change or be removed at any time "
    "without prior notice. Silence this warning by setting environment variable TRL_EXPERIMENTAL_SILENCE=1."
)
ACCELERATE_NOTE = (
    "Removed shared tensor {'policy.lm_head.weight'} while saving. This should be OK, but check by verifying that "
    "you don't receive any warning while reloading"
)


def test_only_the_known_warnings_are_hidden():
    other = "You are using 'environment_factory', which is an experimental feature."
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with harmless_messages_hidden():
            warnings.warn(TRL_NOTE, UserWarning, stacklevel=1)
            warnings.warn(other, UserWarning, stacklevel=1)  # another message
            warnings.warn(TRL_NOTE, DeprecationWarning, stacklevel=1)  # another category
        warnings.warn(TRL_NOTE, UserWarning, stacklevel=1)  # outside the block: shown again
    assert [(w.category, str(w.message)) for w in seen] == [
        (UserWarning, other),
        (DeprecationWarning, TRL_NOTE),
        (UserWarning, TRL_NOTE),
    ]


def test_only_the_known_log_records_are_hidden(caplog: pytest.LogCaptureFixture):
    logger = logging.getLogger("accelerate.utils.other")
    with caplog.at_level(logging.WARNING), harmless_messages_hidden():
        logger.warning("[RANK 0] %s", ACCELERATE_NOTE)
        logger.warning("Removed nothing: another message of that logger")
        logging.getLogger("accelerate.other").warning(ACCELERATE_NOTE)  # another logger
    logger.warning(ACCELERATE_NOTE)  # outside the block: the filter is gone
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("accelerate.utils.other", "Removed nothing: another message of that logger"),
        ("accelerate.other", ACCELERATE_NOTE),
        ("accelerate.utils.other", ACCELERATE_NOTE),
    ]
    assert logger.filters == []


@pytest.mark.parametrize("disable_tqdm", [False, True])
def test_a_trainer_keeps_its_progress_bar_and_drops_its_printed_dicts(tmp_path, disable_tqdm):
    model, _ = load_model("tiny-random", device="cpu")
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], disable_tqdm=disable_tqdm)
    trainer = Trainer(model=model, args=args)
    kinds = [type(c) for c in trainer.callback_handler.callbacks]
    assert (PrinterCallback if disable_tqdm else ProgressCallback) in kinds
    progress_bar_only(trainer)
    after = [type(c) for c in trainer.callback_handler.callbacks]
    assert PrinterCallback not in after and ProgressCallback not in after
    assert after == [k for k in kinds if k not in (PrinterCallback, ProgressCallback)] + (
        [] if disable_tqdm else [ProgressBarOnly]
    )
