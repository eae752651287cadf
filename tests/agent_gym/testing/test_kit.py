"""The conformance kit catches real bugs, each with a message naming the broken invariant.

Every broken env below breaks exactly one invariant that only the kit checks
(the rubric and Gymnasium's checker stay happy), so switching a kit check off
makes its test fail.
"""

import random

import gymnasium as gym
import numpy as np
import pytest

from agent_gym.core.env import ToolEnv
from agent_gym.envs import _STOP_REASON
from agent_gym.testing import check_copies, check_text_env
from tests.conftest import LookupEnv, LookupTool


class FiveStars(LookupEnv):
    """The issue's user env: ``score_answer`` returns 5.0."""

    def score_answer(self, task, answer):
        return {"em": 5.0, "f1": 5.0}


class FiveStarsForTheGold(LookupEnv):
    """Out-of-range scores only for the right answer: only the oracle's episode finds it."""

    def score_answer(self, task, answer):
        return {"em": 5.0 if answer == task.capital else 0.0}


class LongObservation(LookupEnv):
    def _render_observation(self):
        text = super()._render_observation()
        return text if self.state.turn == 0 else "x" * (self.observation_space.max_length + 1)


class RewardNotTheSum(LookupEnv):
    def _observe(self, *args):
        obs, reward, terminated, truncated, info = super()._observe(*args)
        return obs, reward + 0.001, terminated, truncated, info


class NoMetrics(LookupEnv):
    def _observe(self, *args):
        obs, reward, terminated, truncated, info = super()._observe(*args)
        info.pop("metrics", None)
        return obs, reward, terminated, truncated, info


class NarrowRange(LookupEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.reward_range = (-0.01, 0.01)


class RenamedTerm(LookupEnv):
    def _observe(self, *args):
        obs, reward, terminated, truncated, info = super()._observe(*args)
        info["reward_terms"] = {("evidence_gain" if k == "evidence" else k): v for k, v in info["reward_terms"].items()}
        return obs, reward, terminated, truncated, info


class GoesOnAfterTheEnd(LookupEnv):
    def _require_running(self):
        assert self._state is not None
        return self._state


class GoesOnAndHasNoOracle(GoesOnAfterTheEnd):
    oracle_action = ToolEnv.oracle_action  # so only the random-policy episodes can notice


class UnseededTool(LookupTool):
    def run(self, ctx, country):
        return f"{random.random()}"


class Unseeded(LookupEnv):
    def make_tools(self, task):
        return [UnseededTool()]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (FiveStars(), r"score bounds: score_answer must return scores in \[0, 1\], got em=5.0"),
        (FiveStarsForTheGold(), r"score bounds: .* got em=5.0 for answer 'Lima'"),
        (LongObservation(), r"observation of length 1000001 is not in TextSpace"),
        (RewardNotTheSum(), r"reward terms .* sum to .*, not to the reward"),
        (NoMetrics(), r"a terminated step must report info\['metrics'\]"),
        (NarrowRange(), r"reward .* outside reward_range \(-0.01, 0.01\)"),
        (RenamedTerm(), r"info\['reward_terms'\] names .*'evidence_gain'.* are not the rubric's terms"),
        (GoesOnAfterTheEnd(), r"step\(\) after termination must raise EpisodeOverError"),
        (GoesOnAndHasNoOracle(), r"seed 0: step\(\) after termination must raise EpisodeOverError"),
        (Unseeded(), r"seed 0: step 1 differs between two runs with the same seed"),
    ],
    ids=lambda x: type(x).__name__ if isinstance(x, LookupEnv) else "",
)
def test_the_kit_names_each_broken_invariant_with_default_seeds(env, message):
    with pytest.raises(AssertionError, match=message):
        check_text_env(env, skip_gymnasium_checker=True)


def test_the_kit_passes_a_correct_env_bare_and_wrapped():
    check_text_env(LookupEnv())
    if "Test/KitLookup-v0" not in gym.registry:
        gym.register(
            "Test/KitLookup-v0", entry_point=LookupEnv, max_episode_steps=4, additional_wrappers=(_STOP_REASON,)
        )
    check_text_env(gym.make("Test/KitLookup-v0"), max_steps=10)  # the time limit ends some episodes first


class Recording(LookupEnv):
    ends: list[str] = []

    def step(self, action):
        out = super().step(action)
        if out[2]:
            Recording.ends.append(self.state.answer)
        return out


def test_every_kit_episode_ends_and_the_oracle_answers_right():
    Recording.ends = []
    check_text_env(Recording(), seeds=(0, 1, 2), skip_gymnasium_checker=True)
    assert len(Recording.ends) == 2 * 3 + 1  # two runs per seed, each answered; then the oracle's episode
    assert Recording.ends[-1] in {"Paris", "Tokyo", "Nairobi", "Lima"}


class ReseedOnCopy(LookupEnv):
    """A copy that draws its noise from a fresh generator: it looks fine, and diverges."""

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._np_random = np.random.default_rng(12345)


class LosesWeights(LookupEnv):
    """A copy that scores differently but shows the same observations."""

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.rubric = self.rubric.with_weights(step_cost=0.02)


def test_check_copies_catches_a_copy_that_diverges():
    check_copies(LookupEnv(tool_noise={"failure_prob": 0.5}), seed=4)
    with pytest.raises(AssertionError, match="made before step 1: step 1 differs"):
        check_copies(ReseedOnCopy(tool_noise={"failure_prob": 0.5}), seed=4)
    with pytest.raises(AssertionError, match="made before step 1: step 1 differs"):
        check_copies(LosesWeights(), seed=4)
