"""The embedded sample data and the fixed train/test split.

``agent_gym/data/`` ships a small *original* multi-hop QA sample written for
this project (fictional towns, rivers, inventors and bands; no text from the
real datasets), one file per official layout:

* ``hotpotqa_original_sample.json`` - 32 questions (bridge and comparison),
  2 gold + 8 distractor paragraphs each, HotpotQA official JSON list;
* ``2wikimultihopqa_original_sample.jsonl`` - 8 questions with ``evidences``,
  2WikiMultihopQA official layout, JSON lines;
* ``musique_original_sample.jsonl`` - 8 questions (2 and 3 hops) with
  decompositions and aliases, MuSiQue official layout, JSON lines.

They let every environment run offline and exercise each loader path; they
are far too small to measure anything but plumbing.

Splits are fixed by position: the first ``TRAIN_FRACTION`` of the tasks
(rounded down) are ``"train"``, the rest ``"test"`` (24 / 8 for the HotpotQA
sample), so a trainer can train on one and evaluate on the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import TypeVar

from agent_gym.datasets.loaders import Source, load_qa
from agent_gym.datasets.records import QATask

__all__ = ["EMBEDDED_FILES", "TRAIN_FRACTION", "Split", "embedded_path", "load_embedded", "select_split"]

T = TypeVar("T")

TRAIN_FRACTION = 0.75
"""Share of the tasks (leading, by position) in the ``"train"`` split."""

EMBEDDED_FILES: dict[Source, str] = {
    Source.HOTPOTQA: "hotpotqa_original_sample.json",
    Source.TWOWIKI: "2wikimultihopqa_original_sample.jsonl",
    Source.MUSIQUE: "musique_original_sample.jsonl",
}


class Split(StrEnum):
    """Which part of a task list to use."""

    TRAIN = "train"
    TEST = "test"
    ALL = "all"


def select_split(items: Sequence[T], split: str | Split) -> list[T]:
    """The ``split`` part of ``items``: leading ``TRAIN_FRACTION`` is train, the rest test."""
    split = Split(split)
    cut = int(len(items) * TRAIN_FRACTION)
    if split is Split.TRAIN:
        return list(items[:cut])
    if split is Split.TEST:
        return list(items[cut:])
    return list(items)


def embedded_path(source: str | Source = Source.HOTPOTQA) -> Path:
    """The path of the embedded sample file in ``source``'s official layout."""
    source = Source(source)
    if source not in EMBEDDED_FILES:
        raise ValueError(
            f"no embedded sample for source={source.value!r}; pass data_path= (one of {list(EMBEDDED_FILES)})"
        )
    name = EMBEDDED_FILES[source]
    return Path(str(resources.files("agent_gym").joinpath("data", name)))


def load_embedded(source: str | Source = Source.HOTPOTQA, split: str | Split = Split.ALL) -> list[QATask]:
    """The embedded original sample in ``source``'s layout, restricted to ``split``."""
    return select_split(load_qa(embedded_path(source)), split)
