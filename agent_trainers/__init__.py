"""Drive ``agent_gym`` environments from RL trainers.

Layers; each imports only the ones below it (nothing heavy is imported here):

* :mod:`agent_trainers.pipeline` - config (``algorithm``, ``device``, ``report_to``), the stage
  table, training, the main job, the ``agent-r1`` command line;
* :mod:`agent_trainers.evaluation` - beside ``algorithms`` (neither imports the other): the one
  metrics table and summary, the Table-3 methods, bootstrap intervals, report, viewer;
* :mod:`agent_trainers.algorithms` - the RL settings, trajectories -> tensors, advantage estimators
  (GRPO, RLOO, REINFORCE++, REINFORCE++-baseline), the log-prob engine (room ``shared``); the adapter
  on TRL's ``GRPOTrainer`` (``trl_adapter``), our PPO (``ppo``), SFT (``sft``);
* :mod:`agent_trainers.rollout` - trajectory types, incremental tokenisation, the multi-turn
  engine, the token-exactness checker, JSONL export, the rollout CLI;
* :mod:`agent_trainers.policies` - one sampling type, the transformers / vLLM / OpenAI-compatible /
  scripted backends, and the one model loader.
"""
