"""AgentR1/TextWorld-v0: the oracle wins, tasks are deterministic, rewards follow the game, bad input is refused.

Games come from the default cache (``$AGENT_R1_CACHE/textworld``), as in the all-ids tests: the first run
makes them (about 2 s each), later runs read them. The default tests play task indices ``FAST`` of
``task_seed`` 0 and ``HELD_ASIDE_FAST`` of the held-aside family ``task_seed=1``; ``-m slow`` plays 50 games
of the held-aside family, 50 resets and 10 long games.
"""

import re

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("textworld")

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.core.context import turn_starts
from agent_gym.core.history import ToolCall, ToolResult
from agent_gym.core.parsing import ParsedAction
from agent_gym.core.rubric import Transition
from agent_gym.envs.textworld_env import (
    GAME_VERBS,
    GameTool,
    command_problem,
    game_progress,
    game_seed,
    textworld_rubric,
)
from agent_gym.envs.textworld_games import GameSettings
from agent_gym.testing import check_step, check_view, run_episode
from agent_gym.testing.strategies import actions

ID = "AgentR1/TextWorld-v0"
FAST = range(3)
HELD_ASIDE = 1
HELD_ASIDE_FAST = range(3)
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def oracle_episode(env, index, seed=0):
    """The oracle's steps on task ``index``: ``[(action, obs, reward, terminated, truncated, info), ...]``."""
    return run_episode(env, env.unwrapped.oracle_action, seed=seed, options={"task_index": index}, max_steps=60)[1:]


def call(env, text):
    return env.unwrapped.parser.format_call("command", {"text": text})


def test_the_registry_row_plays_household_games_with_a_50_turn_limit():
    env = gym.make(ID)
    assert env.spec.max_episode_steps == 50 and env.unwrapped.num_tasks() == 1_000
    assert env.unwrapped.settings == GameSettings(world_size=5, nb_objects=10, quest_length=5)
    _, info = env.reset(seed=0, options={"task_index": 0})
    assert [t["function"]["name"] for t in info["tools"]] == ["command"] and info["task_id"] == "tw-0-0"
    assert env.unwrapped.task_index_of("tw-0-2") == 2


def _wins(env, index, seed=0):
    steps = oracle_episode(env, index, seed)
    *_, terminated, truncated, info = steps[-1]
    won = terminated and info["metrics"]["answer_won"] == 1.0 and info["stop_reason"] == "answer"
    return won, len(steps), env.unwrapped.state.task.files.walkthrough


@pytest.mark.parametrize("index", HELD_ASIDE_FAST)
def test_the_oracle_wins_held_aside_games_in_walkthrough_length(index):
    won, turns, walkthrough = _wins(gym.make(ID, task_seed=HELD_ASIDE), index)
    assert won and turns == len(walkthrough) == 5


@pytest.mark.slow
def test_the_oracle_wins_at_least_99_percent_of_50_held_aside_games():
    env = gym.make(ID, task_seed=HELD_ASIDE)
    wins = [_wins(env, i)[0] for i in range(50)]
    assert sum(wins) / len(wins) >= 0.99, f"the oracle won {sum(wins)} of {len(wins)}"


@pytest.mark.parametrize("count", [1, pytest.param(10, marks=pytest.mark.slow)])
def test_the_long_variant_needs_20_steps_and_the_oracle_wins_it(count):
    env = gym.make(ID, quest_length=20)
    for index in range(count):
        won, turns, walkthrough = _wins(env, index)
        assert won and turns == len(walkthrough) == 20


@pytest.mark.parametrize("indices", [FAST, pytest.param(range(50), marks=pytest.mark.slow)], ids=["fast", "50"])
def test_every_task_index_of_a_range_resets(indices):
    env = gym.make(ID)
    seen = set()
    for index in indices:
        obs, info = env.reset(seed=0, options={"task_index": index})
        files = env.unwrapped.state.task.files
        assert env.observation_space.contains(obs) and files.objective in obs and files.intro in obs
        assert info["evidence_total"] == files.max_score >= 1 and info["task_id"] == f"tw-0-{index}"
        seen.add(files.folder.name)
    assert len(seen) == len(indices)  # every index is its own game


def test_the_same_index_is_the_same_game_with_the_same_observations():
    assert [game_seed(0, i) for i in range(3)] == [game_seed(0, i) for i in range(3)]
    assert game_seed(0, 0) != game_seed(1, 0) and game_seed(0, 0) != game_seed(0, 1)
    script = ["look", "inventory", "dance", "go north"]
    runs = []
    for _ in range(2):
        env = gym.make(ID)  # a new env each time: nothing carries over but the cache
        obs, info = env.reset(seed=7, options={"task_index": 1})
        record = [obs, info["task_id"]]
        for text in script:
            record.append(env.step(call(env, text))[:4])
        record.extend(step[:4] for step in oracle_episode(env, 1, seed=7))
        runs.append(record)
    assert runs[0] == runs[1]
    other = gym.make(ID)
    assert other.reset(seed=7, options={"task_index": 2})[0] != runs[0][0]


def test_process_rewards_follow_the_games_progress_and_win():
    env = gym.make(ID)
    steps = oracle_episode(env, 0)
    n = len(steps)
    raw = [info["reward_raw"] for *_, info in steps]
    assert [r["progress"] for r in raw] == [1.0] * n  # every walkthrough command shortens the winning policy
    assert [r["won"] for r in raw] == [0.0] * (n - 1) + [1.0]
    assert [r["score"] for r in raw] == [0.0] * (n - 1) + [1.0]  # one quest: its point comes with the win
    assert [r["step_cost"] for r in raw] == [-1.0] * (n - 1) + [0.0]
    assert sum(step[2] for step in steps) == pytest.approx(0.05 * n + 0.2 + 1.0 - 0.01 * (n - 1))
    assert steps[-1][5]["metrics"]["evidence_recall"] == 1.0
    assert env.unwrapped.reward_range == pytest.approx((-0.16, 1.25))
    assert steps[-1][2] == pytest.approx(1.25)  # the winning step is the range's high end


def test_walking_away_from_the_goal_is_negative_progress_and_the_lowest_step():
    env = gym.make(ID)
    for index in FAST:
        walkthrough = env.unwrapped.load_task(index).files.walkthrough
        k = next((i for i, c in enumerate(walkthrough[:-1]) if c.split()[-1] in OPPOSITE and c.startswith("go ")), None)
        if k is not None:
            break
    assert k is not None, "no game of FAST walks through a door before its last step"
    env.reset(seed=0, options={"task_index": index})
    for command in walkthrough[: k + 1]:
        env.step(call(env, command))
    broken = "<tool_call>{oops</tool_call>"  # malformed too: the process preset's lowest step
    _, reward, *_, info = env.step(call(env, "go " + OPPOSITE[walkthrough[k].split()[-1]]) + broken)
    assert info["reward_raw"]["progress"] == -1.0 and info["tool_calls"][0]["ok"]
    assert reward == pytest.approx(-0.1 - 0.05 - 0.01) == pytest.approx(env.unwrapped.reward_range[0])
    assert env.unwrapped.oracle_action() == call(env, walkthrough[k])  # the oracle leads back


def test_giving_up_ends_the_episode_unwon():
    env = gym.make(ID)
    env.reset(seed=0, options={"task_index": 0})
    env.step(env.unwrapped.oracle_action())
    _, reward, terminated, _, info = env.step("<answer>I give up</answer>")
    assert terminated and info["stop_reason"] == "answer" and reward == 0.0
    assert info["metrics"]["answer_won"] == 0.0 and info["metrics"]["evidence_recall"] == 0.0


def test_the_outcome_preset_pays_the_win_and_shaping_pays_the_score():
    outcome = gym.make(ID, reward="outcome")
    steps = oracle_episode(outcome, 0)
    assert [s[2] for s in steps] == [0.0] * (len(steps) - 1) + [1.0]
    assert outcome.unwrapped.reward_range == (-1.0, 1.0)
    outcome.reset(seed=0, options={"task_index": 0})
    rewards = [outcome.step("junk")[1] for _ in range(3)]
    while not outcome.unwrapped.state.done:
        *_, info = outcome.step(outcome.unwrapped.oracle_action())
    assert rewards == [0.0] * 3 and info["reward_raw"]["outcome"] == pytest.approx(5 / 8 - 1)  # -1 approached
    shaped = gym.make(ID, shaping_gamma=1.0, reward_weights={"progress": 0.0})
    steps = oracle_episode(shaped, 0)
    assert sum(s[5]["reward_terms"]["shaping"] for s in steps) == pytest.approx(0.2)  # 0.2 (Φ_end - Φ_0)
    assert [s[5]["reward_terms"]["progress"] for s in steps] == [0.0] * len(steps)  # a logged metric


def test_bad_reward_settings_are_refused():
    with pytest.raises(ValueError, match="'process' and 'outcome'"):
        gym.make(ID, reward="gated")
    for gamma in (0.0, 1.5, True):
        with pytest.raises(ValueError, match="shaping_gamma"):
            textworld_rubric("process", gamma)
    with pytest.raises(ValueError, match="answer_metric"):
        gym.make(ID, answer_metric="substring")


def test_game_progress_sums_the_commands_and_clips():
    def result(progress):
        return ToolCall("command", {"text": "x"}), ToolResult("ok", metadata={"progress": progress})

    step = Transition(turn=1, action=ParsedAction(raw=""), results=(result(1), result(1), result(1)))
    assert game_progress(step) == 1.0
    assert game_progress(Transition(turn=1, action=ParsedAction(raw=""), results=(result(1), result(-1)))) == 0.0


def test_the_tags_format_plays_the_game():
    env = gym.make(ID, action_format="tags")
    steps = oracle_episode(env, 0)
    assert steps[0][0].startswith("<command>") and steps[-1][3] and steps[-1][5]["metrics"]["answer_won"] == 1.0
    env.reset(seed=0, options={"task_index": 0})
    obs, reward, terminated, _, info = env.step("<command>look")
    assert not terminated and info["format_errors"] == ["<command> is not closed with </command>"]
    assert "Format error" in obs and reward == pytest.approx(-0.1 - 0.01)
    _, _, _, _, info = env.step("<command>inventory</command>")
    assert info["tool_calls"][0]["ok"] and info["tool_calls"][0]["content"].startswith("You are carrying")


@pytest.mark.parametrize(
    "context", [{"context": "window", "context_turns": 1}, {"context": "fold", "context_turns": 2}], ids=str
)
def test_the_oracle_wins_under_every_context_policy(context):
    env = gym.make(ID, **context)
    steps = oracle_episode(env, 0)
    assert steps[-1][3] and steps[-1][5]["metrics"]["answer_won"] == 1.0
    for *_, info in steps:
        check_view(info["messages"], info["history"])
    last = steps[-1][5]
    assert len(turn_starts([m["role"] for m in last["messages"]])) < len(steps)  # older turns are left out


PRIVILEGED = [
    "enable print state option", "Enable Print State Option", "disable print state option", "restrict commands",
    "tw-print version", "tw-print player id", "tw-extra-infos score", "tw-trace-actions", "help", "goal",
]  # fmt: skip
"""TextWorld's debug and meta commands: the first prints every room, container and key and the score after each
command from then on; all of them passed the old refuse-list."""


@pytest.mark.parametrize(
    "text", ["restart", "UNDO", "save", "quit", "again", "wait", "dance wildly", "look. go east", "look, go east",
             "take key then go east", "go\u00e9ast", "x" * 201, "", "   ", *PRIVILEGED],
)  # fmt: skip
def test_commands_that_would_break_the_game_are_refused(text):
    env = gym.make(ID)
    env.reset(seed=0, options={"task_index": 0})
    _, _, terminated, _, info = env.step(call(env, text))
    (result,) = info["tool_calls"]
    assert not terminated and not result["ok"] and result["content"].startswith("Error: ")
    assert env.unwrapped.tools["command"].commands == []  # nothing reached the game
    assert env.unwrapped.oracle_action() == call(env, env.unwrapped.state.task.files.walkthrough[0])


def test_privileged_commands_are_refused_by_name_and_the_game_never_prints_its_state():
    env = gym.make(ID)
    env.reset(seed=0, options={"task_index": 0})
    for text in PRIVILEGED:
        _, _, _, _, info = env.step(call(env, text))
        (result,) = info["tool_calls"]
        word = text.split()[0].lower()
        assert result["content"] == (
            f"Error: {word!r} is not a game command here (meta and debug commands are refused); start a command with "
            "one of: close, drop, eat, examine, go, insert, inventory, lock, look, open, put, take, unlock"
        )
    for command in env.unwrapped.state.task.files.walkthrough:
        obs, *_ = env.step(call(env, command))
        assert "STATE START" not in obs and "Room:" not in obs


def test_every_verb_of_textworld_and_its_short_forms_reach_the_game():
    from textworld.generator.data import KnowledgeBase

    templates = KnowledgeBase.default().inform7_commands.values()
    assert {t.split()[0] for t in templates} <= GAME_VERBS  # the game's own verbs are all allowed
    env = gym.make(ID)
    env.reset(seed=0, options={"task_index": 0})
    for text in ("l", "i", "inv", "x bed", "get bed", "pick up bed", "n", "s", "e", "w", "north", "examine bed"):
        _, _, _, _, info = env.step(call(env, text))
        assert info["tool_calls"][0]["ok"], text
    assert len(env.unwrapped.tools["command"].commands) == 12


def test_the_game_answers_what_it_does_not_understand_and_arguments_are_checked():
    env = gym.make(ID)
    env.reset(seed=0, options={"task_index": 0})
    _, _, _, _, info = env.step(call(env, "take the unicorn"))
    assert info["tool_calls"][0]["ok"] and info["tool_calls"][0]["content"] == "You can't see any such thing."
    for args in ('{"text": 5}', '{"command": "look"}', "{}"):
        _, _, _, _, info = env.step(f'<tool_call>{{"name": "command", "arguments": {args}}}</tool_call>')
        assert info["tool_calls"][0]["content"].startswith("Error: invalid arguments for command")


def test_commands_after_the_winning_one_are_refused():
    env = gym.make(ID)
    walkthrough = env.unwrapped.load_task(0).files.walkthrough
    env.reset(seed=0, options={"task_index": 0})
    for command in walkthrough[:-1]:
        env.step(call(env, command))
    _, _, terminated, _, info = env.step(call(env, walkthrough[-1]) + call(env, "look"))
    assert terminated and [c["ok"] for c in info["tool_calls"]] == [True, False]
    assert info["tool_calls"][1]["content"] == "Error: the game is over; it takes no more commands"


def test_a_closed_game_picks_up_where_it_was():
    env = gym.make(ID)
    steps = oracle_episode(env, 0)
    env.reset(seed=0, options={"task_index": 0})
    for i, (action, obs, *_) in enumerate(steps):
        if i == 2:
            env.close()  # stops the emulator; the next command starts it again and replays the first two
        assert env.step(action)[0] == obs


_ENV = gym.make(ID)


@given(actions(tool_names=["command"]))
@settings(max_examples=100)
def test_any_action_is_an_observation_never_a_crash(action):
    _ENV.reset(seed=0, options={"task_index": 2})
    obs, reward, terminated, truncated, info = _ENV.step(action)
    check_step(_ENV.unwrapped, obs, reward, terminated, truncated, info)


@given(st.text(max_size=60))
def test_the_command_check_lets_only_one_in_game_action_through(text):
    command = " ".join(text.split())
    if command_problem(command) is None:
        assert re.fullmatch(r"[A-Za-z0-9'\- ]{1,200}", command) and "then" not in command.lower().split()
        assert command.split()[0].lower() in GAME_VERBS
        return
    task = _ENV.unwrapped.load_task(2)
    tool = GameTool(task.ref, task.files)
    result = tool.call({"text": text})
    assert not result.ok and result.metadata["reason"] == "bad_command" and tool.commands == []
