"""Reward presets: default weights (as docs/mdp.md states them), exact reward ranges, shaping at γ < 1."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.core.parsing import ParsedAction
from agent_gym.core.rubric import Transition
from agent_gym.datasets.metrics import score_answer
from agent_gym.rewards import make_rubric
from tests.conftest import LookupEnv

MDP_PAGE = Path(__file__).resolve().parents[3] / "docs" / "mdp.md"


def test_default_process_weights_and_bounds():
    assert make_rubric("process", shaping_gamma=1.0).describe() == [
        {"name": "format", "weight": 0.1, "bounds": [-1, 0], "final_bounds": [0, 0], "nonfinal_bounds": [-1, 0]},
        {"name": "evidence", "weight": 0.2, "bounds": [0, 1], "final_bounds": [0, 0], "nonfinal_bounds": [0, 1]},
        {"name": "repeat", "weight": 0.05, "bounds": [-1, 0], "final_bounds": [0, 0], "nonfinal_bounds": [-1, 0]},
        {"name": "step_cost", "weight": 0.01, "bounds": [-1, 0], "final_bounds": [0, 0], "nonfinal_bounds": [-1, -1]},
        {"name": "answer", "weight": 1.0, "bounds": [0, 1], "final_bounds": [0, 1], "nonfinal_bounds": [0, 0]},
        {"name": "shaping", "weight": 0.2, "bounds": [0, 1], "final_bounds": [0, 0], "nonfinal_bounds": [0, 1]},
    ]
    (outcome,) = make_rubric("outcome").describe()
    assert outcome == {
        "name": "outcome",
        "weight": 1.0,
        "bounds": [-1, 1],
        "final_bounds": [-1, 1],
        "nonfinal_bounds": [0, 0],
    }


def test_the_documented_weight_table_matches_the_defaults():
    rows = re.findall(r"^\| `(\w+)`[^|]* \| [^|]+ \| ([\d.]+) \|$", MDP_PAGE.read_text(), flags=re.MULTILINE)
    documented = {name: float(weight) for name, weight in rows}
    actual = {t.name: t.weight for t in make_rubric("process", shaping_gamma=1.0).terms}
    assert documented == actual


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, (-0.1 - 0.05 - 0.01, 1.0)),  # malformed + repeated call; a correct answer
        ({"shaping_gamma": 1.0}, (-0.16, 1.0)),
        ({"shaping_gamma": 0.9}, (-0.16 + 0.2 * (0.9 - 1), 1.0)),  # (-0.18, 1.0)
        ({"shaping_gamma": 0.5}, (-0.26, 1.0)),
        ({"weights": {"answer": 2.0}}, (-0.16, 2.0)),
        ({"weights": {"evidence": 10.0}}, (-0.16, 10.0 - 0.01)),  # a non-final step now pays most
        ({"weights": {"step_cost": 0.0, "format": 0.0, "repeat": 0.0}}, (0.0, 1.0)),
    ],
)
def test_process_reward_range_is_exact(kwargs, expected):
    assert make_rubric("process", **kwargs).reward_range == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [({}, (-1.0, 1.0)), ({"shaping_gamma": 0.5}, (-1.0 - 0.1, 1.0)), ({"shaping_gamma": 1.0}, (-1.0, 1.0))],
)
def test_outcome_reward_range(kwargs, expected):
    assert make_rubric("outcome", **kwargs).reward_range == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"preset": "bogus"}, r"reward must be one of \['outcome', 'process', 'gated'\]"),
        ({"answer_metric": "bleu"}, r"answer_metric must be one of \['em', 'f1'\]"),
        ({"shaping_gamma": 0.0}, r"shaping_gamma must lie in \(0, 1\]"),
        ({"shaping_gamma": 1.5}, r"shaping_gamma must lie in \(0, 1\]"),
        ({"shaping_gamma": "0.9"}, "shaping_gamma must be a number"),
    ],
)
def test_bad_preset_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_rubric(**kwargs)


def _env(gamma: float) -> LookupEnv:
    return LookupEnv(rubric=make_rubric("process", answer_metric="em", shaping_gamma=gamma))


@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.5])
def test_both_ends_of_reward_range_are_reached(gamma):
    env = _env(gamma)
    low, high = env.reward_range
    env.reset(seed=0, options={"task_index": 1})
    call = env.oracle_action()
    env.step(call)  # all evidence found: Φ = 1 from now on
    _, reward, *_ = env.step(call + "<tool_call>{oops</tool_call>")  # malformed, repeats a call, finds nothing
    assert reward == pytest.approx(low) == pytest.approx(-0.16 + 0.2 * (gamma - 1))
    env.reset(seed=0, options={"task_index": 1})
    _, reward, *_ = env.step("<answer>Tokyo</answer>")  # correct at once, Φ = 0
    assert reward == pytest.approx(high) == pytest.approx(1.0)


def test_shaping_at_gamma_one_half_by_hand():
    env = _env(0.5)
    env.reset(seed=0, options={"task_index": 2})
    shaping = []
    for action in [env.oracle_action(), "junk", None]:
        info = env.step(action or env.oracle_action())[4]
        shaping.append(info["reward_raw"]["shaping"])
    # Φ: 0 -> 1 (lookup), 1 -> 1 (junk), 1 -> 1 (answer); F = γΦ' - Φ
    assert shaping == pytest.approx([0.5 * 1 - 0, 0.5 * 1 - 1, 0.5 * 1 - 1])
    assert info["reward_terms"]["shaping"] == pytest.approx(0.2 * -0.5)


@given(st.integers(0, 2**16), st.sampled_from([0.3, 0.5, 0.9, 0.99]))
def test_discounted_shaping_telescopes(seed, gamma):
    """Σ_t γ^t F_t = γ^T Φ(s_T) - Φ(s_0) over any episode (Ng, Harada & Russell 1999)."""
    env = LookupEnv(
        rubric=make_rubric("process", answer_metric="em", shaping_gamma=gamma), tool_noise={"failure_prob": 0.4}
    )
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    total, phi0, steps = 0.0, env.state.potential, 0
    for t in range(6):
        action = env.oracle_action() if rng.random() < 0.7 else "junk"
        _, _, term, _, info = env.step(action)
        total += gamma**t * info["reward_raw"]["shaping"]
        steps = t + 1
        if term:
            break
    assert math.isclose(total, gamma**steps * env.state.potential - phi0, abs_tol=1e-9)


def test_outcome_preset_by_hand():
    env = LookupEnv(rubric=make_rubric("outcome", answer_metric="em"))
    env.reset(seed=0, options={"task_index": 0})
    rewards = [env.step(a)[1] for a in ["junk", env.oracle_action()]]
    rewards.append(env.step(env.oracle_action())[1])
    assert rewards == pytest.approx([0.0, 0.0, (1 - 1 / 3) - 1])  # one malformed action in three
    env.reset(seed=0, options={"task_index": 0})
    assert env.step("<answer>Paris</answer>")[1] == 1.0


@pytest.mark.parametrize(("metric", "expected"), [("em", 0.0), ("f1", 0.8)])
def test_outcome_preset_scores_the_chosen_metric(metric, expected):
    """A partly right answer separates EM from F1: "New York" vs "New York City" is EM 0, F1 0.8."""
    rubric = make_rubric("outcome", answer_metric=metric)
    final = Transition(
        turn=1,
        action=ParsedAction("<answer>New York</answer>", answer="New York"),
        terminated=True,
        answer_scores=score_answer("New York", "New York City"),
    )
    weighted, raw = rubric.score(final)
    assert raw == {"outcome": pytest.approx(expected)} and weighted == raw
    process = make_rubric("process", answer_metric=metric).score(final)[1]
    assert process["answer"] == pytest.approx(expected)


def test_gated_preset_moves_the_evidence_bonus_to_the_answer():
    described = make_rubric("gated").describe()
    assert [d["name"] for d in described] == ["format", "evidence", "repeat", "step_cost", "answer"]
    assert described[1] == {
        "name": "evidence", "weight": 0.2, "bounds": [0, 1], "final_bounds": [0, 1], "nonfinal_bounds": [0, 0],
    }  # fmt: skip
    assert make_rubric("gated").reward_range == pytest.approx((-0.16, 1.2))  # a right answer after all evidence
    with pytest.raises(ValueError, match="gated preset pays"):
        make_rubric("gated", shaping_gamma=1.0)


def _episode_return(preset: str | None, answer_early: bool) -> tuple[float, str]:
    """Embedded HotpotQA train task 0 (two gold paragraphs, 8-turn limit), as ``gym.make`` returns it.

    Both policies first search the first gold title (evidence 1 of 2). ``answer_early`` then answers, wrongly;
    otherwise the agent searches on (six queries that find nothing, then the second gold title on turn 8) and
    never answers: it is cut by the turn limit.
    """
    import gymnasium as gym

    import agent_gym  # noqa: F401

    kwargs = {} if preset is None else {"reward": preset}
    env = gym.make("AgentR1/HotpotQA-v0", split="train", **kwargs)
    env.reset(seed=0, options={"task_index": 0})
    parser = env.unwrapped.parser
    actions = [parser.format_call("search", {"query": "Odile Marchetti"})]
    if answer_early:
        actions.append("<answer>Paris</answer>")
    else:
        actions += [parser.format_call("search", {"query": f"weather report number {k}"}) for k in range(1, 7)]
        actions.append(parser.format_call("search", {"query": "Varnholt"}))
    total = 0.0
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        total += reward
    assert terminated or truncated
    return total, info["stop_reason"]


@pytest.mark.parametrize(
    ("preset", "search_on", "answer"),
    [
        (None, -8 * 0.01, 0.2 * 0.5 - 0.01),  # the default is gated: -0.08 < 0.09
        ("process", 0.2 - 8 * 0.01, 0.1 - 0.01),  # 0.12 > 0.09: not answering wins
        ("gated", -8 * 0.01, 0.2 * 0.5 - 0.01),  # -0.08 < 0.09: the answer collects the evidence found
        ("outcome", 0.0, 0.0),  # a wrong answer and no answer both earn 0
    ],
)
def test_searching_until_truncated_beats_a_wrong_answer_only_under_process(preset, search_on, answer):
    searched, why = _episode_return(preset, answer_early=False)
    answered, how = _episode_return(preset, answer_early=True)
    assert (why, how) == ("max_turns", "answer")
    assert searched == pytest.approx(search_on) and answered == pytest.approx(answer)
    if preset == "process":
        assert searched > answered
    else:
        assert searched <= answered


@pytest.mark.parametrize(
    ("env_id", "low", "search"),
    [
        ("AgentR1/HotpotQA-v0", -0.16, -0.01),
        ("AgentR1/2WikiMultihopQA-v0", -0.16, -0.01),
        ("AgentR1/MuSiQue-v0", -0.16, -0.01),
        ("AgentR1/Calculator-v0", -0.16, -0.01),
        ("AgentR1/SQLite-v0", -0.18, -0.01 + 0.02),  # + its valid_query term: -0.02 for a failing query, +0.02 else
    ],
)
def test_the_default_preset_of_every_env_with_evidence_is_gated(env_id, low, search):
    """``gym.make(id)`` pays evidence on the answer: the oracle's tool calls earn their step cost (SQLite: and a
    valid query), its answer 1.0 plus 0.2 x all the evidence (so the range's high end is 1.2, and searching on
    without answering earns no evidence)."""
    import gymnasium as gym

    import agent_gym  # noqa: F401

    env = gym.make(env_id)
    assert [t.name for t in env.unwrapped.rubric.terms][:5] == ["format", "evidence", "repeat", "step_cost", "answer"]
    assert env.unwrapped.reward_range == pytest.approx((low, 1.2))
    env.reset(seed=0, options={"task_index": 0})
    rewards, terminated = [], False
    while not terminated:
        _, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        rewards.append(reward)
        assert not truncated
    assert info["stop_reason"] == "answer" and rewards[-1] == pytest.approx(1.2)
    assert rewards[:-1] and all(r == pytest.approx(search) for r in rewards[:-1])
