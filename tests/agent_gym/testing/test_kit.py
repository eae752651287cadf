"""The conformance kit catches real bugs, each with a message naming the broken invariant.

Every broken env below breaks exactly one invariant that only the kit checks
(the rubric and Gymnasium's checker stay happy), so switching a kit check off
makes its test fail.
"""

import random

import gymnasium as gym
import numpy as np
import pytest

from agent_gym.core.context import Append, split_turns
from agent_gym.core.env import ToolEnv
from agent_gym.core.history import Message, ToolCall, ToolResult
from agent_gym.envs import _STOP_REASON
from agent_gym.testing import check_context_policy, check_copies, check_text_env
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


# ---------------------------------------------------------------------------- context policies
class DropsTheTask:
    """Shows the turns only: the agent never sees its question again."""

    name = "drops_the_task"

    def view(self, history):
        task, turns = split_turns(history)
        return [m for turn in turns for m in turn] if turns else list(history)


class ShowsNothing:
    """An empty view."""

    name = "shows_nothing"

    def view(self, history):
        return []


class ReplacesTheQuestion:
    """Keeps the system prompt, but swaps the question for a summary of its own."""

    name = "replaces_the_question"

    def view(self, history):
        return [history[0], Message.user("Summary: a question about a country."), *history[2:]]


class InventsAnAnswer:
    """Adds an assistant turn the agent never wrote."""

    name = "invents_an_answer"

    def view(self, history):
        return [*history, Message.assistant("<answer>Paris</answer>")]


class ReversesTheTurns:
    """Every message is from the history, but the turns come newest first."""

    name = "reverses_the_turns"

    def view(self, history):
        task, turns = split_turns(history)
        return [*task, *(m for turn in reversed(turns) for m in turn)]


class DropsTheLatest:
    """Hides the result the agent must react to."""

    name = "drops_the_latest"

    def view(self, history):
        return list(history[:-1]) if split_turns(history)[1] else list(history)


class Forgetful:
    """Drops the last message of the list it is given, in place."""

    name = "forgetful"

    def view(self, history):
        history.pop()
        return list(history)


class Moody:
    """Keeps one or two turns, at random."""

    name = "moody"
    rng = random.Random(0)

    def view(self, history):
        task, turns = split_turns(history)
        return [*task, *(m for turn in turns[-self.rng.choice([1, 2]) :] for m in turn)]


_CALL = ToolCall("lookup", {"country": "Peru"}, id="call_1_0")
_HISTORY = [
    Message.system("Use tools."),
    Message.user("What is the capital of Peru?"),
    Message.assistant("<tool_call>lookup Peru</tool_call>", (_CALL,)),
    Message.tool(_CALL, ToolResult("The capital of Peru is Lima.")),
    Message.assistant("I think"),
    Message.user("Format error: no answer."),
]


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (DropsTheTask(), r"'drops_the_task', history 0: the view must start with the task .* view\[0\] is \(assistant"),
        (ShowsNothing(), r"'shows_nothing', history 0: the view has 0 messages, fewer than the task's 2: it drops"),
        (ReplacesTheQuestion(), r"view\[1\] is \(user: 'Summary: a question about a country.'\)"),
        (InventsAnAnswer(), r"view\[6\] \(assistant: '<answer>Paris</answer>'\) is not a message of the history"),
        (ReversesTheTurns(), r"view\[4\] \(assistant: '<tool_call>lookup Peru.*never invent or reorder them"),
        (DropsTheLatest(), r"must end with the history's last message \(user: 'Format error: no answer.'\)"),
        (Forgetful(), r"'forgetful', history 0: view\(\) must leave the history as it was"),
    ],
    ids=lambda x: x.name if hasattr(x, "name") else "",
)
def test_check_context_policy_names_each_broken_rule(policy, message):
    with pytest.raises(AssertionError, match=message):
        check_context_policy(policy, [list(_HISTORY)])


def test_check_context_policy_catches_an_undeterministic_policy_and_bad_input():
    with pytest.raises(AssertionError, match="view\\(\\) must be deterministic"):
        check_context_policy(Moody(), [list(_HISTORY)] * 20)
    with pytest.raises(AssertionError, match="a context policy needs a name and a view"):
        check_context_policy(lambda history: history, [_HISTORY])
    with pytest.raises(ValueError, match="at least one history"):
        check_context_policy(Append(), [])
    with pytest.raises(ValueError, match="history 1 starts with an assistant message"):
        check_context_policy(Append(), [_HISTORY, _HISTORY[2:]])
    check_context_policy(Append(), [_HISTORY, _HISTORY[:2]])


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (DropsTheTask(), r"seed 0, step 1: the view must start with the task .* view\[0\] is \(assistant: '<tool"),
        (InventsAnAnswer(), r"seed 0, reset: view\[2\] \(assistant: '<answer>Paris</answer>'\) is not a message"),
        (DropsTheLatest(), r"seed 0, step 1: the view must end with the history's last message"),
    ],
    ids=lambda x: x.name if hasattr(x, "name") else "",
)
def test_check_text_env_rejects_an_env_with_a_broken_policy(policy, message):
    with pytest.raises(AssertionError, match=message):
        check_text_env(LookupEnv(context=policy), skip_gymnasium_checker=True)


class NewMessagesOfTheView(LookupEnv):
    """``new_messages`` computed as the view's last message: a step appends two or three."""

    def _observe(self, *args):
        obs, reward, terminated, truncated, info = super()._observe(*args)
        info["new_messages"] = info["messages"][-1:]
        return obs, reward, terminated, truncated, info


def test_check_text_env_rejects_new_messages_that_are_not_the_appended_ones():
    with pytest.raises(AssertionError, match=r"seed 0, step 1: info\['history'\] must be the previous history follo"):
        check_text_env(NewMessagesOfTheView(), skip_gymnasium_checker=True)
