"""Cold-start SFT: oracle episodes, assistant-only masks that match the rollout layout, a real SFTTrainer run."""

import copy

import gymnasium as gym
import pytest

from agent_trainers.algorithms.sft import make_sft_config, oracle_episodes, run_sft, tokenize_episode
from agent_trainers.policies import ScriptedPolicy, tiny_random_model
from agent_trainers.rollout import TemplateDriftError, rollout
from tests.conftest import LookupEnv

ENV_ID = "Test/SFTLookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=3)


def test_oracle_episodes_solve_their_tasks():
    episodes = oracle_episodes(ENV_ID, [0, 1, 2, 3], seed=1)
    assert [e.task_index for e in episodes] == [0, 1, 2, 3]
    for e in episodes:
        assert e.metrics["answer_em"] == 1.0
        assert [m["role"] for m in e.messages] == ["system", "user", "assistant", "tool", "assistant"]
        assert all(set(m) == {"role", "content"} for m in e.messages)


def test_mask_covers_exactly_the_assistant_turns_and_their_stop_token():
    _, tok = tiny_random_model()
    episode = oracle_episodes(ENV_ID, [2])[0]
    row = tokenize_episode(episode.messages, tok)
    assert len(row["input_ids"]) == len(row["assistant_masks"])
    assert row["input_ids"] == tok.apply_chat_template(episode.messages, tokenize=True, return_dict=True)["input_ids"]
    taught = tok.decode([i for i, m in zip(row["input_ids"], row["assistant_masks"], strict=True) if m])
    calls = [m["content"] for m in episode.messages if m["role"] == "assistant"]
    assert taught == "<|im_end|>".join(calls) + "<|im_end|>"
    assert "Nairobi" in calls[-1] and "capital of Kenya is" not in taught  # tool results are not taught


def test_sft_rows_are_laid_out_as_the_rollout_of_the_same_chat(smollm2_tokenizer):
    episode = oracle_episodes(ENV_ID, [1])[0]
    actions = [m["content"] for m in episode.messages if m["role"] == "assistant"]
    (traj,) = rollout(ScriptedPolicy(smollm2_tokenizer, actions), ENV_ID, task_indices=[1])
    assert traj.messages[-1]["content"] == actions[-1]
    row = tokenize_episode(episode.messages, smollm2_tokenizer)
    assert row["input_ids"] == traj.prompt_ids + traj.completion_ids
    sft_mask = row["assistant_masks"][len(traj.prompt_ids) :]
    # what the model wrote in the rollout is taught; SFT also teaches <|im_end|> where the rollout stopped on a tag
    assert all(s >= m for s, m in zip(sft_mask, traj.loss_mask, strict=True))
    extra = [traj.completion_ids[i] for i, (s, m) in enumerate(zip(sft_mask, traj.loss_mask, strict=True)) if s > m]
    assert set(extra) == {smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")}


def test_non_prefix_stable_template_is_rejected():
    _, tok = tiny_random_model()
    tok = copy.deepcopy(tok)  # the tiny model shares one cached tokenizer
    tok.chat_template = "{% for m in messages|reverse %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(TemplateDriftError, match="not context-free"):
        tokenize_episode([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], tok)


@pytest.mark.slow  # ~26 s; CI runs it after the default suite
def test_run_sft_lowers_the_loss_on_assistant_tokens(tmp_path):
    model, tok = tiny_random_model()
    episodes = oracle_episodes(ENV_ID, [0, 1, 2, 3])
    args = make_sft_config(
        device="cpu", output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4, learning_rate=3e-3
    )
    trainer = run_sft(model, tok, episodes, args)
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    assert len(losses) == 4 and losses[-1] < losses[0]
    with pytest.raises(ValueError, match="at least one"):
        run_sft(model, tok, [], args)


@pytest.mark.slow  # two SFT runs, ~20 s of CPU; CI runs it after the default suite
def test_gradient_checkpointing_trains_the_same_weights_on_and_off(tmp_path):
    """TRL's SFTConfig turns checkpointing on (sft.gradient_checkpointing's default); on, it recomputes the same
    numbers: two SFT steps give bit-identical weights either way (fp32 on a CPU, no dropout)."""
    import hashlib

    episodes = oracle_episodes(ENV_ID, [0, 1, 2, 3])
    assert make_sft_config(device="cpu", output_dir=str(tmp_path)).gradient_checkpointing is True
    digests, used = [], []
    for on in (False, True):
        model, tok = tiny_random_model()
        args = make_sft_config(
            device="cpu", output_dir=str(tmp_path / str(on)), max_steps=2, per_device_train_batch_size=2,
            learning_rate=3e-3, gradient_checkpointing=on, seed=0,
        )  # fmt: skip
        run_sft(model, tok, episodes, args, print_logs=False)
        used.append(bool(model.is_gradient_checkpointing))
        digests.append(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())
    assert used == [False, True]
    assert digests[0] == digests[1]


def test_flawed_share_picks_the_same_episodes_every_run_and_they_carry_the_flaw():
    import random

    kwargs = {"task_seed": 0, "action_format": "tags"}
    tasks = list(range(12))
    episodes = oracle_episodes("AgentR1/Calculator-v0", tasks, env_kwargs=kwargs, seed=7, flawed_share=0.5)
    flawed = [random.Random(7 + k).random() < 0.5 for k in range(12)]
    assert 0 < sum(flawed) < 12  # the draw is a mix at this seed
    assert [e.metrics["answer_em"] for e in episodes] == [0.0 if f else 1.0 for f in flawed]
    again = oracle_episodes("AgentR1/Calculator-v0", tasks, env_kwargs=kwargs, seed=7, flawed_share=0.5)
    assert [e.messages for e in again] == [e.messages for e in episodes]
    plain = oracle_episodes("AgentR1/Calculator-v0", tasks, env_kwargs=kwargs)
    assert all(e.metrics["answer_em"] == 1.0 for e in plain)
    every = oracle_episodes("AgentR1/Calculator-v0", tasks, env_kwargs=kwargs, flawed_share=1.0)
    assert all(e.metrics["answer_em"] == 0.0 for e in every)


def test_flawed_share_is_refused_for_an_env_without_a_flawed_demonstrator_or_out_of_range():
    with pytest.raises(ValueError, match="no flawed demonstrator"):
        oracle_episodes(ENV_ID, [0], flawed_share=0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        oracle_episodes("AgentR1/Calculator-v0", [0], flawed_share=1.5)
