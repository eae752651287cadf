"""Household text games for ``AgentR1/TextWorld-v0``: made by the ``textworld`` package, cached on disk.

A game is a function of its :class:`GameSettings` and a seed (and the
textworld version): :func:`load_game` makes it the first time - the same
generator as ``tw-make custom --world-size W --nb-objects N --quest-length L
--seed S``, about 1-5 s on one core - plays its walkthrough once to check that
it wins in exactly ``quest_length`` commands (a game whose walkthrough does not
is redrawn from the next of :func:`draw_seeds`), and keeps it in the cache;
later calls read it back (about a millisecond). The cache is ``cache_dir`` if given, else
``$AGENT_R1_CACHE/textworld``, else ``~/.cache/agent-r1/textworld``; one entry
is one folder::

    <cache>/tw1.7.0-5r-10o-5q-seed<S>-f2/
        game.z8     the compiled game (played by Jericho)
        game.json   TextWorld's game record (quests, for state tracking)
        meta.json   settings, objective, first room, walkthrough, max score, files' SHA-256

An entry is written in a temporary folder and renamed into place, so several
processes may build the same game at once. An entry that fails its check
(missing file, bad ``meta.json``, a file whose SHA-256 differs) is rebuilt,
with a :class:`TextWorldCacheWarning`; a cache that cannot be written raises
:class:`TextWorldCacheError` naming the folder.

``textworld`` is an optional dependency (``pip install 'agent-r1-gym[textworld]'``),
imported only when a game is built or played.

Example:
    >>> files = load_game(GameSettings(quest_length=3), seed=7)  # doctest: +SKIP
    >>> len(files.walkthrough)  # doctest: +SKIP
    3
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from agent_gym.core.validation import positive_int

__all__ = [
    "GameFiles",
    "GameSettings",
    "TextWorldCacheError",
    "TextWorldCacheWarning",
    "clean_feedback",
    "default_cache_dir",
    "draw_seeds",
    "load_game",
    "require_textworld",
    "start_game",
]

_FORMAT = 2
"""Bump when the entry layout or ``meta.json`` changes (old entries are then simply not found)."""
_EXTRA_HINT = "pip install 'agent-r1-gym[textworld]'"
_FILES = ("game.z8", "game.json")
_DRAWS = 10
_END_PROMPT = re.compile(r"\n*Would you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command\?.*", re.S)


class TextWorldCacheError(RuntimeError):
    """The game cache cannot be written, or a game cannot be built there."""


class TextWorldCacheWarning(UserWarning):
    """A cache entry failed its check and is being rebuilt."""


class _BadEntry(Exception):
    """A cache entry that fails its check (the message says why)."""


@dataclass(frozen=True)
class GameSettings:
    """How games are generated (``tw-make custom``'s settings of the same names).

    Attributes:
        world_size: Rooms in the house (``--world-size``).
        nb_objects: At least this many objects (``--nb-objects``).
        quest_length: Actions the quest takes (``--quest-length``): exactly the walkthrough's length. 20
            or more makes the long variant (the turn limit of 50 still leaves room for detours).
    """

    world_size: int = 5
    nb_objects: int = 10
    quest_length: int = 5

    def __post_init__(self) -> None:
        for name in ("world_size", "nb_objects", "quest_length"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))

    def key(self, seed: int, version: str) -> str:
        """The cache folder's name of the game made with ``seed`` by textworld ``version``."""
        s = self
        return f"tw{version}-{s.world_size}r-{s.nb_objects}o-{s.quest_length}q-seed{seed}-f{_FORMAT}"


@dataclass(frozen=True)
class GameFiles:
    """A game in the cache, checked.

    Attributes:
        folder: Its cache folder.
        objective: The quest as the game states it.
        intro: The first room's description.
        walkthrough: Commands that win the game from the start (checked when it was built).
        max_score: The points a won game has.
    """

    folder: Path
    objective: str
    intro: str
    walkthrough: tuple[str, ...]
    max_score: int

    @property
    def game_file(self) -> Path:
        """The compiled game (``game.z8``); ``game.json`` lies beside it."""
        return self.folder / "game.z8"


def require_textworld() -> ModuleType:
    """``import textworld``, or an ``ImportError`` that says how to install it."""
    try:
        import textworld
    except ImportError as exc:
        raise ImportError(f"AgentR1/TextWorld-v0 needs the textworld package: {_EXTRA_HINT}") from exc
    return textworld


def default_cache_dir() -> Path:
    """Where games are cached: ``$AGENT_R1_CACHE/textworld``, else ``~/.cache/agent-r1/textworld``."""
    root = os.environ.get("AGENT_R1_CACHE")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "agent-r1") / "textworld"


def clean_feedback(text: str) -> str:
    """The game's text without the prompt and status line, the end-of-game menu, or runs of blank lines."""
    text = _END_PROMPT.sub("", text)
    cut = text.rfind("\n>")  # the prompt, followed by the status line ("-= Kitchen =-0/3")
    if cut >= 0:
        text = text[:cut]
    lines = [line.strip() for line in text.replace("\r", "").split("\n")]  # Inform centres "*** The End ***"
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def start_game(files: GameFiles, emulator_seed: int = 1) -> Any:
    """A started textworld environment of the game, reset, tracking score, quest progress and winning policy."""
    textworld = require_textworld()
    infos = textworld.EnvInfos(
        description=True, intermediate_reward=True, policy_commands=True, score=True, max_score=True, won=True,
        lost=True, objective=True,
    )  # fmt: skip
    with warnings.catch_warnings():  # Jericho warns that it lacks bindings for the game: TextWorld tracks it instead
        warnings.filterwarnings("ignore", message=r"Game .* is not fully supported")
        env = textworld.start(str(files.game_file), request_infos=infos)
    env.seed(emulator_seed)  # the z-machine's random numbers; takes effect at reset
    env.reset()
    return env


def load_game(settings: GameSettings, seed: int, cache_dir: str | Path | None = None) -> GameFiles:
    """The game made from ``settings`` and ``seed``: read from the cache, else built there.

    Raises:
        ImportError: textworld is not installed.
        TextWorldCacheError: The cache cannot be written, or the generator failed for these settings.
    """
    textworld = require_textworld()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    folder = root / settings.key(int(seed), textworld.__version__)
    if folder.exists():
        try:
            return _read(folder)
        except _BadEntry as exc:
            warnings.warn(f"rebuilding the TextWorld cache entry {folder}: {exc}", TextWorldCacheWarning, stacklevel=2)
    return _build(settings, int(seed), root, folder)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read(folder: Path) -> GameFiles:
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise _BadEntry(f"meta.json is not a format-{_FORMAT} record")
        for name in _FILES:
            if _sha256(folder / name) != meta["sha256"][name]:
                raise _BadEntry(f"{name} does not match its SHA-256 in meta.json")
        walkthrough = tuple(str(c) for c in meta["walkthrough"])
        objective, intro = clean_feedback(str(meta["objective"])), clean_feedback(str(meta["intro"]))
        return GameFiles(folder, objective, intro, walkthrough, int(meta["max_score"]))
    except _BadEntry:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:  # missing file, bad JSON, missing field
        raise _BadEntry(f"{type(exc).__name__}: {exc}") from exc


def _build(settings: GameSettings, seed: int, root: Path, folder: Path) -> GameFiles:
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
    except OSError as exc:
        raise TextWorldCacheError(
            f"cannot write the TextWorld game cache {root}: {exc}; pass cache_dir= or set $AGENT_R1_CACHE "
            "to a writable folder"
        ) from exc
    try:
        _generate(settings, seed, tmp)
        _install(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        return _read(folder)
    except _BadEntry as exc:  # written a moment ago: the disk or another writer is at fault
        raise TextWorldCacheError(f"the TextWorld game just built in {folder} fails its check: {exc}") from exc


def draw_seeds(seed: int) -> list[int]:
    """The generator seeds tried for the game of ``seed``, in order (see :func:`load_game`)."""
    return [seed] + [(seed + 7_919 * k) % 65_536 for k in range(1, _DRAWS)]


def _generate(settings: GameSettings, seed: int, tmp: Path) -> None:
    """Make, compile and check the game in ``tmp``; write ``meta.json`` last.

    The game is the first of :func:`draw_seeds` whose walkthrough takes ``quest_length`` commands (TextWorld
    sometimes finds a shorter one) and wins it (the game's parser can find a walkthrough's object names
    ambiguous, e.g. among many similar keys), so it is the same everywhere and its oracle wins.
    """
    textworld = require_textworld()
    for generator_seed in draw_seeds(seed):
        walkthrough, max_score = _make(settings, generator_seed, tmp)
        if len(walkthrough) != settings.quest_length:
            continue
        first = _play_walkthrough(GameFiles(tmp, "", "", walkthrough, max_score))
        if first is not None:
            break
    else:
        raise TextWorldCacheError(
            f"no game with {settings} whose walkthrough takes quest_length commands and wins it in {_DRAWS} "
            f"draws from seed {seed}"
        )
    meta = {
        "format": _FORMAT,
        "textworld": textworld.__version__,
        "settings": asdict(settings),
        "seed": seed,
        "draw": draw_seeds(seed).index(generator_seed),
        "generator_seed": generator_seed,
        "objective": str(first["objective"]),  # cleaned when read, so a better clean_feedback needs no rebuild
        "intro": str(first["description"]),
        "walkthrough": list(walkthrough),
        "max_score": max_score,
        "sha256": {name: _sha256(tmp / name) for name in _FILES},
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")


def _make(settings: GameSettings, seed: int, tmp: Path) -> tuple[tuple[str, ...], int]:
    """Make and compile the game of ``seed`` into ``tmp`` (as ``tw-make custom`` does); its walkthrough, max score."""
    textworld = require_textworld()
    from textworld.generator import compile_game, make_game

    options = textworld.GameOptions()
    options.seeds = seed
    options.nb_rooms, options.nb_objects = settings.world_size, settings.nb_objects
    options.quest_length = settings.quest_length
    options.path = str(tmp / "game.z8")
    options.force_recompile = True
    try:
        game = make_game(options)
        compile_game(game, options)
    except Exception as exc:  # QuestGenerationError, CouldNotCompileGameError, ...
        raise TextWorldCacheError(
            f"textworld could not make a game with {settings} and seed {seed}: {type(exc).__name__}: {exc}"
        ) from exc
    (tmp / "game.ni").unlink(missing_ok=True)  # the Inform 7 source: not needed to play
    return tuple(game.walkthrough or ()), int(game.max_score)


def _play_walkthrough(files: GameFiles) -> Any:
    """The game's first state if its walkthrough wins it, else ``None``."""
    env = start_game(files)
    try:
        first, won = env.state, False
        for command in files.walkthrough:
            state, _, _ = env.step(command)
            won = bool(state["won"])
    finally:
        env.close()
    return first if won else None


def _install(tmp: Path, folder: Path) -> None:
    """Rename ``tmp`` to ``folder``, moving a bad entry aside first; another process's good entry wins."""
    if folder.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{folder.name}-old-", dir=folder.parent))
        try:
            os.replace(folder, trash / "entry")
        except OSError:
            pass  # another process moved it already
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.rename(tmp, folder)
    except OSError:  # another process installed it first
        if not folder.exists():
            raise
