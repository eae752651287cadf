"""The conformance kit, check by check: exact messages, boundaries, defaults and the episodes it plays.

``test_kit.py`` plants one broken invariant per env; this file pins what each check accepts and refuses
at its edges, and what the kit's own policies and episode loops do, so that loosening a check, shortening
an episode or unseeding a policy fails a test.
"""

import pickle

import gymnasium as gym
import jsonschema
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.wrappers import TimeLimit

from agent_gym.core.env import ToolEnv
from agent_gym.core.rubric import RewardTerm, Rubric
from agent_gym.core.tool import Tool
from agent_gym.testing import (
    check_answer_scores,
    check_copies,
    check_step,
    check_text_env,
    odd_arguments,
    random_call,
    random_episode_actions,
    run_episode,
)
from agent_gym.wrappers import RecordStopReason
from tests.conftest import LookupEnv


# ---------------------------------------------------------------------------- envs the kit is run on
class _NoAnswers:
    """A parser whose answers are plain text (never final); everything else is the real parser's."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def format_answer(self, answer: str) -> str:
        return f"I think it is {answer}"


class Endless(LookupEnv):
    """Episodes never end by themselves (the kit's answers are not answers here); counts resets and steps."""

    oracle_action = ToolEnv.oracle_action  # no oracle: the kit's random policy plays

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.episodes: list[int] = []
        self.reset_seeds: list[int | None] = []
        self.actions: list[str] = []

    @property
    def parser(self):
        return _NoAnswers(super().parser)

    def reset(self, *, seed=None, options=None):
        self.episodes.append(0)
        self.reset_seeds.append(seed)
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.episodes[-1] += 1
        self.actions.append(action)
        return super().step(action)


def _valid_step(env: LookupEnv):
    env.reset(seed=0, options={"task_index": 0})
    return list(env.step("<answer>Paris</answer>"))


# ---------------------------------------------------------------------------- check_step
def test_check_step_accepts_both_ends_of_the_reward_range():
    env = LookupEnv()
    obs, _, term, trunc, info = _valid_step(env)
    low, high = env.reward_range
    for reward, part in ((low, "format"), (high, "answer")):
        terms = dict.fromkeys(info["reward_terms"], 0.0) | {part: reward}
        check_step(env, obs, reward, term, trunc, {**info, "reward_terms": terms})


@pytest.mark.parametrize("offset", [-0.5, 0.5])
def test_check_step_refuses_a_reward_just_outside_the_range(offset):
    env = LookupEnv()
    obs, _, term, trunc, info = _valid_step(env)
    low, high = env.reward_range
    reward = low + offset if offset < 0 else high + offset
    terms = dict.fromkeys(info["reward_terms"], 0.0) | {"answer": reward}
    with pytest.raises(AssertionError) as caught:
        check_step(env, obs, reward, term, trunc, {**info, "reward_terms": terms})
    assert str(caught.value) == f"reward {reward} outside reward_range {env.reward_range}"


def test_check_step_sums_terms_with_an_absolute_tolerance():
    env = LookupEnv()
    obs, _, term, trunc, info = _valid_step(env)
    terms = dict.fromkeys(info["reward_terms"], 0.0) | {"answer": 1e-10}
    check_step(env, obs, 0.0, term, trunc, {**info, "reward_terms": terms})  # |1e-10 - 0| is within 1e-9


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reward": 0}, "reward must be a finite float, got 0"),
        ({"info": {"reward_terms": [1.0]}}, "info['reward_terms'] must be a dict of named reward parts"),
        ({"info": {"tool_calls": ()}}, "info['tool_calls'] must be a list"),
        ({"terminated": 1}, "terminated and truncated must be bools"),
        ({"truncated": 0}, "terminated and truncated must be bools"),
        ({"info": {"stop_reason": None}}, "a terminated step must name its info['stop_reason']"),
        ({"info": {"metrics": None}}, "a terminated step must report info['metrics']"),
    ],
)
def test_check_step_messages(change, message):
    env = LookupEnv()
    obs, reward, term, trunc, info = _valid_step(env)
    args = {"obs": obs, "reward": reward, "terminated": term, "truncated": trunc, "info": info}
    args.update({k: v for k, v in change.items() if k != "info"})
    args["info"] = {**info, **change.get("info", {})}
    with pytest.raises(AssertionError) as caught:
        check_step(env, args["obs"], args["reward"], args["terminated"], args["truncated"], args["info"])
    assert str(caught.value) == message


# ---------------------------------------------------------------------------- check_answer_scores
class Scores(LookupEnv):
    def __init__(self, scores, **kwargs):
        super().__init__(**kwargs)
        self.scores = scores

    def score_answer(self, task, answer):
        return self.scores


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        ({}, "score_answer must return a non-empty dict, got {}"),
        ([("em", 1.0)], "score_answer must return a non-empty dict, got [('em', 1.0)]"),
        ({"em": True}, "score bounds: score_answer must return scores in [0, 1], got em=True for answer 'x'"),
        ({"em": "0.5"}, "score bounds: score_answer must return scores in [0, 1], got em='0.5' for answer 'x'"),
        ({"em": 1.5}, "score bounds: score_answer must return scores in [0, 1], got em=1.5 for answer 'x'"),
        ({"em": float("nan")}, "score bounds: score_answer must return scores in [0, 1], got em=nan for answer 'x'"),
    ],
)
def test_check_answer_scores_messages(scores, message):
    env = Scores(scores)
    env.reset(seed=0)
    with pytest.raises(AssertionError) as caught:
        check_answer_scores(env, "x")
    assert str(caught.value) == message


def test_check_answer_scores_accepts_zero_and_one_and_needs_an_episode():
    env = Scores({"em": 0.0, "f1": 1.0})
    with pytest.raises(AssertionError, match=r"^check_answer_scores needs a running episode$"):
        check_answer_scores(env, "x")
    env.reset(seed=0)
    check_answer_scores(env, "x")


# ---------------------------------------------------------------------------- the kit's episodes
def test_check_text_env_plays_max_steps_steps_per_episode_by_default():
    env = Endless()
    check_text_env(env, skip_gymnasium_checker=True)
    played = [n for n in env.episodes if n]
    odd = len(odd_arguments(env.tools["lookup"]))  # then one step per odd argument set of its one tool
    assert played == [10] * 6 + [1] * odd  # seeds 0, 1, 2, each twice; no oracle episode; no turn limit


def test_check_text_env_runs_gymnasiums_checker_by_default():
    class NoOptions(LookupEnv):
        def reset(self, *, seed=None):
            return super().reset(seed=seed)

    check_text_env(NoOptions(), skip_gymnasium_checker=True)
    with pytest.raises(gym.error.Error, match="does not provide an `options`"):
        check_text_env(NoOptions())


def test_a_render_mode_is_rendered_by_gymnasiums_checker():
    class RenderFails(LookupEnv):
        def render(self):
            raise RuntimeError("render failed")

    check_text_env(RenderFails())  # no render mode: nothing to render
    with pytest.raises(RuntimeError, match="render failed"):
        check_text_env(RenderFails(render_mode="ansi"))


class FixedRange(LookupEnv):
    def __init__(self, reward_range, **kwargs):
        super().__init__(rubric=Rubric([RewardTerm("c", lambda t: 0.5, 1.0, (0.5, 0.5))]), **kwargs)
        self.reward_range = reward_range


def test_a_single_point_reward_range_is_valid_and_an_infinite_one_is_not():
    check_text_env(FixedRange((0.5, 0.5)), skip_gymnasium_checker=True)
    for bad in ((0.0, float("inf")), (1.0, 0.0)):
        with pytest.raises(AssertionError) as caught:
            check_text_env(FixedRange(bad), skip_gymnasium_checker=True)
        assert str(caught.value) == f"bad reward_range {bad}"


def test_a_non_toolenv_is_named():
    for check in (check_text_env, check_copies):
        with pytest.raises(AssertionError, match=r"^expected a ToolEnv, got CartPoleEnv$"):
            check(gym.make("CartPole-v1"))


def test_a_broken_reward_is_reported_with_seed_and_step():
    env = LookupEnv(rubric=Rubric([RewardTerm("bad", lambda t: float("nan"))]))
    with pytest.raises(AssertionError) as caught:
        check_text_env(env, seeds=(4,), skip_gymnasium_checker=True)
    assert str(caught.value) == (
        "seed 4, step 1: a reward term broke its contract (a finite number inside its declared bounds): "
        "reward term 'bad' returned nan, not a finite number"
    )


def test_a_reward_term_outside_its_declared_bounds_is_reported():
    env = LookupEnv(rubric=Rubric([RewardTerm("x", lambda t: 2.0, 1.0, (0.0, 1.0))]))
    with pytest.raises(AssertionError) as caught:
        check_text_env(env, skip_gymnasium_checker=True)
    assert str(caught.value) == (
        "seed 0, step 1: a reward term broke its contract (a finite number inside its declared bounds): "
        "reward term 'x' returned 2.0 on a non-final step, outside its bounds (0.0, 1.0)"
    )


def test_reset_info_must_carry_messages():
    class NoMessages(LookupEnv):
        def reset(self, *, seed=None, options=None):
            obs, info = super().reset(seed=seed, options=options)
            info.pop("messages")
            return obs, info

    with pytest.raises(AssertionError, match=r"^info\['messages'\] must be a list of chat messages$"):
        check_text_env(NoMessages(), skip_gymnasium_checker=True)


class GoesOnAfterTheRightAnswer(LookupEnv):
    """Only the oracle's (right) answer leaves the episode open: only the oracle's episode can notice."""

    def step(self, action):
        state = self._state
        if state is not None and state.done and state.answer == state.task.capital:  # goes on, unchanged
            return self._render_observation(), 0.0, True, False, {}
        return super().step(action)


def test_the_oracle_episode_is_checked_too_and_named_by_its_seed():
    with pytest.raises(AssertionError) as caught:
        check_text_env(GoesOnAfterTheRightAnswer(), seeds=(3,), skip_gymnasium_checker=True)
    assert str(caught.value) == "seed 3: step() after termination must raise EpisodeOverError"
    with pytest.raises(AssertionError) as caught:
        check_text_env(GoesOnAfterTheRightAnswer(), seeds=(), skip_gymnasium_checker=True)
    assert str(caught.value) == "seed 0: step() after termination must raise EpisodeOverError"


def test_with_no_seeds_only_the_oracle_plays():
    check_text_env(LookupEnv(), seeds=(), skip_gymnasium_checker=True)


# ---------------------------------------------------------------------------- after the end, per wrapper stack
class LeakyStop(RecordStopReason):
    """A RecordStopReason that forgets the end (the bug the kit must catch)."""

    def step(self, action):
        self._ended = None
        return super().step(action)


def test_truncation_must_refuse_steps_when_record_stop_reason_is_in_the_stack():
    check_text_env(RecordStopReason(TimeLimit(Endless(), 2)), skip_gymnasium_checker=True)
    with pytest.raises(AssertionError) as caught:
        check_text_env(LeakyStop(TimeLimit(Endless(), 2)), skip_gymnasium_checker=True)
    assert str(caught.value) == "seed 0: step() after truncation must raise EpisodeOverError"


def test_record_stop_reason_is_found_under_other_wrappers():
    from gymnasium.wrappers import OrderEnforcing

    with pytest.raises(AssertionError, match=r"^seed 0: step\(\) after truncation must raise EpisodeOverError$"):
        check_text_env(OrderEnforcing(LeakyStop(TimeLimit(Endless(), 2))), skip_gymnasium_checker=True)


TRUNCATED_WITHOUT_REASON = (
    "a truncated step must name its info['stop_reason'] (e.g. 'max_turns'): register the id with "
    "agent_gym.register_env, or wrap the env in agent_gym.wrappers.RecordStopReason outside its TimeLimit"
)


def test_truncation_without_record_stop_reason_fails_on_the_missing_stop_reason():
    """A bare TimeLimit truncates with stop_reason None and lets step() go on: the kit says so (it used to skip)."""
    with pytest.raises(AssertionError) as caught:
        check_text_env(TimeLimit(Endless(), 2), skip_gymnasium_checker=True)
    assert str(caught.value) == TRUNCATED_WITHOUT_REASON


class NamesItsStopButGoesOn(gym.Wrapper):
    """Sets a stop reason on truncation but does not refuse the next step (the other half of RecordStopReason)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if truncated:
            info["stop_reason"] = "max_turns"
        return obs, reward, terminated, truncated, info


def test_truncation_must_refuse_steps_whatever_wrapper_names_the_stop():
    with pytest.raises(AssertionError) as caught:
        check_text_env(NamesItsStopButGoesOn(TimeLimit(Endless(), 2)), skip_gymnasium_checker=True)
    assert str(caught.value) == "seed 0: step() after truncation must raise EpisodeOverError"


def test_check_step_names_a_truncated_step_without_stop_reason():
    env = LookupEnv()
    obs, _ = env.reset(seed=0)
    obs, reward, _, _, info = env.step("plain text")
    check_step(env, obs, reward, False, True, {**info, "stop_reason": "max_turns"})
    with pytest.raises(AssertionError) as caught:
        check_step(env, obs, reward, False, True, info)
    assert str(caught.value) == TRUNCATED_WITHOUT_REASON


# ---------------------------------------------------------------------------- check_copies
def test_check_copies_defaults_seed_zero_and_six_steps():
    env = Endless()
    check_copies(env)
    assert env.reset_seeds == [0, 0] and env.episodes[-1] == 6


def test_check_copies_plays_the_same_episode_for_the_same_seed():
    first, second = Endless(), Endless()
    check_copies(first, seed=5)
    check_copies(second, seed=5)
    assert first.actions == second.actions and len(first.actions) == 6


class ReseedsWhenCopiedAtTheStart(LookupEnv):
    """A copy made before the first step draws its noise elsewhere; the first step uses no noise."""

    def oracle_action(self):
        return "let me think" if self.state.turn == 0 else super().oracle_action()

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self._state is not None and self._state.turn == 0:
            self._np_random = np.random.default_rng(12345)


def test_every_twin_is_compared_to_the_end():
    with pytest.raises(AssertionError) as caught:
        check_copies(ReseedsWhenCopiedAtTheStart(tool_noise={"failure_prob": 0.5}), seed=1)
    assert str(caught.value) == "pickle made before step 1: step 2 differs from the original's"


class DeepcopyLosesWeights(LookupEnv):
    def __deepcopy__(self, memo):
        clone = pickle.loads(pickle.dumps(self))
        clone.rubric = clone.rubric.with_weights(step_cost=0.02)
        return clone


class PickleChangesThePrompt(LookupEnv):
    def __setstate__(self, state):
        self.__dict__.update(state)
        self.user_prompt = lambda task: f"Country? {task.country}"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (DeepcopyLosesWeights(), "deepcopy made before step 1: step 1 differs from the original's"),
        (PickleChangesThePrompt(), "pickle before reset: resets differ"),
    ],
)
def test_check_copies_names_the_copy_that_differs(env, message):
    with pytest.raises(AssertionError) as caught:
        check_copies(env)
    assert str(caught.value) == message


# ---------------------------------------------------------------------------- the kit's policies
def test_random_episode_actions_answer_from_answer_at_on():
    env = LookupEnv()
    env.reset(seed=0)
    act = random_episode_actions(env, np.random.default_rng(1), answer_at=3)
    actions = [act() for _ in range(5)]
    parsed = [env.parser.parse(a) for a in actions]
    assert [p.is_final for p in parsed] == [False, False, True, True, True]
    assert all(p.answer.isdigit() for p in parsed[2:])


def test_run_episode_replays_under_its_seed_and_stops_at_max_steps():
    env = LookupEnv(tool_noise={"failure_prob": 0.5})
    first = run_episode(env, env.oracle_action, seed=3)
    assert data_equivalence(first, run_episode(env, env.oracle_action, seed=3))
    endless = Endless()
    record = run_episode(endless, lambda: "hmm", seed=0)
    assert len(record) == 1 + 12  # the reset, then 12 steps


class Typed(Tool):
    name = "typed"
    description = "Every JSON type the kit's random calls fill in."
    parameters = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "flag": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["a", "b", "c"]},
            "text": {"type": "string"},
        },
        "required": ["n", "x", "flag", "mode", "text"],
        "additionalProperties": False,
    }

    def run(self, ctx, **kwargs):
        return "ok"


def test_random_calls_satisfy_the_schema_and_cover_each_type():
    rng = np.random.default_rng(0)
    draws = [random_call(Typed(), rng) for _ in range(300)]
    for args in draws:
        jsonschema.validate(args, Typed.parameters)
        assert type(args["n"]) is int and type(args["x"]) is float and type(args["flag"]) is bool
    assert {a["n"] for a in draws} == set(range(10))  # integers 0-9
    assert {a["flag"] for a in draws} == {False, True}
    assert {a["mode"] for a in draws} == {"a", "b", "c"}
    assert all(1 <= len(a["text"].split()) <= 4 for a in draws)
