"""The TRL GRPO adapter: rollout_func fields, group-consistent tasks, turn-level advantages, a real update."""

from collections.abc import Sequence

import gymnasium as gym
import pytest
import torch
from datasets import Dataset

from agent_gym.core.parsing import make_parser
from agent_trainers.grpo import AgentGRPOTrainer, EnvRolloutFunc, env_reward, grpo_dataset_rows, make_grpo_config
from agent_trainers.models import tiny_random_model
from agent_trainers.policies import Generation
from agent_trainers.rollout import RolloutConfig
from tests.conftest import CAPITALS, LookupEnv

ENV_ID = "Test/GRPOLookup-v0"
env_parser = make_parser("tool_call")
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=3)


class ScriptedPolicy:
    """Looks the capital up, then answers: correctly on even batch rows, wrongly on odd ones."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, prompts: list[list[int]], *, max_new_tokens, temperature, top_p, stop: Sequence[str]):
        out = []
        for row, ids in enumerate(prompts):
            text = self.tokenizer.decode(ids)
            country = next(c for c in CAPITALS if f"capital of {c.country}?" in text)
            if f"The capital of {country.country} is" in text:
                answer = country.capital if row % 2 == 0 else "Atlantis"
                action = f"<answer>{answer}</answer>"
            else:
                action = env_parser.format_call("lookup", {"country": country.country})
            tokens = self.tokenizer(action, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=tokens, logprobs=[-1.0] * len(tokens), finish_reason="stop"))
        return out


def _trainer(tmp_path, advantage, policy_factory=None, steps=1, new_tokens=24):
    model, tok = tiny_random_model()
    rows = grpo_dataset_rows(ENV_ID, range(len(CAPITALS)))
    fn = EnvRolloutFunc(
        rows,
        config=RolloutConfig(max_new_tokens_per_turn=new_tokens, max_total_tokens=1024),
        policy_factory=policy_factory,
    )
    args = make_grpo_config(
        output_dir=str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=4,
        num_generations=2,
        learning_rate=1e-2,
        max_completion_length=1024,
        seed=0,
    )
    return AgentGRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[env_reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        rollout_func=fn,
        advantage=advantage,
    )


def _scripted(model, tok, seed):
    return ScriptedPolicy(tok)


def _inputs(trainer, tasks):
    rows = {r["task_index"]: r for r in trainer.rollout_func.rows}
    return [dict(rows[t]) for t in tasks for _ in range(trainer.num_generations)]


def test_turn_advantages_differ_by_turn_and_follow_rewards(tmp_path):
    trainer = _trainer(tmp_path, "turn", _scripted)
    trainer.model.train()
    out = trainer._generate_and_score_completions(_inputs(trainer, [0, 1]))
    trajs = trainer.rollout_func.last_trajectories
    adv = out["advantages"]
    assert adv.shape == out["completion_ids"].shape
    assert [t.task_index for t in trajs] == [0, 0, 1, 1]  # group members share the task
    for b, traj in enumerate(trajs):
        assert traj.stop_reason == "answer" and len(traj.turns) == 2
        lookup, answer = traj.turns
        assert traj.turn_rewards[0] != traj.turn_rewards[1]
        for span in traj.turns:  # one value per turn, zero on the env tokens after it
            assert torch.unique(adv[b, span.start : span.end]).numel() == 1
            assert torch.all(adv[b, span.end : span.env_end] == 0)
        assert adv[b, lookup.start] != adv[b, answer.start]
    # the correct answerer (even row) beats the wrong one on the answer turn of the same task
    assert trajs[0].total_reward > trajs[1].total_reward
    assert adv[0, trajs[0].turns[1].start] > adv[1, trajs[1].turns[1].start]
    # env tokens are masked out of the loss
    assert out["tool_mask"].sum() < out["completion_mask"].sum()


def test_outcome_mode_keeps_trl_scalar_advantages(tmp_path):
    trainer = _trainer(tmp_path, "outcome", _scripted)
    trainer.model.train()
    out = trainer._generate_and_score_completions(_inputs(trainer, [2]))
    assert out["advantages"].shape == (2,)
    assert out["advantages"][0] > 0 > out["advantages"][1]


def test_rollout_func_output_matches_trl_contract(tmp_path):
    trainer = _trainer(tmp_path, "outcome", _scripted)
    prompts = [r["prompt"] for r in _inputs(trainer, [3])]
    out = trainer.rollout_func(prompts, trainer)
    for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward"):
        assert len(out[key]) == 2
    for ids, mask, lps in zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True):
        assert len(ids) == len(mask) == len(lps) and 0 in mask and 1 in mask
    assert out["metric_answer_em"] == [1.0, 0.0]


def test_unknown_prompt_and_broken_groups_are_clear_errors(tmp_path):
    trainer = _trainer(tmp_path, "outcome", _scripted)
    rows = trainer.rollout_func.rows
    with pytest.raises(ValueError, match="not one group"):
        trainer.rollout_func([rows[0]["prompt"], rows[1]["prompt"]], trainer)
    with pytest.raises(KeyError, match="not in the rows"):
        trainer.rollout_func([[{"role": "user", "content": "?"}]] * 2, trainer)
    with pytest.raises(ValueError, match="env_reward"):
        env_reward(["x"])


def test_a_grpo_step_updates_the_model(tmp_path):
    trainer = _trainer(tmp_path, "turn", new_tokens=8)  # the real TransformersPolicy on the tiny model
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 1
    changed = sum(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters(), strict=True))
    assert changed > 0
    assert all(len(t.turns) >= 1 for t in trainer.rollout_func.last_trajectories)
