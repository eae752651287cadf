"""The layering of agent_trainers: imports point downward only, no import loops, small modules and functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "agent_trainers"
LAYERS = {"errors": 0, "policies": 1, "rollout": 2, "algorithms": 3, "evaluation": 4, "pipeline": 5}
"""Lower numbers are lower layers; a module may import its own layer and the ones below."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(name: str) -> int:
    parts = name.split(".")
    if len(parts) == 1:
        return -1  # the package itself
    return LAYERS[parts[1]]


def ours(path: Path) -> list[str]:
    """Every ``agent_trainers`` module that ``path`` imports, at any depth of its code."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("agent_trainers")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agent_trainers"):
            found.append(node.module)
    return found


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def test_every_module_belongs_to_a_layer():
    assert {n.split(".")[1] for n in MODULES if "." in n} == set(LAYERS)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_downward(name):
    for target in ours(MODULES[name]):
        assert layer(target) <= layer(name), f"{name} (layer {layer(name)}) imports {target} (layer {layer(target)})"


def test_there_are_no_import_loops():
    graph = {n: {t for t in ours(p) if t in MODULES and t != n} for n, p in MODULES.items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import loop: " + " -> ".join([*path, node, nxt]))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_and_functions_stay_small(name):
    source = MODULES[name].read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 500, f"{name} has {len(source.splitlines())} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            size = node.end_lineno - node.lineno + 1
            assert size <= 60, f"{name}.{node.name} has {size} lines"


def test_the_checker_finds_a_planted_upward_import(tmp_path):
    planted = tmp_path / "bad.py"
    planted.write_text("def f():\n    from agent_trainers.pipeline.config import TrainConfig\n")
    assert ours(planted) == ["agent_trainers.pipeline.config"]
    assert layer("agent_trainers.pipeline.config") > layer("agent_trainers.policies.loader")
