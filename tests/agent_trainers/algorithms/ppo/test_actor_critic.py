"""The actor-critic: chunked log-probs equal the full-logits ones (values and gradients), never keep a batch of
logits for backward, match the rollout's sampling log-probs under left padding; value head vs separate critic."""

from __future__ import annotations

import pytest
import torch

from agent_trainers.algorithms.ppo.actor_critic import ActorCritic, pack_sequences
from agent_trainers.algorithms.shared.logprobs import chunked_logprobs
from agent_trainers.policies import SamplingParams, TransformersPolicy, tiny_random_model

PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [9, 10, 11]]
COMPLETIONS = [[20, 21, 22], [30, 31, 32, 33, 34], [40]]


def full_logprobs(model, batch, temperature):
    """The reference computation: the whole (B, L, V) logits tensor."""
    logits = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
    ).logits
    p, t = batch.prompt_width, batch.valid.shape[1]
    logp = torch.log_softmax(logits[:, p - 1 : p - 1 + t].float() / temperature, dim=-1)
    return logp.gather(-1, batch.input_ids[:, p : p + t].unsqueeze(-1)).squeeze(-1) * batch.valid


def test_pack_sequences_left_pads_prompts_right_pads_completions():
    b = pack_sequences(PROMPTS, COMPLETIONS, pad_id=0)
    assert b.prompt_width == 5 and b.valid.shape == (3, 5)
    assert b.input_ids[1].tolist() == [0, 0, 0, 7, 8, 30, 31, 32, 33, 34]
    assert b.attention_mask[2].tolist() == [0, 0, 1, 1, 1, 1, 0, 0, 0, 0]
    assert b.position_ids[1].tolist()[3:] == [0, 1, 2, 3, 4, 5, 6]  # positions count real tokens only
    assert b.valid.sum(1).tolist() == [3, 5, 1]
    with pytest.raises(ValueError, match="at least one token"):
        pack_sequences([[]], [[1]], pad_id=0)


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_chunked_logprobs_equal_full_logits_in_value_and_gradient(one_thread, chunk):
    model, _ = tiny_random_model(seed=1)
    batch = pack_sequences(PROMPTS, COMPLETIONS, pad_id=0)
    ac = ActorCritic(model, "value_head", chunk=chunk)
    logp, values, _ = ac(**batch.model_inputs(), temperature=0.7)
    expected = full_logprobs(model, batch, 0.7)
    assert torch.allclose(logp, expected, atol=1e-5)
    weight = torch.randn_like(logp)
    grad = torch.autograd.grad((logp * weight).sum(), model.lm_head.weight)[0]
    grad_full = torch.autograd.grad((expected * weight).sum(), model.lm_head.weight)[0]
    assert (grad - grad_full).abs().max() < 1e-4 * grad_full.abs().max(), (grad - grad_full).abs().max()
    assert values is not None and torch.equal(values, torch.zeros_like(values))  # zero-initialised head


def test_no_block_of_logits_is_kept_for_backward(one_thread):
    """Checkpointed chunks save only their inputs: nothing of vocabulary size survives the forward pass."""
    model, _ = tiny_random_model(seed=1)
    vocab = model.config.vocab_size
    hidden = torch.randn(40, model.config.hidden_size, requires_grad=True)
    targets = torch.randint(0, vocab, (40,))
    saved: list[int] = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp, _ = chunked_logprobs(hidden, targets, model.lm_head, temperature=1.0, chunk=8)
    assert max(saved) < 8 * vocab  # an unchecked chunk would save its 8 x vocab logits (and their softmax)
    lp.sum().backward()
    assert hidden.grad is not None and hidden.grad.abs().sum() > 0


def test_scores_match_the_rollout_behaviour_logprobs_under_left_padding(one_thread, smollm2_tokenizer):
    model, tok = tiny_random_model(smollm2_tokenizer, seed=2)
    policy = TransformersPolicy(model, tok, seed=3)
    gens = policy.generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=0.7))
    batch = pack_sequences(PROMPTS, [g.token_ids for g in gens], pad_id=tok.pad_token_id)
    with torch.no_grad():
        logp, _, _ = ActorCritic(model, chunk=4)(**batch.model_inputs(), temperature=0.7)
    for row, gen in enumerate(gens):
        assert torch.allclose(logp[row, : len(gen.token_ids)], torch.tensor(gen.logprobs), atol=1e-5)


def test_scored_mask_limits_logits_to_the_tokens_asked_for(one_thread):
    model, _ = tiny_random_model(seed=1)
    batch = pack_sequences(PROMPTS, COMPLETIONS, pad_id=0)
    scored = batch.valid.clone()
    scored[1, 1:3] = False
    logp, _, _ = ActorCritic(model)(**batch.model_inputs(), temperature=1.0, scored=scored)
    full = full_logprobs(model, batch, 1.0)
    assert torch.equal(logp[1, 1:3], torch.zeros(2))
    assert torch.allclose(logp[scored], full[scored], atol=1e-5)


def test_value_head_reads_the_state_before_each_token_and_the_separate_critic_has_its_own_weights(one_thread):
    model, _ = tiny_random_model(seed=1)
    batch = pack_sequences(PROMPTS, COMPLETIONS, pad_id=0)
    shared = ActorCritic(model, "value_head")
    torch.nn.init.normal_(shared.value_head.weight)
    _, values, _ = shared(**batch.model_inputs(), temperature=1.0)
    hidden = model.model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
    ).last_hidden_state
    p = batch.prompt_width
    expected = shared.value_head(hidden[:, p - 1 : p + 4]).squeeze(-1) * batch.valid
    assert torch.allclose(values, expected, atol=1e-5)
    separate = ActorCritic(model, "separate")  # a copy of the policy's backbone, so the same states
    separate.value_head.load_state_dict(shared.value_head.state_dict())
    _, critic_values, _ = separate(**batch.model_inputs(), temperature=1.0)
    assert torch.allclose(critic_values, expected, atol=1e-5)
    policy_params = {id(q) for q in model.parameters()}
    assert separate.critic is not None and not policy_params & {id(q) for q in separate.critic.parameters()}
    assert len(list(separate.parameters())) > len(list(shared.parameters()))


def test_models_that_transform_their_logits_are_refused():
    model, _ = tiny_random_model(seed=1)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        ActorCritic(model)
