"""Cold-start SFT: oracle episodes, assistant-only masks that match the rollout layout, a real SFTTrainer run."""

import copy

import gymnasium as gym
import pytest
from trl import SFTConfig

from agent_trainers.models import tiny_random_model
from agent_trainers.sft import oracle_episodes, run_sft, tokenize_episode
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


def test_non_prefix_stable_template_is_rejected():
    _, tok = tiny_random_model()
    tok = copy.deepcopy(tok)  # the tiny model shares one cached tokenizer
    tok.chat_template = "{% for m in messages|reverse %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="prefix-stable"):
        tokenize_episode([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], tok)


def test_run_sft_lowers_the_loss_on_assistant_tokens(tmp_path):
    model, tok = tiny_random_model()
    episodes = oracle_episodes(ENV_ID, [0, 1, 2, 3])
    args = SFTConfig(
        output_dir=str(tmp_path),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
    )
    trainer = run_sft(model, tok, episodes, args)
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    assert len(losses) == 4 and losses[-1] < losses[0]
    with pytest.raises(ValueError, match="at least one"):
        run_sft(model, tok, [], args)
