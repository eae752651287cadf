"""The TextWorld game cache: games made by seed, the same everywhere, read back; bad entries rebuilt, bad folders named.

The cache tests copy one pristine entry (made once per module) into their own folder, so only the rebuild
they test costs a game's generation (about 1 s for these two-step quests).
"""

import filecmp
import hashlib
import json
import pickle
import shutil
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import data_equivalence

pytest.importorskip("textworld")
import textworld.generator

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.envs import textworld_games
from agent_gym.envs.textworld_games import (
    GameSettings,
    TextWorldCacheError,
    TextWorldCacheWarning,
    clean_feedback,
    default_cache_dir,
    draw_seeds,
    load_game,
    require_textworld,
)

TINY = GameSettings(quest_length=2)
SEED = 4242


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A cache folder holding one game of ``TINY`` settings, made here."""
    root = tmp_path_factory.mktemp("pristine")
    load_game(TINY, SEED, root)
    return root


@pytest.fixture
def cache(pristine, tmp_path):
    """A private copy of the pristine cache, and the entry's folder in it."""
    root = tmp_path / "cache"
    shutil.copytree(pristine, root)
    (entry,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    return root, entry


def _no_rebuild(root):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a rebuild warns
        return load_game(TINY, SEED, root)


def test_an_entry_holds_the_checked_game_and_is_read_back_without_rebuilding(cache):
    root, entry = cache
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


@pytest.mark.parametrize(
    "damage",
    [
        lambda e: (e / "game.z8").write_bytes((e / "game.z8").read_bytes()[:1000]),  # truncated game
        lambda e: (e / "game.json").unlink(),
        lambda e: (e / "meta.json").write_text("{not json"),
        lambda e: (e / "meta.json").write_text(json.dumps({"format": 999})),
    ],
    ids=["truncated-z8", "missing-json", "garbage-meta", "old-format"],
)
def test_a_corrupt_entry_is_rebuilt_with_a_warning(cache, pristine, damage):
    root, entry = cache
    damage(entry)
    with pytest.warns(TextWorldCacheWarning, match="rebuilding the TextWorld cache entry"):
        files = load_game(TINY, SEED, root)
    assert filecmp.cmp(files.folder / "game.json", pristine / entry.name / "game.json", shallow=False)
    _no_rebuild(root)  # and it is whole again


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
    assert files.folder.name.endswith(f"seed{SEED}-f2")  # still the entry of the seed asked for


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
    """A golden fingerprint (textworld 1.7.0): the game record of tw-0-0 and its walkthrough."""
    files = gym.make("AgentR1/TextWorld-v0").unwrapped.load_task(0).files
    digest = hashlib.sha256((files.folder / "game.json").read_bytes()).hexdigest()
    assert digest == "a21c16b92fff1a52dca5c5e64d8fa8c4e5254738b0073bfde687acd0bb2844ff"
    assert files.walkthrough == (
        "go east",
        "open locker",
        "take knife from locker",
        "go west",
        "put knife on bed stand",
    )


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
