"""Benchmark and script command lines: one flag per documented ``Args`` field, the old spellings and defaults."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, load_script

SCRIPTS = [
    *sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "benchmarks").glob("*.py")),
    "scripts/gpu_check.py",
]


def load(relative: str):
    return load_script(relative, "cli_args_" + Path(relative).stem)


def field_docs(relative: str) -> dict[str, str]:
    """Each ``Args`` field's docstring, read from the source: the string right below the field."""
    tree = ast.parse((REPO_ROOT / relative).read_text(encoding="utf-8"))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Args").body
    docs = {}
    for node, after in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            docs[node.target.id] = after.value.value if is_doc else ""
    return docs


def flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_every_benchmark_is_covered():
    assert len(SCRIPTS) == 18 and all(hasattr(load(s), "parse_args") for s in SCRIPTS)


@pytest.mark.parametrize("relative", SCRIPTS)
def test_help_shows_every_field_and_its_docstring(relative, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per option: the docstrings are not wrapped mid-sentence
    module = load(relative)
    with pytest.raises(SystemExit) as exit_:
        module.parse_args(["--help"])
    assert exit_.value.code == 0
    text = flat(capsys.readouterr().out)
    assert flat(module.__doc__.splitlines()[0]) in text
    docs = field_docs(relative)
    assert set(docs) == {f.name for f in dataclasses.fields(module.Args)}
    for name, doc in docs.items():
        assert doc, f"{relative}: Args.{name} has no docstring"
        assert "--" + name.replace("_", "-") in text
        assert flat(doc) in text, f"{relative}: --help lacks the docstring of {name}"


@pytest.mark.parametrize("relative", SCRIPTS)
def test_no_flags_give_the_dataclass_defaults(relative):
    module = load(relative)
    assert module.parse_args([]) == module.Args()


def test_algorithms_flags():
    bench = load("benchmarks/algorithms.py")
    args = bench.parse_args(["--algorithms", "ppo", "--quick", "--ppo-critic", "value_head", "--learning-rate", "1e-3"])
    assert (args.algorithms, args.quick, args.steps, args.ppo_critic, args.learning_rate) == (
        "ppo", True, 20, "value_head", 1e-3)  # fmt: skip
    assert bench.parse_args([]).steps == 40 and bench.parse_args(["--steps", "30"]).steps == 30
    assert bench.parse_args(["--ppo-critic-warmup-steps", "3"]).ppo_critic_warmup_steps == 3


def test_list_and_boolean_flags():
    integrations = load("benchmarks/integrations.py")
    args = integrations.parse_args(["--env-ids", "AgentR1/HotpotQA-v0", "--adapters", "native", "skyrl", "--no-peer"])
    assert (args.env_ids, args.adapters, args.peer) == (["AgentR1/HotpotQA-v0"], ["native", "skyrl"], False)
    assert integrations.parse_args([]).peer is True and integrations.parse_args(["--env-ids"]).env_ids == []
    fuzz = load("benchmarks/fuzz.py")
    assert (fuzz.parse_args(["--quick"]).actions, fuzz.parse_args([]).actions) == (500, 10_000)
    rollout = load("benchmarks/rollout.py")
    args = rollout.parse_args(["--cache-check", "--max-new-tokens", "64", "--ray-actors", "1,2,4"])
    assert (args.cache_check, args.threads_check, args.max_new_tokens, args.ray_actors) == (True, False, 64, "1,2,4")
    args = rollout.parse_args(["--quick", "--decode-rows", "8"])
    assert (args.quick, args.decoders, args.precision) == (True, False, False)
    assert (args.decode_rows, args.decode_tokens) == (8, 64)
    server = load("benchmarks/retrieval_server.py")
    assert (server.parse_args([]).hostile, server.parse_args(["--no-hostile"]).hostile) == (True, False)
    assert load("benchmarks/sql_hostile.py").parse_args(["--only", "like", "glob"]).only == ["like", "glob"]


def test_a_repeated_flag_takes_the_last_value():
    """``grpo_step.py`` starts each run with every field as a flag, then ``--model`` and ``--path`` again."""
    bench = load("benchmarks/grpo_step.py")
    argv = [item for f in dataclasses.fields(bench.Args) for item in ("--" + f.name.replace("_", "-"), "")]
    args = bench.parse_args([*argv[:4], "--model", "smollm2", "--path", "ours", "--gradient-checkpointing", "1"])
    assert (args.models, args.env_id, args.model, args.path, args.gradient_checkpointing) == (
        "",
        "",
        "smollm2",
        "ours",
        1,
    )


def test_a_wrong_flag_or_value_exits_with_status_2(capsys):
    bench = load("benchmarks/env_step.py")
    for argv in (["--episodez", "3"], ["--episodes", "many"]):
        with pytest.raises(SystemExit) as exit_:
            bench.parse_args(argv)
        assert exit_.value.code == 2
