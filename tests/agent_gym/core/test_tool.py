import jsonschema
import pytest

from agent_gym.core.history import ToolResult
from agent_gym.core.tool import Tool, ToolContext, tool


@tool
def add(a: int, b: int = 1) -> str:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return str(a + b)


def test_schema_derived_from_hints_and_docstring():
    params = add.schema()["function"]["parameters"]
    assert params["properties"]["a"] == {"type": "integer", "description": "The first number."}
    assert params["required"] == ["a"]
    assert add.description == "Add two integers."
    jsonschema.Draft202012Validator.check_schema(params)


@pytest.mark.parametrize("args", [{"a": "x"}, {}, {"a": 1, "c": 2}, [1, 2], "a=1", None])
def test_invalid_arguments_are_error_results(args):
    result = add.call(args)
    assert not result.ok and result.content.startswith("Error:")
    assert result.metadata["reason"] == "invalid_arguments"


def test_exceptions_become_error_results():
    @tool
    def boom(x: str) -> str:
        """Explode.

        Args:
            x: Ignored.
        """
        raise ZeroDivisionError("nope")

    result = boom.call({"x": "1"})
    assert not result.ok and "ZeroDivisionError" in result.content


def test_ctx_is_passed_and_not_in_schema():
    @tool
    def roll(ctx: ToolContext, sides: int) -> str:
        """Roll a die.

        Args:
            sides: Number of sides.
        """
        return str(int(ctx.rng.integers(1, sides + 1)))

    assert "ctx" not in roll.parameters["properties"]
    import numpy as np

    a = roll.call({"sides": 6}, ToolContext(rng=np.random.default_rng(1))).content
    b = roll.call({"sides": 6}, ToolContext(rng=np.random.default_rng(1))).content
    assert a == b


def test_bad_schema_and_name_fail_at_definition():
    class BadSchema(Tool):
        name = "bad"
        parameters = {"type": "nonsense"}

    with pytest.raises(jsonschema.SchemaError):
        BadSchema()

    class BadName(Tool):
        name = "has space"

    with pytest.raises(ValueError, match="identifier"):
        BadName()


def test_non_text_return_is_an_error_result():
    class Weird(Tool):
        name = "weird"
        description = "returns a number"

        def run(self, ctx, **kw):
            return 42

    assert not Weird().call({}).ok
    assert ToolResult.error("x").content == "Error: x"
