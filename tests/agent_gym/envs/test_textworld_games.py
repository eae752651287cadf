"""The TextWorld game cache: games made by seed, the same everywhere, read back; bad or forged entries rebuilt
before Jericho sees them, bad folders named, killed builds cleaned up.

The cache tests copy two pristine entries (made once per module) into their own folder, so only the rebuild
they test costs a game's generation (about 1 s for these two-step quests).
"""

import fcntl
import filecmp
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import data_equivalence

pytest.importorskip("textworld")
import numpy as np
import textworld.generator

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.envs import textworld_games
from agent_gym.envs.textworld_cache import BUILD_PREFIX, remove_stale_builds
from agent_gym.envs.textworld_env import GameRef, GameTool
from agent_gym.envs.textworld_games import (
    PORTABLE_GRAMMARS,
    GameSettings,
    TextWorldCacheError,
    TextWorldCacheWarning,
    clean_feedback,
    default_cache_dir,
    draw_seeds,
    load_game,
    require_textworld,
)
from tests.conftest import REPO_ROOT

TINY = GameSettings(quest_length=2)
SEED = 4242


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A cache folder holding the games of ``TINY`` settings and seeds ``SEED`` and ``SEED + 1``, made here."""
    root = tmp_path_factory.mktemp("pristine")
    load_game(TINY, SEED, root)
    load_game(TINY, SEED + 1, root)
    return root


@pytest.fixture
def cache(pristine, tmp_path):
    """A private copy of the pristine cache, and the folder of the entry of ``SEED`` in it."""
    root = tmp_path / "cache"
    shutil.copytree(pristine, root, symlinks=True)
    return root, root / TINY.key(SEED, textworld.__version__)


def _no_rebuild(root):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a rebuild warns
        return load_game(TINY, SEED, root)


def test_an_entry_holds_the_checked_game_and_is_read_back_without_rebuilding(cache):
    root, entry = cache
    assert sorted(p.name for p in root.iterdir()) == [TINY.key(s, textworld.__version__) for s in (SEED, SEED + 1)]
    assert sorted(p.name for p in entry.iterdir()) == ["game.json", "game.z8", "meta.json"]
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["settings"] == {"world_size": 5, "nb_objects": 10, "quest_length": 2} and meta["seed"] == SEED
    before = (entry / "game.z8").stat().st_mtime_ns
    files = _no_rebuild(root)
    assert files.folder == entry and (entry / "game.z8").stat().st_mtime_ns == before
    assert len(files.walkthrough) == 2 and files.max_score >= 1 and files.objective and files.intro.startswith("-=")


def test_a_missing_entry_is_built(cache):
    root, entry = cache
    shutil.rmtree(entry)
    files = load_game(TINY, SEED, root)
    assert files.folder == entry and files.game_file.is_file()
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temporary folder left behind


def _forge(entry, name, data):
    """Write ``data`` as ``entry/name`` and record its SHA-256 in ``meta.json``, as a careful forger would."""
    (entry / name).write_bytes(data)
    _edit_meta(entry, lambda meta: meta["sha256"].update({name: hashlib.sha256(data).hexdigest()}))


def _edit_meta(entry, change):
    meta = json.loads((entry / "meta.json").read_text())
    change(meta)
    (entry / "meta.json").write_text(json.dumps(meta))


def _story(entry, **words):
    """The entry's story file with header words changed (``offset=value``); the checksum covers no header byte."""
    data = bytearray((entry / "game.z8").read_bytes())
    for offset, value in words.items():
        at = int(offset.removeprefix("at"), 16)
        data[at : at + 2] = value.to_bytes(2, "big")
    return bytes(data)


def _random_story(version):
    data = bytearray(np.random.default_rng(0).bytes(390_000))
    data[0] = version
    return bytes(data)


def _other(entry):
    """The entry of the other pristine game (seed ``SEED + 1``) beside ``entry``."""
    return entry.parent / TINY.key(SEED + 1, textworld.__version__)


def _link_outside(path, root):
    """Move ``path`` out of the cache ``root`` (beside it) and leave a symbolic link to it in its place."""
    outside = root.parent / f"outside-{path.name}"
    shutil.move(path, outside)
    path.symlink_to(outside)
    return outside


DAMAGE = {
    "truncated-z8": lambda e: (e / "game.z8").write_bytes((e / "game.z8").read_bytes()[:1000]),
    "missing-json": lambda e: (e / "game.json").unlink(),
    "garbage-meta": lambda e: (e / "meta.json").write_text("{not json"),
    "old-format": lambda e: (e / "meta.json").write_text(json.dumps({"format": 2})),
    # forged entries whose meta.json records the forged files' SHA-256: stopped before Jericho reads them
    "random-z8": lambda e: _forge(e, "game.z8", _random_story(0x8B)),
    "random-v8-z8": lambda e: _forge(e, "game.z8", _random_story(8)),
    "length-past-the-end": lambda e: _forge(e, "game.z8", _story(e, at1a=0xFFFF)),
    "static-memory-outside": lambda e: _forge(e, "game.z8", _story(e, at0e=0x0010)),
    "dictionary-in-the-header": lambda e: _forge(e, "game.z8", _story(e, at08=0x0002)),
    "globals-past-dynamic-memory": lambda e: _forge(e, "game.z8", _story(e, at0c=0xFFF0)),
    "oversized-z8": lambda e: _forge(e, "game.z8", (e / "game.z8").read_bytes() + bytes(600_000)),
    "another-games-entry": lambda e: shutil.copytree(e.parent / TINY.key(SEED + 1, "1.7.0"), e, dirs_exist_ok=True),
    "another-games-story": lambda e: _forge(
        e, "game.z8", (e.parent / TINY.key(SEED + 1, "1.7.0") / "game.z8").read_bytes()
    ),
    "max-score-1e8": lambda e: _edit_meta(e, lambda m: m.update(max_score=1e8)),
    "max-score-10**8": lambda e: _edit_meta(e, lambda m: m.update(max_score=10**8)),
    "long-walkthrough": lambda e: _edit_meta(e, lambda m: m.update(walkthrough=["look"] * 10**5)),
    "deep-meta": lambda e: (e / "meta.json").write_text("[" * 100_000 + "]" * 100_000),
    "deep-record": lambda e: _forge(e, "game.json", b"[" * 100_000 + b"]" * 100_000),
    "z8-linked-outside": lambda e: _link_outside(e / "game.z8", e.parent),
    "entry-linked-outside": lambda e: _link_outside(e, e.parent),
    "json-is-a-fifo": lambda e: ((e / "game.json").unlink(), os.mkfifo(e / "game.json")),
}


# Each damage costs a rebuild (~3 s): the default suite keeps one of each family (a cut file, a bad meta.json, a
# forged story, another game's files, deep JSON, a link out of the cache); the rest are slow tests, which CI runs
# after the default suite (scripts/test_slow.sh).
DEFAULT_DAMAGE = {
    "truncated-z8", "garbage-meta", "random-z8", "another-games-story", "deep-meta", "entry-linked-outside",
}  # fmt: skip


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(damage, id=name, marks=() if name in DEFAULT_DAMAGE else pytest.mark.slow)
        for name, damage in DAMAGE.items()
    ],
)
def test_a_corrupt_or_forged_entry_is_rebuilt_with_a_warning(cache, pristine, damage):
    root, entry = cache
    damage(entry)
    with pytest.warns(TextWorldCacheWarning, match="rebuilding the TextWorld cache entry"):
        files = load_game(TINY, SEED, root)
    assert files.folder == entry and not entry.is_symlink()
    assert all((entry / name).is_file() and not (entry / name).is_symlink() for name in ("game.z8", "game.json"))
    assert filecmp.cmp(files.folder / "game.json", pristine / entry.name / "game.json", shallow=False)
    assert sorted(p.name for p in root.iterdir()) == sorted(p.name for p in pristine.iterdir())  # nothing left over
    _no_rebuild(root)  # and it is whole again


def test_what_a_link_pointed_to_outside_the_cache_is_left_alone(cache):
    root, entry = cache
    outside = _link_outside(entry, root)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    with pytest.warns(TextWorldCacheWarning, match="not a folder"):
        load_game(TINY, SEED, root)
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before


def test_a_game_whose_files_change_after_they_were_read_refuses_to_start(cache):
    """Another game's story put in place after the read (its SHA-256 in meta.json too) is never played."""
    root, entry = cache
    files = load_game(TINY, SEED, root)
    _forge(entry, "game.z8", (_other(entry) / "game.z8").read_bytes())
    tool = GameTool(GameRef(TINY, SEED, str(root)), files)
    result = tool.call({"text": "look"})
    assert not result.ok and "game.z8 does not match its SHA-256" in result.content
    assert "changed since it was read" in result.content and tool.commands == []


def _build_folder(root, name, locked):
    """A build folder as a build leaves it: ``.lock``, ``entry/`` and textworld's folder in ``tmp/``."""
    folder = root / f"{BUILD_PREFIX}{name}"
    (folder / "entry").mkdir(parents=True)
    (folder / "entry" / "game.z8").write_bytes(b"half a game")
    (folder / "tmp" / "tmp_inform1234" / "Source").mkdir(parents=True)
    fd = os.open(folder / ".lock", os.O_WRONLY | os.O_CREAT)
    if locked:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a running build holds it
        return fd
    os.close(fd)  # as the kernel does when a build is killed
    return None


def test_a_killed_builds_folder_is_removed_by_the_next_build_and_a_running_ones_is_kept(cache):
    root, entry = cache
    _build_folder(root, "killed", locked=False)
    running = _build_folder(root, "running", locked=True)
    try:
        shutil.rmtree(entry)
        files = load_game(TINY, SEED, root)  # a build: it removes what killed builds left first
        assert files.folder == entry
        names = sorted(p.name for p in root.iterdir())
        assert names == sorted([f"{BUILD_PREFIX}running", entry.name, _other(entry).name])
    finally:
        os.close(running)
    assert remove_stale_builds(root) == [f"{BUILD_PREFIX}running"]  # once its build is gone


def test_textworld_compiles_in_the_build_folder_not_in_tmpdir(monkeypatch, tmp_path):
    """A build killed while Inform 7 runs would leave its project folder behind: it is made inside the cache."""
    from textworld.generator.inform7 import world2inform7

    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    projects, real = [], world2inform7.subprocess.check_output

    def record(cmd, *args, **kwargs):
        if "--project" in cmd:
            projects.append(Path(cmd[cmd.index("--project") + 1]))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(world2inform7.subprocess, "check_output", record)
    load_game(TINY, SEED, tmp_path / "cache")
    assert projects and all(p.parent.parent.name.startswith(BUILD_PREFIX) for p in projects)
    assert all(p.parent.name == "tmp" and p.parent.parent.parent == tmp_path / "cache" for p in projects)
    assert list(tmpdir.iterdir()) == []


def _wait_until_unlocked(lock: Path, timeout_s: float = 60.0) -> None:
    """Wait until no process holds ``lock`` (the kernel drops a ``flock`` when its last holder has exited)."""
    fd = os.open(lock, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return  # closing fd below releases it again
            except BlockingIOError:
                assert time.monotonic() < deadline, f"{lock} is still locked {timeout_s:.0f} s after the kill"
                time.sleep(0.05)
    finally:
        os.close(fd)


def test_a_build_killed_midway_leaves_nothing_behind(tmp_path):
    """kill -9 while Inform 7 compiles (its project folder exists), then the next build in the cache."""
    root, tmpdir = tmp_path / "cache", tmp_path / "tmpdir"
    tmpdir.mkdir()
    code = f"from agent_gym.envs.textworld_games import *; load_game({TINY!r}, {SEED}, {str(root)!r})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env={**os.environ, "TMPDIR": str(tmpdir)}, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while not [*root.glob(".*/tmp/tmp_inform*"), *tmpdir.glob("tmp_inform*")]:  # Inform 7 is compiling
            assert proc.poll() is None and time.monotonic() < deadline, "the build never reached Inform 7"
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert list(tmpdir.iterdir()) == []  # nothing in $TMPDIR
    (left,) = root.iterdir()
    assert left.name.startswith(BUILD_PREFIX)  # the killed build's folder
    _wait_until_unlocked(left / ".lock")  # a child forked but not yet exec'd shares the lock until it has died
    files = load_game(TINY, SEED, root)
    assert [p.name for p in root.iterdir()] == [files.folder.name]  # the next build removed it


def test_an_unwritable_cache_is_a_clear_error_naming_the_folder(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(TextWorldCacheError, match=r"cannot write the TextWorld game cache .*not-a-folder"):
        load_game(TINY, SEED, blocker)
    env = gym.make("AgentR1/TextWorld-v0", cache_dir=str(blocker))
    with pytest.raises(TextWorldCacheError, match="cache_dir= or set \\$AGENT_R1_CACHE"):
        env.reset(seed=0)


def test_a_game_whose_walkthrough_fails_is_redrawn_from_the_next_seed(monkeypatch, tmp_path):
    real, calls = textworld_games._play_walkthrough, []

    def fails_first(files):
        calls.append(files.walkthrough)
        return None if len(calls) == 1 else real(files)

    monkeypatch.setattr(textworld_games, "_play_walkthrough", fails_first)
    files = load_game(TINY, SEED, tmp_path)
    meta = json.loads((files.folder / "meta.json").read_text())
    assert len(calls) == 2 and meta["draw"] == 1 and meta["generator_seed"] == draw_seeds(SEED)[1] != SEED
    assert files.folder.name.endswith(f"seed{SEED}-f3")  # still the entry of the seed asked for


def test_generator_failures_are_clear_errors(monkeypatch, tmp_path):
    monkeypatch.setattr(textworld_games, "_make", lambda settings, seed, tmp: (("look", "look"), 1))
    monkeypatch.setattr(textworld_games, "_play_walkthrough", lambda files: None)
    with pytest.raises(TextWorldCacheError, match="takes quest_length commands and wins it in 10 draws from seed 7"):
        load_game(TINY, 7, tmp_path)
    monkeypatch.undo()

    def broken(options):
        raise textworld.generator.QuestGenerationError("no quest of that length")

    monkeypatch.setattr(textworld.generator, "make_game", broken)
    with pytest.raises(TextWorldCacheError, match=r"could not make a game .* QuestGenerationError: no quest"):
        load_game(TINY, 7, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-made is left
    for bad in ({"quest_length": 0}, {"world_size": -1}, {"nb_objects": 2.5}):
        with pytest.raises(ValueError, match="must be a positive int"):
            GameSettings(**bad)


def test_a_pickled_episode_comes_back_where_the_cache_lacks_its_game(cache):
    """As on another machine: unpickling makes the game again, then replays the commands sent so far."""
    root, entry = cache
    env = gym.make("AgentR1/TextWorld-v0", quest_length=2, cache_dir=str(root))
    env.reset(seed=0, options={"task_index": 0})
    env.step(env.unwrapped.oracle_action())
    blob = pickle.dumps(env)
    for folder in root.iterdir():
        shutil.rmtree(folder)
    twin = pickle.loads(blob)
    action = env.unwrapped.oracle_action()
    assert twin.unwrapped.oracle_action() == action
    assert data_equivalence(env.step(action), twin.step(action))


def test_the_same_seed_makes_the_same_game_in_any_cache(pristine, tmp_path):
    """The same game record and texts (the compiled game's header holds its compile date, so not its bytes)."""
    again = load_game(TINY, SEED, tmp_path)
    first = pristine / again.folder.name
    assert filecmp.cmp(again.folder / "game.json", first / "game.json", shallow=False)
    before = load_game(TINY, SEED, pristine)
    assert (again.objective, again.intro, again.walkthrough) == (before.objective, before.intro, before.walkthrough)
    other = load_game(TINY, SEED + 1, tmp_path)
    assert not filecmp.cmp(other.folder / "game.json", first / "game.json", shallow=False)


def test_task_0_is_the_same_game_on_every_machine():
    """A golden fingerprint (textworld 1.7.0): the game record of tw-0-0 and its walkthrough.

    It holds in a clone at any path, with any venv and an empty cache (``AGENT_R1_CACHE=$(mktemp -d)``): the
    record holds nothing of the machine (see the next test).
    """
    files = gym.make("AgentR1/TextWorld-v0").unwrapped.load_task(0).files
    digest = hashlib.sha256((files.folder / "game.json").read_bytes()).hexdigest()
    assert digest == "814d3b14c0e35c54f4952386f7bef83aaa9ef876827001aa195fbb20773455c7"
    assert files.walkthrough == (
        "go east",
        "open locker",
        "take knife from locker",
        "go west",
        "put knife on bed stand",
    )


def test_a_game_record_holds_nothing_of_the_machine_that_built_it(pristine):
    """TextWorld writes the absolute path of its grammar folder into game.json (so its digest depended on where
    the venv was); the entry keeps a fixed placeholder instead, and no absolute path at all."""
    text = (pristine / TINY.key(SEED, textworld.__version__) / "game.json").read_text()
    record = json.loads(text)
    assert record["KB"]["text_grammars_path"] == PORTABLE_GRAMMARS
    assert str(Path(textworld.__file__).parent) not in text and str(pristine) not in text
    assert str(Path.home()) not in text and sys.prefix not in text and not _absolute_paths(record)


def _absolute_paths(value):
    if isinstance(value, str):
        return [value] if value.startswith("/") and len(value) > 1 else []
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [p for v in items for p in _absolute_paths(v)]


def test_the_default_cache_follows_agent_r1_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENT_R1_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "textworld"
    monkeypatch.delenv("AGENT_R1_CACHE")
    assert default_cache_dir().parts[-3:] == (".cache", "agent-r1", "textworld")


def test_without_textworld_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)  # import textworld now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'agent-r1-gym\[textworld\]'"):
        require_textworld()
    with pytest.raises(ImportError, match="textworld"):
        gym.make("AgentR1/TextWorld-v0")


def test_clean_feedback_drops_the_prompt_status_line_and_end_menu():
    raw = "\nYou open the box.\n\n\n\n>          -= Attic =-0/3"
    assert clean_feedback(raw) == "You open the box."
    end = (
        "\nYou take the hat.\n\n\nYour score has just gone up by one point.\n\n\n          *** The End ***\n\n"
        "You scored 1 out of a possible 1, in 4 turns.\n\n\nWould you like to RESTART, RESTORE a saved game, QUIT or "
        "UNDO the last command?\n>          "
    )
    assert clean_feedback(end) == (
        "You take the hat.\n\nYour score has just gone up by one point.\n\n*** The End ***\n\n"
        "You scored 1 out of a possible 1, in 4 turns."
    )
