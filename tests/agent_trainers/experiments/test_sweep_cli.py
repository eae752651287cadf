"""``agent-r1 sweep``: its help and ``--plan`` from any folder (the console script, as a user types it)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from agent_trainers.cli import main


def test_sweep_plan_from_another_folder_prints_the_runs_and_runs_nothing(tmp_path):
    exe = shutil.which("agent-r1") or f"{sys.executable} -m agent_trainers.cli"
    out = subprocess.run(f"{exe} sweep learn_main --plan", shell=True, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("learn_main: SFT from partly flawed demonstrations")
    assert "test: {'task_seed': 41" in lines[1] and "seeds [0]" in lines[1]
    assert lines[2].startswith("sft/seed0") and "SFT -> runs/learn_main/seed0/sft" in lines[2]
    assert lines[3].startswith("grpo/seed0") and "grpo RL, 8 steps from sft/seed0" in lines[3]
    assert not (tmp_path / "runs").exists()


def test_sweep_help_and_one_line_errors(capsys):
    with pytest.raises(SystemExit) as done:
        main(["sweep", "--help"])
    assert done.value.code == 0 and "--plan" in capsys.readouterr().out
    assert main(["sweep", "learn_mian", "--plan"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-r1 sweep: error: no sweep file 'learn_mian'") and err.count("\n") == 1
    assert main(["sweep", "learn_main", "--plan", "--set", "rl.micro_batch=2"]) == 2
    assert "rl.micro_batch moved: it is now grpo.micro_batch" in capsys.readouterr().err
    assert main(["sweep", "learn_main", "--plan", "--report"]) == 2
    assert "--plan and --report: choose one" in capsys.readouterr().err
    assert main(["sweep", "learn_main", "--plan", "--seeds", "0,1,2"]) == 0
    assert capsys.readouterr().out.count("grpo RL, 8 steps") == 3


def test_sweep_plan_of_some_arms_lists_them_with_their_start(capsys):
    assert main(["sweep", "hotpotqa_rate", "--plan", "--seeds", "1,2", "--arms", "lr1e-5-kl"]) == 0
    runs = [line.split()[0] for line in capsys.readouterr().out.splitlines()[3:]]
    assert runs == ["sft/seed1", "lr1e-5-kl/seed1", "sft/seed2", "lr1e-5-kl/seed2"]
    assert main(["sweep", "hotpotqa_rate", "--plan", "--arms", "lr1e-5,kl"]) == 2
    err = capsys.readouterr().err
    assert "no arm kl in this sweep; its arms: sft, lr1e-5, lr1e-5-4q, lr1e-5-evidence, lr1e-5-kl" in err
