"""The training pipeline and the ``agent-r1`` command line (the top trainer layer).

* :mod:`.config` - :class:`~.config.TrainConfig` (``algorithm``, ``device``, ``report_to``, sections);
* :mod:`.stages` - the stage table (SFT, RL with the chosen algorithm, evaluations);
* :mod:`.train` - :func:`~.train.run_training`;
* :mod:`.demo` - the HotpotQA job (``agent-r1 demo``);
* :mod:`.plots`, :mod:`.report` - metrics files, plots, tables;
* :mod:`.cli` - ``agent-r1``.
"""
