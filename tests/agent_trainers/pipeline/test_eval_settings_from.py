"""`agent-r1 eval --settings-from RUN`: a trained agent evaluated as its run evaluated it, elsewhere too."""

from __future__ import annotations

import json

import pytest
import yaml

from agent_trainers.pipeline.cli import main
from agent_trainers.pipeline.eval_commands import build_eval_parser, eval_settings
from agent_trainers.pipeline.stages import EVAL_SEED


def write_run(folder, **sections):
    """A run folder holding only the config.yaml `agent-r1 train` writes (tiny's, with ``sections`` merged in)."""
    from agent_trainers.pipeline.config import load_config

    data = load_config("tiny").to_dict()
    for name, values in sections.items():
        data[name] = {**data[name], **values} if isinstance(data.get(name), dict) else values
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def settings(*argv):
    return eval_settings(build_eval_parser().parse_args(list(argv)))


def test_without_a_run_the_options_keep_their_own_defaults():
    s = settings()
    assert (s.env, s.env_kwargs, s.env_seed, s.policy_seed, s.batch_size, s.chunk_size, s.bf16) == (
        "AgentR1/HotpotQA-v0",
        {"split": "test"},
        0,
        0,
        8,
        16,
        False,
    )
    assert (s.rollout.temperature, s.rollout.max_new_tokens_per_turn) == (0.0, 256)


def test_a_run_s_evaluation_settings_become_the_defaults(tmp_path):
    run = write_run(
        tmp_path / "run",
        seed=7,
        env={"id": "AgentR1/Calculator-v0", "eval_kwargs": {"task_seed": 3, "action_format": "tags"}},
        rollout={"max_turns": 3, "max_new_tokens_per_turn": 24, "max_total_tokens": 900, "temperature": 1.0},
        eval={"tasks": 5, "batch_size": 5, "temperature": 0.0},
    )
    s = settings("--settings-from", str(run))
    assert (s.env, s.env_kwargs) == ("AgentR1/Calculator-v0", {"task_seed": 3, "action_format": "tags"})
    # the rollout at eval.temperature (greedy here), not the sampling temperature of training
    assert (s.rollout.max_turns, s.rollout.max_new_tokens_per_turn, s.rollout.max_total_tokens) == (3, 24, 900)
    assert s.rollout.temperature == 0.0
    assert (s.env_seed, s.policy_seed, s.batch_size, s.chunk_size) == (EVAL_SEED, 7, 5, 5)
    # the run's config.yaml named directly reads the same
    assert settings("--settings-from", str(run / "config.yaml")) == s
    # every option given wins; --env-kwargs key by key
    s = settings(
        "--settings-from", str(run), "--env-kwargs", '{"task_seed": 29}', "--max-turns", "2", "--seed", "4",
        "--batch-size", "2", "--chunk-size", "3",
    )  # fmt: skip
    assert s.env_kwargs == {"task_seed": 29, "action_format": "tags"}
    assert (s.rollout.max_turns, s.rollout.max_new_tokens_per_turn) == (2, 24)
    assert (s.env_seed, s.policy_seed, s.batch_size, s.chunk_size) == (4, 4, 2, 3)


def test_other_data_leaves_the_run_s_data_out_and_keeps_the_rest(tmp_path, shared_data):
    hotpot = {"split": "test", "top_k": 1, "max_passage_chars": 200, "action_format": "tags"}
    run = write_run(tmp_path / "run", env={"id": "AgentR1/HotpotQA-v0", "eval_kwargs": hotpot})
    assert settings("--settings-from", str(run)).env_kwargs == hotpot
    rest = {"top_k": 1, "max_passage_chars": 200, "action_format": "tags"}
    musique = str(shared_data / "musique" / "ans_dev_100.json")
    s = settings("--settings-from", str(run), "--env", "AgentR1/MuSiQue-v0", "--data-path", musique)
    assert (s.env, s.env_kwargs) == ("AgentR1/MuSiQue-v0", {**rest, "data_path": musique})
    # the run's env on other data: the run's split (of its embedded sample) goes too
    hotpot_file = str(shared_data / "hotpotqa" / "dev_distractor_sample_a_300.jsonl")
    s = settings("--settings-from", str(run), "--data-path", hotpot_file)
    assert (s.env, s.env_kwargs) == ("AgentR1/HotpotQA-v0", {**rest, "data_path": hotpot_file})
    # another env on its embedded sample: the run's split goes, the env's held-aside split comes back
    s = settings("--settings-from", str(run), "--env", "AgentR1/MuSiQue-v0")
    assert s.env_kwargs == {**rest, "split": "test"}
    assert settings("--settings-from", str(run), "--split", "train").env_kwargs == {**rest, "split": "train"}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.mkdir() or p, "no config.yaml there (agent-r1 train writes one)"),
        (lambda p: p / "none.yaml", "none.yaml"),
        (lambda p: write_run(p, rollout={"max_turns": "many"}), "max_turns"),
    ],
)
def test_a_run_without_a_valid_config_is_a_one_line_error(make, message, tmp_path, capsys):
    run = make(tmp_path / "run")
    assert main(["eval", "--settings-from", str(run), "--model", "tiny-random", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-r1 eval: error:") and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # ~55 s (a training run, then three evaluations); CI runs it after the default suite
def test_a_trained_agent_evaluated_with_its_run_s_settings_scores_what_the_run_recorded(tmp_path, one_thread):
    run = tmp_path / "run"
    sets = {
        "output_dir": str(run),
        "rl.steps": "1",
        "sft.episodes": "2",
        "env.eval_kwargs": "{split: test, top_k: 1, max_passage_chars: 120}",
        "rollout.max_new_tokens_per_turn": "6",
        "eval.tasks": "3",
        "eval.batch_size": "3",
    }
    assert main(["train", "--config", "tiny", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]]) == 0
    out = tmp_path / "again"
    argv = ["eval", "--settings-from", str(run), "--model", str(run / "final"), "--limit", "3", "--out", str(out)]
    assert main(argv) == 0

    def episodes(folder):
        rows = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
        return sorted(rows, key=lambda r: r["task_index"])

    recorded = run / "eval" / "final"
    # every record the same: answers, scores, rewards and the trajectories' tokens, log-probs and messages
    assert len(episodes(recorded)) == 3 and episodes(out) == episodes(recorded)
    spec = json.loads((out / "spec.json").read_text())
    assert spec["env_kwargs"] == {"split": "test", "top_k": 1, "max_passage_chars": 120}
    assert spec["rollout"]["max_new_tokens_per_turn"] == 6 and spec["seed"] == EVAL_SEED
    # the defaults alone (256 new tokens a turn, 5 passages) play other episodes: the check above can fail
    plain = tmp_path / "plain"
    assert main(["eval", "--model", str(run / "final"), "--limit", "3", "--out", str(plain)]) == 0
    assert episodes(plain) != episodes(recorded)
