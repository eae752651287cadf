"""What every RL algorithm shares: settings, trajectories -> tensors, advantage estimators, log-probs.

* :mod:`.settings` - the RL settings (:class:`RLConfig`, the ``rl:`` section) and its enums;
* :mod:`.tensors` - trajectories -> per-token rewards, masks, turn indices;
* :mod:`.advantages` - the estimator registry (outcome- and turn-level; step-level estimators go here too);
* :mod:`.logprobs` - the one chunked log-prob engine (log-probs of the scored tokens only);
* :mod:`.checkpoints` - exact resume.

Nothing here imports a trainer room (:mod:`..trl_adapter`, :mod:`..ppo`, :mod:`..sft`).
"""
