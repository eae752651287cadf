"""scripts/gpu_check.{sh,py}: the 3B shape, the scratch tokenizer, and a --tiny run on the CPU."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
gpu_check = load_script("scripts/gpu_check.py", "gpu_check")


def test_the_model_has_qwen25_3b_s_parameter_count():
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(Qwen2Config(**gpu_check.QWEN25_3B))
    assert sum(p.numel() for p in model.parameters()) == 3_085_938_688  # "3.09 B" on Qwen2.5-3B's model card


def test_the_scratch_tokenizer_speaks_chatml_and_keeps_special_tokens_whole():
    tok = gpu_check.scratch_tokenizer(1024)
    text = tok.apply_chat_template([{"role": "user", "content": "Who founded Apple?"}], tokenize=False,
                                   add_generation_prompt=True)  # fmt: skip
    assert text == "<|im_start|>user\nWho founded Apple?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 2 and tok.decode(ids) == text
    assert tok.eos_token == tok.pad_token == "<|im_end|>" and len(tok) <= 1024


def test_args_and_flags():
    args = gpu_check.parse_args(["--tiny"])
    assert args.tiny and (args.episodes, args.group, args.turns, args.max_new_tokens) == (4, 2, 2, 8)
    assert not gpu_check.parse_args([]).tiny
    with pytest.raises(ValueError, match="divisible by group"):
        gpu_check.Args(episodes=6, group=4)
    assert gpu_check.parse_args([]).async_steps == 4 and gpu_check.parse_args(["--tiny"]).async_steps == 3
    assert gpu_check.parse_args(["--async-steps", "0"]).async_steps == 0
    with pytest.raises(ValueError, match="at least 2"):
        gpu_check.Args(async_steps=1)  # the rows average the steps after the first


@pytest.mark.slow
def test_tiny_run_prints_the_table():
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", "scripts/gpu_check.sh", "--tiny"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout[done.stdout.index("gpu_check on CPU") :].splitlines()
    assert table[1].split() == ["row", "seconds", "rate", "peak", "GiB", "note"]
    assert table[2].startswith("rollout") and "4 episodes, 8 turns, 64 model tokens" in table[2]
    assert table[3].startswith("grpo step (TRL)")
    if gpu_check.ppo_available():
        assert table[4].startswith("ppo step (ours)")
        assert table[5].startswith("ppo sync") and "staleness 0" in table[5]
        assert table[6].startswith("ppo async") and "staleness 1" in table[6] and "x the sync steps/s" in table[6]
    else:
        assert "PPO: not available in this checkout" in done.stdout


def test_the_gpu_wheels_carry_the_argument_parser_at_the_constraints_pin():
    """The GPU image lacks tyro (gpu_check.py's parser): ``--fetch-wheels`` must bring the version CI tests."""
    lines = (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
    pin = next(r.strip() for r in lines if r.startswith("tyro=="))
    script = (ROOT / "scripts" / "gpu_check.sh").read_text(encoding="utf-8")
    assert pin in script.split() and "import trl, gymnasium, pydantic, tyro" in script
