"""QA envs on question-only data with a corpus file, on a datasets.Dataset, on folders and on MuSiQue-Full."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

from agent_gym.datasets import DatasetFormatError, embedded_path
from agent_gym.retrieval import Passage
from agent_gym.testing import check_text_env, run_episode

QUESTIONS = [
    {"question": "Which river flows through Paris?", "golden_answers": ["the Seine", "Seine"]},
    {"question": "What is the capital of Peru?", "answer": "Lima"},
    {"question": "Who painted the Mona Lisa?", "answers": ["Leonardo da Vinci"]},
]
PASSAGES = [
    Passage("p0", "Seine", "The Seine flows through Paris."),
    Passage("p1", "Lima", "Lima is the capital of Peru."),
    Passage("p2", "Mona Lisa", "The Mona Lisa was painted by Leonardo da Vinci."),
]


@pytest.fixture
def open_files(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "nq_like.jsonl"
    data.write_text("\n".join(json.dumps(q) for q in QUESTIONS), encoding="utf-8")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"id": p.id, "contents": p.contents}) for p in PASSAGES), encoding="utf-8")
    return data, corpus


def test_question_only_data_with_a_corpus_file_scores_answers_without_evidence(open_files) -> None:
    data, corpus = open_files
    env = gym.make("AgentR1/HotpotQA-v0", data_path=data, corpus=str(corpus))
    assert [t.id for t in env.unwrapped.tasks] == ["nq_like-0", "nq_like-1", "nq_like-2"]
    obs, info = env.reset(seed=0, options={"task_index": 1})
    _, _, _, _, info = env.step('<tool_call>{"name": "search", "arguments": {"query": "capital of Peru"}}</tool_call>')
    assert "Lima is the capital of Peru." in info["messages"][-1]["content"]
    assert info["evidence_total"] == 0 and info["reward_terms"]["evidence"] == 0.0  # no gold paragraphs: term off
    _, reward, terminated, _, info = env.step("<answer>Lima</answer>")
    assert terminated and info["metrics"]["answer_em"] == 1.0 and info["metrics"]["answer_f1"] == 1.0
    assert "evidence_recall" not in info["metrics"]  # no gold evidence: recall is absent, not 0.0
    assert reward > 0
    # the oracle (no evidence to fetch) answers at once and is right on every question, aliases included
    for i in range(3):
        steps = run_episode(env, env.unwrapped.oracle_action, seed=i, options={"task_index": i})
        assert len(steps) == 2 and steps[-1][-1]["metrics"]["answer_em"] == 1.0
    check_text_env(env)


@pytest.mark.parametrize("corpus", ["question", "pooled"])
def test_question_only_data_without_a_corpus_file_is_refused(open_files, corpus: str) -> None:
    with pytest.raises(ValueError, match=rf"corpus='{corpus}' searches the tasks' own paragraphs.*question-only"):
        gym.make("AgentR1/HotpotQA-v0", data_path=open_files[0], corpus=corpus)


def test_a_datasets_dataset_is_a_data_path() -> None:
    # Hugging Face datasets: the submodule, since a bare "datasets" folder on sys.path (tests/agent_gym/datasets)
    # imports as an empty namespace package where the library is not installed
    pytest.importorskip("datasets.arrow_dataset")
    import datasets

    rows = [json.loads(line) for line in embedded_path("musique").read_text(encoding="utf-8").splitlines()]
    for row in rows:  # one schema for every row, as a Hub dataset would have
        for step in row["question_decomposition"]:
            step.setdefault("paragraph_support_idx", None)
    env = gym.make("AgentR1/MuSiQue-v0", data_path=datasets.Dataset.from_list(rows))
    assert env.unwrapped.tasks == gym.make("AgentR1/MuSiQue-v0").unwrapped.tasks
    assert len(gym.make("AgentR1/MuSiQue-v0", data_path=rows, split="test").unwrapped.tasks) == 2


def test_folder_mixing_splits_is_refused_by_the_env(shared_data: Path) -> None:
    with pytest.raises(DatasetFormatError, match="the folder mixes 3 splits/settings"):
        gym.make("AgentR1/HotpotQA-v0", data_path=shared_data / "hotpotqa")
    env = gym.make("AgentR1/HotpotQA-v0", data_path=shared_data / "hotpotqa", data_files="train_*")
    assert env.unwrapped.num_tasks() == 100


def test_musique_env_skips_unanswerable_unless_asked(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in embedded_path("musique").read_text(encoding="utf-8").splitlines()]
    rows[0]["answerable"] = False
    path = tmp_path / "musique_full_dev.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    assert gym.make("AgentR1/MuSiQue-v0", data_path=path).unwrapped.num_tasks() == 7
    full = gym.make("AgentR1/MuSiQue-v0", data_path=path, include_unanswerable=True).unwrapped
    assert full.num_tasks() == 8 and not full.tasks[0].answerable
