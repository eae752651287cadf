"""The train config: shipped configs load, every algorithm is selectable, bad values name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_trainers.algorithms import AdvantageMode, Algorithm, LossType
from agent_trainers.errors import one_line
from agent_trainers.pipeline.config import TrainConfig, config_from_dict, load_config
from agent_trainers.rollout import RolloutConfig

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


@pytest.mark.parametrize("name", ["demo.yaml", "hotpotqa_grpo.yaml", "hotpotqa_shared.yaml", "tiny.yaml"])
def test_shipped_configs_load(name):
    config = load_config(CONFIGS / name)
    section = config.algorithm_settings
    assert isinstance(section.advantage, AdvantageMode) and isinstance(section.loss_type, LossType)
    assert isinstance(config.rollout, RolloutConfig)


@pytest.mark.parametrize("algorithm", [a.value for a in Algorithm])
def test_every_algorithm_can_be_set_on_the_tiny_config(algorithm):
    config = load_config(CONFIGS / "tiny.yaml", {"algorithm": algorithm, "output_dir": "x"})
    assert config.algorithm is Algorithm(algorithm) and config.model.name == "tiny-random"


def test_toml_and_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('seed = 3\nalgorithm = "rloo"\n[rl]\nsteps = 4\n[rloo]\nadvantage = "outcome"\n[eval]\nevery = 2\n')
    config = load_config(path, {"rl.num_generations": 3, "rollout.temperature": 0.5})
    assert (config.seed, config.rl.steps, config.rl.num_generations) == (3, 4, 3)
    assert config.algorithm_settings.advantage is AdvantageMode.OUTCOME and config.algorithm is Algorithm.RLOO
    assert config.rollout.temperature == 0.5


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rl": {"stepz": 1}}, "rl.stepz: not a setting; did you mean rl.steps?"),
        (
            {"rl": {"stepz": 1}, "grpo": {"gamma": 2}},
            "rl.stepz: not a setting; did you mean rl.steps?; grpo.gamma: Input",
        ),
        ({"grpo": {"advantage": "token"}}, "grpo.advantage: Input should be 'outcome' or 'turn' (got 'token')"),
        ({"rl": {"num_generations": 1}}, "rl.num_generations: Input should be greater than or equal to 2 (got 1)"),
        ({"rl": {"steps": 6}, "eval": {"every": 4}}, "rl.steps must be divisible by eval.every (got 6 and 4)"),
        ({"grpo": {"gamma": 1.5}}, "grpo.gamma: Input should be less than or equal to 1 (got 1.5)"),
        (
            {"grpo": {"micro_batch": 3}},
            "grpo.micro_batch must divide rl.num_generations * rl.prompts_per_step (got 3 and 8)",
        ),
        ({"rollout": {"max_new_tokens_per_turn": 64, "max_total_tokens": 32}}, "max_total_tokens must exceed"),
        ({"rollout": {"temperature": -1}}, "rollout: temperature must be >= 0 (got -1.0)"),
        ({"sft": {"enabled": False}, "rl": {"enabled": False}}, "enable at least one stage"),
        ({"model": "smollm2"}, "model: Input should be a valid dictionary"),
        ({"bf16": "sometimes"}, "bf16: Input should be a valid boolean"),
    ],
)
def test_validation_messages_name_the_problem_on_one_line(data, message):
    with pytest.raises(ValueError) as info:
        config_from_dict(data)
    assert message in one_line(info.value) and "\n" not in one_line(info.value)


def test_bad_suffix(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match=r"must end in \.yaml"):
        load_config(path)


def test_defaults_are_valid_and_round_trip():
    config = TrainConfig()
    assert config_from_dict(config.to_dict()) == config
    assert config.algorithm is Algorithm.GRPO and config.device == "auto" and config.report_to == "none"
    assert TrainConfig.model_fields["rl"].description == "RL stage: what every RL trainer reads."  # the docs


@pytest.mark.parametrize(("load", "cores"), [(0.2, 2), (0.6, 1), (1.0, 1), (3.5, 1)])
def test_threads_auto_takes_the_cores_idle_at_start(monkeypatch, load, cores):
    from agent_trainers.policies import threads

    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert threads.resolve_threads("auto") == cores
    assert threads.resolve_threads(0) is None and threads.resolve_threads(3) == 3
    assert config_from_dict({"threads": "auto"}).threads == "auto"
    with pytest.raises(ValueError) as info:
        config_from_dict({"threads": -1})
    assert "threads.constrained-int: Input should be greater than or equal to 0 (got -1)" in one_line(info.value)


def _float_fields(model_type, prefix=""):
    """Dotted names of every float setting of the config, sections and nested dataclasses included."""
    import dataclasses
    import typing

    fields = getattr(model_type, "__pydantic_fields__", {})
    for name, info in fields.items():
        kinds = {info.annotation, *typing.get_args(info.annotation)}
        if float in kinds:
            yield f"{prefix}{name}"
        for kind in kinds:
            if isinstance(kind, type) and (hasattr(kind, "__pydantic_fields__") or dataclasses.is_dataclass(kind)):
                yield from _float_fields(kind, f"{prefix}{name}.")


FLOATS = sorted(_float_fields(TrainConfig))


def test_the_float_settings_are_all_found():
    assert {"rl.learning_rate", "rl.beta", "sft.learning_rate", "sft.epochs", "rollout.temperature"} <= set(FLOATS)
    assert len([f for f in FLOATS if f.startswith("ppo.")]) >= 7 and "eval.temperature" in FLOATS
    assert {"gigpo.step_weight", "grpo.gamma", "rl.async_rollouts.importance_cap"} <= set(FLOATS)


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_no_float_setting_takes_inf_or_nan(name, bad):
    """``--set sft.learning_rate=.inf`` exited 0 and saved 3,219,776 NaN weights (issue 25.8)."""
    section, *rest = name.split(".")
    data: dict = {"algorithm": section} if section in {a.value for a in Algorithm} else {}
    node = data.setdefault(section, {})
    for part in rest[:-1]:
        node = node.setdefault(part, {})
    node[rest[-1]] = bad
    with pytest.raises(ValueError, match="finite number") as info:
        config_from_dict(data)
    assert name in one_line(info.value)


def _alias_bomb(levels: int = 6, width: int = 10) -> str:
    """``width ** levels`` leaves from a ~1.3 kB document (10**6 for the defaults)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for k in range(1, levels):
        lines.append(f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * width) + "]")
    return "\n".join(lines) + f"\nseed: *a{levels - 1}\n"


def test_a_yaml_alias_bomb_is_refused_in_one_line_at_once(tmp_path):
    """A 1,344-byte config of aliases wrote a 26 MB config.yaml over 97 s, then a traceback (issue 25.10)."""
    import time

    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())
    assert len(path.read_bytes()) < 1500
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"expands to more than 100,000 values") as info:
        load_config(path)
    assert "\n" not in one_line(info.value) and time.perf_counter() - start < 5
    small = tmp_path / "anchors.yaml"  # anchors as people use them stay fine
    small.write_text("rl: {steps: 4, learning_rate: &lr 3.0e-5}\nsft: {learning_rate: *lr}\n")
    config = load_config(small)
    assert config.rl.steps == 4 and config.sft.learning_rate == config.rl.learning_rate == 3.0e-5


def test_python_tags_and_broken_yaml_are_one_line_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("seed: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ValueError, match=r"is not valid YAML: could not determine a constructor") as info:
        load_config(path)
    assert "\n" not in str(info.value)
    path.write_text("rl: {steps: [\n")
    with pytest.raises(ValueError, match="is not valid YAML"):
        load_config(path)


def test_the_repository_configs_that_link_into_the_package_are_package_data():
    """`agent-r1 train --config tiny` after a pip install: the packaged file is real, shipped, and loads."""
    import tomllib
    from fnmatch import fnmatch

    from agent_trainers.pipeline.config_files import PACKAGED_CONFIGS, packaged_configs

    root = CONFIGS.parent
    shipped = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]["agent_trainers"]
    links = sorted(p for p in CONFIGS.glob("*.yaml") if p.is_symlink())
    assert {p.stem for p in links} == set(packaged_configs()) >= {"tiny", "demo", "learn_main", "learn_hasty"}
    for link in links:
        target = PACKAGED_CONFIGS / link.name
        assert link.samefile(target) and target.is_file() and not target.is_symlink()
        relative = target.relative_to(root / "agent_trainers").as_posix()
        assert any(fnmatch(relative, pattern) for pattern in shipped), relative
        load_config(link.stem, {"output_dir": "x"})  # each loads by its bare name


@pytest.mark.parametrize(
    "text",
    [
        "env: {train_kwargs: " + "{a: " * 5000 + "1" + "}" * 5000 + "}\n",  # flow mappings
        "env: {train_kwargs: {x: " + "[" * 5000 + "]" * 5000 + "}}\n",  # flow sequences
        "rl:\n" + "".join(" " * (k + 1) + f"k{k}:\n" for k in range(40)) + " " * 41 + "v: 1\n",  # block, 40 deep
    ],
)
def test_yaml_nested_5000_deep_is_one_line(tmp_path, text):
    """Before: a RecursionError traceback from the YAML loader (refused from the parser's events now)."""
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"deep.yaml nests deeper than 32 levels"):
        load_config(path)


def test_toml_nested_5000_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ValueError, match=r"deep.toml nests deeper than 32 levels"):
        load_config(path)


def test_config_files_are_read_with_bounds(tmp_path):
    """--config naming a folder (before: IsADirectoryError), /dev/zero (read to a MemoryError before the suffix
    was checked), a FIFO (hung), a file over 1 MB: each one line, without reading the file."""
    import os

    folder = tmp_path / "configs.yaml"
    folder.mkdir()
    with pytest.raises(ValueError, match=r"configs.yaml is a folder, not a config file"):
        load_config(folder)
    with pytest.raises(ValueError, match=r"must end in \.yaml, \.yml or \.toml \(got 'zero'\)"):
        load_config("/dev/zero")
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    with pytest.raises(ValueError, match=r"zero.yaml is not a regular file"):
        load_config(tmp_path / "zero.yaml")
    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(ValueError, match=r"fifo.yaml is not a regular file \(a device, FIFO or socket\)"):
        load_config(tmp_path / "fifo.yaml")
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * 1_000_000 + "\n")
    with pytest.raises(ValueError, match=r"big.yaml holds 1,000,003 bytes, more than a config's 1,000,000"):
        load_config(big)
    (tmp_path / "latin1.yaml").write_bytes(b"seed: 0 # caf\xe9\n")
    with pytest.raises(ValueError, match=r"latin1.yaml is not UTF-8 text \(byte 13\)"):
        load_config(tmp_path / "latin1.yaml")


@pytest.mark.parametrize(
    ("dotted", "value", "message"),
    [
        ("threads", 100_000, "Input should be less than or equal to 1024 (got 100000)"),
        ("rl.num_generations", 1e9, "rl.num_generations: Input should be less than or equal to 1024"),
        ("rl.prompts_per_step", 10**6, "rl.prompts_per_step: Input should be less than or equal to 4096"),
        ("rl.steps", 10**9, "rl.steps: Input should be less than or equal to 1000000"),
        ("rollout.max_total_tokens", 1e18, "rollout.max_total_tokens: Input should be less than or equal to 1048576"),
        ("rollout.tool_workers", 10**6, "rollout.tool_workers: Input should be less than or equal to 1024"),
        ("sft.episodes", 10**9, "sft.episodes: Input should be less than or equal to 1000000"),
        ("eval.tasks", 10**9, "eval.tasks: Input should be less than or equal to 1000000"),
        ("rl.async_rollouts", {"enabled": True, "max_staleness": 10**6}, "less than or equal to 64"),
    ],
)
def test_absurd_sizes_are_refused_naming_the_bound(dotted, value, message):
    """Before, each was accepted and ended in an allocation traceback (or a MemoryError) once the run started."""
    with pytest.raises(ValueError) as info:
        load_config(CONFIGS / "tiny.yaml", {dotted: value})
    assert message in one_line(info.value) and "\n" not in one_line(info.value)
