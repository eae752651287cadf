"""Decode token ids without torch: a model's ``tokenizer.json`` read by the ``tokenizers`` library.

Drawing a trajectory's tokens (``agent-r1 view``) only needs ``decode`` and the vocabulary size. A
transformers tokenizer brings torch with it (seconds of imports); the ``tokenizers`` library reads the
same ``tokenizer.json`` and decodes the same text. :func:`load_decoder` uses it when the file is there
(SmolLM2's converted checkpoint, a checkpoint folder) and falls back to
:func:`agent_trainers.policies.load_tokenizer` otherwise (a hub id, or SmolLM2 before its first conversion).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_trainers.policies.cache import smollm2_cache_dir, smollm2_tokenizer_cache_dir

__all__ = ["TokenizerFile", "load_decoder", "tokenizer_file"]


class TokenizerFile:
    """A ``tokenizer.json`` for decoding: ``len()`` is the vocabulary size with added tokens, as a
    transformers fast tokenizer's.

    Args:
        path: The ``tokenizer.json`` file.
    """

    def __init__(self, path: str | Path):
        from tokenizers import Tokenizer

        self.path = Path(path)
        self._tokenizer = Tokenizer.from_file(str(self.path))

    def __len__(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def decode(
        self, ids: Sequence[int], skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool = False
    ) -> str:
        """The text of ``ids`` (``clean_up_tokenization_spaces`` is accepted and must be False)."""
        if clean_up_tokenization_spaces:
            raise ValueError("TokenizerFile decodes the text as it is (clean_up_tokenization_spaces=False)")
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))


def tokenizer_file(name_or_path: str | Path) -> Path | None:
    """The ``tokenizer.json`` of ``"smollm2"`` / ``"tiny-random"`` (its converted cache) or of a checkpoint folder;
    None when there is none yet."""
    name = str(name_or_path)
    if name in ("smollm2", "tiny-random"):
        whole, alone = smollm2_cache_dir() / "tokenizer.json", smollm2_tokenizer_cache_dir() / "tokenizer.json"
        return whole if whole.is_file() else alone if alone.is_file() else None
    elif Path(name).expanduser().is_dir():
        folder = Path(name).expanduser()
    else:
        return None
    found = folder / "tokenizer.json"
    return found if found.is_file() else None


def load_decoder(name_or_path: str | Path = "smollm2") -> Any:
    """A tokenizer that decodes ids: a :class:`TokenizerFile` when :func:`tokenizer_file` finds one, else the
    transformers tokenizer of :func:`agent_trainers.policies.load_tokenizer` (which imports torch).

    Raises:
        ValueError: An unknown model name (from ``load_tokenizer``).
        FileNotFoundError: No tokenizer files (from ``load_tokenizer``).
    """
    found = tokenizer_file(name_or_path)
    if found is not None:
        return TokenizerFile(found)
    from agent_trainers.policies.loader import load_tokenizer

    return load_tokenizer(name_or_path)
