"""A module-level ``@tool`` pickles and deep-copies, alone and inside an env (pickle used to refuse it).

``@tool`` binds the module's name to the tool, so pickle, which saves a function as ``module.qualname``,
found the tool there instead of the function: ``PicklingError: ... it's not the same object as ...``.
"""

import copy
import pickle
import sys

import pytest

from agent_gym import FunctionTool, ToolResult, tool
from agent_gym.testing import check_copies
from tests.conftest import LookupEnv


@tool
def capital(country: str) -> ToolResult:
    """Name a country's capital.

    Args:
        country: The country.
    """
    known = {"france": "Paris", "japan": "Tokyo", "kenya": "Nairobi", "peru": "Lima"}
    found = known.get(country.strip().lower())
    return ToolResult(found) if found else ToolResult.error(f"no country {country!r}")


@tool(name="lookup")
def lookup_capital(country: str) -> ToolResult:
    """Look up the capital city of a country (the env's tool, under the name its oracle calls).

    Args:
        country: The country's name.
    """
    return capital.run(None, country=country)  # type: ignore[arg-type]


class ModuleToolEnv(LookupEnv):
    """The suite's lookup env with module-level ``@tool`` s instead of a Tool subclass."""

    def make_tools(self, task):
        return [lookup_capital, capital]


def test_a_module_level_tool_round_trips_through_pickle_and_deepcopy():
    for twin in (pickle.loads(pickle.dumps(capital)), copy.deepcopy(capital)):
        assert isinstance(twin, FunctionTool) and twin is not capital and twin._fn is capital._fn
        assert twin.schema() == capital.schema()
        assert twin.call({"country": "Kenya"}).content == "Nairobi"
        assert twin.call({"country": 3}).ok is False  # the rebuilt schema validator works


def test_an_env_with_module_level_tools_pickles_and_copies_mid_episode():
    env = ModuleToolEnv()
    env.reset(seed=0, options={"task_index": 1})
    action = env.parser.format_call("capital", {"country": "Japan"})
    for twin in (pickle.loads(pickle.dumps(env)), copy.deepcopy(env)):
        obs, reward, *_, info = twin.step(action)
        assert info["tool_calls"][0]["content"] == "Tokyo" and info["tool_calls"][0]["ok"]
        assert twin.tools["capital"]._fn is capital._fn
    check_copies(ModuleToolEnv())  # the kit's own check, oracle episode, twins before every step


def test_a_tool_whose_name_now_means_something_else_refuses_to_load(monkeypatch):
    saved = pickle.dumps(capital)
    monkeypatch.setattr(sys.modules[__name__], "capital", "not a tool")
    with pytest.raises(TypeError, match=r"\.capital is no longer a @tool; cannot load the tool pickled from it$"):
        pickle.loads(saved)


def test_a_tool_made_inside_a_function_still_does_not_pickle():
    @tool
    def local(x: int) -> str:
        """Echo.

        Args:
            x: A number.
        """
        return str(x)

    assert copy.deepcopy(local).call({"x": 2}).content == "2"  # deepcopy keeps the function itself
    with pytest.raises((pickle.PicklingError, AttributeError), match="local"):
        pickle.dumps(local)
