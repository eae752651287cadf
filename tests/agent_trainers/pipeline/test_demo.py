"""The main job: which data it uses, and its report (table, what SFT and RL changed, viewer page)."""

from __future__ import annotations

import copy
import json
import tomllib
from fnmatch import fnmatch

import pytest
import yaml

from agent_trainers.evaluation import EvalSpec, Method, run_eval
from agent_trainers.pipeline.cli import main
from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.demo import DEMO_CONFIG, DEMO_SETTINGS, SHARED_PREFIX, _report, resolve_data, run_demo
from agent_trainers.rollout import RolloutConfig
from tests.agent_trainers.evaluation.conftest import HOTPOT, TEST_SPLIT, PromptScripted, search_call
from tests.conftest import REPO_ROOT


def test_shared_paths_resolve_from_the_environment_variable(tmp_path, monkeypatch):
    for name in ("hotpotqa/train_100_official.json", "hotpotqa/dev_distractor_sample_a_300.jsonl"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("[]")
    monkeypatch.setenv("AGENT_R1_SHARED_DATA", str(tmp_path))
    settings, line = resolve_data(DEMO_SETTINGS)
    assert settings["env"]["train_kwargs"]["data_path"] == str(tmp_path / "hotpotqa/train_100_official.json")
    assert settings["env"]["eval_kwargs"]["top_k"] == 2 and line.startswith("data: train ")


def test_without_the_shared_data_the_embedded_sample_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_R1_SHARED_DATA", str(tmp_path))  # empty
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("agent_trainers.pipeline.demo._shared_file", lambda path: None)  # nor beside the repo
    settings, line = resolve_data(DEMO_SETTINGS)
    assert settings["env"]["train_kwargs"] == {"split": "train", "top_k": 2, "max_passage_chars": 300}
    assert settings["env"]["eval_kwargs"] == {"split": "test", "top_k": 2, "max_passage_chars": 300}
    assert "not found; using the embedded HotpotQA sample" in line and SHARED_PREFIX in line
    assert DEMO_SETTINGS["env"]["train_kwargs"]["data_path"].startswith(SHARED_PREFIX)  # not modified in place


def test_the_demo_report(tmp_path, smollm2_tokenizer, capsys):
    """Five phases on the same 8 questions; SFT learns to search and answer, RL then fixes two answers."""
    fixed = {"agr1-hotpot-025", "agr1-hotpot-027"}

    def phase(name, respond):
        spec = EvalSpec(HOTPOT, Method.AGENT, env_kwargs=dict(TEST_SPLIT), label=name,
                        rollout=RolloutConfig(max_turns=3, temperature=0.0))  # fmt: skip
        run_eval(spec, PromptScripted(smollm2_tokenizer, respond), tmp_path / "eval" / name, progress=False)

    def agent(rl):
        def respond(task, prompt):
            if "Doc 1" not in prompt:
                return search_call(task.question)
            right = task.type == "bridge" and (task.id not in fixed or rl)
            return f"<answer>{task.answer if right else 'no idea'}</answer>"

        return respond

    phase("closed-book", lambda t, p: "<answer>no idea</answer>")
    phase("before", lambda t, p: "I would like to help")
    phase("after_sft", agent(rl=False))
    phase("final", agent(rl=True))
    (tmp_path / "final").mkdir()
    smollm2_tokenizer.save_pretrained(tmp_path / "final")
    (tmp_path / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"stage": "rl", "step": s, "reward": r, "step_time": t}) + "\n"
            for s, r, t in [(1, 0.25, 80.0), (2, 0.5, 110.0)]
        )
    )
    config = config_from_dict({**DEMO_SETTINGS, "output_dir": str(tmp_path)})
    lines = _report(config)
    out = capsys.readouterr().out
    assert "closed-book" in out and "naive RAG" not in out  # rows of the folders that exist, in order
    sft, rl, rewards, times = lines
    assert sft.startswith("SFT changed em +0.500 [+0.125, +0.875], f1 +0.500 [+0.125, +0.875]")
    assert "answer_rate +1.000 [+1.000, +1.000], tool_call_rate +1.000" in sft
    assert sft.endswith("(vs before; 8 questions, 8 answers changed)")
    # 2 of 8 fixed: EM +0.25, but a resample without either fixed question has probability (6/8)^8 = 10%
    assert rl.startswith(
        "RL (6 grpo steps) changed no metric measurably (every 95% interval includes 0; f1 +0.250 [+0.000, "
    )
    assert rl.endswith("(vs after_sft; 8 questions, 2 answers changed)")
    assert rewards == "RL train reward per step: 1: 0.250, 2: 0.500"
    assert times == "RL step wall time: mean 95.0 s/step over 2 steps (min 80.0, max 110.0)"
    table = (tmp_path / "eval" / "table.md").read_text()
    assert table.splitlines()[0].startswith("| method | em | f1 |") and "- SFT changed em" in table
    assert (tmp_path / "view.html").stat().st_size > 10_000


def test_demo_set_overrides_apply_last_and_leave_the_defaults_alone():
    from agent_trainers.pipeline.demo import demo_settings

    before = copy.deepcopy(DEMO_SETTINGS)
    settings = demo_settings(quick=True, output_dir="runs/x", overrides={"threads": 1, "rl.steps": 3})
    config = config_from_dict(settings)
    assert (config.threads, config.rl.steps, config.output_dir, config.rl.num_generations) == (1, 3, "runs/x", 2)
    assert DEMO_SETTINGS == before
    with pytest.raises(ValueError, match=r"stepz"):
        config_from_dict(demo_settings(overrides={"rl.stepz": 3}))


def test_the_demo_settings_with_and_without_quick_are_valid():
    from agent_trainers.pipeline.demo import QUICK_OVERRIDES, _merge

    full = config_from_dict(copy.deepcopy(DEMO_SETTINGS))
    quick = config_from_dict(_merge(DEMO_SETTINGS, QUICK_OVERRIDES))
    assert (full.algorithm_settings.micro_batch, full.rl.num_generations) == (4, 4)
    assert (quick.algorithm_settings.micro_batch, quick.rl.num_generations, quick.rl.steps) == (2, 2, 1)


def test_the_demo_settings_are_one_packaged_file_that_configs_demo_yaml_points_at():
    assert DEMO_SETTINGS == yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    assert (REPO_ROOT / "configs" / "demo.yaml").samefile(DEMO_CONFIG)  # the README's path: the same file
    assert DEMO_CONFIG.is_file() and not DEMO_CONFIG.is_symlink()  # a wheel gets the file itself
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = project["tool"]["setuptools"]["package-data"]["agent_trainers"]
    relative = DEMO_CONFIG.relative_to(REPO_ROOT / "agent_trainers").as_posix()
    assert any(fnmatch(relative, pattern) for pattern in shipped), f"{relative} is not package data: {shipped}"


class _Stop(Exception):
    """Raised by the stand-in for training: the test only needs the config it was given."""


def test_agent_r1_demo_applies_quick_output_dir_and_set_to_the_packaged_settings(monkeypatch, capsys):
    seen = []

    def run_training(config, resume=False, overwrite=False):
        seen.append((config, resume))
        raise _Stop

    monkeypatch.setattr("agent_trainers.pipeline.train.run_training", run_training)
    with pytest.raises(_Stop):
        main(["demo", "--quick", "--output-dir", "runs/x", "--set", "threads=1", "--set", "rl.steps=3"])
    config, resume = seen[0]
    assert (config.threads, config.rl.steps, config.rl.num_generations, config.output_dir) == (1, 3, 2, "runs/x")
    assert (config.model.name, config.eval.tasks, resume) == ("smollm2", 4, False)
    assert capsys.readouterr().out.startswith("data: ")
    assert main(["demo", "--set", "rl.stepz=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-r1 demo: error: ") and "stepz" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_quick_demo_end_to_end_with_a_tiny_model(tmp_path, monkeypatch, one_thread, capsys):
    config = tmp_path / "demo.yaml"
    import yaml

    settings = {**DEMO_SETTINGS, "model": {"name": "tiny-random"}, "output_dir": str(tmp_path / "run"),
                "rollout": {"max_turns": 2, "max_new_tokens_per_turn": 8, "max_total_tokens": 1024}}  # fmt: skip
    config.write_text(yaml.safe_dump(settings))
    assert run_demo(config_path=str(config), quick=True) == 0
    out = capsys.readouterr().out
    assert "total time" in out and "RL (1 grpo steps)" in out and "viewer:" in out
    assert "RL step 1/1: " in out and "RL step wall time: mean " in out
    assert sorted(p.name for p in (tmp_path / "run" / "eval").iterdir() if p.is_dir()) == [
        "after_sft", "before", "closed-book", "final", "naive-rag"]  # fmt: skip
