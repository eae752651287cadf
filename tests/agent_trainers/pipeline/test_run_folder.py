"""One run per folder (``agent_trainers.pipeline.run_folder``): another run there is refused unless told."""

from __future__ import annotations

import json

import pytest

from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.train import run_training
from tests.agent_trainers.pipeline.test_resume import config, rl_records


@pytest.mark.slow  # ~30 s (three runs in one folder); CI runs it after the default suite
def test_a_folder_holds_one_run(tmp_path, one_thread):
    """A second run (another learning rate) in a used folder is refused unless told: --resume must match the run's
    settings (its config.yaml and its newest checkpoint), --overwrite clears the first run's files first. Before,
    such a run went on, and once killed and resumed continued from the first run's newest checkpoint."""
    out = tmp_path / "run"

    def setting(lr, steps, out=out):
        c = config(out, "grpo").to_dict()
        c["rl"] |= {"learning_rate": lr, "steps": steps}
        return config_from_dict(c)

    run_training(setting(1e-2, 2))
    saved = (out / "config.yaml").read_text()
    with pytest.raises(ValueError, match=r"holds another run \(rl/checkpoint-1, rl/checkpoint-2, final, metrics"):
        run_training(setting(1e-3, 1))
    with pytest.raises(ValueError, match=r"other settings: rl.learning_rate: 0.01 then, 0.001 now"):
        run_training(setting(1e-3, 1), resume=True)
    assert (out / "config.yaml").read_text() == saved  # refused before anything was written
    (out / "config.yaml").write_text(saved.replace("learning_rate: 0.01", "learning_rate: 0.001"))
    with pytest.raises(ValueError, match=r"checkpoint-2 belongs to a run with other settings: rl.learning_rate"):
        run_training(setting(1e-3, 1), resume=True)  # the checkpoint itself says whose it is
    with pytest.raises(ValueError, match="choose one"):
        run_training(setting(1e-3, 1), resume=True, overwrite=True)
    (out / "notes.txt").write_text("mine")
    run_training(setting(1e-3, 1), overwrite=True)
    assert sorted(p.name for p in (out / "rl").glob("checkpoint-*")) == ["checkpoint-1"]
    state = json.loads((out / "rl" / "checkpoint-1" / "rollout_state.json").read_text())
    assert state["settings"]["rl"]["learning_rate"] == 1e-3 and "steps" not in state["settings"]["rl"]
    assert [r["step"] for r in rl_records(out)] == [1] and (out / "notes.txt").read_text() == "mine"
    run_training(setting(1e-3, 2), resume=True)  # more steps for a finished run: rl.steps may change
    assert [r["step"] for r in rl_records(out)] == [1, 2]
