"""The safety of the TextWorld game cache: files read with bounds, story files checked, builds that leave nothing.

A cache entry's ``game.z8`` is run by Jericho's C code, which trusts it: a
story file of random bytes makes the process exit, one whose header points
outside the file can spin a core for minutes. So nothing reaches Jericho that
has not passed these checks:

* :func:`read_regular_file` reads a file of the entry only if it is a regular
  file of at most a given size, never following a symbolic link (an entry is
  written by :mod:`agent_gym.envs.textworld_games` and holds none), and never
  blocking on a FIFO or device;
* :func:`story_problem` checks a version-8 Z-machine header against the bytes:
  the file length, the checksum, and that every table and the first
  instruction lie inside the story (section 11 of the Z-machine Standard 1.1);
* :func:`story_dictionary` and :func:`dictionary_word` read the words a story's
  parser knows (section 13), so the story can be matched with the game record
  beside it: a story knows the names of its own game's rooms and objects, and
  another game's story lacks most of them (13-17 of about 20 names, over the
  games cached here).

A build runs in a :class:`BuildFolder` inside the cache (the new entry, the
entry it replaces, and textworld's own temporary folders, which would
otherwise go to ``$TMPDIR``), locked with ``flock`` while it runs. The kernel
drops the lock when its process dies, however it dies, so
:func:`remove_stale_builds` can tell a killed build (its lock is free) from
a running one and delete what the killed one left.

Example:
    >>> story_problem(bytes(64))
    'Z-machine version 0, not 8'
"""

from __future__ import annotations

import contextvars
import fcntl
import functools
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

__all__ = [
    "BUILD_PREFIX",
    "MAX_STORY_BYTES",
    "BuildFolder",
    "dictionary_word",
    "read_regular_file",
    "remove_stale_builds",
    "story_dictionary",
    "story_problem",
]

MAX_STORY_BYTES = 512 * 1024
"""A version-8 story file addresses at most 512 KiB."""

BUILD_PREFIX = ".build-"
"""The names of build folders in the cache start with this (entries never start with a dot)."""

_HEADER = 64
_GLOBALS_BYTES = 480  # 240 two-byte global variables
_UNLOCKED_GRACE_S = 600.0
"""A build folder without its lock file is a build killed between making the folder and locking it, or one that
is just starting: it is removed only once it is this old."""

_ALPHABET_0 = "abcdefghijklmnopqrstuvwxyz"  # Z-characters 6-31 of the lower-case alphabet
_ALPHABET_2 = "\n0123456789.,!?_#'\"/\\-:()"  # Z-characters 7-31 of alphabet 2 (6 starts a ZSCII escape)
_SHIFT_2, _ESCAPE, _DICTIONARY_ZCHARS = 5, 6, 9

_BUILD_TEMP: contextvars.ContextVar[str | None] = contextvars.ContextVar("textworld_build_temp", default=None)


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes, not a symbolic link.

    Opened without following a link and without blocking (a FIFO would block a plain ``open`` until a writer
    came), then checked on the open file, so what is checked is what is read.

    Raises:
        OSError: ``path`` is missing, a symbolic link (``ELOOP``), not a regular file, longer than ``limit``
            bytes, or unreadable; the message says which.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path.name} is not a regular file")
        if info.st_size > limit:
            raise OSError(f"{path.name} is {info.st_size} bytes, over the limit of {limit}")
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise OSError(f"{path.name} is over the limit of {limit} bytes")
    return data


def story_problem(data: bytes) -> str | None:
    """Why ``data`` is not a sound version-8 Z-machine story file, or ``None``.

    Checks the size (a header, at most :data:`MAX_STORY_BYTES`), the version byte, the header's file length
    (within the file) and checksum (the sum of the bytes after the header, modulo 65,536), and that static
    memory, high memory, the dictionary, the object table, the globals, the abbreviations table and the first
    instruction all lie inside the story, the tables the interpreter writes within dynamic memory.
    """
    if not _HEADER <= len(data) <= MAX_STORY_BYTES:
        return f"{len(data)} bytes, not between a header ({_HEADER}) and {MAX_STORY_BYTES}"
    if data[0] != 8:
        return f"Z-machine version {data[0]}, not 8"

    def word(at: int) -> int:
        return int.from_bytes(data[at : at + 2], "big")

    length = word(0x1A) * 8
    if not _HEADER < length <= len(data):
        return f"the header's file length {length} is not within the file's {len(data)} bytes"
    if int(np.frombuffer(data, dtype=np.uint8, count=length - _HEADER, offset=_HEADER).sum()) % 65_536 != word(0x1C):
        return "the header's checksum does not match the story's bytes"
    static = word(0x0E)
    bounds = {
        "static memory": (0x0E, length + 1),
        "high memory": (0x04, length + 1),
        "dictionary": (0x08, length),
        "first instruction": (0x06, length),
        "object table": (0x0A, static),
        "abbreviations table": (0x18, static),
        "globals table": (0x0C, static - _GLOBALS_BYTES + 1),
    }
    for name, (at, end) in bounds.items():
        if not _HEADER <= word(at) < end:
            return f"the header's {name} address {word(at):#x} is outside the story"
    return None


def dictionary_word(word: str) -> bytes:
    """``word`` as the text of a version-8 dictionary entry: lower-cased, as 9 Z-characters (cut or padded with
    5s) packed three to a big-endian word, the last word's top bit set (Z-machine Standard 1.1, 3.7 and 13.3).

    Example:
        >>> dictionary_word("Key").hex()
        '415e14a594a5'
    """
    zchars: list[int] = []
    for ch in word.lower():
        if ch in _ALPHABET_0:
            zchars.append(6 + _ALPHABET_0.index(ch))
        elif ch in _ALPHABET_2:
            zchars += [_SHIFT_2, 7 + _ALPHABET_2.index(ch)]
        else:
            code = ord(ch) & 0x3FF
            zchars += [_SHIFT_2, _ESCAPE, code >> 5, code & 31]
    zchars = (zchars + [_SHIFT_2] * _DICTIONARY_ZCHARS)[:_DICTIONARY_ZCHARS]
    words = [(zchars[i] << 10) | (zchars[i + 1] << 5) | zchars[i + 2] for i in range(0, _DICTIONARY_ZCHARS, 3)]
    words[-1] |= 0x8000
    return b"".join(w.to_bytes(2, "big") for w in words)


def story_dictionary(data: bytes) -> frozenset[bytes]:
    """The texts (6 bytes each) of the entries of the dictionary of ``data``, a story :func:`story_problem` passed.

    An entry count or size that runs past the file yields the entries that lie inside it.
    """
    at = int.from_bytes(data[0x08:0x0A], "big")
    at += 1 + data[at]  # the word separators
    size, count = data[at], abs(int.from_bytes(data[at + 1 : at + 3], "big", signed=True))
    first = at + 3
    if size < 6:
        return frozenset()
    count = min(count, max(0, (len(data) - first) // size))
    return frozenset(data[first + i * size : first + i * size + 6] for i in range(count))


class BuildFolder(AbstractContextManager["BuildFolder"]):
    """A locked folder inside the cache for one build: ``entry/`` (the game being made) and ``tmp/``.

    While it is open, textworld's temporary folders (the Inform 7 project it compiles in) are made in ``tmp/``
    (for builds on this thread). On leaving, the folder is removed; if the process is killed instead, the
    folder stays, unlocked, for :func:`remove_stale_builds`.

    Args:
        root: The cache folder.
        name: The entry's name (part of the folder's name, for whoever looks).
    """

    def __init__(self, root: Path, name: str):
        self.path = Path(tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{name}-", dir=root))
        try:
            self._lock = _locked(self.path / ".lock")
        except OSError:
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        self.entry = self.path / "entry"
        self.entry.mkdir()
        (self.path / "tmp").mkdir()
        self._token: contextvars.Token[str | None] | None = None

    def __enter__(self) -> BuildFolder:
        _route_textworld_temp_dirs()
        self._token = _BUILD_TEMP.set(str(self.path / "tmp"))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._token is not None:
            _BUILD_TEMP.reset(self._token)
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._lock)  # after the removal, so no cleaner takes a folder still being removed for stale


def _locked(path: Path) -> int:
    """A new file at ``path``, open and locked (``flock``, exclusive) until its descriptor is closed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def remove_stale_builds(root: Path) -> list[str]:
    """Remove the build folders in ``root`` whose build is no longer running (its process was killed).

    A running build holds its folder's lock; a killed one's lock was dropped by the kernel. A folder without
    a lock file is removed once it is ten minutes old (a kill between making it and locking it).

    Returns:
        The names of the folders removed.
    """
    removed: list[str] = []
    try:
        children = list(os.scandir(root))
    except OSError:
        return removed
    for child in children:
        if not child.name.startswith(BUILD_PREFIX) or not child.is_dir(follow_symlinks=False):
            continue
        with _claim(Path(child.path)) as stale:
            if stale:
                shutil.rmtree(child.path, ignore_errors=True)
                removed.append(child.name)
    return removed


@contextmanager
def _claim(folder: Path) -> Iterator[bool]:
    """Whether ``folder``'s build is dead; while true, its lock is held here, so no one else claims it."""
    fd = None
    try:
        fd = os.open(folder / ".lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        stale = True
    except FileNotFoundError:  # no lock file (yet): a build is starting, or was killed before it locked
        stale = _age_s(folder) > _UNLOCKED_GRACE_S
    except OSError:  # held: a build is running there (or the lock cannot be read: leave it alone)
        stale = False
    try:
        yield stale
    finally:
        if fd is not None:
            os.close(fd)


def _age_s(folder: Path) -> float:
    try:
        return time.time() - folder.stat().st_mtime
    except OSError:
        return 0.0


def _route_textworld_temp_dirs() -> None:
    """Make textworld's compiler put its temporary folders in the running build's ``tmp/`` (once per process).

    textworld compiles a game in a folder from its ``make_temp_directory``, made in ``$TMPDIR`` and removed when
    the compilation ends; a process killed meanwhile leaves it there, where no one can tell it from another
    program's. The wrapper passes the build's folder (a context variable, so builds on other threads are
    unaffected) where textworld passes none; outside a build it changes nothing.
    """
    from textworld.generator.inform7 import world2inform7

    original: Callable[..., Any] = world2inform7.make_temp_directory
    if getattr(original, "_agent_r1_routed", False):
        return

    @functools.wraps(original)
    def make_temp_directory(suffix: str = "", prefix: str = "tw_", dir: str | None = None) -> Any:
        return original(suffix, prefix, dir if dir is not None else _BUILD_TEMP.get())

    make_temp_directory._agent_r1_routed = True  # type: ignore[attr-defined]
    world2inform7.make_temp_directory = make_temp_directory
