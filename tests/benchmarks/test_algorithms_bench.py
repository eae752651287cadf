"""benchmarks/algorithms.py: the warm-up clones the answer turn (not the prompt) and the table's rows."""

from __future__ import annotations

import torch

from agent_trainers.algorithms.sft import tokenize_episode
from agent_trainers.policies import load_tokenizer
from tests.conftest import load_script

bench = load_script("benchmarks/algorithms.py", "bench_algorithms")


def test_demos_answer_at_once_with_an_arm_in_the_env_format():
    from agent_gym.envs.bandit import ARMS

    chats = bench._demos(8, seed=0)
    answers = [c[-1]["content"] for c in chats]
    assert all(c[-1]["role"] == "assistant" for c in chats)
    assert {a.removeprefix("<answer>").removesuffix("</answer>") for a in answers} <= set(ARMS)
    assert len(set(answers)) > 1  # a random arm, not the paying one every time


def test_clone_batch_scores_exactly_the_answer_tokens():
    tok = load_tokenizer("tiny-random")
    rows = []
    for chat in bench._demos(3, seed=0):
        row = tokenize_episode(chat, tok)
        first = row["assistant_masks"].index(1)
        rows.append((row["input_ids"][:first], row["input_ids"][first:]))
    inputs, valid, width = bench._clone_batch(rows, tok)
    assert width == max(len(p) for p, _ in rows)
    assert valid.sum(dim=1).tolist() == [len(c) for _, c in rows]  # ~9 answer tokens a row, not the prompt
    for b, (_, c) in enumerate(rows):
        assert inputs["input_ids"][b, width : width + len(c)].tolist() == c
        assert tok.decode(c).startswith("<answer>")
    assert torch.equal(valid, inputs["attention_mask"][:, width:].bool())
