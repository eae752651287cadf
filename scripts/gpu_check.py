"""One short check for a lent GPU machine: rollout tokens/s, one GRPO and one PPO step, as a table.

No weights and no internet are needed: the model is a Qwen2.5-3B-shaped
``Qwen2ForCausalLM`` built from its configuration with random weights (bf16
on a GPU), and the tokenizer is a byte-level BPE trained here, in about a
second, on the embedded HotpotQA sample, with the ChatML tokens and our tool
template. A random model never stops on its own, so every turn runs to
``max_new_tokens`` and the token counts are the workload's upper bound.

Rows (each with its wall time and peak memory: the CUDA allocator's peak on a
GPU, the process's peak RSS on a CPU):

* ``rollout``: :func:`agent_trainers.rollout.rollout` with
  :class:`~agent_trainers.policies.TransformersPolicy` on ``AgentR1/HotpotQA-v0``
  (``episodes`` episodes of up to ``turns`` turns): model tokens per second;
* ``grpo step``: one :class:`~agent_trainers.algorithms.AgentGRPOTrainer` step
  (TRL) on ``episodes / group`` tasks x ``group`` rollouts, split into rollout and update;
* ``ppo step``: one step of our PPO trainer, when this checkout has it
  (``PPO: not available in this checkout`` otherwise);
* ``ppo sync`` and ``ppo async``: ``async_steps`` PPO steps without and with
  ``rl.async_rollouts`` (a generation worker process on the same device,
  ``max_staleness`` 1): seconds per step and the seconds the trainer sat idle
  in each step's rollout call, over the steps after the first (the first
  has nothing generated ahead), and the ratio of their step rates.

Run it through ``scripts/gpu_check.sh`` (which installs carried wheels first),
or ``python scripts/gpu_check.py --tiny`` on any CPU.
"""

from __future__ import annotations

import gc
import importlib.util
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import tyro
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a plain checkout, no install needed

QWEN25_3B = {
    "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
    "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768, "rope_theta": 1e6,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
}  # fmt: skip
"""Qwen2.5-3B's shape (3.09 B parameters)."""
TINY = QWEN25_3B | {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
"""The same family at toy size (its vocabulary is cut to the tokenizer's, else the logits dominate on a CPU)."""
ENV_ID = "AgentR1/HotpotQA-v0"


@dataclass
class Args:
    """Settings (each is also a ``--flag``)."""

    tiny: bool = False
    """A 2-layer, 64-wide model of the same family and a small workload: a CPU runs it in about a minute."""
    device: str = "auto"
    """``auto`` (the GPU when there is one), ``cuda`` or ``cpu``."""
    episodes: int = 16
    """Episodes of the rollout row; also the batch of the GRPO and PPO steps."""
    group: int = 4
    """Rollouts per task (GRPO's ``num_generations``)."""
    turns: int = 3
    """Turn limit of an episode."""
    max_new_tokens: int = 64
    """Tokens per turn."""
    max_total_tokens: int = 4096
    """Token budget of an episode."""
    vocab: int = 4096
    """Size of the BPE vocabulary trained here (the model's embedding keeps Qwen's 151,936 rows)."""
    seed: int = 0
    """Seed of the weights, the tokenizer's training order, sampling and resets."""
    async_steps: int = 4
    """PPO steps of each of the sync and async rows (0: no async rows; else at least 2)."""
    decode_batches: str = "16,64"
    """Batch sizes of the decode rows (the policy's decode loop on left-padded prompts; empty: none)."""
    decode_tokens: int = 128
    """Tokens each decode row generates per prompt."""
    bandwidth_gbs: float = 4800.0
    """Memory bandwidth (GB/s) for the decode rows' bound: one read of the weights per step (H200: 4,800)."""

    def __post_init__(self) -> None:
        if self.tiny:
            self.episodes, self.group, self.turns, self.max_new_tokens = 4, 2, 2, 8
            self.async_steps = min(self.async_steps, 3)
            self.decode_batches, self.decode_tokens = "4", 8
        if self.async_steps == 1 or self.async_steps < 0:
            raise ValueError(f"--async-steps is 0 (no async rows) or at least 2 (got {self.async_steps})")
        if self.episodes % self.group:
            raise ValueError(f"episodes must be divisible by group (got {self.episodes} and {self.group})")


def scratch_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the embedded HotpotQA sample, with ChatML tokens and our tool template."""
    import json

    from tokenizers import ByteLevelBPETokenizer

    from agent_trainers.policies.loader import prepare_tokenizer

    data = json.loads(
        (Path(__file__).resolve().parents[1] / "agent_gym/data/hotpotqa_original_sample.json").read_text()
    )
    texts = [r["question"] for r in data] + [" ".join(s) for r in data for _, s in r["context"]]
    bpe = ByteLevelBPETokenizer()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe.train_from_iterator(texts * 2, vocab_size=vocab, special_tokens=specials, show_progress=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|im_end|>")
    return prepare_tokenizer(tok)


def build_model(args: Args, device: torch.device, vocab: int) -> Any:
    """The Qwen2.5-3B-shaped model (or its tiny sibling), randomly initialised on ``device`` (bf16 on a GPU)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape = TINY | {"vocab_size": vocab} if args.tiny else QWEN25_3B
    config = Qwen2Config(**shape, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    return model


class Peak:
    """Peak memory over a block: CUDA's allocator on a GPU, the process's max RSS on a CPU (never reset)."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self) -> Peak:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def gib(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated() / 2**30
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _rollout_config(args: Args) -> Any:
    from agent_trainers.rollout import RolloutConfig

    return RolloutConfig(max_turns=args.turns, max_new_tokens_per_turn=args.max_new_tokens,
                         max_total_tokens=args.max_total_tokens, temperature=1.0)  # fmt: skip


def rollout_row(args: Args, model: Any, tok: Any, device: torch.device) -> dict[str, Any]:
    """Engine tokens/s on ``episodes`` HotpotQA episodes."""
    from agent_trainers.policies import TransformersPolicy
    from agent_trainers.rollout import check_trajectory, rollout

    policy = TransformersPolicy(model, tok, batch_size=args.episodes, seed=args.seed)
    tasks = range(args.episodes // args.group)
    with Peak(device) as peak:
        start = time.perf_counter()
        trajs = rollout(policy, ENV_ID, task_indices=tasks, group_size=args.group, seed=args.seed,
                        config=_rollout_config(args))  # fmt: skip
        wall = time.perf_counter() - start
    for t in trajs:
        check_trajectory(t, tok)
    tokens = sum(sum(t.loss_mask) for t in trajs)
    turns = sum(len(t.turns) for t in trajs)
    longest = max(len(t.prompt_ids) + len(t.completion_ids) for t in trajs)
    note = f"{len(trajs)} episodes, {turns} turns, {tokens} model tokens, longest {longest} tokens"
    return {"row": "rollout", "seconds": wall, "rate": f"{tokens / wall:,.0f} tok/s", "peak": peak.gib(), "note": note}


def decode_rows(args: Args, model: Any, tok: Any, device: torch.device) -> list[dict[str, Any]]:
    """The decode loop at each batch size: tokens/s (sampling at T=1) and the fraction of the bandwidth bound (one
    read of the weights per step), beside bare ``model(...)`` calls over the same tokens."""
    from transformers import DynamicCache

    from agent_trainers.policies import SamplingParams, TransformersPolicy
    from agent_trainers.rollout.async_process import synchronize

    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bound_step_s = weight_bytes / (args.bandwidth_gbs * 1e9)
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    for batch in [int(b) for b in args.decode_batches.split(",") if b]:
        prompts = [torch.randint(10, len(tok), (256,), generator=gen).tolist() for _ in range(batch)]
        policy = TransformersPolicy(model, tok, batch_size=batch, seed=args.seed)
        params = SamplingParams(max_new_tokens=args.decode_tokens, temperature=1.0)
        policy.generate(prompts, SamplingParams(max_new_tokens=2))  # warm-up
        synchronize(device)
        start = time.perf_counter()
        gens = policy.generate(prompts, params)
        synchronize(device)
        wall = time.perf_counter() - start
        steps = max(len(g.token_ids) for g in gens)
        ids = torch.tensor(prompts, device=device)
        forced = torch.tensor([g.token_ids + [0] * (steps - len(g.token_ids)) for g in gens], device=device)
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            synchronize(device)
            start = time.perf_counter()
            past = DynamicCache(config=model.config)
            model(input_ids=ids, past_key_values=past, logits_to_keep=1)
            for col in range(steps - 1):
                model(input_ids=forced[:, col : col + 1], past_key_values=past, logits_to_keep=1)
            synchronize(device)
            bare = time.perf_counter() - start
        step_s = wall / steps
        note = (f"{steps} steps, {step_s * 1e3:.1f} ms/step, bound {bound_step_s * 1e3:.2f} ms/step "
                f"({bound_step_s / step_s:.1%} of it); bare forwards {bare:.2f} s, "
                f"engine/bare {wall / bare:.2f}x")  # fmt: skip
        rows.append({"row": f"decode batch {batch}", "seconds": wall, "rate": f"{batch * steps / wall:,.0f} tok/s",
                     "peak": 0.0, "note": note})  # fmt: skip
        print(f"[gpu_check] decode batch {batch}: {rows[-1]['rate']}, {note}", flush=True)
    return rows


def _timed_rollout_func(rows: list[dict[str, Any]], args: Args, **kwargs: Any) -> Any:
    """An :class:`EnvRolloutFunc` that adds up the time spent playing (``.play_s``)."""
    from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc

    class Timed(EnvRolloutFunc):
        play_s = 0.0

        def play(self, *a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return super().play(*a, **kw)
            finally:
                self.play_s += time.perf_counter() - start

    return Timed(rows, config=_rollout_config(args), seed=args.seed, batch_size=args.episodes, **kwargs)


def grpo_row(args: Args, model: Any, tok: Any, device: torch.device, out: Path) -> dict[str, Any]:
    """One AgentGRPOTrainer step: rollout, then TRL's loss, backward and optimizer step."""
    from datasets import Dataset

    from agent_trainers.algorithms import AgentGRPOTrainer, GRPOSettings, env_reward, make_grpo_config
    from agent_trainers.rollout.training import task_rows

    rows = task_rows(ENV_ID, range(args.episodes // args.group))
    fn = _timed_rollout_func(rows, args)
    config = make_grpo_config(
        device=device.type, output_dir=str(out / "grpo"), max_steps=1, per_device_train_batch_size=args.episodes,
        num_generations=args.group, max_completion_length=args.max_total_tokens, learning_rate=1e-6,
        gradient_checkpointing=not args.tiny, seed=args.seed, temperature=1.0,
    )  # fmt: skip
    trainer = AgentGRPOTrainer(model=model, reward_funcs=[env_reward], args=config, processing_class=tok,
                               train_dataset=Dataset.from_list(rows), rollout_func=fn, algorithm="grpo",
                               settings=GRPOSettings(advantage="turn"))  # fmt: skip
    with Peak(device) as peak:
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    del trainer
    return _step_row("grpo step (TRL)", wall, fn.play_s, peak.gib())


def _step_row(name: str, wall: float, play_s: float, peak: float) -> dict[str, Any]:
    note = f"rollout {play_s:.1f} s + update {wall - play_s:.1f} s"
    return {"row": name, "seconds": wall, "rate": f"{1 / wall:.3f} steps/s", "peak": peak, "note": note}


def ppo_available() -> bool:
    """This checkout has our PPO (``algorithm: ppo`` and its trainer module)."""
    from agent_trainers.algorithms import Algorithm

    has_enum = "ppo" in {a.value for a in Algorithm}
    return has_enum and importlib.util.find_spec("agent_trainers.algorithms.ppo") is not None


def ppo_row(args: Args, model: Any, tok: Any, device: torch.device, out: Path) -> dict[str, Any]:
    """One step of our PPO trainer (rollout, scoring, GAE, one epoch of updates) on the same batch size."""
    from agent_trainers.algorithms import PPOConfig, RLConfig
    from agent_trainers.algorithms.ppo import PPOTrainer
    from agent_trainers.rollout.training import task_rows

    rows = task_rows(ENV_ID, range(args.episodes // args.group))
    fn = _timed_rollout_func(rows, args)
    rl = RLConfig(steps=1, num_generations=args.group, prompts_per_step=args.episodes // args.group,
                  learning_rate=1e-6, save_steps=1)  # fmt: skip
    ppo = PPOConfig(update_epochs=1, num_minibatches=1, micro_batch_size=min(args.episodes, 4))
    trainer = PPOTrainer(model, tok, fn, rl, ppo, output_dir=out / "ppo", seed=args.seed, device=device.type)
    with Peak(device) as peak:
        start = time.perf_counter()
        trainer.step()  # rollout, scoring, GAE, update; train() would also write a checkpoint
        wall = time.perf_counter() - start
    del trainer
    return _step_row("ppo step (ours)", wall, fn.play_s, peak.gib())


def async_rows(args: Args, model: Any, tok: Any, device: torch.device, out: Path) -> list[dict[str, Any]]:
    """``async_steps`` PPO steps synchronous, then as many with ``rl.async_rollouts`` (staleness 1)."""
    from agent_trainers.algorithms import PPOConfig, RLConfig
    from agent_trainers.algorithms.ppo import PPOTrainer
    from agent_trainers.rollout.training import task_rows

    rows, rates = [], {}
    for overlap in (False, True):
        fn = _timed_rollout_func(task_rows(ENV_ID, range(args.episodes // args.group)), args)
        rl = RLConfig(steps=args.async_steps, num_generations=args.group, prompts_per_step=args.episodes // args.group,
                      learning_rate=1e-6, save_steps=args.async_steps, async_rollouts=overlap)  # fmt: skip
        ppo = PPOConfig(update_epochs=1, num_minibatches=1, micro_batch_size=min(args.episodes, 4))
        name = "ppo async" if overlap else "ppo sync"
        trainer = PPOTrainer(model, tok, fn, rl, ppo, output_dir=out / name.replace(" ", "_"), seed=args.seed,
                             device=device.type)  # fmt: skip
        walls, idle, stale = [], [], []
        with Peak(device) as peak:
            try:
                for _ in range(args.async_steps):  # step() by hand: train() would write a checkpoint
                    start = time.perf_counter()
                    metrics = trainer.step()
                    trainer.state.global_step += 1
                    walls.append(time.perf_counter() - start)
                    idle.append(metrics["time/rollout"])
                    stale.append(metrics.get("async/staleness", 0.0))
            finally:
                if trainer.rollout.asynchronous is not None:
                    trainer.rollout.asynchronous.close()
        wall, wait = sum(walls[1:]) / len(walls[1:]), sum(idle[1:]) / len(idle[1:])
        rates[overlap] = 1 / wall
        note = (f"trainer idle {wait:.2f} s/step in the rollout call (steps 2-{args.async_steps}; step 1 "
                f"{walls[0]:.1f} s), staleness {max(stale):.0f}")  # fmt: skip
        rows.append({"row": name, "seconds": wall, "rate": f"{1 / wall:.3f} steps/s", "peak": peak.gib(),
                     "note": note})  # fmt: skip
        print(f"[gpu_check] {name}: {wall:.2f} s/step, trainer idle {wait:.2f} s/step", flush=True)
        del trainer
        _free(device)
    rows[-1]["note"] += f"; {rates[True] / rates[False]:.2f}x the sync steps/s"
    return rows


def print_table(rows: list[dict[str, Any]], title: str) -> None:
    print(f"\n{title}")
    print(f"{'row':<17} {'seconds':>8} {'rate':>14} {'peak GiB':>9}  note")
    for r in rows:
        print(f"{r['row']:<17} {r['seconds']:>8.2f} {r['rate']:>14} {r['peak']:>9.2f}  {r['note']}")


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(args: Args) -> None:
    from agent_trainers.policies import resolve_device

    device = resolve_device(args.device)
    torch.set_num_threads(1 if device.type == "cpu" else torch.get_num_threads())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    tok = scratch_tokenizer(args.vocab)
    model = build_model(args, device, len(tok))
    params = sum(p.numel() for p in model.parameters()) / 1e9
    title = (f"gpu_check on {name}: {'tiny' if args.tiny else 'Qwen2.5-3B-shaped'} model, {params:.2f} B params, "
             f"{model.dtype}; {args.episodes} episodes x {args.turns} turns x {args.max_new_tokens} new tokens; "
             f"torch {torch.__version__}")  # fmt: skip
    rows = [rollout_row(args, model, tok, device)]
    print(f"[gpu_check] rollout: {rows[-1]['seconds']:.2f} s, {rows[-1]['rate']}", flush=True)
    rows.extend(decode_rows(args, model, tok, device))
    _free(device)
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(grpo_row(args, model, tok, device, Path(tmp)))
        print(f"[gpu_check] grpo step: {rows[-1]['seconds']:.2f} s", flush=True)
        _free(device)
        if ppo_available():
            rows.append(ppo_row(args, model, tok, device, Path(tmp)))
            print(f"[gpu_check] {rows[-1]['row']}: {rows[-1]['seconds']:.2f} s", flush=True)
            _free(device)
            if args.async_steps:
                rows.extend(async_rows(args, model, tok, device, Path(tmp)))
        else:
            print("PPO: not available in this checkout")
    print_table(rows, title)


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
