"""``agent-r1 sweep NAME``: plan a sweep's runs, run them, choose on dev, test once, report.

::

    agent-r1 sweep learn_main --plan                 # the runs, their configs' differences, nothing run
    agent-r1 sweep learn_main                        # run (or continue) everything, then the report
    agent-r1 sweep learn_hotpotqa --seeds 0 --set rl.steps=20 --out runs/hotpotqa-short
    agent-r1 sweep calculator_rewards --archive docs/results/sweeps/calculator_rewards   # grows seed by seed
    agent-r1 sweep hotpotqa_algorithms --report --archive docs/results/sweeps/hotpotqa_algorithms --out /tmp/r
                                                     # the report of what is finished so far; nothing runs
    agent-r1 sweep hotpotqa_rate --seeds 1,2 --arms lr1e-5     # one arm (and the sft it starts from) on more seeds

Everything goes under ``--out`` (default ``runs/<sweep name>``): ``seed<k>/<arm>/`` (each run's folder),
``costs.json``, ``choices.json`` and ``test_log.json`` (:mod:`.protocol`), ``test/`` (the test evaluations),
``report.md`` and ``curves.png``. Running it again continues: finished runs and evaluations are kept. Seeds run
one after another and each run is tested as soon as it is finished; ``--archive DIR`` keeps each tested run's
results (without weights) where a later machine finds them (:mod:`.archive`), so a machine lost mid-seed loses
only the run it was training.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_gym.core.files import write_atomic
from agent_trainers.experiments.plan import Run, describe, plan_runs, select_arms
from agent_trainers.experiments.spec import SweepSpec, load_sweep

__all__ = ["SweepResult", "add_sweep_parser", "finished_runs", "run_sweep", "run_sweep_command"]

SWEEP_HELP = "run a sweep (packaged or a file): runs on several seeds, choices on dev, the test set once, a report"


@dataclass(frozen=True)
class SweepResult:
    """What a sweep produced.

    Attributes:
        runs: Its runs.
        report: The report's text (``report.md``).
        curves: The dev curves' plot, if one was drawn.
    """

    runs: list[Run]
    report: str
    curves: Path | None


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    *,
    name: str = "sweep",
    overrides: dict[str, Any] | None = None,
    seeds: Sequence[int] | None = None,
    runner: Callable[[Run], Any] | None = None,
    say: Callable[[str], None] = print,
    dev_only: bool = False,
    archive: str | Path | None = None,
    report_only: bool = False,
    arms: Sequence[str] | None = None,
) -> SweepResult:
    """Run (or continue) the runs seed by seed - train, freeze each run's choice, evaluate the test set once (each
    run as soon as it is finished) - and write the report over every seed.

    ``dev_only``: leave the test set untouched and report on dev (a sweep can then grow, e.g. by seeds, and be
    reported on dev as it goes; a run without it evaluates the test set). ``archive``: a folder that keeps each
    tested run's results without the weights (:mod:`.archive`): archived runs missing from ``out`` are restored
    first and count as finished (one that a run still to train starts from is trained again for its weights and
    checked against its archived dev answers), and each run is archived once its test set is evaluated.
    ``report_only``: train and evaluate nothing; report on the runs finished (and, unless ``dev_only``, tested)
    so far - restored from ``archive`` and copied from lenders, which costs no compute - and name the rest
    (:func:`finished_runs`): a report of a sweep still growing, e.g. while another process trains it.
    ``arms``: only these arms, and the arms they start from (:func:`~.plan.select_arms`), are run and reported; the
    sweep's definition is still the whole sweep, so the folder and its test log stay the sweep's (e.g. the recipe
    arm, once chosen on dev, run on more seeds than the arms it was chosen among).

    Raises:
        ProtocolError: ``report_only`` and no run is finished yet, or a step of the protocol out of order.
        ValueError: A name in ``arms`` that is no arm of the sweep."""
    import agent_trainers.experiments.archive as archives
    import agent_trainers.experiments.protocol as protocol
    import agent_trainers.experiments.report as report
    import agent_trainers.experiments.runner as runners

    if seeds is not None:
        spec = spec.model_copy(update={"seeds": list(seeds)})
    folder = Path(out)
    runs = plan_runs(spec, folder, overrides)
    if arms is not None:
        runs = select_arms(runs, arms)
    sweep = protocol.sweep_digest(spec, overrides)  # the whole sweep's, whichever arms run
    if archive is not None and (restored := archives.restore_runs(runs, folder, archive)):
        say(f"[sweep] restored from {archive}: {', '.join(restored)} (results without weights)")
    protocol.check_definition(folder, sweep)  # before anything trains: a looked-at test set fixes the definition
    testing = spec.test is not None and not dev_only
    missing: list[str] = []
    if report_only:
        runs, missing = finished_runs(spec, runs, folder, sweep, testing, say)
    else:
        _grow(spec, runs, folder, sweep, runner or runners.run_in_subprocess, say, dev_only, archive)
    costs = runners.read_costs(folder)
    frozen = protocol.freeze_choices(spec, runs, folder, sweep)
    steps = {c["run"]: (c["step"], c["dev"]) for c in frozen["runs"]}
    parts = [f"# {name}: {spec.description.strip()}", "", f"Recipe `{spec.recipe}`, seeds {spec.seeds}, metric "
             f"`{spec.metric}`, checkpoints chosen on dev: `{spec.choose.value}` (sweep {frozen['sweep']}).", "",
             "## Dev (every choice is made here)", "", report.dev_table(runs, spec.metric, costs, steps)]  # fmt: skip
    if arms is not None:
        shown = list(dict.fromkeys(r.arm.name for r in runs))
        others = [a.name for a in spec.arms if a.name not in shown]
        parts[2:2] = [f"Arms run and reported (`--arms`): {', '.join(shown)}; the sweep's other arms: "
                      f"{', '.join(others) or 'none'}.", ""]  # fmt: skip
    if missing:
        parts[2:2] = [f"Partial report (`--report`: nothing was trained or evaluated for it): {len(runs)} of "
                      f"{len(runs) + len(missing)} runs; not finished{' and tested' if testing else ''} yet: "
                      f"{', '.join(missing)}.", ""]  # fmt: skip

    def dev_folder(run: Run) -> Path:
        return report.dev_eval_folder(run, steps[run.name][0])

    parts += report.change_lines(runs, spec.metric, dev_folder)
    parts += ["", report.behaviour_table(runs, dev_folder, "dev")]
    for part in (
        report.arms_table(runs, spec.metric, dev_folder, "dev"),
        report.speed_table(runs, spec.metric),
        report.training_table(runs),
    ):
        parts += ["", part] if part else []
    if spec.test is not None and dev_only:
        parts += ["", "## Test", "", "Not evaluated yet (`--dev-only`): the test set is untouched."]
    elif spec.test is not None:
        folders = protocol.frozen_test_folders(spec, runs, folder)
        parts += ["", "## Test (evaluated once, after the choices were frozen)", "",
                  report.test_set_table(runs, spec.metric, costs, steps, folders)]  # fmt: skip
        parts += report.change_lines(runs, spec.metric, lambda r: folders[r.name])
        parts += ["", report.behaviour_table(runs, lambda r: folders[r.name], "test")]
        arms = report.arms_table(runs, spec.metric, lambda r: folders[r.name], "test")
        parts += ["", arms] if arms else []
        if spec.transfer or spec.baselines:
            parts += ["", _transfer_section(spec, runs, folder, folders)]
    text = "\n".join(parts) + "\n"
    write_atomic(folder / "report.md", text)
    curves = report.draw_curves(runs, spec.metric, folder / "curves.png", f"{name}: dev {spec.metric}")
    return SweepResult(runs, text, curves)


def _grow(
    spec: SweepSpec,
    runs: Sequence[Run],
    folder: Path,
    sweep: str,
    train: Callable[[Run], Any],
    say: Callable[[str], None],
    dev_only: bool,
    archive: str | Path | None,
) -> None:
    """Train what is missing seed by seed, testing (unless ``dev_only``) and archiving each run as it finishes;
    then the baselines."""
    import agent_trainers.experiments.archive as archives
    import agent_trainers.experiments.borrow as borrow
    import agent_trainers.experiments.protocol as protocol
    import agent_trainers.experiments.runner as runners
    import agent_trainers.experiments.transfer as transfer

    testing = spec.test is not None and not dev_only
    for seed in spec.seeds:
        mine = [r for r in runs if r.seed == seed]
        trained = [r for r in mine if r.arm.borrow is None]
        for start in archives.needing_weights(mine):
            archives.rebuild_weights(start, train, say=say)
        after = functools.partial(_test_and_archive, spec, trained, folder, sweep, archive, say) if testing else None
        runners.run_all(trained, folder, runner=train, say=say, after=after)
        borrow.borrow_runs(spec, mine, folder, say=say)
        if testing:
            for copied in borrow.borrow_held_out(spec, mine, folder, sweep):
                say(f"[sweep] {copied}: the lender's evaluation, borrowed")
            protocol.evaluate_test(spec, mine, folder, say=say, sweep=sweep)
        if archive is not None and not dev_only and not all(r.archived for r in mine):
            archives.archive_runs(mine, folder, archive)
            say(f"[sweep] seed {seed} archived in {archive}")
    if testing and spec.baselines:
        transfer.evaluate_baselines(spec, runs, folder, say=say)
        if archive is not None:
            archives.archive_baselines(folder, archive)


def finished_runs(
    spec: SweepSpec, runs: Sequence[Run], out: Path, sweep: str, testing: bool, say: Callable[[str], None]
) -> tuple[list[Run], list[str]]:
    """The runs a report can show now, and the names of the others: each finished run (a borrowed one is copied
    from its lender first, once its start is finished) that was tested too when ``testing`` (its evaluation of
    every held-out set is logged under its frozen choice), and whose start can be shown. Nothing is trained or
    evaluated; the finished runs' choices are frozen (``choices.json``), as every report does.

    Raises:
        ProtocolError: No run can be shown, or a lender is not the run this sweep would train.
    """
    import agent_trainers.experiments.borrow as borrow
    import agent_trainers.experiments.protocol as protocol

    borrow.borrow_runs(spec, [r for r in runs if r.start is None or r.start.done], out, say=say)
    done = [r for r in runs if r.done]
    if testing and done:
        borrow.borrow_held_out(spec, done, out, sweep)
        protocol.freeze_choices(spec, done, out, sweep)

    def tested(run: Run) -> bool:
        try:
            for held in protocol.held_out_sets(spec, out):
                protocol.frozen_test_folders(spec, [run], out, held.name)
        except protocol.ProtocolError:
            return False
        return True

    shown: dict[str, Run] = {}
    for run in done:  # in plan order: a run's start comes before it
        if (not testing or tested(run)) and (run.start is None or run.start.name in shown):
            shown[run.name] = run
    if not shown:
        raise protocol.ProtocolError(f"no run of {out} is finished{' and tested' if testing else ''} yet: nothing to "
                                     "report (restore an archive with --archive)")  # fmt: skip
    return list(shown.values()), [r.name for r in runs if r.name not in shown]


def _test_and_archive(
    spec: SweepSpec,
    runs: Sequence[Run],
    out: Path,
    sweep: str,
    archive: str | Path | None,
    say: Callable[[str], None],
    run: Run,
) -> None:
    """A run just finished: test it once (its choice is its own, so nothing still to train can change it) and
    archive it, before the next run trains: a machine lost later takes only the run it was training."""
    import agent_trainers.experiments.archive as archives
    import agent_trainers.experiments.protocol as protocol

    ready = [r for r in runs[: runs.index(run) + 1] if r.done]  # those tested already are kept (and lend twins)
    protocol.evaluate_test(spec, ready, out, say=say, sweep=sweep)
    if archive is not None and not run.archived:
        if archives.archive_runs([run], out, archive):
            say(f"[sweep] {run.name} tested and archived in {archive}")
        else:
            say(f"[sweep] {run.name}: already in {archive}, unchanged")


def _transfer_section(spec: SweepSpec, runs: Sequence[Run], folder: Path, test: dict[str, Path]) -> str:
    """The paper's Table 3: the baselines and the arms on the test set and every transfer set, in the sweep's
    metric (and in EM beside it, where the test evaluations have it)."""
    import agent_trainers.experiments.protocol as protocol
    import agent_trainers.experiments.transfer as transfer
    from agent_trainers.evaluation.compare import load_run

    sets = [h.name for h in protocol.held_out_sets(spec, folder)]
    folders = {"test": test} | {name: protocol.frozen_test_folders(spec, runs, folder, name) for name in sets[1:]}
    baselines = transfer.baseline_folders(spec, folder)
    has_em = any(r.metric("em") is not None for r in load_run(test[runs[0].name]).records)
    parts = ["## Transfer (the paper's Table 3: each set evaluated once, after the choices were frozen)", ""]
    for metric in dict.fromkeys([spec.metric, *(["em"] if has_em else [])]):
        table = transfer.transfer_table(runs, metric, sets, folders, baselines)
        parts += [f"{metric} (mean over tasks; an arm: the mean of its seeds' means, Δ to its start paired over tasks "
                  "and seeds [95% CI]):", "", table]  # fmt: skip
    return "\n".join(parts)


def add_sweep_parser(sub: Any) -> None:
    """Add ``sweep`` to the ``agent-r1`` sub-commands."""
    sweep = sub.add_parser("sweep", help=SWEEP_HELP, description=SWEEP_HELP + ".")
    sweep.add_argument("name", help="a packaged sweep's name (e.g. learn_main) or a sweep file")
    sweep.add_argument("--plan", action="store_true", help="print the runs without running them")
    sweep.add_argument("--out", default=None, help="where everything goes (default runs/<name>)")
    sweep.add_argument("--seeds", default=None, help="comma-separated seeds instead of the sweep's")
    sweep.add_argument(
        "--arms", default=None, help="comma-separated arms to run and report (with the arms they start from)"
    )
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    sweep.add_argument(
        "--dev-only", action="store_true", help="run and report on dev; leave the test set untouched for a later run"
    )
    sweep.add_argument(
        "--report",
        action="store_true",
        help="train and evaluate nothing: report on the runs finished and tested so far (with --archive: those it "
        "holds) and name the rest",
    )
    sweep.add_argument(
        "--archive",
        metavar="DIR",
        help="keep each tested run's results (no weights) in DIR and restore them from there: a sweep that "
        "grows run by run across machines",
    )


def run_sweep_command(args: argparse.Namespace, parse_set: Callable[[Sequence[str]], dict[str, Any]]) -> int:
    """``agent-r1 sweep``: ``--plan`` prints the runs; otherwise run the sweep and print its report."""
    spec = load_sweep(args.name)
    name = Path(args.name).stem
    out = Path(args.out or f"runs/{name}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds else None
    arms = [a.strip() for a in args.arms.split(",") if a.strip()] if args.arms else None
    overrides = parse_set(args.set)
    if args.plan and args.report:
        raise ValueError("--plan and --report: choose one (the plan runs nothing; the report trains nothing)")
    if args.plan:
        planned = spec if seeds is None else spec.model_copy(update={"seeds": seeds})
        runs = plan_runs(planned, out, overrides)
        runs = runs if arms is None else select_arms(runs, arms)
        print(f"{name}: {spec.description.strip()}")
        test = "none" if spec.test is None else f"{spec.test.env_kwargs} tasks {spec.test.first_task}+{spec.test.tasks}"
        print(f"dev: {spec.dev.env_kwargs} tasks {spec.dev.first_task}+{spec.dev.tasks}; test: {test}; "
              f"seeds {planned.seeds}; choose: {spec.choose.value}")  # fmt: skip
        for set_name, ts in spec.transfer.items():
            print(f"transfer {set_name}: {ts.env or 'the recipe env'} {ts.env_kwargs} tasks {ts.first_task}+{ts.tasks}")
        if spec.baselines:
            print(f"baselines (test and transfer sets, base model): {', '.join(spec.baselines)}")
        for line in describe(runs):
            print(line)
        return 0
    result = run_sweep(spec, out, name=name, overrides=overrides, seeds=seeds, dev_only=args.dev_only,
                       archive=args.archive, report_only=args.report, arms=arms)  # fmt: skip
    print(result.report)
    if result.curves:
        print(f"curves: {result.curves}")
    return 0
