"""Adapters that let other RL frameworks use the ``AgentR1/*`` environments as their own.

Each adapter lives in its own module and imports its framework only when that
module is imported, so ``import agent_gym`` (and ``import
agent_gym.integrations``) never pulls in verifiers, SkyRL-gym, OpenEnv or torch:

* :mod:`agent_gym.integrations.verifiers` - a verifiers (``verifiers.v1``)
  taskset and in-process harness; ``vf-eval agent-r1-gym`` runs any env
  (``pip install 'agent-r1-gym[verifiers]'``).
* :mod:`agent_gym.integrations.skyrl` - a SkyRL-gym ``BaseTextEnv`` wrapper and
  :func:`~agent_gym.integrations.skyrl.register_skyrl_envs`
  (``pip install 'agent-r1-gym[skyrl]'``).
* :mod:`agent_gym.integrations.openenv` - an OpenEnv environment server, a
  typed client and a session factory for TRL's OpenEnv harness
  (``pip install 'agent-r1-gym[openenv]'``: ``openenv`` 0.10; or ``[openenv-core]``: ``openenv-core`` 0.3,
  which installs beside verifiers 0.4).

All three drive the env through its public Gymnasium API (``reset``/``step``,
``info["messages"]``, ``info["tools"]``, ``info["reward_terms"]``) via
:class:`~agent_gym.integrations.session.EnvSession`, so they work for a
user's own :class:`~agent_gym.ToolEnv` too.
"""

from agent_gym.integrations.session import EnvSession, NativeCall, StepView, make_tool_env

__all__ = ["EnvSession", "NativeCall", "StepView", "make_tool_env"]
