"""Evaluation: an unanswered episode is wrong; a renamed metric fails loudly instead of scoring 0."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agent_gym.envs import _STOP_REASON
from agent_trainers.evaluation import EvalSummary, MissingMetricError, evaluate
from agent_trainers.policies import ScriptedPolicy
from tests.agent_trainers.conftest import LOOKUP_ID
from tests.conftest import LookupEnv


class RenamedMetricEnv(LookupEnv):
    """Reports ``answer_exact`` instead of ``answer_em`` in its episode metrics."""

    def _episode_metrics(self, state):
        metrics = super()._episode_metrics(state)
        metrics["answer_exact"] = metrics.pop("answer_em")
        return metrics


if "Test/RenamedMetric-v0" not in gym.registry:
    gym.register("Test/RenamedMetric-v0", entry_point=RenamedMetricEnv, max_episode_steps=3,
                 additional_wrappers=(_STOP_REASON,))  # fmt: skip


def test_unanswered_episodes_count_as_wrong(smollm2_tokenizer):
    # task 0 answered right, task 1 wrong, task 2 never answers (three malformed turns)
    script = ["<answer>Paris</answer>", "<answer>Rome</answer>", "hm", "hm", "hm"]
    result = evaluate(ScriptedPolicy(smollm2_tokenizer, script), LOOKUP_ID, [0, 1, 2])
    assert (result.episodes, result.em, result.answer_rate) == (3, pytest.approx(1 / 3), pytest.approx(2 / 3))


def test_a_renamed_metric_fails_loudly(smollm2_tokenizer):
    policy = ScriptedPolicy(smollm2_tokenizer, ["<answer>Paris</answer>"])
    with pytest.raises(MissingMetricError, match=r"lack 'answer_em' \(it reported \['answer_exact', 'answer_f1'"):
        evaluate(policy, "Test/RenamedMetric-v0", [0])
    with pytest.raises(ValueError, match="at least one record"):
        EvalSummary.from_records([])
