"""Rollout engine speed: KV-cache reuse, engine overhead and tool-call overlap, each against a reference.

1. Cache reuse. The engine plays the same greedy multi-turn SmolLM2 rollout
   twice: with ``TransformersPolicy``'s per-episode KV caches (each turn runs the
   model over the new env tokens only) and with ``reuse_kv_cache=False`` (each
   turn re-runs the whole conversation). Figures: model tokens/s of each, the
   speed-up, and whether both produced the same token ids with log-probs within
   ``logprob_atol``. ``--cache-check`` runs only this and ends with the line
   ``cache reuse: exact=<true|false> speedup=<ratio>``.
2. Overhead. The engine plays ``episodes`` HotpotQA episodes with SmolLM2 on
   CPU, with and without KV reuse (same seeds: same prompts and tokens, which
   is checked). Every batched generate call of the re-prefilling run is
   recorded (prompts, tokens produced); the reference then replays exactly those
   calls as bare batched ``model.generate`` (same prompts, left padding,
   sampling, each call forced to its longest generation's length). Figures:
   engine tokens/s over the whole rollout (generation, stop checks, log-probs,
   env steps, template deltas) with and without reuse; reference: bare-generate
   tokens/s for the same model tokens; ratios and the overhead
   ``engine_time / reference_time - 1`` of the re-prefilling engine (goal <= 10%).
3. Tool overlap. ``overlap_episodes`` scripted episodes (a search call, then an
   answer) on an env whose ``step`` sleeps ``tool_latency_s``. Figure: wall
   time with the engine's thread pool; references: the same rollout with one
   worker (the serial sum) and the ideal ``turns * latency`` (the max).
3. Ray env pool (``--ray-actors 1,2,4``; only this part runs then). Scripted
   episodes whose env steps either sleep ``ray_tool_latency_s`` (a tool that
   waits) or spin the CPU in Python for ``ray_tool_cpu_s`` (a tool that holds
   the GIL). Figure: episodes/s with the envs in 1, 2 and 4 Ray actors
   (:class:`agent_trainers.rollout.ray_pool.RayEnvPool`); reference: the same
   episodes with in-process envs and the engine's threads; ratio Ray/threads.

4. Decode loop (``--quick``: only this, with the tiny random model). The policy's decode loop
   (:mod:`agent_trainers.policies.decode`) and ``model.generate`` (``decoder="generate"``, the engine
   before the loop) generate ``decode_tokens`` tokens after ``decode_rows`` left-padded prompts
   (sampling at T=1, the stop string ``</tool_call>``); reference: a bare loop of
   ``model(input_ids, past_key_values=...)`` calls over the same prompts and the same tokens (no sampling,
   no log-probs, no stop check). Ends with ``engine/bare decode time: N.NNx`` (goal <= 1.30x) and the
   same ratio for ``model.generate``. With ``--decoders`` (or in the default run) it uses ``--model`` and
   also plays ``episodes`` rollouts under both decoders (same seeds), printing model tokens/s and the ratio.

Run: ``python benchmarks/rollout.py`` (defaults take a few minutes on 2 CPU cores);
``python benchmarks/rollout.py --cache-check`` (only part 1); ``--quick`` (part 4, tiny model, ~20 s);
``--decoders --episodes 16`` (part 4 with SmolLM2); ``--precision --episodes 16 --temperature 0`` (fp32
against a bf16 copy on 1 and 2 threads, and the log-probs' distance);
``python benchmarks/rollout.py --episodes 8 --max-new-tokens 64`` for a longer one.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import tyro

import agent_gym  # noqa: F401  (registers the environment ids)
from agent_trainers.policies import (
    Generation,
    SamplingParams,
    ScriptedPolicy,
    TransformersPolicy,
    load_model,
    load_tokenizer,
)
from agent_trainers.policies.threads import apply_threads
from agent_trainers.rollout import RolloutConfig, Trajectory, rollout


@dataclass
class Args:
    """Benchmark settings (each is also a ``--flag``)."""

    env_id: str = "AgentR1/HotpotQA-v0"
    """Environment played (its embedded sample, no data files needed)."""
    model: str = "smollm2"
    """Model played (``smollm2``, ``tiny-random`` or a checkpoint folder)."""
    quick: bool = False
    """Run only the decode-loop rows (part 4) with the tiny random model; ends with ``engine/bare decode time``."""
    precision: bool = False
    """Run only the precision rows: ``episodes`` rollouts with ``--model`` in fp32 and with a bf16 copy, on 1 and
    2 threads (tokens/s), and the bf16 log-probs' distance from an fp32 forward of the same tokens."""
    decoders: bool = False
    """Run only part 4 with ``--model``: the decode-loop rows, then whole rollouts under both decoders."""
    decode_rows: int = 16
    """Prompts per batch in the decode-loop rows."""
    decode_tokens: int = 64
    """Tokens generated per prompt in the decode-loop rows (the longest row runs this many steps)."""
    cache_check: bool = False
    """Run only the cache-reuse check (part 1) and end with ``cache reuse: exact=... speedup=...``."""
    threads_check: bool = False
    """Run only the cache check's rollout (with reuse) under 1 and 2 torch threads, alternating ``repeats`` times."""
    check_episodes: int = 4
    """Episodes of the cache check (one batch, distinct tasks)."""
    check_turns: int = 3
    """Turn limit of the cache check."""
    check_new_tokens: int = 32
    """Tokens per turn in the cache check (greedy)."""
    dtype: str = "float32"
    """Model dtype (``float32``, or ``float64`` to see the paths agree far below float32's rounding)."""
    logprob_atol: float = 1e-4
    """Largest log-prob difference the cache check accepts as exact. In float32, batching alone moves
    SmolLM2's greedy log-probs by up to 2e-5 (the same prompts decoded alone vs in a batch of 4, no cache);
    in float64 the paths agree to ~1e-12 (the tests require 1e-5)."""
    episodes: int = 4
    """Episodes in the overhead run (one batch)."""
    max_new_tokens: int = 32
    """Tokens per turn in the overhead run."""
    max_turns: int = 3
    """Turn limit of the overhead run."""
    temperature: float = 1.0
    """Sampling temperature of the overhead run's engine and reference."""
    threads: int = 1
    """torch CPU threads (0: torch's default). 1 by default: on this project's shared 2-core machine one thread
    decoded faster than two (see the README's rollout section for the measurement)."""
    tool_latency_s: float = 0.5
    """Latency of every env step in the overlap run."""
    overlap_episodes: int = 8
    """Episodes in the overlap run."""
    seed: int = 0
    """Seed of sampling and resets."""
    repeats: int = 2
    """Timed runs alternate this many times; medians are reported (the box is shared)."""
    # --- Ray env pool rows (part 3) ---
    ray_actors: str = ""
    """Comma-separated actor counts, e.g. ``1,2,4``: run only the Ray env-pool comparison (empty: skip it)."""
    ray_episodes: int = 16
    """Episodes per Ray-comparison run (2 env steps each)."""
    ray_tool_latency_s: float = 0.2
    """Sleep of every env step in the waiting-tool rows."""
    ray_tool_cpu_s: float = 0.1
    """Pure-Python busy time of every env step in the GIL-bound rows."""
    ray_threads_per_actor: int = 8
    """``max_concurrency`` of each actor (env steps one actor runs at once on its threads)."""


class RecordingPolicy:
    """Wraps a policy, times it and records every generate call (prompts and generations)."""

    def __init__(self, inner: TransformersPolicy):
        self.inner, self.tokenizer = inner, inner.tokenizer
        self.calls: list[tuple[list[list[int]], list[Generation]]] = []
        self.generate_s = 0.0

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, *, sessions: Sequence[Hashable] | None = None
    ) -> list[Generation]:
        start = time.perf_counter()
        gens = self.inner.generate(prompts, params, sessions=sessions)
        self.generate_s += time.perf_counter() - start
        self.calls.append(([list(p) for p in prompts], gens))
        return gens

    def end_sessions(self, sessions: Iterable[Hashable]) -> None:
        self.inner.end_sessions(sessions)


@dataclass
class Run:
    """One timed engine rollout."""

    trajs: list[Trajectory]
    wall_s: float
    policy: RecordingPolicy

    @property
    def tokens(self) -> int:
        return sum(sum(t.loss_mask) for t in self.trajs)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens the model ran over: all of them without reuse; with reuse, the new ones plus one per row."""
        stats = self.policy.inner.cache_stats
        if stats is None or not self.policy.inner.reuses_kv_cache or not _used_sessions(self.policy):
            return sum(len(p) for prompts, _ in self.policy.calls for p in prompts)
        return stats.prefilled + sum(len(prompts) for prompts, _ in self.policy.calls)


def _used_sessions(policy: RecordingPolicy) -> bool:
    stats = policy.inner.cache_stats
    return stats is not None and (stats.prefilled + stats.reused + stats.shared) > 0


def play(args: Args, model: Any, tok: Any, cfg: RolloutConfig, episodes: int, reuse: bool) -> Run:
    """One engine rollout of ``episodes`` tasks, timed, with or without KV reuse."""
    policy = RecordingPolicy(TransformersPolicy(model, tok, batch_size=episodes, seed=args.seed, reuse_kv_cache=reuse))
    start = time.perf_counter()
    trajs = rollout(policy, args.env_id, task_indices=range(episodes), seed=args.seed, config=cfg, progress=True)
    return Run(trajs, time.perf_counter() - start, policy)


def compare(cached: list[Trajectory], plain: list[Trajectory]) -> tuple[bool, float]:
    """(same token ids and masks everywhere, largest log-prob difference)."""
    same, worst = True, 0.0
    for c, p in zip(cached, plain, strict=True):
        same &= c.completion_ids == p.completion_ids and c.loss_mask == p.loss_mask
        if len(c.logprobs) == len(p.logprobs):
            worst = max([worst, *(abs(a - b) for a, b in zip(c.logprobs, p.logprobs, strict=True))])
    return same, worst


def timed_pair(args: Args, model: Any, tok: Any, cfg: RolloutConfig, episodes: int) -> tuple[list[Run], list[Run]]:
    """``repeats`` alternating (re-prefill, cached) runs."""
    plain, cached = [], []
    for _ in range(args.repeats):
        plain.append(play(args, model, tok, cfg, episodes, reuse=False))
        cached.append(play(args, model, tok, cfg, episodes, reuse=True))
    return plain, cached


def _row(label: str, runs: list[Run]) -> float:
    wall = statistics.median(r.wall_s for r in runs)
    r = runs[-1]
    print(
        f"  {label:26s}: {wall:7.2f} s  {r.tokens / wall:7.1f} model tok/s  prompt tokens run: {r.prompt_tokens:6d}"
        f"  (runs: {_fmt([x.wall_s for x in runs])})"
    )
    return wall


def cache_check(args: Args, model: Any, tok: Any) -> None:
    """Part 1: the same greedy rollout with and without KV reuse; exactness and speed-up."""
    cfg = RolloutConfig(
        max_new_tokens_per_turn=args.check_new_tokens,
        max_turns=args.check_turns,
        temperature=0.0,
        max_total_tokens=4096,
    )
    plain, cached = timed_pair(args, model, tok, cfg, args.check_episodes)
    same, worst = compare(cached[-1].trajs, plain[-1].trajs)
    same &= all(compare(c.trajs, cached[0].trajs)[0] for c in cached)  # every repeat played the same
    turns = [len(t.turns) for t in cached[-1].trajs]
    print(
        f"cache reuse: {args.check_episodes} episodes, turns {turns}, greedy, {args.check_new_tokens} tokens/turn, "
        f"{cached[-1].tokens} model tokens, {args.dtype}"
    )
    plain_s, cached_s = _row("re-prefill every turn", plain), _row("KV cache reuse", cached)
    print(f"  same token ids: {same}; largest log-prob difference: {worst:.2e} (accepted: {args.logprob_atol:.0e})")
    exact = same and worst <= args.logprob_atol
    print(f"cache reuse: exact={str(exact).lower()} speedup={plain_s / cached_s:.2f}")


def threads_check(args: Args, model: Any, tok: Any) -> None:
    """Is one torch thread faster than two on this machine? The cache check's rollout, alternating."""
    cfg = RolloutConfig(max_new_tokens_per_turn=args.check_new_tokens, max_turns=args.check_turns,
                        temperature=0.0, max_total_tokens=4096)  # fmt: skip
    walls: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for n in walls:
            torch.set_num_threads(n)
            walls[n].append(play(args, model, tok, cfg, args.check_episodes, reuse=True).wall_s)
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    print(f"threads: 1 thread {one:.1f} s (runs: {_fmt(walls[1])}), 2 threads {two:.1f} s (runs: {_fmt(walls[2])})")
    print(f"threads: 2 threads take {two / one:.2f}x the time of 1")


@torch.inference_mode()
def bare_generate(model: Any, tok: Any, prompts: list[list[int]], new_tokens: int, temperature: float) -> None:
    """The reference: one plain batched ``model.generate`` call, forced to ``new_tokens``."""
    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=temperature > 0,
        temperature=temperature or None,
        top_k=None,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=pad,
    )


def overhead(args: Args, model: Any, tok: Any) -> None:
    """Part 2: engine tokens/s with and without KV reuse, and the re-prefilling engine vs bare generate."""
    cfg = RolloutConfig(
        max_new_tokens_per_turn=args.max_new_tokens,
        max_turns=args.max_turns,
        temperature=args.temperature,
        max_total_tokens=4096,
    )
    plain, cached = timed_pair(args, model, tok, cfg, args.episodes)
    reference = []
    for run in plain:
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        for prompts, gens in run.policy.calls:
            bare_generate(model, tok, prompts, max(len(g.token_ids) for g in gens), args.temperature)
        reference.append(time.perf_counter() - start)
    same, _ = compare(cached[-1].trajs, plain[-1].trajs)
    last = plain[-1]
    turns = sum(len(t.turns) for t in last.trajs)
    print(
        f"overhead: {args.episodes} episodes, {turns} turns, {len(last.policy.calls)} generate calls, "
        f"{last.tokens} model tokens, temperature {args.temperature}; same tokens with and without reuse: {same}"
    )
    plain_s, cached_s = _row("engine, re-prefill", plain), _row("engine, KV cache reuse", cached)
    gen_s = statistics.median(r.policy.generate_s for r in plain)
    print(
        f"    re-prefill run: policy.generate {gen_s:.2f} s; env steps + templates + tokenization "
        f"{plain_s - gen_s:.2f} s"
    )
    ref_s = statistics.median(reference)
    rate = last.tokens / ref_s
    print(f"  {'reference bare generate':26s}: {ref_s:7.2f} s  {rate:7.1f} model tok/s  (runs: {_fmt(reference)})")
    print(
        f"  KV reuse speed-up: {plain_s / cached_s:.2f}x   re-prefill engine overhead vs bare generate: "
        f"{100 * (plain_s / ref_s - 1):+.1f}%   KV-reuse engine vs bare generate: {ref_s / cached_s:.2f}x"
    )


def _fmt(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


class SleepyStep(gym.Wrapper):
    """Every ``step`` first sleeps ``latency_s`` (a slow tool)."""

    def __init__(self, env: gym.Env, latency_s: float):
        super().__init__(env)
        self.latency_s = latency_s

    def step(self, action: Any) -> Any:
        time.sleep(self.latency_s)
        return self.env.step(action)


def overlap(args: Args, tok: Any) -> None:
    slow_id = "Bench/SlowStep-v0"
    if slow_id not in gym.registry:
        gym.register(slow_id, entry_point=lambda **kw: SleepyStep(gym.make(args.env_id, **kw), args.tool_latency_s))
    script = ['<tool_call>\n{"name": "search", "arguments": {"query": "capital"}}\n</tool_call>', "<answer>x</answer>"]
    turns = len(script)

    def run(workers: int) -> float:
        policy = ScriptedPolicy(tok, lambda ids: script[min(tok.decode(ids).count("<|im_start|>assistant") - 1, 1)])
        cfg = RolloutConfig(tool_workers=workers, tool_timeout_s=60.0)
        start = time.perf_counter()
        trajs = rollout(policy, slow_id, task_indices=range(args.overlap_episodes), seed=args.seed, config=cfg)
        assert all(len(t.turns) == turns for t in trajs), [t.stop_reason for t in trajs]
        return time.perf_counter() - start

    pooled, serial = run(args.overlap_episodes), run(1)
    ideal = turns * args.tool_latency_s
    n = args.overlap_episodes
    print(f"tool overlap: {n} episodes x {turns} steps, step latency {args.tool_latency_s} s")
    print(f"  engine ({n} workers)   : {pooled:6.2f} s")
    print(f"  reference serial (1 worker, the sum): {serial:6.2f} s   ideal (the max, turns x latency): {ideal:.2f} s")
    print(f"  ratio engine/ideal: {pooled / ideal:.2f}   serial/engine speed-up: {serial / pooled:.1f}x")


class BusyStep(gym.Wrapper):
    """Every ``step`` first spins the CPU in Python for ``cpu_s`` seconds (a GIL-bound tool)."""

    def __init__(self, env: gym.Env, cpu_s: float):
        super().__init__(env)
        self.cpu_s = cpu_s

    def step(self, action: Any) -> Any:
        end, x = time.thread_time() + self.cpu_s, 0
        while time.thread_time() < end:
            x += 1
        return self.env.step(action)


def _register_tool_envs(env_id: str, latency_s: float, cpu_s: float) -> None:
    """``Bench/SleepTool-v0`` and ``Bench/CpuTool-v0`` (run in the driver and, pickled by value, in each actor)."""
    for name, wrap in (("Bench/SleepTool-v0", lambda e: SleepyStep(e, latency_s)),
                       ("Bench/CpuTool-v0", lambda e: BusyStep(e, cpu_s))):  # fmt: skip
        if name not in gym.registry:
            gym.register(name, entry_point=lambda wrap=wrap, **kw: wrap(gym.make(env_id, **kw)))


def ray_pool_rows(args: Args, tok: Any) -> None:
    """Part 3: episodes/s with envs in 1, 2, 4 Ray actors vs in-process envs on the engine's threads."""
    import os

    import ray

    from agent_trainers.rollout.ray_pool import RayEnvPool

    actors = [int(a) for a in args.ray_actors.split(",")]
    setup = functools.partial(_register_tool_envs, args.env_id, args.ray_tool_latency_s, args.ray_tool_cpu_s)
    setup()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    script = ['<tool_call>\n{"name": "search", "arguments": {"query": "capital"}}\n</tool_call>', "<answer>x</answer>"]
    policy = ScriptedPolicy(tok, lambda ids: script[min(tok.decode(ids).count("<|im_start|>assistant") - 1, 1)])
    cfg = RolloutConfig(tool_workers=args.ray_episodes, tool_timeout_s=120.0)
    n = args.ray_episodes

    def run(env_id: str, make_env: Any = None) -> float:
        start = time.perf_counter()
        trajs = rollout(policy, env_id, task_indices=range(n), seed=args.seed, config=cfg, make_env=make_env)
        assert all(len(t.turns) == 2 for t in trajs), [t.stop_reason for t in trajs]
        return n / (time.perf_counter() - start)

    print(f"ray env pool: {n} episodes x 2 steps; {os.cpu_count()} CPUs; {args.ray_threads_per_actor} threads/actor")
    for env_id, what in (("Bench/SleepTool-v0", f"tool sleeps {args.ray_tool_latency_s} s"),
                         ("Bench/CpuTool-v0", f"tool spins the CPU {args.ray_tool_cpu_s} s (GIL)")):  # fmt: skip
        reference = run(env_id)
        print(f"  {what}: in-process envs, {n} engine threads (reference): {reference:6.2f} episodes/s")
        for k in actors:
            started = time.perf_counter()
            with RayEnvPool(num_actors=k, max_concurrency=args.ray_threads_per_actor, setup=setup) as pool:
                run(env_id, pool.make)  # warm-up: starts the actors and builds their first envs
                warm = time.perf_counter() - started
                rate = run(env_id, pool.make)
            print(f"    Ray, {k} actor(s): {rate:6.2f} episodes/s  ratio Ray/threads {rate / reference:.2f}"
                  f"  (actor start + warm-up run {warm:.1f} s)")  # fmt: skip
    ray.shutdown()


def _bare_decode(model: Any, ids: torch.Tensor, mask: torch.Tensor, tokens: torch.Tensor) -> float:
    """Seconds for a prefill of ``ids`` then one ``model(...)`` call per column of ``tokens`` (the bound)."""
    from transformers import DynamicCache

    start = time.perf_counter()
    with torch.inference_mode():
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        past = DynamicCache(config=model.config)
        model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=past, logits_to_keep=1)
        step = positions[:, -1:]
        for col in range(tokens.shape[1] - 1):
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            step = step + 1
            model(input_ids=tokens[:, col : col + 1], attention_mask=mask, position_ids=step, past_key_values=past)
    return time.perf_counter() - start


def decode_loop_rows(args: Args, model: Any, tok: Any) -> None:
    """Part 4: the decode loop and ``model.generate`` against bare forwards over the same tokens."""
    gen = torch.Generator().manual_seed(args.seed)
    rows = args.decode_rows
    lengths = [200 + 7 * r for r in range(rows)]
    width = max(lengths)
    ids = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    prompts = []
    for r, n in enumerate(lengths):
        prompts.append(torch.randint(100, 5000, (n,), generator=gen).tolist())
        ids[r, width - n :], mask[r, width - n :] = torch.tensor(prompts[-1]), 1
    params = SamplingParams(max_new_tokens=args.decode_tokens, temperature=1.0, stop=("</tool_call>",))
    ratios: dict[str, list[float]] = {"loop": [], "generate": []}
    policies = {d: TransformersPolicy(model, tok, batch_size=rows, seed=args.seed, decoder=d) for d in ratios}
    for policy in policies.values():
        policy.generate(prompts[:1], SamplingParams(max_new_tokens=2, stop=params.stop))  # warm-up (stop table)
    _bare_decode(model, ids, mask, ids[:, :8])  # warm-up
    for _ in range(args.repeats):
        for d, policy in policies.items():
            start = time.perf_counter()
            gens = policy.generate(prompts, params)
            engine_s = time.perf_counter() - start
            steps = max(len(g.token_ids) for g in gens)
            forced = torch.tensor([g.token_ids + [0] * (steps - len(g.token_ids)) for g in gens])
            ratios[d].append(engine_s / _bare_decode(model, ids, mask, forced))
    for d in ("generate", "loop"):
        what = "model.generate (before)" if d == "generate" else "decode loop"
        print(f"  {what:24s}: {statistics.median(ratios[d]):.2f}x bare  (runs: {_fmt(ratios[d])})")
    print(f"generate/bare decode time: {statistics.median(ratios['generate']):.2f}x")
    print(f"engine/bare decode time: {statistics.median(ratios['loop']):.2f}x")


def decoder_rollouts(args: Args, model: Any, tok: Any) -> None:
    """Part 4, whole rollouts: ``episodes`` episodes of ``env_id`` under each decoder, model tokens/s."""
    cfg = RolloutConfig(max_new_tokens_per_turn=args.max_new_tokens, max_turns=args.max_turns,
                        temperature=args.temperature)  # fmt: skip
    rates: dict[str, list[float]] = {"generate": [], "loop": []}
    for _ in range(args.repeats):
        for d in rates:
            policy = TransformersPolicy(model, tok, batch_size=args.episodes, seed=args.seed, decoder=d)
            start = time.perf_counter()
            trajs = rollout(policy, args.env_id, task_indices=range(args.episodes), seed=args.seed, config=cfg)
            rates[d].append(sum(sum(t.loss_mask) for t in trajs) / (time.perf_counter() - start))
    loop, before = statistics.median(rates["loop"]), statistics.median(rates["generate"])
    print(f"rollout {args.model}: model.generate {before:.1f} model tok/s (runs: {_fmt(rates['generate'])}), "
          f"decode loop {loop:.1f} (runs: {_fmt(rates['loop'])}); loop/generate: {loop / before:.2f}x")  # fmt: skip


def precision_rows(args: Args, model: Any, tok: Any) -> None:
    """fp32 against a bf16 copy, on 1 and 2 threads: model tokens/s of whole rollouts, and how far bf16's recorded
    log-probs sit from an fp32 forward of the same tokens (what ``bf16: null`` weighs)."""
    cfg = RolloutConfig(max_new_tokens_per_turn=args.max_new_tokens, max_turns=args.max_turns,
                        temperature=args.temperature)  # fmt: skip
    bf16_trajs: list[Trajectory] = []
    for threads in (1, 2):
        apply_threads(threads)
        for bf16 in (False, True):
            policy = TransformersPolicy(model, tok, batch_size=args.episodes, seed=args.seed, bf16=bf16)
            start = time.perf_counter()
            trajs = rollout(policy, args.env_id, task_indices=range(args.episodes), seed=args.seed, config=cfg)
            wall = time.perf_counter() - start
            tokens = sum(sum(t.loss_mask) for t in trajs)
            print(f"  {threads} thread(s), {'bf16 copy' if bf16 else 'fp32':9s}: {wall:6.1f} s  {tokens:5d} model "
                  f"tokens  {tokens / wall:6.1f} tok/s")  # fmt: skip
            bf16_trajs = trajs if bf16 else bf16_trajs
    worst = 0.0
    with torch.inference_mode():
        for t in bf16_trajs[:4]:
            ids = t.prompt_ids + t.completion_ids
            lps = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float(), dim=-1)
            for i, (kept, lp) in enumerate(zip(t.loss_mask, t.logprobs, strict=True)):
                pos = len(t.prompt_ids) + i
                worst = max(worst, abs(float(lps[pos - 1, ids[pos]]) - lp)) if kept else worst
    print(f"precision: bf16 log-probs vs an fp32 forward of the same tokens: largest |diff| {worst:.3f} "
          f"(KV-reuse tolerance {args.logprob_atol:.0e})")  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def main() -> None:
    args = parse_args()
    apply_threads(args.threads)
    print(f"args: {args}  torch threads: {torch.get_num_threads()}")
    if args.ray_actors:
        ray_pool_rows(args, load_tokenizer("smollm2"))
        return
    if args.quick:
        print("decode loop: tiny-random on CPU")
        decode_loop_rows(args, *load_model("tiny-random", device="cpu"))
        return
    model, tok = load_model(args.model, device="cpu", dtype=getattr(torch, args.dtype))
    if args.precision:
        print(f"precision: {args.model}, {args.episodes} episodes of {args.env_id}, temperature {args.temperature}")
        precision_rows(args, model, tok)
        return
    if args.decoders:
        print(f"decode loop: {args.model} on CPU")
        decode_loop_rows(args, model, tok)
        decoder_rollouts(args, model, tok)
        return
    if args.cache_check or args.threads_check:
        if args.cache_check:
            cache_check(args, model, tok)
        if args.threads_check:
            threads_check(args, model, tok)
        return
    cache_check(args, model, tok)
    overhead(args, model, tok)
    overlap(args, tok)
    print(f"decode loop: {args.model} on CPU")
    decode_loop_rows(args, model, tok)
    decoder_rollouts(args, model, tok)


if __name__ == "__main__":
    main()
