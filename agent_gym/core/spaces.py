"""Text spaces for language-agent observations and actions.

Gymnasium's :class:`~gymnasium.spaces.Text` accepts only alphanumeric
characters by default, and its shared-memory support stores characters as
indices into that charset, so any other character comes back as garbage from
:class:`~gymnasium.vector.AsyncVectorEnv`. :class:`TextSpace` contains *every*
Python string up to ``max_length`` and registers its own shared-memory codec
(UTF-32 code points plus a length), so vector environments work with their
default arguments.

Example:
    >>> space = TextSpace(max_length=64)
    >>> space.contains("naïve <tool_call>{}</tool_call> \\u2603")
    True
    >>> space.seed(0); isinstance(space.sample(), str)
    0
    True
"""

from __future__ import annotations

import json
import multiprocessing as mp
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import shared_memory as _shm

__all__ = ["SharedTextView", "TextSpace"]

_ALPHANUMERIC = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_SAMPLE_PIECES = (
    "<tool_call>",
    "</tool_call>",
    "<answer>",
    "</answer>",
    "<search>",
    "</search>",
    '{"name": "search", "arguments": {"query": "',
    '{"name": ',
    '"arguments": {}',
    "}",
    "{",
    '"',
    "\\",
    "\n",
    " ",
    "\x00",
    "\ufffd",
    "é",
    "日本",
    "🙂",
    "SELECT * FROM t;",
    "9**9**9",
    "((((",
)


class TextSpace(Text):
    """Every Python ``str`` of length ``min_length..max_length``.

    Args:
        max_length: The longest string the space contains.
        min_length: The shortest string the space contains.
        seed: Optional seed for :meth:`sample`.

    ``sample()`` mixes random Unicode, alphanumerics and fragments of tool-call
    syntax (tags, half-written JSON), so random agents exercise an
    environment's parser rather than only its "malformed" branch.
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | None = None):
        if max_length < min_length or min_length < 0:
            raise ValueError(
                f"need 0 <= min_length <= max_length (got min_length={min_length}, max_length={max_length})"
            )
        super().__init__(max_length=max_length, min_length=min_length, charset=_ALPHANUMERIC, seed=seed)

    def contains(self, x: Any) -> bool:
        """Any ``str`` whose length lies in ``[min_length, max_length]``."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string of varied content (masks are not supported)."""
        if mask is not None or probability is not None:
            raise NotImplementedError("TextSpace.sample does not support masks")
        rng = self.np_random
        budget = int(rng.integers(self.min_length, min(self.max_length, 256) + 1))
        parts: list[str] = []
        size = 0
        while size < budget:
            kind = rng.integers(4)
            if kind == 0:
                piece = _SAMPLE_PIECES[int(rng.integers(len(_SAMPLE_PIECES)))]
            elif kind == 1:
                piece = "".join(rng.choice(list(_ALPHANUMERIC), size=int(rng.integers(1, 8))))
            elif kind == 2:
                piece = chr(int(rng.integers(0x20, 0x2FFF)))
            else:
                piece = chr(int(rng.integers(0, 0x20)))
            parts.append(piece)
            size += len(piece)
        text = "".join(parts)[:budget]
        return text + "x" * (self.min_length - len(text))

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length}, min_length={self.min_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TextSpace) and other.max_length == self.max_length and other.min_length == self.min_length
        )

    def __hash__(self) -> int:
        return hash(("TextSpace", self.min_length, self.max_length))

    def to_jsonable(self, sample_n: Iterable[str]) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: Sequence[str]) -> list[str]:
        return [str(s) for s in sample_n]


# --- shared memory for AsyncVectorEnv -------------------------------------
# Layout per env: one int32 length followed by ``max_length`` UTF-32 code points.


@_shm.create_shared_memory.register(TextSpace)
def _create_text_shm(space: TextSpace, n: int = 1, ctx: Any = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


class SharedTextView(Sequence[str]):
    """A live, read-only view of ``n`` strings in shared memory.

    ``AsyncVectorEnv`` reads its shared observation buffer once, at start-up,
    and expects a view that later writes show through (true for numpy arrays,
    false for Gymnasium's ``Text``, which is why its strings come back stale).
    This view decodes on access; ``copy.deepcopy`` (what ``AsyncVectorEnv``
    does with its default ``copy=True``) turns it into a plain ``tuple``.
    """

    def __init__(self, data: np.ndarray):
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(len(self))[index])
        row = self._data[index]
        return row[1 : 1 + int(row[0])].astype(np.uint32).tobytes().decode("utf-32-le", errors="surrogatepass")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTextView({tuple(self)!r})"


@_shm.read_from_shared_memory.register(TextSpace)
def _read_text_shm(space: TextSpace, shared_memory: Any, n: int = 1) -> SharedTextView:
    data = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(n, space.max_length + 1)
    return SharedTextView(data)


@_shm.write_to_shared_memory.register(TextSpace)
def _write_text_shm(space: TextSpace, index: int, value: str, shared_memory: Any) -> None:
    if not space.contains(value):
        raise ValueError(f"value of length {len(value)} is not in {space!r}")
    size = space.max_length + 1
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * size : (index + 1) * size]
    codes = np.frombuffer(value.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32)
    row[0] = len(codes)
    row[1 : 1 + len(codes)] = codes.astype(np.int32)


def describe(space: TextSpace) -> str:
    """A JSON description of the space (for logs and exported trajectories)."""
    return json.dumps({"type": "TextSpace", "min_length": space.min_length, "max_length": space.max_length})
