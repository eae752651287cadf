"""Multi-hop QA environments: conformance, adversarial actions, the oracle on real data, noise, resets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import given, settings

import agent_gym
from agent_gym.datasets import DatasetFormatError, embedded_path, load_embedded
from agent_gym.envs.qa import MultiHopQAEnv
from agent_gym.testing import check_step, check_text_env, run_episode
from agent_gym.testing.strategies import actions

ENV_IDS = ["AgentR1/HotpotQA-v0", "AgentR1/2WikiMultihopQA-v0", "AgentR1/MuSiQue-v0"]


def play_oracle(env: gym.Env, *, seed: int, task_index: int, max_steps: int = 30) -> tuple[dict, list[dict]]:
    """Run the oracle until the episode ends; returns the last info and every step's info."""
    options = {"task_index": task_index}
    steps = run_episode(env, env.unwrapped.oracle_action, seed=seed, options=options, max_steps=max_steps)[1:]
    *_, terminated, truncated, info = steps[-1]
    assert terminated or truncated, f"episode did not end within {max_steps} steps"
    return info, [step[-1] for step in steps]


def oracle_solve_rate(env: MultiHopQAEnv, indices: range) -> tuple[float, list[str]]:
    """Share of tasks where the oracle finds every gold paragraph AND answers with EM 1; failing ids."""
    failures = []
    for i in indices:
        info, _ = play_oracle(env, seed=i, task_index=i, max_steps=12)
        solved = info["metrics"]["answer_em"] == 1.0 and info["evidence_found"] == info["evidence_total"]
        if not solved:
            failures.append(env.tasks[i].id)
    return 1 - len(failures) / len(indices), failures


# ------------------------------------------------------------------ conformance
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_text_env_passes(env_id: str) -> None:
    check_text_env(gym.make(env_id))


def test_check_text_env_with_tags_pooled_corpus_and_noise() -> None:
    noise = {"failure_prob": 0.2, "truncate_prob": 0.2, "retrieval": {"drop_prob": 0.3, "distractor_prob": 0.3}}
    env = gym.make(
        "AgentR1/HotpotQA-v0",
        action_format="tags",
        corpus="pooled",
        tool_noise=noise,
        reward="process",
        shaping_gamma=0.9,
    )
    check_text_env(env, seeds=(0, 1, 2, 3))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_oracle_solves_every_embedded_question(env_id: str) -> None:
    env = gym.make(env_id)
    rate, failures = oracle_solve_rate(env.unwrapped, range(env.unwrapped.num_tasks()))
    assert rate == 1.0, failures


def test_registry_rows() -> None:
    rows = dict(agent_gym.list_envs())
    assert set(ENV_IDS) <= set(rows)
    assert gym.spec("AgentR1/HotpotQA-v0").max_episode_steps == 8
    assert gym.spec("AgentR1/MuSiQue-v0").max_episode_steps == 10
    assert {gym.make(e).unwrapped.tasks[0].source for e in ENV_IDS} == {"hotpotqa", "2wikimultihopqa", "musique"}


def test_gym_make_in_a_fresh_process_without_importing_agent_gym() -> None:
    code = (
        "import sys, gymnasium as gym\n"
        "assert 'agent_gym' not in sys.modules\n"
        "env = gym.make('agent_gym:AgentR1/HotpotQA-v0', split='test')\n"
        "obs, info = env.reset(seed=0)\n"
        "print(env.unwrapped.num_tasks(), 'Question:' in obs)\n"
        "assert not any(m in sys.modules for m in ('torch', 'transformers', 'trl'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["8", "True"]


# -------------------------------------------------------------- adversarial actions
def _adversarial_test(env_id: str, calls: list[str]):
    env = gym.make(env_id)
    base = env.unwrapped

    @given(actions(tool_names=["search"]))
    def run(action: str) -> None:
        calls.append(action)
        obs, _ = env.reset(seed=0, options={"task_index": 1})
        obs, reward, terminated, truncated, info = env.step(action)
        check_step(base, obs, reward, terminated, truncated, info)
        assert not truncated
        if not terminated:  # the episode goes on: a second, well-formed step still works
            obs, reward, terminated, truncated, info = env.step(base.oracle_action())
            check_step(base, obs, reward, terminated, truncated, info)

    return run


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_adversarial_actions_never_crash(env_id: str) -> None:
    calls: list[str] = []
    _adversarial_test(env_id, calls)()
    assert len(calls) >= settings.default.max_examples  # 200 in the default profile


# --------------------------------------------------------------- rewards and modes
def test_process_rewards_follow_the_oracle_episode() -> None:
    env = gym.make("AgentR1/HotpotQA-v0", reward="process", shaping_gamma=1.0)
    info, infos = play_oracle(env, seed=0, task_index=0)
    assert [len(i["new_evidence"]) for i in infos] == [1, 1, 0]
    assert [i["reward_raw"]["evidence"] for i in infos] == [0.5, 0.5, 0.0]
    assert infos[-1]["reward_raw"]["answer"] == 1.0 and info["stop_reason"] == "answer"
    assert info["metrics"] == {
        "answer_em": 1.0, "answer_f1": 1.0, "answer_substring": 1.0,
        "turns": 3.0, "malformed_actions": 0.0, "evidence_recall": 1.0,
    }  # fmt: skip


def test_outcome_reward_and_answer_scores() -> None:
    env = gym.make("AgentR1/HotpotQA-v0", reward="outcome", answer_metric="em")
    env.reset(seed=0, options={"task_index": 0})  # gold answer "River Lisse"
    _, reward, terminated, _, info = env.step("<answer>the river Lisse.</answer>")
    assert terminated and reward == 1.0
    env.reset(seed=0, options={"task_index": 0})
    env.step("I think I should search")  # malformed
    _, reward, terminated, _, info = env.step("<answer>Lisse</answer>")
    assert terminated and reward == -0.5  # Agent-R1: format fraction 1/2 minus 1
    base = env.unwrapped
    task = base.tasks[0]
    assert base.score_answer(task, "Lisse valley") == {"em": 0.0, "f1": 0.5, "substring": 0.0}  # P = R = 1/2


def test_tags_action_format_with_the_oracle() -> None:
    env = gym.make("AgentR1/MuSiQue-v0", action_format="tags")
    obs, _ = env.reset(seed=0, options={"task_index": 2})
    assert "<search>query</search>" in obs
    assert env.unwrapped.oracle_action().startswith("<search>")
    info, infos = play_oracle(env, seed=0, task_index=2)
    assert info["metrics"]["answer_em"] == 1.0 and info["evidence_found"] == info["evidence_total"] == 3


def test_question_corpus_only_searches_the_questions_paragraphs() -> None:
    env = gym.make("AgentR1/HotpotQA-v0")
    env.reset(seed=0, options={"task_index": 0})
    own = set(env.unwrapped.tasks[0].paragraph_ids)
    for query in ["River Tesk", "Hesper Kaine band", "Lindqvist University founded"]:
        _, _, _, _, info = env.step(env.unwrapped.parser.format_call("search", {"query": query}))
        shown = env.unwrapped.state.history[-1].content
        titles = {line.split("(Title: ")[1].split(")")[0] for line in shown.splitlines() if "(Title: " in line}
        assert titles <= {env.unwrapped.tasks[0].paragraph(pid).title for pid in own}


def test_pooled_corpus_spans_the_split() -> None:
    env = MultiHopQAEnv(corpus="pooled", split="train")
    titles = {p.title for p in env.retriever.passages}
    assert len(env.tasks) == 24 and len(titles) == len(env.retriever.passages)
    assert {p.title for t in env.tasks for p in t.paragraphs} == titles
    assert oracle_solve_rate(env, range(24))[0] == 1.0


def test_external_corpus_file_matches_gold_by_title(tmp_path: Path) -> None:
    tasks = load_embedded("hotpotqa")
    rows = {p.title: {"contents": f'"{p.title}"\n{p.text}'} for t in tasks for p in t.paragraphs}
    records = [{"id": f"doc{i}", **row} for i, row in enumerate(rows.values())]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    env = MultiHopQAEnv(corpus=str(corpus))
    assert env.gold_evidence(tasks[0]) == {"Odile Marchetti", "Varnholt"}
    assert oracle_solve_rate(env, range(env.num_tasks()))[0] == 1.0


def test_bad_arguments_fail_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="corpus must be 'question', 'pooled' or a path"):
        MultiHopQAEnv(corpus="wikipedia")
    with pytest.raises(ValueError, match="'bogus' is not a valid Split"):
        MultiHopQAEnv(split="bogus")
    with pytest.raises(FileNotFoundError, match="data_path does not exist"):
        MultiHopQAEnv(data_path=tmp_path / "absent.json")
    with pytest.raises(DatasetFormatError, match="does not match the record layout"):
        gym.make("AgentR1/MuSiQue-v0", data_path=embedded_path("hotpotqa"))
    with pytest.raises(ValueError, match="limit must be a positive int"):
        MultiHopQAEnv(limit=0)


def test_split_and_limit() -> None:
    train, test = MultiHopQAEnv(split="train"), MultiHopQAEnv(split="test", limit=3)
    assert train.num_tasks() == 24 and test.num_tasks() == 3
    assert not {t.id for t in train.tasks} & {t.id for t in test.tasks}
    assert test.task_index_of(test.tasks[2].id) == 2
    obs, info = test.reset(seed=0, options={"task_id": test.tasks[1].id})
    assert info["task_index"] == 1 and test.tasks[1].question in obs


# ------------------------------------------------------------------ noise and resets
def test_oracle_retries_through_transient_failures() -> None:
    env = gym.make("AgentR1/HotpotQA-v0", tool_noise={"failure_prob": 0.3}, max_episode_steps=30)
    failures = 0
    for i in range(16):
        info, infos = play_oracle(env, seed=i, task_index=i)
        failures += sum("failure" in step["noise_events"] for step in infos)
        assert info["stop_reason"] == "answer" and info["metrics"]["answer_em"] == 1.0
        assert info["evidence_found"] == info["evidence_total"]
    assert failures > 0  # the noise fired, and the oracle retried through it


def test_permanent_failure_is_truncated_by_the_turn_limit() -> None:
    env = gym.make("AgentR1/HotpotQA-v0", tool_noise={"failure_prob": 1.0})
    info, infos = play_oracle(env, seed=0, task_index=0)
    assert len(infos) == 8 and info["stop_reason"] == "max_turns"
    assert all(step["noise_events"] == ["failure"] for step in infos)


def test_retrieval_noise_is_survived() -> None:
    noise = {"retrieval": {"drop_prob": 0.3, "shuffle_prob": 0.5, "distractor_prob": 0.2}}
    env = gym.make("AgentR1/2WikiMultihopQA-v0", tool_noise=noise, max_episode_steps=30)
    for i in range(8):
        info, _ = play_oracle(env, seed=i, task_index=i)
        assert info["metrics"]["answer_em"] == 1.0 and info["evidence_found"] == info["evidence_total"]


def test_group_resets_are_consistent() -> None:
    noise = {"failure_prob": 0.3, "retrieval": {"drop_prob": 0.3, "distractor_prob": 0.3}}
    a = gym.make("AgentR1/HotpotQA-v0", tool_noise=noise)
    b = gym.make("AgentR1/HotpotQA-v0", tool_noise=noise)

    def trajectory(env: gym.Env, seed: int) -> tuple[str, list]:
        obs, info = env.reset(seed=seed, options={"task_index": 5})
        steps = []
        for _ in range(8):
            obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            steps.append((obs, reward, info["noise_events"]))
            if terminated or truncated:
                break
        return info["messages"][1]["content"], steps

    assert trajectory(a, 7) == trajectory(b, 7)  # same task and seed: identical episode
    runs = [trajectory(a, seed) for seed in range(6)]
    assert len({question for question, _ in runs}) == 1  # different seeds: same question
    assert len({json.dumps([s[2] for s in steps]) for _, steps in runs}) > 1  # ... under different noise


# -------------------------------------------------------------- the oracle on real data
SHARED_FILES = [
    "hotpotqa/dev_distractor_sample_a_300.jsonl",
    "hotpotqa/dev_distractor_sample_b_300.jsonl",
    "hotpotqa/dev_distractor_sample_c_500.jsonl",
    "hotpotqa/dev_distractor_head_53_official.json",
    "hotpotqa/train_100_official.json",
    "2wikimultihopqa/dev_503.jsonl",
    "musique/ans_dev_100.json",
    "musique/ans_train_100.json",
]


@pytest.mark.parametrize("corpus", ["question", "pooled"])
@pytest.mark.parametrize("name", SHARED_FILES)
def test_oracle_solves_real_questions(shared_data: Path, name: str, corpus: str) -> None:
    """The oracle retrieves every gold paragraph through the tool and answers: >= 99% of questions."""
    env = MultiHopQAEnv(data_path=shared_data / name, corpus=corpus)
    rate, failures = oracle_solve_rate(env, range(env.num_tasks()))
    assert rate >= 0.99, failures[:10]


def test_oracle_on_fullwiki_finds_the_gold_paragraphs_that_exist(shared_data: Path) -> None:
    env = MultiHopQAEnv(data_path=shared_data / "hotpotqa/dev_fullwiki_500.jsonl")
    complete = [i for i, t in enumerate(env.tasks) if not t.missing_supporting]
    assert len(complete) == 134
    rate, failures = oracle_solve_rate(env, range(env.num_tasks()))
    assert rate >= 0.99, failures[:10]


def test_repeated_task_ids_warn_and_select_the_first(shared_data: Path) -> None:
    with pytest.warns(UserWarning, match="repeat an earlier task id"):
        env = MultiHopQAEnv(data_path=shared_data / "hotpotqa", data_files="dev_*", corpus="pooled")
    positions: dict[str, list[int]] = {}
    for i, t in enumerate(env.tasks):
        positions.setdefault(t.id, []).append(i)
    repeated = {task_id: where for task_id, where in positions.items() if len(where) > 1}
    assert repeated  # the fullwiki file shares questions with the distractor files
    for task_id, where in repeated.items():
        assert env.task_index_of(task_id) == where[0]


@pytest.mark.parametrize(("backend", "module"), [("lucene", "pyserini"), ("dense", "sentence_transformers")])
def test_optional_retriever_backends_serve_the_oracle(backend, module):
    pytest.importorskip(module)
    env = gym.make("AgentR1/HotpotQA-v0", retriever=backend)
    assert type(env.unwrapped.retriever).__name__.lower().startswith(backend)
    for i in range(env.unwrapped.num_tasks()):
        env.reset(seed=i, options={"task_index": i})
        while True:
            _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            if terminated or truncated:
                break
        assert terminated and info["evidence_found"] == info["evidence_total"]


def test_unknown_retriever_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="faiss"):
        gym.make("AgentR1/HotpotQA-v0", retriever="faiss")
