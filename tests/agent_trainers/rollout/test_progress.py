"""The rollout progress bar: episode-turns with skips for early ends, model tokens/s, closed at the end."""

from __future__ import annotations

import io

from agent_trainers.policies import ScriptedPolicy
from agent_trainers.rollout import RolloutConfig, RolloutProgress, rollout
from tests.agent_trainers.conftest import UNEVEN_ID

CALL = '<tool_call>\n{"name": "lookup", "arguments": {"country": "France"}}\n</tool_call>'


class RecordingProgress(RolloutProgress):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, file=io.StringIO(), **kwargs)
        self.seen: list[int] = []

    def generated(self, turns, tokens):
        super().generated(turns, tokens)
        self.seen.append(self.bar.n)

    def ended(self, traj):
        super().ended(traj)
        self.seen.append(self.bar.n)


def test_bar_counts_turns_and_skips_the_turns_of_ended_episodes(smollm2_tokenizer):
    bar = RecordingProgress(3, 4)
    trajs = rollout(ScriptedPolicy(smollm2_tokenizer, lambda ids: CALL), UNEVEN_ID, task_indices=[0, 1, 2],
                    config=RolloutConfig(max_turns=4), progress=bar)  # fmt: skip
    assert [len(t.turns) for t in trajs] == [1, 2, 3]
    # turn 1: 3 turns; task 0 ends (3 turns skipped); turn 2: 2; task 1 ends (2 skipped); turn 3: 1; task 2 ends (1)
    assert bar.seen == [3, 6, 8, 10, 11, 12] and bar.bar.total == 12
    assert bar.tokens == sum(sum(t.loss_mask) for t in trajs) > 0
    assert bar.live == 0 and "model tok/s, 0 live" in bar.bar.postfix


def test_progress_true_draws_a_bar_with_the_env_turn_limit(smollm2_tokenizer, capsys):
    rollout(ScriptedPolicy(smollm2_tokenizer, lambda ids: CALL), UNEVEN_ID, task_indices=[1, 0], progress=True)
    err = capsys.readouterr().err
    assert "rollout" in err and "8/8" in err and "model tok/s" in err  # 2 episodes x the env's 4-step limit
