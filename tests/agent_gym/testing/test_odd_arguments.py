"""A planted bug (a NaN reward for an empty argument) is found by every tool of the kit, and truncation is forced.

Issue 41.6: ``play_episode`` (200 episodes), ``hostile_actions`` and ``check_text_env`` all missed a reward term
that is NaN when a tool that takes two arguments gets an empty one, because no strategy sent an empty,
whitespace-only, missing or wrongly typed argument beside valid ones to a real tool; and the kit passed an id
registered with plain ``gym.register`` at ``max_episode_steps=3`` when no episode of its seeds happened to reach
the limit.
"""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agent_gym import RewardError, RewardTerm, ToolResult, Transition, register_env, tool
from agent_gym.rewards import env_rubric
from agent_gym.testing import check_odd_arguments, check_text_env, odd_arguments
from agent_gym.testing.strategies import hostile_actions, odd_tool_arguments, play_episode
from tests.conftest import LookupEnv, LookupTool

UNITS = {"km": 1000.0, "mi": 1609.344, "ft": 0.3048}


@tool
def convert(amount: float, unit: str) -> ToolResult:
    """Convert an amount to metres.

    Args:
        amount: How many units.
        unit: The unit: km, mi or ft (anything else is read as metres).
    """
    return ToolResult(f"{amount * UNITS.get(unit.strip().lower(), 1.0)} m")


def lettered(t: Transition) -> float:
    """The share of letters in the units of the conversions that worked; the planted bug: NaN for an empty unit."""
    units = [call.arguments["unit"] for call, result in t.results if call.name == "convert" and result.ok]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "mean of empty slice": the bug itself
        shares = [np.mean([ch.isalpha() for ch in unit.strip()]) for unit in units]
        return float(np.mean(shares)) if shares else 0.0


class PlantedEnv(LookupEnv):
    """The test env's lookup, plus a two-argument tool and a reward term that is NaN for an empty unit."""

    def __init__(self, **kwargs):
        term = RewardTerm("lettered", lettered, 0.01)
        super().__init__(rubric=env_rubric(reward="process", answer_metric="em", process_terms=[term]), **kwargs)

    def make_tools(self, task):
        return [LookupTool(), convert]


PLANTED_ID = "Test/PlantedNaN-v0"
register_env(PLANTED_ID, PlantedEnv, max_episode_steps=4)
NAN = "reward term 'lettered' returned nan, not a finite number"
PLAIN_ID = "Test/PlainLookup-v0"
if PLAIN_ID not in gym.registry:  # plain gym.register: a TimeLimit, no RecordStopReason
    gym.register(PLAIN_ID, entry_point=LookupEnv, max_episode_steps=3)


def test_check_text_env_finds_the_nan_reward_and_names_the_call():
    with pytest.raises(AssertionError) as caught:
        check_text_env(gym.make(PLANTED_ID))
    assert str(caught.value) == (
        "seed 0, tool 'convert' called with unit='': a reward term broke its contract (a finite number inside "
        f"its declared bounds): {NAN}"
    )


# Finding is what is tested: without the shrink phase (which spent ~74 of this test's 75 s on 2 cores making the
# episode that found it shorter) the same draws run and the same error is raised.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def test_drawn_episodes_find_it():
    env = PlantedEnv()

    @settings(
        max_examples=200, derandomize=True, database=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK
    )
    @given(st.data())
    def episodes(data):
        play_episode(data, env)

    with pytest.raises(RewardError, match=NAN):
        episodes()


def test_hostile_actions_with_the_tools_find_it():
    env = PlantedEnv()
    env.reset(seed=0)

    @settings(max_examples=200, derandomize=True, database=None)
    @given(hostile_actions(["lookup", "convert"], ["country", "amount", "unit"], tools=env.tools.values()))
    def hostile(action):
        env.reset(seed=0)
        env.step(action)

    with pytest.raises(RewardError, match=NAN):
        hostile()


@pytest.mark.parametrize("seed", range(6))
def test_a_plain_gym_register_id_fails_whatever_the_seeds(seed):
    """The kit's own episodes truncate only when its random policy does not answer in time; the episode that
    never answers reaches the turn limit every time."""
    with pytest.raises(AssertionError, match=r"^a truncated step must name its info\['stop_reason'\]"):
        check_text_env(gym.make(PLAIN_ID), seeds=(seed,))


def test_an_env_that_cannot_be_truncated_by_calls_is_a_warning_not_a_pass_in_silence():
    class AnswersOnEveryCall(LookupEnv):  # every step ends the episode: the turn limit is out of reach
        def step(self, action):
            obs, reward, _, truncated, info = super().step(self.parser.format_answer("Paris"))
            return obs, reward, True, truncated, info

    with pytest.warns(UserWarning, match="no episode reached the turn limit of 3 steps without an answer"):
        check_text_env(gym.wrappers.TimeLimit(AnswersOnEveryCall(), 3), skip_gymnasium_checker=True)


def test_odd_arguments_are_empty_blank_missing_and_wrongly_typed():
    labels = [label for label, _ in odd_arguments(LookupTool())]
    assert labels == [
        "no arguments",
        "country=''",
        "country='   '",
        "country='\\n\\t '",
        "country=0",
        "country=None",
        "country=True",
        "country=[]",
        "country={}",
    ]
    assert check_odd_arguments(LookupEnv()) == len(labels)


@settings(max_examples=50, database=None)
@given(odd_tool_arguments(LookupTool(), ["France", "Peru"]))
def test_odd_tool_arguments_break_one_thing(arguments):
    value = arguments.get("country")
    assert not (isinstance(value, str) and value.strip()), json.dumps(arguments)
