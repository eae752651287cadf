"""Where QA records come from: files, folders (one split at a time) and in-memory datasets.

A folder such as the shared ``hotpotqa/`` holds several splits and settings
side by side (``train_100_official.json``, ``dev_distractor_sample_a_300.jsonl``,
``dev_fullwiki_500.jsonl``). Loading all of them at once would mix train and
dev questions, and the distractor and fullwiki versions of the same
questions, without a word. So :func:`select_data_files` groups a folder's
files by the split and setting words in their names and refuses a folder
with more than one group unless a glob (``data_files=``) chooses.

Example:
    >>> file_group(Path("dev_distractor_sample_a_300.jsonl")), file_group(Path("train_100_official.json"))
    ('dev+distractor', 'train')
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agent_gym.core.files import DatasetFormatError

__all__ = ["DATA_SUFFIXES", "file_group", "memory_records", "select_data_files"]

DATA_SUFFIXES = (".json", ".jsonl", ".csv")
"""Data file name endings (each optionally followed by ``.gz``)."""

_SPLIT_WORDS = {"train": "train", "dev": "dev", "validation": "dev", "val": "dev", "valid": "dev", "test": "test"}
_SETTING_WORDS = frozenset({"distractor", "fullwiki", "ans", "full"})
_CORPUS_WORDS = frozenset({"corpus", "passages"})


def _is_data_file(path: Path) -> bool:
    return path.is_file() and path.name.removesuffix(".gz").endswith(DATA_SUFFIXES)


def file_group(path: Path) -> str:
    """The split and setting a file name states: ``"dev+distractor"``, ``"train"``, ``"?"`` (none stated)."""
    words = re.split(r"[^a-z0-9]+", path.name.lower())
    split = next((_SPLIT_WORDS[w] for w in words if w in _SPLIT_WORDS), "?")
    settings = sorted({w for w in words if w in _SETTING_WORDS})
    return "+".join([split, *settings])


def _is_corpus(path: Path) -> bool:
    return bool(_CORPUS_WORDS & set(re.split(r"[^a-z0-9]+", path.name.lower())))


def select_data_files(path: Path, pattern: str | None = None) -> list[Path]:
    """The data files to load from ``path``, in name order.

    A file is returned as is. In a folder, files named like a passage corpus
    (``corpus``/``passages`` in the name) are left out unless ``pattern``
    picks them; the rest must all share one split and setting (see
    :func:`file_group`), else ``pattern`` (a glob over the file names) must
    choose.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DatasetFormatError: No data files, or files of several splits/settings
            and no ``pattern`` (the message lists them by group).
    """
    if path.is_file():
        if pattern is not None:
            raise ValueError(f"data_files={pattern!r} selects files inside a folder, but {path} is a file")
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such data file or folder: {path}")
    files = sorted(p for p in path.iterdir() if _is_data_file(p))
    if pattern is not None:
        chosen = [p for p in files if fnmatch.fnmatch(p.name, pattern)]
        if not chosen:
            names = ", ".join(p.name for p in files) or "none"
            raise DatasetFormatError(f"{path}: no data file matches data_files={pattern!r} (files: {names})")
        return chosen
    files = [p for p in files if not _is_corpus(p)]
    if not files:
        raise DatasetFormatError(f"{path}: the folder holds no {', '.join(DATA_SUFFIXES)} data files")
    groups: dict[str, list[str]] = {}
    for p in files:
        groups.setdefault(file_group(p), []).append(p.name)
    if len(groups) > 1:
        listing = "; ".join(f"{g}: {', '.join(names)}" for g, names in sorted(groups.items()))
        raise DatasetFormatError(
            f"{path}: the folder mixes {len(groups)} splits/settings ({listing}); load one file, or choose "
            f"with data_files= a glob over the names, e.g. data_files={_example_glob(groups, files)!r}"
        )
    return files


def _example_glob(groups: dict[str, list[str]], files: list[Path]) -> str:
    """A glob that picks exactly the largest group (its names' common prefix + ``*``), else one file name."""
    names = max(groups.values(), key=len)
    prefix = names[0]
    for name in names[1:]:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    glob = prefix + "*"
    if len(names) > 1 and [p.name for p in files if fnmatch.fnmatch(p.name, glob)] == names:
        return glob
    return names[0]


def memory_records(data: Any) -> tuple[str, Iterable[tuple[int, Any]]] | None:
    """``(label, numbered records)`` for a ``datasets.Dataset`` or a list of dicts; ``None`` for a path.

    ``datasets`` is never imported here: a ``Dataset`` can only exist if the
    caller imported it already.

    Raises:
        DatasetFormatError: A ``DatasetDict`` (several splits: pick one).
    """
    if isinstance(data, str | Path):
        return None
    hf = sys.modules.get("datasets")
    if hf is not None and isinstance(data, hf.DatasetDict | hf.IterableDatasetDict):
        raise DatasetFormatError(
            f"a DatasetDict holds several splits ({', '.join(data)}); pass one of them, e.g. data[{next(iter(data))!r}]"
        )
    if hf is not None and isinstance(data, hf.Dataset | hf.IterableDataset):
        name = getattr(data.info, "dataset_name", None) or "dataset"
        return f"<datasets.Dataset {name} split={data.split}>", enumerate(data)
    if isinstance(data, Sequence) and not isinstance(data, bytes | bytearray):
        return f"<list of {len(data)} records>", enumerate(data)
    raise TypeError(f"expected a path, a datasets.Dataset or a list of record dicts, got {type(data).__name__}")
