"""verifiers plugin entry point for agent-r1-gym (``vf-eval agent-r1-gym``).

verifiers resolves a taskset or harness id to a top-level module (``agent-r1-gym``
-> ``agent_r1_gym``) and takes the ``Taskset``/``Harness`` subclasses its
``__all__`` exports, so this module only re-exports
:mod:`agent_gym.integrations.verifiers`. Needs ``pip install 'agent-r1-gym[verifiers]'``::

    vf-eval agent-r1-gym --env.taskset.env-id AgentR1/HotpotQA-v0 -n 8 -m MODEL --client.base-url URL
"""

try:
    from agent_gym.integrations.verifiers import AgentGymEnv, AgentGymHarness, AgentGymTaskset, load_environment
except ModuleNotFoundError as err:  # the core install: say which extra, not which inner import failed
    if (err.name or "").split(".")[0] != "verifiers":
        raise
    raise ModuleNotFoundError(
        "agent_r1_gym is the verifiers plugin entry point and needs its extra: pip install 'agent-r1-gym[verifiers]'",
        name=err.name,
    ) from None

__all__ = ["AgentGymEnv", "AgentGymHarness", "AgentGymTaskset", "load_environment"]
