"""`agent-r1`: envs, train (SFT + RL, metrics, plots, checkpoints, --resume, TensorBoard), eval, one-line errors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest
import torch
import yaml

from agent_trainers.pipeline.cli import main
from agent_trainers.pipeline.config_files import PACKAGED_CONFIGS
from tests.conftest import LookupEnv, run_agent_r1

ENV_ID = "Test/CLILookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=3)


def write_config(tmp_path, steps, **top):
    data = {
        "seed": 0,
        "output_dir": str(tmp_path / "run"),
        "device": "cpu",
        "model": {"name": "tiny-random"},
        "env": {"id": ENV_ID, "train_kwargs": {}, "eval_kwargs": {}},
        "rollout": {"max_new_tokens_per_turn": 8, "max_total_tokens": 1024},
        "sft": {"episodes": 4, "epochs": 1.0, "batch_size": 4, "learning_rate": 1e-3},
        "rl": {"steps": steps, "num_generations": 2, "prompts_per_step": 1, "save_steps": 1},
        "eval": {"tasks": 1, "every": 1},
        **top,
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def records(tmp_path):
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # ~40 s (a run, killed and resumed); CI runs it after the default suite
def test_train_writes_metrics_plots_checkpoints_tensorboard_and_resumes(tmp_path, capsys):
    assert main(["train", "--config", str(write_config(tmp_path, 2, report_to="tensorboard"))]) == 0
    run = tmp_path / "run"
    assert (run / "sft" / "DONE").is_file() and (run / "final" / "config.json").is_file()
    assert (run / "rl" / "checkpoint-2" / "rollout_state.json").is_file()
    assert (run / "plots" / "eval.png").stat().st_size > 0
    events = sorted((run / "rl" / "runs").rglob("events.out.tfevents.*")) + sorted((run / "sft").rglob("events.*"))
    assert len(events) >= 2 and all(e.stat().st_size > 0 for e in events)
    phases = [r["phase"] for r in records(tmp_path) if r["stage"] == "eval"]
    assert phases == ["before", "after_sft", "rl_step_1", "final"]
    rl = [r for r in records(tmp_path) if r["stage"] == "rl" and "reward" in r]
    assert [r["step"] for r in rl] == [1, 2] and {r["algorithm"] for r in rl} == {"grpo"}
    assert any(r["stage"] == "sft" and "loss" in r for r in records(tmp_path))
    printed = capsys.readouterr().out
    assert (
        "after_sft" in printed
        and "[train] stage 2/5: sft (" in printed
        and "[train] stage 3/5: eval_after_sft" in printed
    )
    assert all(r["step_time"] > 0 for r in rl)  # every RL step's wall time is logged and printed
    assert "RL step 1/2: " in printed and "RL step 2/2: " in printed and "ETA 0.0 min" in printed
    # resume with one more step: SFT is reloaded, RL continues from checkpoint-2
    assert main(["train", "--config", str(write_config(tmp_path, 3)), "--resume"]) == 0
    assert [r["phase"] for r in records(tmp_path) if r["stage"] == "eval"][4:] == ["final"]
    assert [r["step"] for r in records(tmp_path) if r["stage"] == "rl" and "reward" in r] == [1, 2, 3]
    assert (run / "rl" / "checkpoint-3").is_dir()
    # the trained model evaluates from its folder
    capsys.readouterr()
    out = tmp_path / "eval"
    assert main(["eval", "--env", ENV_ID, "--model", str(run / "final"), "--limit", "1", "--out", str(out)]) == 0
    assert "1 questions" in capsys.readouterr().out and (out / "summary.json").is_file()
    assert [p.name for p in sorted((run / "eval").iterdir())] == ["after_sft", "before", "final", "rl_step_1"]


def test_the_event_files_hold_the_training_curves(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert main(["train", "--config", str(write_config(tmp_path, 1, report_to="tensorboard")),
                 "--set", "sft.enabled=false", "--set", "eval.every=0"]) == 0  # fmt: skip
    (folder,) = {p.parent for p in (tmp_path / "run" / "rl" / "runs").rglob("events.out.tfevents.*")}
    acc = EventAccumulator(str(folder))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "train/reward" in tags and "train/loss" in tags and "train/rollout/turns" in tags
    assert [e.step for e in acc.Scalars("train/reward")] == [1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "rl.steps=abc"], "rl.steps: Input should be a valid integer, unable to parse string"),
        (["--set", "algorithm=ppo2"], "'gigpo', 'ppo' or 'rft' (got 'ppo2')"),
        (["--set", "device=tpu"], "device: Input should be 'auto', 'cpu' or 'cuda' (got 'tpu')"),
        (["--set", "report_to=mlflow"], "report_to: Input should be 'none', 'tensorboard' or 'wandb'"),
        (["--set", "rl.num_generations=1"], "rl.num_generations: Input should be greater than or equal to 2"),
        (["--set", "rollout.max_turnz=2"], "rollout.max_turnz: not a setting; did you mean rollout.max_turns?"),
        (["--set", "rl.stepz=2"], "rl.stepz: not a setting; did you mean rl.steps?"),
        (["--set", "sedd=2"], "sedd: not a setting; did you mean seed?"),
        (["--set", "grpo.zzz=2"], "grpo.zzz: not a setting (the grpo settings: micro_batch, gradient_checkpointing,"),
        (["--set", "ppo.update_epochs=2"], "ppo: the section of algorithm ppo, but the algorithm is grpo"),
        (["--set", "rl.micro_batch=2"], "rl.micro_batch moved: it is now grpo.micro_batch"),
        (["--set", "novalue"], "--set expects KEY=VALUE (got 'novalue')"),
        (["--set", "model.name=gpt-9000"], "unknown model 'gpt-9000'"),
    ],
)
def test_bad_settings_are_one_line_errors(tmp_path, capsys, args, message):
    assert main(["train", "--config", str(write_config(tmp_path, 1)), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "report_to=wandb"], "report_to: wandb is not installed (pip install wandb)"),
        (["--set", "device=cuda"], "device 'cuda' was asked for, but torch sees no CUDA device"),
    ],
)
def test_device_and_logger_are_refused_before_anything_is_written(tmp_path, capsys, args, message):
    """`device=cuda` on a CPU box left runs/.../config.yaml behind, and `report_to=wandb` without wandb failed
    only after the first stage had written its evaluation and metrics."""
    if "cuda" in message and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    if "wandb" in message and importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    assert main(["train", "--config", str(write_config(tmp_path, 1)), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


NO_ORACLE_MODULE = """
from agent_gym import ToolEnv, register_env
from tests.conftest import LookupEnv


class NoOracleEnv(LookupEnv):
    oracle_action = ToolEnv.oracle_action  # a user's env before it has an oracle


register_env("Mine/NoOracle-v0", NoOracleEnv, max_episode_steps=2)
"""


def test_an_env_without_an_oracle_is_refused_in_one_line_before_anything_is_written(tmp_path):
    """Under the default ``sft.enabled: true`` an env without ``oracle_action()`` stopped with a 30-line traceback
    12 s in, after stage 1 had written the run folder, and the message did not name the fix (issue 41.3)."""
    (tmp_path / "mine_env.py").write_text(NO_ORACLE_MODULE)
    done = run_agent_r1("train", "--config", "tiny", "--set", "env.id=mine_env:Mine/NoOracle-v0", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "agent-r1 train: error: sft.enabled: mine_env:Mine/NoOracle-v0 (mine_env:NoOracleEnv) has no oracle_action() "
        "to play the SFT demonstrations; train without SFT (--set sft.enabled=false, or sft: {enabled: false}) or "
        "implement oracle_action() (docs/custom_env.md)\n"
    )
    assert not (tmp_path / "runs").exists()


def test_flawed_demonstrations_without_a_flawed_demonstrator_are_refused_before_anything_is_written(tmp_path, capsys):
    """``sft.flawed_share`` on an env without ``flawed_oracle_action()`` failed in the SFT stage, after the first
    evaluation had been written."""
    assert main(["train", "--config", str(write_config(tmp_path, 1)), "--set", "sft.flawed_share=0.5"]) == 2
    assert capsys.readouterr().err == (
        f"agent-r1 train: error: sft.flawed_share: {ENV_ID} (tests.conftest:LookupEnv) has no flawed_oracle_action() "
        "to play flawed demonstrations; set sft.flawed_share to 0 (--set sft.flawed_share=0) or implement "
        "flawed_oracle_action()\n"
    )
    assert not (tmp_path / "run").exists()


def test_a_model_that_fails_to_load_leaves_no_run_folder_and_a_resumed_run_untouched(tmp_path, capsys):
    """A failed model load left ``config.yaml`` behind in a run folder of its own making (issue 41.3)."""
    config = str(write_config(tmp_path, 1))
    assert main(["train", "--config", config, "--set", "model.name=gpt-9000"]) == 2
    assert "unknown model 'gpt-9000'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    run = tmp_path / "run"  # an earlier run's folder, resumed with a model that does not load: left as it was
    run.mkdir()
    (run / "config.yaml").write_text("model: {name: tiny-random}\n")
    (run / "metrics.jsonl").write_text('{"stage": "eval", "phase": "before", "step": 0}\n')
    assert main(["train", "--config", config, "--set", "model.name=gpt-9000", "--resume"]) == 2
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "metrics.jsonl"]
    assert (run / "config.yaml").read_text() == "model: {name: tiny-random}\n"
    assert (run / "metrics.jsonl").read_text() == '{"stage": "eval", "phase": "before", "step": 0}\n'


_HEAVY_PROBE = """
import sys
from agent_trainers.pipeline.cli import main
code = main(["train", "--config", sys.argv[1], *sys.argv[2:]])
print("exit", code, *sorted(m for m in ("torch", "transformers", "trl") if m in sys.modules))
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "rl.stepz=2"], "did you mean rl.steps?"),
        (["--set", "algorithm=ppo2"], "(got 'ppo2')"),
        (["--set", "env.id=AgentR1/HotpotQ-v0"], "Did you mean: `HotpotQA`?"),
        (["--set", "env.train_kwargs.task_sed=1"], "takes no argument 'task_sed'; did you mean 'task_seed'?"),
        (["--set", "report_to=wandb"], "report_to: wandb is not installed"),
        (["--set", "rl.steps=3", "--set", "eval.every=2"], "rl.steps must be divisible by eval.every"),
    ],
)
def test_config_errors_come_before_torch_transformers_and_trl_are_imported(tmp_path, args, message):
    """Every command spent 15-20 s importing torch and TRL before it read its config (issue 26): a config, env id,
    env kwargs or logger error is now given by a process that has imported none of them."""
    if "wandb" in message and importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    probe = subprocess.run(
        [sys.executable, "-c", _HEAVY_PROBE, str(write_config(tmp_path, 1)), "--set", "env.id=AgentR1/Calculator-v0",
         *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert message in probe.stderr and probe.stderr.count("\n") == 1, probe.stderr
    assert probe.stdout.split() == ["exit", "2"], probe.stdout  # no heavy module named after the exit code
    assert not (tmp_path / "run").exists()


def test_print_config_shows_the_resolved_settings_and_runs_nothing(tmp_path, capsys):
    assert main(["train", "--config", str(write_config(tmp_path, 3)), "--set", "rl.learning_rate=0.25",
                 "--print-config"]) == 0  # fmt: skip
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["rl"]["learning_rate"] == 0.25 and shown["rl"]["steps"] == 3 and shown["algorithm"] == "grpo"
    assert shown["rollout"]["max_new_tokens_per_turn"] == 8 and "grpo" in shown  # defaults are filled in
    assert shown["grpo"]["scale_rewards"] == "group" and "ppo" not in shown  # the chosen algorithm's section only
    assert not (tmp_path / "run").exists()


def test_missing_config_file_is_a_one_line_error(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "none.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"no config file '{tmp_path / 'none.yaml'}'" in err and err.count("\n") == 1
    assert main(["train", "--config", "tinyy"]) == 2
    err = capsys.readouterr().err
    assert (
        "no config file 'tinyy' (and no packaged config of that name: " in err
        and "learn_main, learn_textworld, tiny)" in err
    )


def test_a_packaged_config_is_taken_by_name_from_any_folder(tmp_path, capsys, monkeypatch):
    """A pip user has no configs/ folder: ``--config tiny`` reads the packaged agent_trainers/configs/tiny.yaml."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", "tiny", "--print-config"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["model"]["name"] == "tiny-random" and shown["output_dir"] == "runs/tiny"
    (tmp_path / "tiny").write_text("seed: 7\noutput_dir: mine\n")  # a file of that name wins: no suffix, no glob
    assert main(["train", "--config", "tiny.yaml", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["output_dir"] == "runs/tiny"
    assert main(["train", "--config", "tiny", "--print-config"]) == 2  # the file 'tiny' has no .yaml suffix
    assert "must end in .yaml" in capsys.readouterr().err


def test_the_guides_config_path_works_after_a_pip_install(tmp_path):
    """getting_started.md's ``agent-r1 train --config configs/tiny.yaml`` typed in a folder without ``configs/``
    (a pip install) stopped with "no config file 'configs/tiny.yaml' (and no packaged config of that name: ...,
    tiny)" (issue 41.1): the path's file name is a packaged config's, so that one is read, and named."""
    done = run_agent_r1("train", "--config", "configs/tiny.yaml", "--print-config", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["model"]["name"] == "tiny-random"
    packaged = PACKAGED_CONFIGS / "tiny.yaml"
    assert done.stderr.splitlines() == [
        f"config: 'configs/tiny.yaml' does not exist here; using the packaged tiny.yaml ({packaged})"
    ]
    (tmp_path / "configs").mkdir()  # a file at the path itself wins, silently
    (tmp_path / "configs" / "tiny.yaml").write_text("seed: 7\n")
    mine = run_agent_r1("train", "--config", "configs/tiny.yaml", "--print-config", cwd=tmp_path)
    assert yaml.safe_load(mine.stdout)["seed"] == 7 and mine.stderr == ""
    missing = run_agent_r1("train", "--config", "configs/tinyy.yaml", cwd=tmp_path)  # no packaged config's name
    assert missing.returncode == 2 and "no config file 'configs/tinyy.yaml'" in missing.stderr


QUICK_TINY = ("--set", "rl.steps=1", "--set", "sft.episodes=2", "--set", "eval.before=false")
"""``--config tiny`` cut to one SFT and one RL step."""


@pytest.mark.slow  # two runs of the tiny config (~35 s); CI runs it after the default suite
def test_a_run_prints_its_own_lines_and_the_trainers_dicts_and_known_warnings_only_with_verbose(tmp_path):
    """Every ``agent-r1 train`` printed TRL's "experimental" warning, a tokenizer warning and TRL's 40-key dict per
    step beside the project's own one-line summary (issue 41.10)."""
    done = run_agent_r1("train", "--config", "tiny", *QUICK_TINY, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "[train] stage 2/5: sft (0.0 min in)" in lines and any(line.startswith("RL step 1/1: ") for line in lines)
    assert [line for line in lines if line.startswith("{")] == []  # no trainer dict, SFT's, RL's or the summary's
    assert "experimental feature" not in done.stderr and "clean_up_tokenization_spaces" not in done.stderr
    verbose = run_agent_r1("train", "--config", "tiny", *QUICK_TINY, "-v", "--set", "output_dir=runs/v", cwd=tmp_path)
    assert verbose.returncode == 0, verbose.stderr
    dicts = [line for line in verbose.stdout.splitlines() if line.startswith("{")]
    assert [d.split("'")[1] for d in dicts] == ["loss", "train_runtime", "loss", "train_runtime"]  # SFT, then RL
    assert "'rollout/turns'" in dicts[2]  # the RL step's dict, with our rollout figures among TRL's
    assert "UserWarning: You are using 'rollout_func', which is an experimental feature." in verbose.stderr
    assert "clean_up_tokenization_spaces" not in verbose.stderr  # turned off for good: prepare_tokenizer


def test_rollout_dispatches_to_the_rollout_engine_cli(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["rollout", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--max-new-tokens-per-turn" in out and "Token budget per trajectory" in out


def test_envs_lists_registry(capsys):
    assert main(["envs"]) == 0
    import agent_gym

    out = capsys.readouterr().out
    for env_id, _ in agent_gym.list_envs():
        assert env_id in out


def test_version_is_the_installed_distributions(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"agent-r1 {version('agent-r1-gym')}\n"


_CORE_ONLY = """
import sys
TRAIN_EXTRA = {"torch", "transformers", "trl", "accelerate", "datasets", "pydantic", "yaml", "matplotlib", "tqdm",
               "rich", "tensorboard", "fastapi", "uvicorn"}
class NotInstalled:  # the core install: the train and server extras' modules are absent
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in TRAIN_EXTRA:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotInstalled())
from agent_trainers.pipeline.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--config", "tiny"], "agent-r1 train: error: No module named 'yaml': this command needs the train"),
        (["eval", "--env", "AgentR1/Calculator-v0"], "agent-r1 eval: error: No module named 'pydantic': this command"),
        (["report", "x"], "agent-r1 report: error: No module named 'pydantic': this command needs the train extra"),
        (["demo"], "agent-r1 demo: error: No module named 'yaml': this command needs the train extra"),
        (["rollout", "--help"], "agent-r1 rollout: error: No module named 'yaml': this command needs the train"),
    ],
)
def test_a_core_install_names_the_extra_a_command_needs_in_one_line(args, message):
    """With the core install, `agent-r1` itself crashed on import (No module named 'pydantic', a traceback)."""
    done = subprocess.run([sys.executable, "-c", _CORE_ONLY, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'agent-r1-gym[train]'" in done.stderr


def test_a_module_error_raised_without_a_name_keeps_its_own_text():
    """Gymnasium re-raises a failed ``module:id`` import as ``ModuleNotFoundError(text)`` with no ``name``: the
    one-line message printed "No module named ''" (issue 41.2)."""
    from agent_trainers.errors import missing_extra

    gymnasium_style = ModuleNotFoundError("No module named 'unit_env'. Environment registration via importing failed")
    assert missing_extra(gymnasium_style) == "No module named 'unit_env'. Environment registration via importing failed"
    named = ModuleNotFoundError("No module named 'trl'", name="trl")
    assert missing_extra(named).startswith("No module named 'trl': this command needs the train extra")


def test_a_core_install_lists_the_envs_and_its_version():
    for args, expected in ((["envs"], "AgentR1/Calculator-v0"), (["--version"], "agent-r1 ")):
        done = subprocess.run([sys.executable, "-c", _CORE_ONLY, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and expected in done.stdout, done.stderr


def test_the_verifiers_entry_module_names_its_extra_when_verifiers_is_missing():
    code = _CORE_ONLY.split("from agent_trainers")[0].replace('"uvicorn"}', '"uvicorn", "verifiers"}') + (
        "import agent_r1_gym\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last == (
        "ModuleNotFoundError: agent_r1_gym is the verifiers plugin entry point and needs its extra: "
        "pip install 'agent-r1-gym[verifiers]'"
    ), done.stderr


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    """``agent-r1 sweep learn_main --plan | head -0``: the pipe is closed before the plan is printed."""
    from tests.conftest import AGENT_R1_IMPORT, REPO_ROOT

    code = f"import sys; {AGENT_R1_IMPORT}; sys.argv[0] = 'agent-r1'; sys.exit(main())"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-P", "-c", code, "sweep", "learn_main", "--plan"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    proc.stdout.close()  # the reader is gone before the command has written a line
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and err == "", err
