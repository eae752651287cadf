"""Shared fixtures: a tiny ToolEnv used to test the core contract, and data paths."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
import tomllib
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

from agent_gym.core.env import ToolEnv
from agent_gym.core.history import ToolResult
from agent_gym.core.rubric import RewardTerm, Rubric
from agent_gym.core.tool import Tool, ToolContext
from agent_gym.rewards import make_rubric

settings.register_profile("default", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (scripts/test.sh runs a worker per core), each worker and the processes its tests start
    compute on one thread: two workers of two threads each on two cores run slower than one."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        os.environ["MKL_NUM_THREADS"] = "1"
        if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
            import torch

            torch.set_num_threads(1)


@contextlib.contextmanager
def torch_threads(threads: int | None = None) -> Iterator[None]:
    """Give torch ``threads`` threads (``None``: leave the count as it is) and put the count back on leaving, for
    code that sets its own (a pipeline's ``threads`` setting, a docs page): the next test on this worker gets the
    count it started with. torch is imported here, so that the agent_gym tests run without it."""
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ../shared/data beside the repository; AGENT_R1_SHARED_DATA overrides it (e.g. from a git worktree).
SHARED_DATA = Path(
    os.environ.get("AGENT_R1_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)


REPO_ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str) -> ModuleType:
    """Import a script of the repository (``benchmarks/x.py``, ``scripts/y.py``: not packages) as module ``name``.

    It is registered in ``sys.modules`` first, because dataclasses look their module up there.
    """
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _entry_point_import() -> str:
    """``from MODULE import FUNCTION as main`` for the ``agent-r1`` script this checkout's pyproject.toml declares."""
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, function = scripts["agent-r1"].partition(":")
    return f"from {module} import {function} as main"


AGENT_R1_IMPORT = _entry_point_import()
"""The import line of the ``agent-r1`` entry point (``main`` reads ``sys.argv[1:]`` or takes ``argv``)."""


def run_agent_r1(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``agent-r1 ARGS`` typed in the folder ``cwd``, run as its console script runs it.

    The entry point is the one this checkout's ``pyproject.toml`` declares, imported from this checkout
    (``PYTHONPATH``; a git worktree shares the main checkout's venv, whose installed script may point
    elsewhere); ``-P`` keeps ``cwd`` off ``sys.path``, as a console script does.
    """
    code = f"import sys; {AGENT_R1_IMPORT}; sys.argv[0] = 'agent-r1'; sys.exit(main())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run(
        [sys.executable, "-P", "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` next to the repository; skips the test when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@dataclass(frozen=True)
class Capital:
    id: str
    country: str
    capital: str


CAPITALS = (
    Capital("q0", "France", "Paris"),
    Capital("q1", "Japan", "Tokyo"),
    Capital("q2", "Kenya", "Nairobi"),
    Capital("q3", "Peru", "Lima"),
)


class LookupTool(Tool):
    name = "lookup"
    description = "Look up the capital city of a country."
    parameters = {
        "type": "object",
        "properties": {"country": {"type": "string", "description": "The country's name."}},
        "required": ["country"],
        "additionalProperties": False,
    }

    def run(self, ctx: ToolContext, country: str) -> ToolResult:
        for c in CAPITALS:
            if c.country.lower() == country.strip().lower():
                return ToolResult(f"The capital of {c.country} is {c.capital}.", metadata={"evidence": [c.id]})
        return ToolResult.error(f"no country named {country!r}")


class LookupEnv(ToolEnv[Capital]):
    """Minimal ToolEnv: one lookup tool, one gold evidence item per task."""

    def __init__(self, **kwargs):
        kwargs.setdefault("rubric", make_rubric("process", answer_metric="em", shaping_gamma=1.0))
        super().__init__(**kwargs)

    def num_tasks(self) -> int:
        return len(CAPITALS)

    def load_task(self, index: int) -> Capital:
        return CAPITALS[index]

    def make_tools(self, task: Capital) -> Sequence[Tool]:
        return [LookupTool()]

    def user_prompt(self, task: Capital) -> str:
        return f"What is the capital of {task.country}?"

    def gold_evidence(self, task: Capital) -> frozenset[str]:
        return frozenset({task.id})

    def score_answer(self, task: Capital, answer: str) -> dict[str, float]:
        em = float(answer.strip().lower() == task.capital.lower())
        return {"em": em, "f1": em}

    def oracle_action(self) -> str:
        state = self.state
        assert state is not None
        last = state.history[-1]
        if state.found >= state.evidence and last.ok:
            return self.parser.format_answer(state.task.capital)
        return self.parser.format_call("lookup", {"country": state.task.country})


def _sampled_text_reward(t) -> float:
    return zlib.crc32(t.action.raw.encode()) / 2**32


VARIED_REWARD_RUBRIC = Rubric([RewardTerm("text_hash", _sampled_text_reward, bounds=(0.0, 1.0))])
"""A rubric for RL tests on a random model: each turn earns a fraction in [0, 1) drawn from a hash (CRC-32) of what
was sampled. A random model's turns are all malformed and would all earn the same reward, leaving RL nothing to
learn from; a coarser function of the text (its length mod 7 was one) ties two different samples often enough that a
whole step's groups tie on some CPUs and the step trains nothing. Two samples tie here only when their texts do."""


@pytest.fixture
def lookup_env() -> LookupEnv:
    return LookupEnv()


class SlowLookupEnv(LookupEnv):
    """LookupEnv whose every step first sleeps ``latency_s`` seconds (a slow tool)."""

    def __init__(self, latency_s: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.latency_s = latency_s

    def step(self, action: str):
        time.sleep(self.latency_s)
        return super().step(action)
