"""Experiments as data (the layer above :mod:`agent_trainers.pipeline`): a sweep is a recipe, arms, seeds, a dev
set and a test set (:mod:`.spec`); its runs are typed copies of the recipe (:mod:`.plan`), run in subprocesses or
in this process (:mod:`.runner`); every choice is made on dev and the test set is evaluated once, after the
choices are frozen (:mod:`.protocol`), like any transfer set, with untrained baselines beside the arms (the
paper's Table 3, :mod:`.transfer`); one report serves every sweep (:mod:`.report`); a sweep grows seed by
seed across machines through an archive of its results (:mod:`.archive`); ``agent-r1 sweep`` (:mod:`.sweep`).
The packaged sweeps live in ``agent_trainers/sweeps/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from agent_trainers.experiments.plan import Run as Run
    from agent_trainers.experiments.plan import plan_runs as plan_runs
    from agent_trainers.experiments.protocol import ProtocolError as ProtocolError
    from agent_trainers.experiments.spec import SweepSpec as SweepSpec
    from agent_trainers.experiments.spec import load_sweep as load_sweep
    from agent_trainers.experiments.sweep import run_sweep as run_sweep

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "plan": ["Run", "plan_runs"],
        "protocol": ["ProtocolError"],
        "spec": ["SweepSpec", "load_sweep"],
        "sweep": ["run_sweep"],
    },
)
