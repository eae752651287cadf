"""The rollout engine: groups, seeds, budgets, concurrency, time-outs, errors, text mode."""

from __future__ import annotations

import json
import time

import gymnasium as gym
import pytest

from agent_gym.envs import _STOP_REASON
from agent_trainers.policies import Generation, ScriptedPolicy
from agent_trainers.rollout import RolloutConfig, check_trajectory, rollout, run_with_timeouts
from tests.agent_trainers.conftest import LOOKUP_ID, SLOW_LOOKUP_ID
from tests.conftest import LookupEnv

CALL = '<tool_call>\n{"name": "lookup", "arguments": {"country": "France"}}\n</tool_call>'


class BrokenEnv(LookupEnv):
    def step(self, action):
        raise RuntimeError("database went away")


if "Test/Broken-v0" not in gym.registry:
    gym.register("Test/Broken-v0", entry_point=BrokenEnv, max_episode_steps=4, additional_wrappers=(_STOP_REASON,))


def answer_for(tok):
    """A scripted policy that reads the country off the prompt and answers with its lookup."""
    capitals = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Peru": "Lima"}

    def respond(ids):
        text = tok.decode(ids)
        country = next(c for c in capitals if f"capital of {c}?" in text)
        return f"<answer>{capitals[country]}</answer>"

    return ScriptedPolicy(tok, respond)


def test_groups_are_ordered_and_seeded(smollm2_tokenizer):
    trajs = rollout(answer_for(smollm2_tokenizer), LOOKUP_ID, task_indices=[2, 0], group_size=3, seed=10)
    assert [(t.task_index, t.group_id) for t in trajs] == [(2, 0)] * 3 + [(0, 1)] * 3
    assert [t.seed for t in trajs] == [10, 11, 12, 13, 14, 15]
    assert [t.task_id for t in trajs] == ["q2"] * 3 + ["q0"] * 3
    same = rollout(
        answer_for(smollm2_tokenizer),
        LOOKUP_ID,
        task_indices=[2, 0],
        group_size=3,
        seed=10,
        config=RolloutConfig(same_noise_in_group=True),
    )
    assert [t.seed for t in same] == [10, 10, 10, 11, 11, 11]
    for t in trajs:
        assert t.terminated and not t.truncated and t.stop_reason == "answer"
        assert t.metrics["answer_em"] == 1.0 and t.total_reward == sum(t.turn_rewards)
        check_trajectory(t, smollm2_tokenizer)


def test_two_turn_episode_records_rewards_and_env_tokens(smollm2_tokenizer):
    (t,) = rollout(ScriptedPolicy(smollm2_tokenizer, [CALL, "<answer>Paris</answer>"]), LOOKUP_ID, task_indices=[0])
    assert len(t.turns) == 2 and t.stop_reason == "answer"
    first, second = t.turns
    assert first.reward_terms and first.reward == pytest.approx(sum(first.reward_terms.values()))
    env_text = smollm2_tokenizer.decode(t.completion_ids[first.end : first.env_end])
    # the model stopped on "</tool_call>", so closing its turn is env text
    assert (
        env_text == "<|im_end|>\n<|im_start|>tool\nThe capital of France is Paris.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert second.env_end == len(t.completion_ids)
    assert sum(t.loss_mask) == (first.end - first.start) + (second.end - second.start)


def test_on_no_action_end_ends_the_episode_unanswered(smollm2_tokenizer):
    from agent_trainers.algorithms.trl_adapter.rollout_func import episode_metrics

    plain = ScriptedPolicy(smollm2_tokenizer, lambda _ids: "I am not sure.")
    [t] = rollout(plain, LOOKUP_ID, task_indices=[0], env_kwargs={"on_no_action": "end"})
    assert t.terminated and not t.truncated and not t.answered and t.stop_reason == "no_action"
    assert len(t.turns) == 1 and t.turns[0].reward == pytest.approx(-0.11)  # format -0.1, step cost -0.01
    assert t.metrics == {"turns": 1.0, "malformed_actions": 1.0, "evidence_recall": 0.0}
    assert t.messages[-1] == {"role": "assistant", "content": "I am not sure."}  # no error observation after it
    check_trajectory(t, smollm2_tokenizer)
    assert episode_metrics([t])["rollout/answered"] == 0.0 and episode_metrics([t])["rollout/stop/no_action"] == 1.0
    [d] = rollout(plain, LOOKUP_ID, task_indices=[0])  # the default: an error observation, the turn limit (4)
    assert not d.terminated and d.truncated and d.stop_reason == "max_turns" and len(d.turns) == 4
    answered = rollout(answer_for(smollm2_tokenizer), LOOKUP_ID, task_indices=[0], env_kwargs={"on_no_action": "end"})
    assert answered[0].answered and answered[0].stop_reason == "answer"


def test_model_emitted_end_of_turn_is_a_model_token(smollm2_tokenizer):
    (t,) = rollout(
        ScriptedPolicy(smollm2_tokenizer, ["I am not sure.", "<answer>x</answer>"]), LOOKUP_ID, task_indices=[0]
    )
    first = t.turns[0]
    assert smollm2_tokenizer.decode(t.completion_ids[first.start : first.end]) == "I am not sure.<|im_end|>"
    assert smollm2_tokenizer.decode(t.completion_ids[first.end : first.env_end]).startswith(
        "\n<|im_start|>user\nFormat error"
    )
    assert t.messages[2]["content"] == "I am not sure."
    check_trajectory(t, smollm2_tokenizer)


def test_generation_is_cut_at_the_stop_string(smollm2_tokenizer):
    (t,) = rollout(
        ScriptedPolicy(smollm2_tokenizer, [CALL + " and more text", "<answer>x</answer>"]), LOOKUP_ID, task_indices=[0]
    )
    model_text = smollm2_tokenizer.decode(t.completion_ids[t.turns[0].start : t.turns[0].end])
    assert model_text == CALL
    assert t.messages[2]["content"] == CALL


def test_token_budget_ends_the_episode(smollm2_tokenizer):
    policy = ScriptedPolicy(smollm2_tokenizer, [CALL] * 10)
    (t,) = rollout(policy, LOOKUP_ID, task_indices=[0], config=RolloutConfig(max_total_tokens=330, max_turns=10))
    assert t.stop_reason == "token_budget" and t.truncated and not t.terminated and t.metrics == {}
    assert len(t.prompt_ids) + len(t.completion_ids) <= 330
    check_trajectory(t, smollm2_tokenizer)


def test_max_turns_overrides_the_registered_limit(smollm2_tokenizer):
    policy = ScriptedPolicy(smollm2_tokenizer, [CALL] * 10)
    (t,) = rollout(policy, LOOKUP_ID, task_indices=[0], config=RolloutConfig(max_turns=2))
    assert len(t.turns) == 2 and t.stop_reason == "max_turns" and t.truncated
    check_trajectory(t, smollm2_tokenizer)


def test_tool_steps_overlap(smollm2_tokenizer):
    latency, n = 0.4, 6
    start = time.perf_counter()
    trajs = rollout(
        answer_for(smollm2_tokenizer),
        SLOW_LOOKUP_ID,
        task_indices=[0, 1, 2],
        env_kwargs={"latency_s": latency},
        group_size=2,
        config=RolloutConfig(tool_workers=n),
    )
    wall = time.perf_counter() - start
    assert all(t.stop_reason == "answer" for t in trajs)
    assert wall < n * latency / 2, f"{n} steps of {latency} s took {wall:.2f} s: not concurrent"


def test_slow_tool_times_out_without_hanging(smollm2_tokenizer):
    start = time.perf_counter()
    trajs = rollout(
        answer_for(smollm2_tokenizer),
        SLOW_LOOKUP_ID,
        task_indices=[0, 1],
        env_kwargs={"latency_s": 5.0},
        config=RolloutConfig(tool_timeout_s=0.2),
    )
    assert time.perf_counter() - start < 3.0
    for t in trajs:
        assert (t.stop_reason, t.truncated, t.terminated) == ("tool_timeout", True, False)
        assert "longer than 0.2 s" in t.error and t.turns[0].reward == 0.0
        check_trajectory(t, smollm2_tokenizer)


def test_env_errors_end_only_that_episode(smollm2_tokenizer):
    (t,) = rollout(answer_for(smollm2_tokenizer), "Test/Broken-v0", task_indices=[0])
    assert t.stop_reason == "env_error" and t.truncated and "database went away" in t.error
    check_trajectory(t, smollm2_tokenizer)


def test_run_with_timeouts_respects_worker_count():
    out = run_with_timeouts(
        [lambda: time.sleep(0.2) or 1, lambda: 1 / 0, lambda: time.sleep(3)], workers=3, timeout_s=0.5
    )
    assert out[0] == ("ok", 1) and out[1][0] == "error" and isinstance(out[1][1], ZeroDivisionError)
    assert out[2] == ("timeout", None)


class EchoChatPolicy:
    """A text-only policy (like OpenAIPolicy): sees messages, returns text."""

    tokenizer = None

    def __init__(self):
        self.seen = []

    def generate_chat(self, conversations, params):
        self.seen.append([len(c) for c in conversations])
        return [Generation([], [], "stop", text="<answer>Paris</answer>") for _ in conversations]


def test_text_mode_plays_messages_without_tokens(smollm2_tokenizer):
    policy = EchoChatPolicy()
    trajs = rollout(policy, LOOKUP_ID, task_indices=[0, 1])
    assert policy.seen == [[2, 2]]
    assert [t.metrics["answer_em"] for t in trajs] == [1.0, 0.0]
    for t in trajs:
        assert (
            t.completion_ids == t.loss_mask == t.logprobs == []
            and t.messages[-1]["content"] == "<answer>Paris</answer>"
        )
        check_trajectory(t, smollm2_tokenizer)


def test_bad_config_is_refused(smollm2_tokenizer):
    with pytest.raises(ValueError, match="group_size must be >= 1"):
        rollout(answer_for(smollm2_tokenizer), LOOKUP_ID, task_indices=[0], group_size=0)
    with pytest.raises(ValueError, match="max_total_tokens must exceed max_new_tokens_per_turn"):
        RolloutConfig(max_new_tokens_per_turn=64, max_total_tokens=32)
    with pytest.raises(ValueError, match="Input should be a valid integer"):
        RolloutConfig(max_turns="two")
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        RolloutConfig(top_p=0.0)


def test_tool_schemas_reach_the_template_when_asked(smollm2_tokenizer):
    (t,) = rollout(answer_for(smollm2_tokenizer), LOOKUP_ID, task_indices=[0], config=RolloutConfig(render_tools=True))
    prompt = smollm2_tokenizer.decode(t.prompt_ids)
    assert t.tools and "# Tools" in prompt
    assert prompt.count(json.dumps(t.tools[0])) == 2  # once by the env's instructions, once by the template
    check_trajectory(t, smollm2_tokenizer)


def test_on_episode_end_reports_each_episode_once_in_finishing_order(smollm2_tokenizer):
    finished = []
    policy = ScriptedPolicy(smollm2_tokenizer, ["<answer>x</answer>", CALL, "<answer>Paris</answer>"])
    trajs = rollout(policy, LOOKUP_ID, task_indices=[1, 0], on_episode_end=finished.append)
    assert [t.task_index for t in finished] == [1, 0]  # task 1 answered at once, task 0 after a lookup
    assert [id(t) for t in finished] == [id(trajs[0]), id(trajs[1])]


def test_env_tokens_that_overrun_the_budget_end_the_episode_unless_it_is_over(smollm2_tokenizer):
    def play(budget):
        policy = ScriptedPolicy(smollm2_tokenizer, [CALL, "<answer>Paris</answer>"])
        (t,) = rollout(policy, LOOKUP_ID, task_indices=[0], config=RolloutConfig(max_total_tokens=budget))
        return t

    full = play(4096)
    p, first, second = len(full.prompt_ids), full.turns[0], full.turns[1]
    assert full.stop_reason == "answer" and second.env_end > second.end  # the template closes the answer turn
    # the first turn's env tokens fit exactly: kept; then no room is left for another turn
    t = play(p + first.env_end)
    assert t.completion_ids == full.completion_ids[: first.env_end] and t.turns[0].env_end == first.env_end
    assert t.stop_reason == "token_budget" and t.truncated and len(t.turns) == 1
    # one token short: the env's tokens are dropped, the step's reward is kept, the episode ends there
    t = play(p + first.env_end - 1)
    assert t.completion_ids == full.completion_ids[: first.end] and t.loss_mask == [1] * first.end
    assert (t.stop_reason, t.truncated, t.terminated, len(t.turns)) == ("token_budget", True, False, 1)
    assert t.turns[0].env_end == first.end and t.turns[0].reward == full.turns[0].reward
    check_trajectory(t, smollm2_tokenizer)
    # the answer's closing tokens do not fit, but the answer ended the episode anyway
    t = play(p + second.end)
    assert (t.stop_reason, t.terminated, t.truncated) == ("answer", True, False)
    assert t.completion_ids == full.completion_ids[: second.end] and t.turns[1].env_end == second.end


def test_a_model_turn_the_env_never_saw_is_kept_as_its_content(smollm2_tokenizer):
    (t,) = rollout(ScriptedPolicy(smollm2_tokenizer, ["I am not sure."]), "Test/Broken-v0", task_indices=[0])
    assert t.stop_reason == "env_error" and t.messages[-1] == {"role": "assistant", "content": "I am not sure."}


def test_each_episode_records_its_task_type_from_the_reset_info(smollm2_tokenizer):
    env = gym.make("AgentR1/Calculator-v0")
    want = [env.unwrapped.load_task(i).template for i in range(3)]
    assert len(set(want)) > 1  # the first tasks are of different kinds
    answer = ScriptedPolicy(smollm2_tokenizer, lambda _ids: "<answer>0</answer>")
    out = rollout(answer, "AgentR1/Calculator-v0", task_indices=[0, 1, 2])
    assert [t.task_type for t in out] == want
    [lookup] = rollout(answer, LOOKUP_ID, task_indices=[0])
    assert lookup.task_type is None  # its tasks name no type
