"""agent_gym: Gymnasium environments for LLM agents that act through tools.

Implements the extended MDP of Agent-R1 (arXiv 2511.14460): the state is the
whole interaction history, tools make transitions stochastic (seeded), and
rewards come per step (process rewards) as well as at the end.

Example:
    >>> import gymnasium as gym
    >>> import agent_gym
    >>> [env_id for env_id, _ in agent_gym.list_envs()][:1]
    ['AgentR1/HotpotQA-v0']
"""

from agent_gym.core.context import ContextPolicy, make_context
from agent_gym.core.env import EpisodeOverError, EpisodeState, OnNoAction, ToolEnv
from agent_gym.core.history import History, Message, Role, ToolCall, ToolResult
from agent_gym.core.info import ResetInfo, StepInfo, StopReason, ToolCallInfo
from agent_gym.core.noise import RetrievalNoise, ToolNoise
from agent_gym.core.parsing import ActionFormat, ParsedAction, TagParser, ToolCallParser
from agent_gym.core.rubric import RewardError, RewardTerm, Rubric, Transition
from agent_gym.core.spaces import TextSpace
from agent_gym.core.tool import FunctionTool, Tool, ToolContext, tool
from agent_gym.envs import list_envs, register_envs
from agent_gym.registration import register_env

__version__ = "0.1.0"

__all__ = [
    "ActionFormat",
    "ContextPolicy",
    "EpisodeOverError",
    "EpisodeState",
    "FunctionTool",
    "History",
    "Message",
    "OnNoAction",
    "ParsedAction",
    "ResetInfo",
    "RetrievalNoise",
    "RewardError",
    "RewardTerm",
    "Role",
    "Rubric",
    "StepInfo",
    "StopReason",
    "TagParser",
    "TextSpace",
    "Tool",
    "ToolCall",
    "ToolCallInfo",
    "ToolCallParser",
    "ToolContext",
    "ToolEnv",
    "ToolNoise",
    "ToolResult",
    "Transition",
    "list_envs",
    "make_context",
    "register_env",
    "register_envs",
    "tool",
]

register_envs()
