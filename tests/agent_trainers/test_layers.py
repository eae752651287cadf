"""The layering of agent_trainers: imports point downward only, packages beside each other do not import each other,
the rooms of ``algorithms`` keep to themselves, no import loops, small modules and functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "agent_trainers"
LAYERS = {
    "errors": 0,
    "policies": 1,
    "rollout": 2,
    "algorithms": 3,
    "evaluation": 3,
    "pipeline": 4,
    "experiments": 5,
    "cli": 6,
}
"""Lower numbers are lower layers; a module may import its own package and the layers below (evaluation sits
beside algorithms: it needs rollouts and policies only, and neither imports the other). ``cli`` is the
``agent-r1`` command, over everything."""
MODULE_LINES, FUNCTION_LINES = 800, 100
"""Guards against a runaway file or function, not targets: modules are cut where a concept ends
(docs/architecture.md says what each room holds)."""
ROOMS = {"shared": set(), "trl_adapter": {"shared"}, "ppo": {"shared"}, "sft": {"shared"}}
"""The rooms of ``agent_trainers.algorithms`` and the rooms each may import besides itself: what every algorithm
shares imports no room; the TRL adapter, our PPO and SFT import only the shared room (never each other)."""


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
        if layer(target) == layer(name) and len(target.split(".")) > 1 and len(name.split(".")) > 1:
            assert package(target) == package(name), f"{name} imports {target}, a package beside its own"


def package(name: str) -> str:
    return name.split(".")[1]


def room(name: str) -> str | None:
    """The room of an ``agent_trainers.algorithms`` module (``None``: the package's own ``__init__``)."""
    parts = name.split(".")
    return parts[2] if parts[:2] == ["agent_trainers", "algorithms"] and len(parts) > 2 else None


def test_every_algorithms_module_is_in_a_room():
    rooms = {room(n) for n in MODULES if n.startswith("agent_trainers.algorithms.")}
    assert rooms == set(ROOMS)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if room(n)))
def test_rooms_import_only_what_they_may(name):
    allowed = ROOMS[room(name)] | {room(name)}
    for target in ours(MODULES[name]):
        if target.startswith("agent_trainers.algorithms"):
            assert room(target) in allowed, f"{name} (room {room(name)}) imports {target} (room {room(target)})"


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
def test_no_module_or_function_runs_away(name):
    source = MODULES[name].read_text(encoding="utf-8")
    assert len(source.splitlines()) <= MODULE_LINES, f"{name} has {len(source.splitlines())} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            size = node.end_lineno - node.lineno + 1
            assert size <= FUNCTION_LINES, f"{name}.{node.name} has {size} lines"


def test_the_checker_finds_a_planted_upward_import(tmp_path):
    planted = tmp_path / "bad.py"
    planted.write_text("def f():\n    from agent_trainers.pipeline.config import TrainConfig\n")
    assert ours(planted) == ["agent_trainers.pipeline.config"]
    assert layer("agent_trainers.pipeline.config") > layer("agent_trainers.policies.loader")


def test_the_checker_finds_planted_imports_between_rooms_and_beside():
    ppo, trl = "agent_trainers.algorithms.ppo.trainer", "agent_trainers.algorithms.trl_adapter.grpo"
    assert room(trl) not in ROOMS[room(ppo)] and room(ppo) not in ROOMS[room(trl)]
    assert not ROOMS[room("agent_trainers.algorithms.shared.tensors")]
    a, e = "agent_trainers.algorithms.shared.settings", "agent_trainers.evaluation.records"
    assert layer(a) == layer(e) and package(a) != package(e)  # beside: refused both ways
