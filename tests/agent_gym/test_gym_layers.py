"""The layering of agent_gym: imports point downward only, no import loops, small modules and functions.

The floors (DESIGN.md, "Layers"): ``core`` at the bottom; ``tools``,
``retrieval``, ``datasets``, ``rewards``, ``wrappers`` and ``testing`` above
it; ``envs``; ``integrations`` on top. Rooms of one floor may use each other,
but never both ways (no loop between rooms, nor between modules).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "agent_gym"
FLOORS = {
    "core": 0,
    "tools": 1,
    "retrieval": 1,
    "datasets": 1,
    "rewards": 1,
    "wrappers": 1,
    "registration": 1,
    "testing": 1,
    "envs": 2,
    "integrations": 3,
}
"""Lower numbers are lower floors; a module may import its own floor and the ones below."""
PACKAGE_FLOOR = FLOORS["envs"]
"""``agent_gym`` itself (its ``__init__``) imports ``envs`` to register the ids: importing it is an ``envs`` import."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(name: str) -> str:
    """``agent_gym.retrieval.server`` -> ``retrieval``; the package itself is its own room."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "agent_gym"


def floor(name: str) -> int:
    return PACKAGE_FLOOR if room(name) == "agent_gym" else FLOORS[room(name)]


def ours(path: Path) -> list[str]:
    """Every ``agent_gym`` module that ``path`` imports, at any depth of its code (lazy imports too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "agent_gym"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "agent_gym":
            if node.module == "agent_gym":  # `from agent_gym import envs` names a room, not a symbol of the package
                found += [f"agent_gym.{a.name}" if a.name in FLOORS else "agent_gym" for a in node.names]
            else:
                found.append(node.module)
    return found


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def find_loop(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (loop := visit(nxt, [*path, node])):
                return loop
        state[node] = 2
        return None

    for n in sorted(graph):
        if n not in state and (loop := visit(n, [])):
            return loop
    return None


def test_every_module_belongs_to_a_floor():
    assert {room(n) for n in MODULES} == {*FLOORS, "agent_gym"}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_downward(name):
    for target in ours(MODULES[name]):
        assert floor(target) <= floor(name), f"{name} (floor {floor(name)}) imports {target} (floor {floor(target)})"


def test_there_are_no_import_loops_between_modules():
    graph = {n: {t for t in ours(p) if t in MODULES and t != n} for n, p in MODULES.items()}
    loop = find_loop(graph)
    assert loop is None, "import loop: " + " -> ".join(loop or [])


def test_there_are_no_import_loops_between_rooms():
    graph: dict[str, set[str]] = {room(n): set() for n in MODULES}
    for name, path in MODULES.items():
        graph[room(name)] |= {room(t) for t in ours(path) if room(t) != room(name)}
    loop = find_loop(graph)
    assert loop is None, "rooms import each other: " + " -> ".join(loop or [])


MODULE_LINES, FUNCTION_LINES = 800, 100
"""Guards against a runaway file or function, not targets: modules are cut where a concept ends."""


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
    planted.write_text("def f():\n    from agent_gym.envs.qa import MultiHopQAEnv\n    import agent_gym\n")
    assert ours(planted) == ["agent_gym.envs.qa", "agent_gym"]
    assert floor("agent_gym.envs.qa") > floor("agent_gym.retrieval.server")
    assert floor("agent_gym") > floor("agent_gym.core.env")


def test_the_checker_finds_a_planted_loop_between_rooms():
    graph = {"datasets": {"core", "retrieval"}, "retrieval": {"core", "datasets"}, "core": set()}
    assert find_loop(graph) == ["datasets", "retrieval", "datasets"]
    assert find_loop({"datasets": {"core"}, "retrieval": {"core", "datasets"}, "core": set()}) is None


def test_the_shared_readers_live_on_the_ground_floor():
    """Datasets and retrieval both read data files and build passages: those helpers sit below both."""
    import agent_gym.core.files as files
    import agent_gym.core.passages as passages
    from agent_gym import datasets, retrieval

    assert datasets.DatasetFormatError is retrieval.DatasetFormatError is files.DatasetFormatError
    assert datasets.iter_records is files.iter_records
    assert retrieval.Passage is passages.Passage and retrieval.passage_id is passages.passage_id
