"""What a long episode costs the model under each context policy: TextWorld at turn 30, append vs window.

Protocol (each context in its own process, so peak memory is its own):

1. **Episodes.** ``games`` long TextWorld games (``quest_length`` 20, held-aside ``task_seed``) are played by the
   rollout engine for ``turns`` turns under ``context=append`` (the paper's MDP: the whole history) or
   ``context=window`` (the task and the last ``context_turns`` turns). The actions are scripted so that the
   feedback is real game text and every game lasts: the walkthrough's next command, then ``look``, in turn
   (the walkthrough recovers from the detour; a 20-command quest is not won before turn 39).
2. **The model's cost.** Each turn the project's model (SmolLM2-135M-Instruct) is fed the engine's exact
   prompt of every game, batched, and generates ``new_tokens`` tokens (greedy; its text is discarded, the
   scripted command is played), keeping each game's KV cache between turns as the rollout engine does:
   under ``append`` the cached history is reused and only the new turn's tokens are run; under ``window`` the
   prompt changes after the task, so only that prefix is reused.
3. **Report**: per step, the prompt tokens the model attends to, the tokens it had to run (not reused from
   the cache) and the seconds of the step, at turn ``turns`` and as the mean of the last five turns; the
   peak RSS of each process; window / append ratios.

Run:
    .venv/bin/python benchmarks/context_cost.py                  # 4 games, turn 30, window of 3 turns
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tyro

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "AgentR1/TextWorld-v0"


@dataclass
class Args:
    """Benchmark settings."""

    games: int = 4
    """Games played together (one batch per turn)."""
    turns: int = 30
    """Turns played; the figures are read at this turn."""
    context_turns: int = 3
    """K of ``window``: the task plus the last K turns."""
    quest_length: int = 20
    """Actions of each game's quest (20: the long variant)."""
    task_seed: int = 1
    """The game family (1: held aside from training's family 0)."""
    new_tokens: int = 16
    """Tokens the model generates per step."""
    model: str = "smollm2"
    """The model (``smollm2``, ``tiny-random`` or a checkpoint folder)."""
    threads: int = 1
    """torch CPU threads."""
    out: str = "runs/context_cost"
    """Where each context's per-turn figures (JSON) go."""
    only: str = ""
    """Measure one context in this process (``append`` or ``window``); empty: both, each in a child process."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


class ScriptedGames:
    """Plays each game's walkthrough with a ``look`` between commands, read off a mirror env of the same game.

    The engine asks for each live episode's next action with its prompt; the game is found by its quest text
    (in the prompt under every context), and its mirror env steps with the same action, so the walkthrough's
    next command is always the one for the game's true state.
    """

    def __init__(self, tokenizer: Any, env_kwargs: dict[str, Any], task_indices: Sequence[int]):
        import gymnasium as gym

        import agent_gym  # noqa: F401

        self.tokenizer = tokenizer
        self.mirrors: dict[str, Any] = {}
        self.steps: dict[str, int] = {}
        for index in task_indices:
            env = gym.make(ENV_ID, **env_kwargs)
            _, info = env.reset(seed=0, options={"task_index": int(index)})
            quest = next(m["content"] for m in info["messages"] if m["role"] == "user")
            self.mirrors[quest], self.steps[quest] = env, 0

    def __call__(self, prompt: list[int]) -> str:
        text = self.tokenizer.decode(prompt)
        quest = next(q for q in self.mirrors if q in text)
        env = self.mirrors[quest].unwrapped
        look = env.parser.format_call("command", {"text": "look"})
        action = look if self.steps[quest] % 2 else env.oracle_action()
        self.steps[quest] += 1
        self.mirrors[quest].step(action)
        return action

    def close(self) -> None:
        for env in self.mirrors.values():
            env.close()


def measure(args: Args, context: str) -> dict[str, Any]:
    """Play the games under ``context`` and time the model on every step's prompts (see the module docstring)."""
    import torch

    from agent_trainers.policies import SamplingParams, ScriptedPolicy, TransformersPolicy, load_model
    from agent_trainers.rollout import RolloutConfig, rollout

    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model, device="cpu")
    model.eval()
    kwargs = {"quest_length": args.quest_length, "task_seed": args.task_seed, "action_format": "tags",
              "context": context} | ({"context_turns": args.context_turns} if context == "window" else {})  # fmt: skip
    tasks = list(range(args.games))
    script = ScriptedGames(tok, kwargs, tasks)
    config = RolloutConfig(max_turns=args.turns, max_new_tokens_per_turn=64, max_total_tokens=16_384)
    try:
        played = rollout(ScriptedPolicy(tok, script), ENV_ID, task_indices=tasks, env_kwargs=kwargs, config=config)
    finally:
        script.close()
    short = [len(t.turns) for t in played if len(t.turns) < args.turns]
    if short:
        raise RuntimeError(f"an episode ended before turn {args.turns} ({short} turns): lower --turns")
    policy = TransformersPolicy(model, tok, batch_size=args.games, seed=0)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0)
    rows = []
    for k in range(args.turns):
        prompts = [prompt_at(t, k) for t in played]
        stats = policy.cache_stats
        before = None if stats is None else stats.prefilled
        start = time.perf_counter()
        policy.generate(prompts, params, sessions=list(range(len(prompts))))
        seconds = time.perf_counter() - start
        run = None if stats is None or before is None else (stats.prefilled - before) / len(prompts)
        rows.append({"turn": k + 1, "prompt_tokens": statistics.mean(len(p) for p in prompts), "seconds": seconds,
                     "run_tokens": run})  # fmt: skip
        print(f"[context_cost] {context}: turn {k + 1}/{args.turns}, {rows[-1]['prompt_tokens']:.0f} prompt tokens, "
              f"{seconds:.2f} s", flush=True)  # fmt: skip
    return {"context": context, "turns": rows}


def prompt_at(trajectory: Any, k: int) -> list[int]:
    """The ids the model was fed at turn ``k``: the step prompt under a view, else the history so far."""
    if trajectory.step_prompts:
        return list(trajectory.step_prompts[k])
    turn = trajectory.turns[k]
    return list(trajectory.prompt_ids) + list(trajectory.completion_ids[: turn.start])


def summary(result: dict[str, Any], last: int = 5) -> dict[str, float]:
    """The figures at the last turn, and their means over the last ``last`` turns.

    Example:
        >>> rows = [{"turn": k, "prompt_tokens": 100.0 * k, "seconds": 0.1 * k, "run_tokens": 50.0} for k in (1, 2)]
        >>> summary({"turns": rows}, last=2)["prompt_tokens_mean"]
        150.0
    """
    rows = result["turns"]
    tail = rows[-last:]
    out: dict[str, float] = {}
    for key in ("prompt_tokens", "seconds", "run_tokens"):
        values = [r[key] for r in tail if r.get(key) is not None]
        if values:
            out[key] = float(rows[-1][key])
            out[f"{key}_mean"] = statistics.mean(values)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.only:
        result = measure(args, args.only)
        (out / f"{args.only}.json").write_text(json.dumps(result))
        return
    import psutil

    peaks = {}
    for context in ("append", "window"):
        cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--only", context]
        child = subprocess.Popen(cmd, cwd=ROOT)
        watched, peak = psutil.Process(child.pid), 0.0
        while child.poll() is None:
            try:
                peak = max(peak, watched.memory_info().rss / 2**20)
            except psutil.Error:
                pass
            time.sleep(0.2)
        if child.returncode:
            raise RuntimeError(f"{context} failed (exit {child.returncode})")
        peaks[context] = peak
    results = {c: json.loads((out / f"{c}.json").read_text()) for c in ("append", "window")}
    figs = {c: summary(r) | {"peak_rss_mb": peaks[c]} for c, r in results.items()}
    print(report(args, figs))


def report(args: Args, figs: dict[str, dict[str, float]]) -> str:
    """The table of both contexts and the window / append ratios."""
    t = args.turns
    head = (
        f"TextWorld ({args.games} games, quest length {args.quest_length}, task_seed {args.task_seed}), "
        f"{args.model}, {args.new_tokens} new tokens a step, {args.threads} thread(s); "
        f"window = the task + {args.context_turns} turns"
    )
    lines = [head, "", f"| context | prompt tokens at turn {t} (mean {t - 4}-{t}) | tokens run at turn {t} (mean) "
             f"| s/step at turn {t} (mean) | peak RSS MB |", "|---|---|---|---|---|"]  # fmt: skip
    for c in ("append", "window"):
        f = figs[c]
        run = f"{f['run_tokens']:.0f} ({f['run_tokens_mean']:.0f})" if "run_tokens" in f else "—"
        lines.append(f"| {c} | {f['prompt_tokens']:.0f} ({f['prompt_tokens_mean']:.0f}) | {run} "
                     f"| {f['seconds']:.2f} ({f['seconds_mean']:.2f}) | {f['peak_rss_mb']:,.0f} |")  # fmt: skip
    a, w = figs["append"], figs["window"]
    lines.append("")
    for key, name in (("prompt_tokens_mean", "prompt tokens"), ("run_tokens_mean", "tokens run"),
                      ("seconds_mean", "seconds per step"), ("peak_rss_mb", "peak RSS")):  # fmt: skip
        if key in a and key in w and a[key]:
            lines.append(f"window / append, {name}: {w[key] / a[key]:.2f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
