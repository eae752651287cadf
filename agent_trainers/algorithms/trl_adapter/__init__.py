"""The TRL adapter: our rollouts and advantages on TRL's ``GRPOTrainer`` (grpo, rloo, reinforce_pp, ...).

* :mod:`.grpo` - :class:`AgentGRPOTrainer`;
* :mod:`.rollout_func` - our engine as TRL's ``rollout_func``, :func:`env_reward`;
* :mod:`.trl_args` - ``GRPOConfig`` from the RL settings, micro-batches;
* :mod:`.trl_vllm` - rollouts on TRL's vLLM engine (experimental);
* :mod:`.env_factory` - a TRL ``environment_factory`` from an env id.

It reads :mod:`..shared` only; it never imports our PPO (:mod:`..ppo`).
"""
