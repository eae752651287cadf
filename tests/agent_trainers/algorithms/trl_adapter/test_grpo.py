"""The TRL adapter: trajectories flow as data, advantages come from the registry, the loss-mask switch, real steps."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch
from datasets import Dataset
from trl import GRPOTrainer

from agent_gym.core.parsing import make_parser
from agent_trainers.algorithms import ESTIMATORS
from agent_trainers.algorithms.shared.batch import AgentBatch
from agent_trainers.algorithms.shared.names import ISCorrection
from agent_trainers.algorithms.trl_adapter.grpo import TRL_EOS_METRICS, AgentGRPOTrainer
from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc, env_reward
from agent_trainers.algorithms.trl_adapter.scoring import MicroBatchPolicy
from agent_trainers.algorithms.trl_adapter.trl_args import make_grpo_config
from agent_trainers.policies import FinishReason, Generation, tiny_random_model
from agent_trainers.rollout import RolloutConfig, task_rows, task_schedule
from tests.agent_trainers.conftest import advantages_of
from tests.conftest import CAPITALS, VARIED_REWARD_RUBRIC, LookupEnv

ENV_ID = "Test/GRPOLookup-v0"
env_parser = make_parser("tool_call")
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=3)


class ScriptedLookup:
    """Looks the capital up, then answers: correctly on even batch rows, wrongly on odd ones.

    With ``shout_odd_rows`` the odd rows look the country up in capitals: the env's reply is the same, the
    history before the answer is not.
    """

    def __init__(self, tokenizer, *, shout_odd_rows=False):
        self.tokenizer = tokenizer
        self.shout_odd_rows = shout_odd_rows

    def generate(self, prompts, params):
        return [
            self._turn(ids, right=self.answers_right(row), shout=self.shout_odd_rows and row % 2 == 1)
            for row, ids in enumerate(prompts)
        ]

    def answers_right(self, row):
        return row % 2 == 0

    def _turn(self, ids, *, right, shout=False):
        text = self.tokenizer.decode(ids)
        country = next(c for c in CAPITALS if f"capital of {c.country}?" in text)
        if f"The capital of {country.country} is" in text:
            action = f"<answer>{country.capital if right else 'Atlantis'}</answer>"
        else:
            name = country.country.upper() if shout else country.country
            action = env_parser.format_call("lookup", {"country": name})
        tokens = self.tokenizer(action, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return Generation(token_ids=tokens, logprobs=[-1.0] * len(tokens), finish_reason=FinishReason.STOP)


def scripted(model, tok, seed):
    return ScriptedLookup(tok)


def shouting(model, tok, seed):
    return ScriptedLookup(tok, shout_odd_rows=True)


def make_trainer(
    tmp_path,
    algorithm="grpo",
    advantage="turn",
    factory=None,
    *,
    beta=0.0,
    loss_mask=True,
    tokens=24,
    gamma=1.0,
    env_kwargs=None,
    steps=1,
    step_samples=False,
    args_overrides=None,
    **section,
):
    model, tok = tiny_random_model()
    rows = task_rows(ENV_ID, range(len(CAPITALS)))
    fn = EnvRolloutFunc(
        rows,
        env_kwargs=env_kwargs or {},
        config=RolloutConfig(max_new_tokens_per_turn=tokens, max_total_tokens=1024),
        policy_factory=factory,
        loss_mask=loss_mask,
    )
    args = make_grpo_config(**{
        "device": "cpu", "output_dir": str(tmp_path), "max_steps": steps, "per_device_train_batch_size": 4,
        "num_generations": 2, "learning_rate": 1e-2, "max_completion_length": 1024, "seed": 0, "beta": beta,
    } | (args_overrides or {}))  # fmt: skip
    return AgentGRPOTrainer(
        model=model, reward_funcs=[env_reward], args=args, processing_class=tok, train_dataset=Dataset.from_list(rows),
        rollout_func=fn, algorithm=algorithm, step_samples=step_samples,
        settings=section_of(algorithm, advantage=advantage, gamma=gamma, **section),
    )  # fmt: skip


def section_of(algorithm, **settings):
    """The algorithm's section with the given settings it has (rft has no advantage mode and no discount)."""
    section = ESTIMATORS[algorithm].settings
    return section(**{k: v for k, v in settings.items() if k in section.model_fields})


def inputs_for(trainer, tasks):
    rows = {r["task_index"]: r for r in trainer.rollout_func.rows}
    return [dict(rows[t]) for t in tasks for _ in range(trainer.num_generations)]


@pytest.mark.parametrize("algorithm", sorted(ESTIMATORS))
def test_advantages_come_from_the_registry_on_the_trajectories_trl_passed_in(tmp_path, algorithm):
    keep = {"threshold": 0.5} if algorithm == "rft" else {}  # rft: keep the right answers (reward 1)
    trainer = make_trainer(tmp_path, algorithm, "turn", scripted, **keep)
    trainer.model.train()
    inputs = inputs_for(trainer, [0, 1])
    out = trainer._generate_and_score_completions(inputs)
    trajs = [row["trajectory"] for row in inputs]  # TRL merged the rollout's fields into the rows
    assert [t.task_index for t in trajs] == [0, 0, 1, 1] and all(len(t.turns) == 2 for t in trajs)
    width = out["completion_ids"].shape[1]
    batch = AgentBatch.from_trajectories(trajs, group_size=2, width=width)
    expected = advantages_of(batch, algorithm, advantage="turn", **keep)
    assert out["advantages"].shape == out["completion_ids"].shape
    assert torch.equal(out["advantages"], expected)
    # the correct answerer (even row) beats the wrong one on the answer turn of the same task
    assert out["advantages"][0, trajs[0].turns[1].start] > out["advantages"][1, trajs[1].turns[1].start]
    assert not hasattr(trainer.rollout_func, "last_trajectories")


def test_the_logs_say_how_episodes_stopped_not_whether_they_ended_on_eos(tmp_path):
    trainer = make_trainer(tmp_path, "grpo", "turn", scripted)
    for training in (True, False):
        trainer.model.train(training)
        trainer._generate_and_score_completions(inputs_for(trainer, [0, 1]))
        logged = trainer._metrics["train" if training else "eval"]
        assert logged["rollout/stop/answer"] == [1.0] and logged["completions/mean_length"]
        assert not set(TRL_EOS_METRICS) & set(logged)


def _independent_logps(model, out, temperature=1.0):
    """The completion tokens' log-probs (logits over ``temperature``) from one plain forward pass over the whole
    padded rows."""
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    width = out["completion_ids"].shape[1]
    with torch.no_grad():
        positions = (attn.cumsum(dim=1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=positions).logits
        logp = torch.log_softmax(logits[:, -width - 1 : -1].float() / temperature, dim=-1)
    return logp.gather(-1, out["completion_ids"].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("algorithm", ["rloo", "reinforce_pp"])
def test_the_kl_penalty_and_gamma_reach_the_reinforce_family_advantages(tmp_path, one_thread, algorithm):
    """beta > 0: the per-token KL to the frozen start policy (sampling log-probs minus the reference's, on model
    tokens) enters the reward, and the per-turn gamma discounts; checked against an independent forward pass."""
    trainer = make_trainer(tmp_path, algorithm, "turn", scripted, beta=0.1, gamma=0.5)
    trainer.model.train()
    inputs = inputs_for(trainer, [0, 1])
    out = trainer._generate_and_score_completions(inputs)
    trajs = [row["trajectory"] for row in inputs]
    batch = AgentBatch.from_trajectories(trajs, group_size=2, width=out["completion_ids"].shape[1])
    ref = _independent_logps(trainer.model, out)  # the reference is the policy as RL starts: the untouched policy
    kl = (batch.behaviour_logprobs - ref) * batch.model_mask  # the scripted policy reports -1 per token
    assert kl[batch.model_mask].abs().min() > 0.5
    expected = advantages_of(batch, algorithm, advantage="turn", gamma=0.5, kl_coef=0.1, kl=kl)
    assert torch.allclose(out["advantages"], expected, atol=1e-4)
    for other in (
        advantages_of(batch, algorithm, advantage="turn", gamma=0.5),  # no KL
        advantages_of(batch, algorithm, advantage="turn", kl_coef=0.1, kl=kl),  # gamma 1
    ):
        assert not torch.allclose(out["advantages"], other, atol=1e-3)


def test_the_gigpo_settings_reach_its_advantages(tmp_path):
    """The step weight and the anchor: the odd rows look the country up in capitals, so before the answer they
    saw their group partner's observation (the env's reply) after another history."""
    trainer = make_trainer(tmp_path, "gigpo", "turn", shouting, step_weight=0.5, anchor="history")
    trainer.model.train()
    inputs = inputs_for(trainer, [0, 1])
    out = trainer._generate_and_score_completions(inputs)
    trajs = [row["trajectory"] for row in inputs]
    observed = AgentBatch.from_trajectories(trajs, group_size=2, width=out["completion_ids"].shape[1])
    history = AgentBatch.from_trajectories(trajs, group_size=2, width=out["completion_ids"].shape[1], anchor="history")
    assert observed.turn_states[0][1] == observed.turn_states[1][1]
    assert history.turn_states[0][1] != history.turn_states[1][1]
    assert torch.equal(out["advantages"], advantages_of(history, "gigpo", advantage="turn", step_weight=0.5))
    for other in (
        advantages_of(observed, "gigpo", advantage="turn", step_weight=0.5),  # the answer turns compared
        advantages_of(history, "gigpo", advantage="turn"),  # step weight 1
    ):
        assert not torch.allclose(out["advantages"], other, atol=1e-3)


def test_outcome_grpo_with_gamma_1_equals_trls_own_advantages(tmp_path):
    trainer = make_trainer(tmp_path, "grpo", "outcome", scripted)
    trainer.model.train()
    theirs = GRPOTrainer._generate_and_score_completions(trainer, inputs_for(trainer, [2, 3]))["advantages"]
    inputs = inputs_for(trainer, [2, 3])
    ours = trainer._generate_and_score_completions(inputs)
    assert theirs.shape == (4,) and theirs[0] > 0 > theirs[1]
    for b, traj in enumerate(row["trajectory"] for row in inputs):
        n = len(traj.completion_ids)
        assert torch.allclose(ours["advantages"][b, :n], theirs[b].expand(n), atol=1e-6)
        assert torch.all(ours["advantages"][b, n:] == 0)


@pytest.mark.parametrize("algorithm", sorted(ESTIMATORS))
def test_loss_mask_switch_changes_exactly_the_mask(tmp_path, algorithm):
    outs = {}
    for on in (True, False):
        trainer = make_trainer(tmp_path / str(on), algorithm, "turn", scripted, loss_mask=on)
        trainer.model.train()
        inputs = inputs_for(trainer, [1])
        outs[on] = (trainer._generate_and_score_completions(inputs), [r["trajectory"] for r in inputs])
    (masked, trajs), (unmasked, _) = outs[True], outs[False]
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages"):
        assert torch.equal(masked[key], unmasked[key]), key
    for b, t in enumerate(trajs):
        n = len(t.loss_mask)
        assert masked["tool_mask"][b, :n].tolist() == t.loss_mask and 0 in t.loss_mask
        assert unmasked["tool_mask"][b, :n].tolist() == [1] * n
    assert masked["num_items_in_batch"] == sum(sum(t.loss_mask) for t in trajs)
    assert unmasked["num_items_in_batch"] == sum(len(t.loss_mask) for t in trajs)


@pytest.mark.parametrize(
    ("algorithm", "beta"),
    [
        ("grpo", 0.0),
        ("grpo", 0.1),
        ("rloo", 0.0),
        ("reinforce_pp", 0.1),
        ("reinforce_pp_baseline", 0.0),
        ("gigpo", 0.0),
        ("rft", 0.0),
    ],
)
def test_a_real_step_updates_the_model(tmp_path, one_thread, algorithm, beta):
    trainer = make_trainer(  # the real TransformersPolicy
        tmp_path, algorithm, "turn", tokens=8, beta=beta, env_kwargs={"rubric": VARIED_REWARD_RUBRIC}
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 1
    changed = sum(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters(), strict=True))
    assert changed > 0
    logged = trainer.state.log_history[0]
    assert logged["rollout/turns"] >= 1
    if beta and algorithm == "grpo":  # KL in the loss: the reference is the policy as the step starts
        assert trainer.beta == beta and abs(logged["kl"]) < 1e-6
    elif beta:  # the reference is the initial policy, and the rollout's log-probs are the policy's: KL ~ 0
        assert trainer.args.beta == 0.0 and trainer.kl_coef == beta
        assert abs(logged["kl_reward/mean"]) < 1e-4


def test_the_rows_are_laid_out_in_the_order_the_steps_play_them(tmp_path):
    """Each step's tasks follow from the seed and the step (one permutation per epoch); TRL's sampler reads the rows
    in order, so its generation batches are the schedule's steps."""
    trainer = make_trainer(tmp_path, "grpo", "outcome", scripted, steps=5)  # 4 tasks, 2 a step: 2 steps an epoch
    tasks = [(ENV_ID, i) for i in range(len(CAPITALS))]
    assert trainer.task_schedule == task_schedule(tasks, 2, 5, seed=0) and len(CAPITALS) == 4
    first_epoch = trainer.task_schedule[0] + trainer.task_schedule[1]
    second_epoch = trainer.task_schedule[2] + trainer.task_schedule[3]
    assert len(set(first_epoch)) == len(set(second_epoch)) == 4 and first_epoch != second_epoch
    assert not trainer.args.shuffle_dataset
    rows = [(r["env_id"], r["task_index"]) for r in trainer.train_dataset]
    assert rows == [t for step in trainer.task_schedule for t in step]
    first = next(iter(trainer.get_train_dataloader()))  # a generation batch: each task's group of G rows
    assert [(r["env_id"], r["task_index"]) for r in first][::2] == trainer.task_schedule[0]
    assert trainer.upcoming_tasks(trainer.task_schedule[0], 2) == trainer.task_schedule[1:3]
    assert trainer.upcoming_tasks(trainer.task_schedule[1], 2) == []  # not where the schedule is: no guess


class AnswersCandlePrice:
    """Answers 26.74 at once: the price of 'candle' in SQLite-v0 task 0's shop, not in task 135's (same question)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.tokens = tokenizer("<answer>26.74</answer>", add_special_tokens=False)["input_ids"]
        self.tokens.append(tokenizer.eos_token_id)

    def generate(self, prompts, params):
        return [Generation(self.tokens, [-1.0] * len(self.tokens), FinishReason.STOP) for _ in prompts]


def test_tasks_that_share_a_prompt_are_played_as_the_rows_say(tmp_path):
    """SQLite-v0 tasks 0 and 135 ask the same question of two databases (answers 26.74 and 83.49): the prompt cannot
    tell them apart, so the trainer tells the rollout function which task each row is; without it, it refuses."""
    sql = "AgentR1/SQLite-v0"
    rows = task_rows(sql, [0, 135])
    assert rows[0]["prompt"] == rows[1]["prompt"]
    model, tok = tiny_random_model()
    fn = EnvRolloutFunc(rows, policy_factory=lambda m, t, seed: AnswersCandlePrice(t))
    assert fn.tasks == [(sql, 0), (sql, 135)]
    args = make_grpo_config(
        device="cpu", output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=256, seed=0,
    )  # fmt: skip
    trainer = AgentGRPOTrainer(
        model=model, reward_funcs=[env_reward], args=args, processing_class=tok, train_dataset=Dataset.from_list(rows),
        rollout_func=fn, algorithm="grpo", settings=section_of("grpo", advantage="outcome"),
    )  # fmt: skip
    trainer.model.train()
    for task, reward in [(0, 1.0), (135, 0.0)]:
        inputs = [dict(rows[0] if task == 0 else rows[1]) for _ in range(2)]
        trainer._generate_and_score_completions(inputs)
        trajs = [row["trajectory"] for row in inputs]
        assert [(t.task_index, t.total_reward) for t in trajs] == [(task, reward)] * 2
    assert trainer.tasks_in_generation is None  # set only while TRL generates
    with pytest.raises(ValueError, match="share one prompt"):
        fn([rows[0]["prompt"]] * 2, trainer)


def test_grpo_kl_reference_is_the_policy_as_rl_starts(tmp_path):
    trainer = make_trainer(tmp_path, "grpo", "outcome", scripted, beta=0.1)
    assert trainer.beta == 0.1 and trainer.kl_coef == 0.0 and (tmp_path / "reference" / "config.json").is_file()
    ref = dict(trainer.ref_model.named_parameters())
    for name, p in trainer.model.named_parameters():
        assert torch.equal(p, ref[name]), name


def _count_whole_row_passes(model):
    """Calls of the model's own forward (TRL's routine calls it; the loss's own routine runs its backbone and head)."""
    calls = []
    model.register_forward_hook(lambda module, args, output: calls.append(1))
    return calls


@pytest.mark.parametrize("step_samples", [False, True])
def test_grpo_scores_its_reference_once_the_way_the_loss_scores_the_policy(tmp_path, one_thread, step_samples):
    """beta > 0 in the loss: TRL's own reference pass (every padded row through the model and its head) is not run;
    the reference's log-probs are the loss-mask positions' (0 elsewhere), scored by the loss's routine (each
    group's prompt once, or each turn after its step prompt), and equal a plain forward pass's at the sampling
    temperature."""
    trainer = make_trainer(
        tmp_path, "grpo", "turn", scripted, beta=0.1, step_samples=step_samples, args_overrides={"temperature": 0.7}
    )
    trainer.model.train()
    whole = _count_whole_row_passes(trainer.ref_model)
    backbone = []
    trainer.ref_model.base_model.register_forward_hook(lambda module, args, output: backbone.append(1))
    out = trainer._generate_and_score_completions(inputs_for(trainer, [0, 1]))
    assert whole == [] and backbone and trainer.beta == 0.1
    scored = (out["completion_mask"] * out["tool_mask"]).bool()
    assert bool((~scored & out["completion_mask"].bool()).any())  # env tokens in the completions: not scored
    ref = out["ref_per_token_logps"]
    assert ref.shape == out["completion_ids"].shape and torch.all(ref[~scored] == 0)
    expected = _independent_logps(trainer.ref_model, out, temperature=0.7)
    assert torch.allclose(ref[scored], expected[scored], atol=1e-5) and expected[scored].abs().min() > 0


class AnswersWrong(ScriptedLookup):
    def answers_right(self, row):
        return False


def test_steps_without_signal_leave_the_policy_at_its_reference(tmp_path, one_thread):
    """Every answer wrong: every advantage is 0, so the loss is the KL term alone, and while the policy is its
    reference that term and its gradient are 0 when both are scored alike: two steps leave every weight where it
    was. (With TRL's reference pass the two scorings differ by float rounding, and Adam scales that gradient up to
    a step of about the learning rate, 1e-2 here: the weights moved by 6e-3 and the second step's KL was 7e-3.)"""
    trainer = make_trainer(tmp_path, "grpo", "turn", lambda m, t, s: AnswersWrong(t), beta=0.1, steps=2)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    moved = max(float((a - b.detach()).abs().max()) for a, b in zip(before, trainer.model.parameters(), strict=True))
    assert moved < 1e-6
    logged = [row for row in trainer.state.log_history if "kl" in row]
    assert len(logged) == 2 and all(row["kl"] < 1e-9 and row["reward"] == logged[0]["reward"] for row in logged)


def test_the_reference_keeps_trls_routine_where_the_loss_does(tmp_path, one_thread):
    """``cast_lm_head_to_fp32``: the loss goes through TRL's fused head, and so does the reference (every
    completion position); evaluation keeps TRL's own scoring too."""
    trainer = make_trainer(tmp_path, "grpo", "turn", scripted, beta=0.1, args_overrides={"cast_lm_head_to_fp32": True})
    trainer.model.train()
    whole = _count_whole_row_passes(trainer.ref_model)
    out = trainer._generate_and_score_completions(inputs_for(trainer, [0, 1]))
    assert whole == [1]  # one chunk of 4 rows, once
    live = out["completion_mask"].bool()
    expected = _independent_logps(trainer.ref_model, out)
    assert torch.allclose(out["ref_per_token_logps"][live], expected[live], atol=1e-5)
    trainer = make_trainer(tmp_path / "eval", "grpo", "turn", scripted, beta=0.1)
    trainer.model.eval()
    whole = _count_whole_row_passes(trainer.ref_model)
    trainer._generate_and_score_completions(inputs_for(trainer, [0, 1]))
    assert whole == [1]


def test_contract_and_clear_errors(tmp_path):
    trainer = make_trainer(tmp_path, "grpo", "outcome", scripted)
    rows = trainer.rollout_func.rows
    out = trainer.rollout_func([rows[3]["prompt"]] * 2, trainer)
    assert set(out) == {
        "prompt_ids", "completion_ids", "logprobs", "env_mask", "trajectory", "staleness", "rollout_stats"
    }  # fmt: skip
    assert out["staleness"] == 0 and "time/rollout" in out["rollout_stats"]
    for ids, mask, lps in zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True):
        assert len(ids) == len(mask) == len(lps) and 0 in mask and 1 in mask
    with pytest.raises(ValueError, match="not one group"):
        trainer.rollout_func([rows[0]["prompt"], rows[1]["prompt"]], trainer)
    with pytest.raises(KeyError, match="not in the rows"):
        trainer.rollout_func([[{"role": "user", "content": "?"}]] * 2, trainer)
    with pytest.raises(ValueError, match="needs the `trajectory` field"):
        env_reward(["x"])
    with pytest.raises(TypeError, match="needs an EnvRolloutFunc"):
        AgentGRPOTrainer(model=trainer.model, reward_funcs=[env_reward], args=trainer.args, rollout_func=None)


def test_loss_scored_on_the_loss_mask_equals_trls_fused_head(tmp_path, monkeypatch):
    """The trainer's own scoring (LM head on model tokens only) gives TRL's loss, gradients and entropy metric."""
    import agent_trainers.algorithms.trl_adapter.scoring as scoring

    results, real = [], scoring.shared_prompt_token_logprobs
    for ours in (True, False):
        trainer = make_trainer(tmp_path / str(ours), "grpo", "turn", scripted)
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop
        out = trainer._generate_and_score_completions(inputs_for(trainer, [0, 1]))
        assert 0 in out["tool_mask"] and 1 in out["tool_mask"]  # env tokens in the completions
        calls: list[torch.Tensor] = []
        monkeypatch.setattr(
            scoring, "shared_prompt_token_logprobs", lambda *a, c=calls, **k: c.append(a[4]) or real(*a, **k)
        )
        monkeypatch.setattr(scoring, "supports_scored_logprobs", lambda model, on=ours: on)
        loss = trainer.compute_loss(trainer.model, out)
        loss.backward()
        assert len(calls) == int(ours)
        if ours:  # only the model's tokens go through the LM head
            assert torch.equal(calls[0], out["completion_mask"] * out["tool_mask"])
        grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
        results.append((loss.detach(), grad, trainer._metrics["train"]["entropy"][-1]))
        if ours:
            # outside the loss (TRL's old/reference log-probs) TRL's own path is used again
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
            attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
            with torch.no_grad():
                trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, out["completion_ids"].shape[1])
            assert len(calls) == 1
            # without a tool mask (no env tokens to leave out) every completion token is scored
            with torch.no_grad():
                trainer.compute_loss(trainer.model, {k: v for k, v in out.items() if k != "tool_mask"})
            assert len(calls) == 2 and torch.equal(calls[1], out["completion_mask"])
    (loss_a, grad_a, ent_a), (loss_b, grad_b, ent_b) = results
    assert torch.allclose(loss_a, loss_b, atol=1e-6) and loss_a != 0
    assert torch.allclose(grad_a, grad_b, atol=1e-6) and ent_a == pytest.approx(ent_b, abs=1e-6)


def test_micro_batch_args_split_one_generation_into_accumulated_micro_batches():
    from agent_trainers.algorithms.trl_adapter.trl_args import micro_batch_args

    assert micro_batch_args(8, 2) == {
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 4,
        "steps_per_generation": 4,
    }
    with pytest.raises(ValueError, match=r"divide the rollouts per step \(got 3 and 8\)"):
        micro_batch_args(8, 3)


class TiesAfterFirstStep(ScriptedLookup):
    """As :class:`ScriptedLookup` (rewards vary within a group) until ``tie`` is set; then every row answers
    right, so every group ties and every advantage is 0."""

    tie = False

    def answers_right(self, row):
        return TiesAfterFirstStep.tie or super().answers_right(row)


def test_a_step_where_every_group_ties_moves_no_weight(tmp_path, one_thread):
    """Step 1 has signal and updates; step 2's groups all tie (every advantage 0): its update is dropped, so no
    weight moves (with the zero gradient left in, Adam's first moment would move every weight by ~lr)."""
    from transformers import TrainerCallback

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            if state.global_step == 1:
                self.after_first = [p.detach().clone() for p in model.parameters()]
                TiesAfterFirstStep.tie = True

    TiesAfterFirstStep.tie = False
    trainer = make_trainer(tmp_path, "grpo", "turn", lambda m, t, s: TiesAfterFirstStep(t), steps=2)
    snap = Snapshot()
    trainer.add_callback(snap)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    try:
        trainer.train()
    finally:
        TiesAfterFirstStep.tie = False
    assert trainer.state.global_step == 2
    first, second = (r for r in trainer.state.log_history if "update/skipped" in r)
    assert (first["update/skipped"], second["update/skipped"]) == (0.0, 1.0)
    assert first["groups/tied"] == 0.0 and second["groups/tied"] == 1.0
    assert (first["update/idle_micro_batches"], second["update/idle_micro_batches"]) == (0.0, 1.0)
    moved = sum(not torch.equal(a, b) for a, b in zip(before, snap.after_first, strict=True))
    assert moved > 0  # the first step updated
    after = list(trainer.model.parameters())
    assert all(torch.equal(a, b.detach()) for a, b in zip(snap.after_first, after, strict=True))
    assert "entropy" in first and "entropy" not in second  # the model never ran on step 2's batch


class RightOnFirstRowOnly(ScriptedLookup):
    """Answers right on the first row of each generation call only (one episode of a step's four is kept)."""

    def answers_right(self, row):
        return row == 0


def grad_forwards(model):
    """A list that grows by one at each forward pass through ``model``'s embeddings that builds a graph (training,
    not rollouts; the loss's scoring calls the body, not the model)."""
    calls = []

    def count(module, args, out):
        if torch.is_grad_enabled():
            calls.append(1)

    model.get_input_embeddings().register_forward_hook(count)
    return calls


def test_an_idle_micro_batch_skips_the_model_and_the_weights_are_bit_identical(tmp_path, one_thread):
    """RFT keeps one episode of four; micro-batches of 2 rows (2 accumulated a step): the one without the kept
    episode has every advantage 0, so the model does not run on it, and after 3 steps every weight equals, bit for
    bit, the weights of the same run that scores every micro-batch."""
    runs = {}
    for skip in (True, False):
        trainer = make_trainer(
            tmp_path / str(skip), "rft", factory=lambda m, t, s: RightOnFirstRowOnly(t), steps=3, threshold=0.5,
            args_overrides={"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2},
        )  # fmt: skip
        trainer.skip_idle_micro_batches = skip
        calls = grad_forwards(trainer.model)
        trainer.train()
        logged = [r for r in trainer.state.log_history if "update/skipped" in r]
        runs[skip] = ([p.detach().clone() for p in trainer.model.parameters()], len(calls), logged)
    (weights, forwards, logged), (weights_all, forwards_all, logged_all) = runs[True], runs[False]
    assert [r["update/idle_micro_batches"] for r in logged] == [1.0, 1.0, 1.0]
    assert [r["update/idle_micro_batches"] for r in logged_all] == [0.0, 0.0, 0.0]
    assert [r["update/skipped"] for r in logged] == [0.0, 0.0, 0.0]
    assert forwards_all == 2 * forwards > 0  # half the micro-batches ran
    assert all(torch.equal(a, b) for a, b in zip(weights, weights_all, strict=True))


def test_no_micro_batch_is_left_out_where_the_loss_has_a_kl_term(tmp_path, one_thread):
    """With TRL's KL term in the loss a zero-advantage micro-batch still has a gradient: it runs."""
    TiesAfterFirstStep.tie = True
    try:
        trainer = make_trainer(tmp_path, "grpo", "turn", lambda m, t, s: TiesAfterFirstStep(t), beta=0.1)
        calls = grad_forwards(trainer.model)
        trainer.train()
    finally:
        TiesAfterFirstStep.tie = False
    (logged,) = (r for r in trainer.state.log_history if "update/skipped" in r)
    assert logged["groups/tied"] == 1.0 and logged["update/idle_micro_batches"] == 0.0 and len(calls) > 0


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_mask"])
def test_a_stale_batch_s_loss_is_trls_loss_with_importance_weighted_advantages(tmp_path, one_thread, mode):
    """rl.async_rollouts: the trainer weighs a stale micro-batch's advantages by w = pi_train / pi_behaviour
    (bounded at 1.5), read after TRL scores the log-probs: the loss and gradients equal TRL's loss on
    advantages times w (computed here by hand), and differ from the unweighted loss."""
    trainer = make_trainer(tmp_path, "grpo", "turn", scripted)
    trainer.importance_sampling, trainer.importance_cap = ISCorrection(mode), 1.5
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    out = trainer._generate_and_score_completions(inputs_for(trainer, [0, 1]))
    assert "stale_rows" not in out  # generated by the current policy
    mask = out["completion_mask"] * out["tool_mask"]
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    policy = MicroBatchPolicy(
        trainer.model, dict(out), temperature=trainer.temperature, own_scoring=True,
        importance_sampling=ISCorrection.NONE, importance_cap=2.0, log_metric=lambda name, value: None,
    )  # fmt: skip
    with torch.no_grad():
        logps = policy(ids, attn).log_probs
    shift = 0.3 * ((torch.arange(logps.shape[1]) % 3) - 1).float().expand_as(logps) * mask  # log-ratios
    if mode == "sequence_mask":  # one row's sequence ratio within [1/1.5, 1.5], the others' outside
        shift = torch.zeros_like(logps)
        shift[0, mask[0].bool()] = 0.3 / int(mask[0].sum())  # product e^0.3 = 1.35
        shift[1:, :] = 0.6 * mask[1:] / mask[1:].sum(dim=1, keepdim=True)  # e^0.6 = 1.82: masked out
    stale = dict(out, stale_rows=torch.ones(len(logps), dtype=torch.bool), sampling_per_token_logps=logps - shift)
    if mode == "token_truncate":
        w = torch.where(mask.bool(), shift.exp().clamp(max=1.5), torch.ones_like(shift))
    else:
        w = torch.ones_like(shift)
        w[0, mask[0].bool()] = math.exp(0.3)
        w[1:][mask[1:].bool()] = 0.0
    losses, grads = [], []
    for inputs in (stale, dict(out, advantages=out["advantages"] * w), out):
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, inputs)
        loss.backward()
        losses.append(float(loss))
        grads.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]))
    assert losses[0] == pytest.approx(losses[1], abs=1e-6) and torch.allclose(grads[0], grads[1], atol=1e-6)
    assert losses[0] != pytest.approx(losses[2], abs=1e-4)
    assert torch.equal(stale["advantages"], out["advantages"])  # the batch's advantages are left as they were
    assert trainer._metrics["train"]["offpolicy/ratio_max"][-1] > 1.3
