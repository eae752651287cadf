"""Training rollouts stop on an env that fails: most episodes ending in an env error, or a reward that is not finite
(:func:`agent_trainers.rollout.training.check_episodes`, called on every rollout call)."""

from __future__ import annotations

import math
import re

import gymnasium as gym
import pytest

from agent_trainers.errors import EnvFailureError
from agent_trainers.rollout import RolloutConfig
from agent_trainers.rollout.training import EnvRollouts, check_episodes, task_rows
from agent_trainers.rollout.types import Trajectory, TurnSpan
from tests.agent_trainers.algorithms.trl_adapter.test_grpo import ScriptedLookup
from tests.conftest import LookupEnv


class FlakyLookup(LookupEnv):
    """Its step raises on the tasks in ``failing`` (a tool backend that is down for them)."""

    failing: frozenset[int] = frozenset()

    def step(self, action):
        if self.state is not None and self.state.task_index in self.failing:
            raise ConnectionError("search backend unreachable")
        return super().step(action)


class AlwaysFailing(FlakyLookup):
    failing = frozenset(range(4))


class FailingOnTask0(FlakyLookup):
    failing = frozenset({0})


class NaNBonus(LookupEnv):
    """A reward term that comes out NaN (a user's division by zero)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info["reward_terms"] = {**info["reward_terms"], "bonus": math.nan}
        return obs, math.nan, terminated, truncated, info


for cls in (AlwaysFailing, FailingOnTask0, NaNBonus):
    if f"Test/{cls.__name__}-v0" not in gym.registry:
        gym.register(f"Test/{cls.__name__}-v0", entry_point=cls, max_episode_steps=3)

CONFIG = RolloutConfig(max_new_tokens_per_turn=24, max_total_tokens=1024, temperature=1.0)


def play(env_id, tasks, tok, max_env_errors=0.5):
    rollouts = EnvRollouts(task_rows(env_id, range(4)), config=CONFIG, seed=3, max_env_errors=max_env_errors)
    return rollouts.play([(env_id, i) for i in tasks], 2, ScriptedLookup(tok), CONFIG)


def test_an_env_whose_step_always_raises_stops_training_naming_it_and_the_error(smollm2_tokenizer):
    """Before, every episode ended in env_error with reward 0 and training went on to exit 0."""
    with pytest.raises(EnvFailureError) as caught:
        play("Test/AlwaysFailing-v0", [0, 1], smollm2_tokenizer)
    message = str(caught.value)
    assert message.startswith("Test/AlwaysFailing-v0: 4 of 4 episodes ended in an env error")
    assert "rl.max_env_errors" in message and "ConnectionError: search backend unreachable" in message
    assert "\n" not in message


def test_a_minority_of_env_errors_is_played_through(smollm2_tokenizer):
    """2 of 8 episodes fail (task 0 of four): under the default share, the call returns them as env_error."""
    episodes = play("Test/FailingOnTask0-v0", [0, 1, 2, 3], smollm2_tokenizer)
    assert [t.stop_reason for t in episodes].count("env_error") == 2
    with pytest.raises(EnvFailureError, match="2 of 8 episodes"):
        play("Test/FailingOnTask0-v0", [0, 1, 2, 3], smollm2_tokenizer, max_env_errors=0.2)


@pytest.mark.filterwarnings("ignore:.*The reward is a NaN value")  # Gymnasium's env checker says so too
def test_a_nan_reward_stops_training_naming_the_term(smollm2_tokenizer):
    """Before, the NaN reached the step's statistics and crashed them ('float' object has no attribute
    'numerator')."""
    with pytest.raises(EnvFailureError, match=r"^Test/NaNBonus-v0: reward term bonus = nan at turn 1 of task 0"):
        play("Test/NaNBonus-v0", [0, 1], smollm2_tokenizer)


@pytest.mark.parametrize(
    ("terms", "reward", "named"),
    [
        ({"answer": math.inf}, math.inf, "reward term answer = inf"),
        ({"a": 0.5, "b": -math.inf}, -math.inf, "reward term b = -inf"),
        ({"a": 0.5}, math.nan, "step reward nan (its terms are finite)"),
    ],
)
def test_check_episodes_names_the_term_that_is_not_finite(terms, reward, named):
    ok = TurnSpan(0, 1, 1, reward=0.5, reward_terms={"a": 0.5})
    bad = TurnSpan(1, 2, 2, reward=reward, reward_terms=terms)
    episode = Trajectory("My/Env-v0", {}, 11, "t", 5, 0, turns=[ok, bad])
    with pytest.raises(EnvFailureError, match=rf"^My/Env-v0: {re.escape(named)} at turn 2 of task 5 \(seed 11\)"):
        check_episodes([episode])
    check_episodes([Trajectory("My/Env-v0", {}, 11, "t", 5, 0, turns=[ok])])
