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

    <cache>/tw1.7.0-5r-10o-5q-seed<S>-f3/
        game.z8     the compiled game (played by Jericho)
        game.json   TextWorld's game record (quests, for state tracking)
        meta.json   settings, seed, objective, first room, walkthrough, max score, files' SHA-256

The game record holds nothing of the machine that built it (TextWorld writes
the absolute path of its grammar files into it; the entry keeps a fixed
placeholder, :data:`PORTABLE_GRAMMARS`, which playing never reads), so the same
seed gives the same ``game.json`` byte for byte on every machine.

An entry is checked before anything of it reaches Jericho's C code, at every
read and again when a game starts: its files are regular files within size
bounds, never symbolic links (nor is the entry's folder one); ``meta.json`` is
a bounded JSON read naming this entry's settings, seed and textworld version,
with a walkthrough of ``quest_length`` commands and a max score of at most
:data:`MAX_SCORE`; ``game.z8`` is a sound Z-machine story (header, checksum,
addresses: :func:`~agent_gym.envs.textworld_cache.story_problem`); both files
have the SHA-256 recorded when the entry was built; ``game.json`` (bounded
depth) has the walkthrough and objective of ``meta.json``, and the story knows
the names of the record's rooms and objects, so neither file is another
game's even where ``meta.json``'s hashes were rewritten to match. (An entry
whose three files are all another game's, with the seed in ``meta.json``
changed, passes: the cache trusts its owner's files that far.) An entry that
fails is rebuilt, with a :class:`TextWorldCacheWarning` saying why; a game
whose files change after its episode started refuses to start (an error
result). A cache that cannot be written raises :class:`TextWorldCacheError`
naming the folder.

A build runs in a locked folder inside the cache, ``.build-<entry>-<random>/``,
which also holds textworld's temporary folders; the new entry is renamed into
place (atomic, so several processes may build the same game at once: the first
rename wins), and the folder is removed. A build killed midway leaves its
folder unlocked, and the next build in that cache removes it
(:func:`~agent_gym.envs.textworld_cache.remove_stale_builds`), so nothing is
left behind, in the cache or in ``$TMPDIR``.

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
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from agent_gym.core.scanning import JsonLimits, decode_json, exceeds_depth
from agent_gym.core.validation import positive_int
from agent_gym.envs.textworld_cache import (
    MAX_STORY_BYTES,
    BuildFolder,
    dictionary_word,
    read_regular_file,
    remove_stale_builds,
    story_dictionary,
    story_problem,
)

__all__ = [
    "MAX_SCORE",
    "PORTABLE_GRAMMARS",
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

_FORMAT = 3
"""Bump when the entry layout or ``meta.json`` changes (old entries are then simply not found)."""
_EXTRA_HINT = "pip install 'agent-r1-gym[textworld]'"
_FILES = ("game.z8", "game.json")
_LIMITS = {"game.z8": MAX_STORY_BYTES, "game.json": 16 * 2**20, "meta.json": 2**20}
"""The largest file of each kind an entry may hold, in bytes (the games made here: about 390 KiB, 30 KiB, 1.5 KiB)."""
_META_JSON = JsonLimits(max_length=_LIMITS["meta.json"], max_depth=4)
_RECORD_DEPTH = 64
"""The deepest nesting a ``game.json`` may have (the games made here: 11); TextWorld's reader recurses on it."""
_MAX_COMMAND = 200

MAX_SCORE = 1_000
"""The largest max score an entry may claim (the games made here have one quest and score 1; a claim of 10^8
points would make 10^8 evidence items at ``reset``)."""

PORTABLE_GRAMMARS = "<textworld>/generator/data/text_grammars"
"""What ``game.json`` records as the grammar folder (TextWorld writes the absolute path of the one it used, which
differs per install; only making new text reads it, never playing)."""

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
        sha256: The SHA-256 of ``game.z8`` and ``game.json`` as checked (the game starts only if they still
            match).
    """

    folder: Path
    objective: str
    intro: str
    walkthrough: tuple[str, ...]
    max_score: int
    sha256: Mapping[str, str] = field(hash=False)

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
    """A started textworld environment of the game, reset, tracking score, quest progress and winning policy.

    The game's files are checked again first (regular files, a sound story, the SHA-256 they had when the
    entry was read), so a file replaced since then never reaches Jericho.

    Raises:
        TextWorldCacheError: The files fail the check (the message says why).
    """
    textworld = require_textworld()
    try:
        _check_files(files.folder, files.sha256, files.walkthrough, files.objective)
    except (_BadEntry, OSError) as exc:
        raise TextWorldCacheError(f"the game in {files.folder} changed since it was read: {exc}") from None
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
    """The game made from ``settings`` and ``seed``: read from the cache (checked), else built there.

    Raises:
        ImportError: textworld is not installed.
        TextWorldCacheError: The cache cannot be written, or the generator failed for these settings.
    """
    textworld = require_textworld()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    seed = int(seed)
    folder = root / settings.key(seed, textworld.__version__)
    if os.path.lexists(folder):
        try:
            return _read(folder, settings, seed, textworld.__version__)
        except _BadEntry as exc:
            warnings.warn(f"rebuilding the TextWorld cache entry {folder}: {exc}", TextWorldCacheWarning, stacklevel=2)
    return _build(settings, seed, root, folder)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_files(folder: Path, sha256: Mapping[str, str], walkthrough: Sequence[str], objective: str) -> None:
    """Check the game in ``folder`` before Jericho or TextWorld reads it.

    ``game.z8`` and ``game.json`` must be regular files within bounds with the SHA-256 given; the story sound;
    the record bounded JSON of the game with ``walkthrough`` and ``objective`` (as cleaned); and the story must
    know the names of the record's rooms and objects (so neither file is another game's).

    Raises:
        _BadEntry: A check failed (the message says which).
        OSError: A file is missing, a link, not a regular file or too large.
    """
    if folder.is_symlink() or not folder.is_dir():
        raise _BadEntry("the entry is not a folder (a symbolic link?)")
    story = read_regular_file(folder / "game.z8", _LIMITS["game.z8"])
    record = read_regular_file(folder / "game.json", _LIMITS["game.json"])
    for name, data in (("game.z8", story), ("game.json", record)):
        if _sha256(data) != sha256.get(name):
            raise _BadEntry(f"{name} does not match its SHA-256 in meta.json")
    problem = story_problem(story)
    if problem is not None:
        raise _BadEntry(f"game.z8 is not a sound story file: {problem}")
    names, record_walkthrough, record_objective = _record_facts(record)
    if record_walkthrough != list(walkthrough) or clean_feedback(record_objective) != objective:
        raise _BadEntry("game.json is the record of another game (its walkthrough or objective differs)")
    known = story_dictionary(story)
    unknown = sorted(n for n in names if dictionary_word(n) not in known)
    if unknown:
        raise _BadEntry(f"game.z8 is not the story of game.json (it does not know {', '.join(unknown[:3])})")


def _record_facts(record: bytes) -> tuple[set[str], list[str], str]:
    """The name words of a game record's rooms and objects, its walkthrough and its objective.

    Raises:
        _BadEntry: The record is not bounded JSON of that shape.
    """
    text = record.decode("utf-8", errors="replace")
    if exceeds_depth(text, _RECORD_DEPTH):
        raise _BadEntry(f"game.json is nested more than {_RECORD_DEPTH} deep")
    try:
        data = json.loads(text)
        names = {w for _, info in data["infos"] for k in ("name", "adj", "noun") for w in (info.get(k) or "").split()}
        walkthrough, objective = data["metadata"]["walkthrough"], data["objective"]
    except (ValueError, RecursionError, TypeError, KeyError, AttributeError) as exc:
        raise _BadEntry(f"game.json is not a game record ({type(exc).__name__}: {exc})") from None
    if not isinstance(walkthrough, list) or not isinstance(objective, str):
        raise _BadEntry("game.json is not a game record (no walkthrough or objective)")
    return names, walkthrough, objective


def _read(folder: Path, settings: GameSettings, seed: int, version: str) -> GameFiles:
    """The entry in ``folder``, checked to be the game of ``settings``, ``seed`` and textworld ``version``."""
    try:
        meta, problem = decode_json(read_regular_file(folder / "meta.json", _LIMITS["meta.json"]).decode(), _META_JSON)
        if problem is not None:
            raise _BadEntry(f"meta.json: {problem}")
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise _BadEntry(f"meta.json is not a format-{_FORMAT} record")
        expected = {"textworld": version, "settings": asdict(settings), "seed": seed}
        for key, value in expected.items():
            if meta.get(key) != value:
                raise _BadEntry(f"meta.json is the entry of another game ({key} {meta.get(key)!r}, not {value!r})")
        walkthrough, max_score = meta["walkthrough"], meta["max_score"]
        if not isinstance(walkthrough, list) or len(walkthrough) != settings.quest_length:
            raise _BadEntry(f"the walkthrough is not a list of {settings.quest_length} commands")
        if not all(isinstance(c, str) and 0 < len(c) <= _MAX_COMMAND for c in walkthrough):
            raise _BadEntry(f"a walkthrough command is not a string of 1-{_MAX_COMMAND} characters")
        if type(max_score) is not int or not 1 <= max_score <= MAX_SCORE:
            raise _BadEntry(f"max_score is {max_score!r}, not an integer in [1, {MAX_SCORE}]")
        sha256 = meta["sha256"]
        if not isinstance(sha256, dict):
            raise _BadEntry("meta.json has no SHA-256 of the files")
        objective, intro = clean_feedback(str(meta["objective"])), clean_feedback(str(meta["intro"]))
        _check_files(folder, sha256, walkthrough, objective)
        return GameFiles(folder, objective, intro, tuple(walkthrough), max_score, {n: sha256[n] for n in _FILES})
    except _BadEntry:
        raise
    except (OSError, UnicodeDecodeError, KeyError) as exc:  # a missing file, a link, bytes that are not text
        raise _BadEntry(f"{type(exc).__name__}: {exc}") from exc


def _build(settings: GameSettings, seed: int, root: Path, folder: Path) -> GameFiles:
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_stale_builds(root)  # what builds killed midway left
        build = BuildFolder(root, folder.name)
    except OSError as exc:
        raise TextWorldCacheError(
            f"cannot write the TextWorld game cache {root}: {exc}; pass cache_dir= or set $AGENT_R1_CACHE "
            "to a writable folder"
        ) from exc
    with build:
        _generate(settings, seed, build.entry)
        _install(build, folder)
    try:
        return _read(folder, settings, seed, require_textworld().__version__)
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
        first = _play_walkthrough(GameFiles(tmp, "", "", walkthrough, max_score, {}))
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
        "sha256": _hashes(tmp),
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
    _make_portable(tmp / "game.json")
    return tuple(game.walkthrough or ()), int(game.max_score)


def _make_portable(path: Path) -> None:
    """Replace the absolute grammar folder TextWorld wrote into the game record with :data:`PORTABLE_GRAMMARS`.

    Written as TextWorld writes it (``json.dump`` with its default separators), so the file is the same bytes
    on every machine for the same game.
    """
    record = json.loads(path.read_text(encoding="utf-8"))
    knowledge = record.get("KB") if isinstance(record, dict) else None
    if isinstance(knowledge, dict) and "text_grammars_path" in knowledge:
        knowledge["text_grammars_path"] = PORTABLE_GRAMMARS
        path.write_text(json.dumps(record), encoding="utf-8")


def _hashes(folder: Path) -> dict[str, str]:
    """The SHA-256 of the game's files in ``folder`` (one just made)."""
    return {name: _sha256((folder / name).read_bytes()) for name in _FILES}


def _play_walkthrough(files: GameFiles) -> Any:
    """The game's first state if its walkthrough wins it, else ``None`` (``files`` of a game just made: its
    objective and SHA-256 are filled in here, from its files)."""
    objective = clean_feedback(_record_facts((files.folder / "game.json").read_bytes())[2])
    env = start_game(replace(files, objective=objective, sha256=_hashes(files.folder)))
    try:
        first, won = env.state, False
        for command in files.walkthrough:
            state, _, _ = env.step(command)
            won = bool(state["won"])
    finally:
        env.close()
    return first if won else None


def _install(build: BuildFolder, folder: Path) -> None:
    """Rename the build's entry to ``folder``, moving a bad entry (or a link) aside into the build folder first,
    where it is removed with it; when another process installed the entry first, theirs stays."""
    if os.path.lexists(folder):
        try:
            os.replace(folder, build.path / "replaced")
        except OSError:
            pass  # another process moved it already
    try:
        os.rename(build.entry, folder)
    except OSError:  # another process installed it first
        if not os.path.lexists(folder):
            raise
