"""Drive ``agent_gym`` environments from RL trainers.

Modules (import what you need; nothing heavy is imported here):

* :mod:`agent_trainers.rollout` - multi-turn rollouts with exact token ids and loss masks;
* :mod:`agent_trainers.policies`, :mod:`agent_trainers.models` - generation back ends, SmolLM2 / tiny models;
* :mod:`agent_trainers.grpo` - TRL ``GRPOTrainer`` with our rollouts as ``rollout_func``, turn-level advantages;
* :mod:`agent_trainers.env_factory` - a TRL ``environment_factory`` generated from an env id;
* :mod:`agent_trainers.sft` - cold-start SFT on oracle trajectories (TRL ``SFTTrainer``);
* :mod:`agent_trainers.evaluate`, :mod:`agent_trainers.train`, :mod:`agent_trainers.cli` - evaluation,
  the training pipeline and the ``agent-r1`` command line.
"""
