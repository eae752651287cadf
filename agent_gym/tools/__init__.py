"""Ready-made tools for the environments (each a :class:`~agent_gym.core.tool.Tool`)."""

from agent_gym.tools.search import SearchTool, format_passages

__all__ = ["SearchTool", "format_passages"]
