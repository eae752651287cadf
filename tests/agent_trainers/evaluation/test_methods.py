"""Each evaluation method, played through the real env with a policy scripted from the prompt."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agent_gym.envs import _STOP_REASON
from agent_trainers.evaluation import EvalSpec, Method, MissingMetricError, baseline_answer, run_eval
from agent_trainers.evaluation.methods import CLOSED_BOOK_PROMPT, NAIVE_RAG_PROMPT
from agent_trainers.rollout import RolloutConfig
from tests.agent_trainers.evaluation.conftest import HOTPOT, TASKS, TEST_SPLIT, search_call
from tests.conftest import LookupEnv

GREEDY = RolloutConfig(max_turns=3, max_new_tokens_per_turn=48, max_total_tokens=2048, temperature=0.0)


def evaluate(policy, method, tmp_path, **kw):
    kw.setdefault("env_kwargs", dict(TEST_SPLIT))
    spec = EvalSpec(HOTPOT, Method(method), rollout=GREEDY, **kw)
    return run_eval(spec, policy, tmp_path / str(method), progress=False)


def mean(run, metric):
    return run.summary["metrics"][metric]["mean"]


def test_closed_book_sees_only_the_question_and_is_scored_by_the_env(scripted, tmp_path):
    # right on the bridge questions, wrong on the two comparison questions -> EM 6/8
    policy = scripted(lambda t, _: f"<answer>{t.answer if t.type == 'bridge' else 'no idea'}</answer>")
    run = evaluate(policy, "closed-book", tmp_path)
    assert policy.calls == [8]  # one batched generate call for all 8 questions
    assert all(CLOSED_BOOK_PROMPT in p and "Doc 1" not in p and "<tool_call>" not in p for p in policy.prompts)
    assert mean(run, "em") == pytest.approx(6 / 8) and run.summary["episodes"] == 8
    assert run.summary["by_type"]["bridge"]["em"]["mean"] == 1.0
    assert run.summary["by_type"]["comparison"]["em"]["mean"] == 0.0
    assert (mean(run, "turns"), mean(run, "tool_call_rate"), mean(run, "answer_rate")) == (1.0, 0.0, 1.0)
    assert mean(run, "evidence_recall") == 0.0  # nothing was retrieved: a real 0, the tasks do have gold evidence
    assert "format_error_rate" not in run.summary["metrics"]  # the harness, not the model, wrote the env action
    assert [r.answer for r in run.records][:2] == [TASKS[0].answer, TASKS[1].answer]


def expected_search(query: str, **env_kwargs):
    env = gym.make(HOTPOT, **TEST_SPLIT, **env_kwargs)
    env.reset(seed=0, options={"task_index": next(i for i, t in enumerate(TASKS) if t.question == query)})
    *_, info = env.step(search_call(query))
    return info["tool_calls"][0]["content"], info["evidence_found"] / info["evidence_total"]


@pytest.mark.parametrize("top_k", [1, 3])
def test_naive_rag_reads_the_envs_own_top_k_search_by_the_question(scripted, tmp_path, top_k):
    policy = scripted(lambda t, _: t.answer)  # a plain reply (no tags) is the answer
    run = evaluate(policy, "naive-rag", tmp_path, env_kwargs={**TEST_SPLIT, "top_k": top_k})
    assert mean(run, "em") == 1.0 and mean(run, "tool_call_rate") == 0.0 and mean(run, "turns") == 1.0
    for task, record in zip(TASKS, run.records, strict=True):
        prompt = next(p for p in policy.prompts if task.question in p)
        passages, recall = expected_search(task.question, top_k=top_k)
        assert NAIVE_RAG_PROMPT in prompt and passages in prompt
        assert ("Doc 2" in prompt) == (top_k > 1)
        assert record.evidence_recall == pytest.approx(recall)


def test_naive_rag_needs_a_search_tool(scripted, tmp_path):
    spec = EvalSpec("AgentR1/Calculator-v0", Method.NAIVE_RAG, limit=1)
    with pytest.raises(ValueError, match="needs an env with a `search` tool"):
        run_eval(spec, scripted(lambda t, _: ""), tmp_path, progress=False)


def agent_script(task, prompt):
    """Search with the question, then answer (the gold answer on even task ids)."""
    if "<tool_response>" not in prompt and "Doc 1" not in prompt:
        return search_call(task.question)
    return f"<answer>{task.answer if int(task.id[-1]) % 2 == 0 else 'wrong'}</answer>"


@pytest.mark.parametrize("method", ["base-tool-call", "agent"])
def test_tool_methods_play_the_envs_episode_batched_per_turn(scripted, tmp_path, method):
    policy = scripted(agent_script)
    run = evaluate(policy, method, tmp_path)
    assert policy.calls == [8, 8]  # turn 1 of all 8 episodes in one call, then turn 2
    assert mean(run, "em") == pytest.approx(4 / 8)  # ids end in 4, 6, 8, 0 -> right
    assert (mean(run, "tool_call_rate"), mean(run, "tool_calls"), mean(run, "turns")) == (1.0, 1.0, 2.0)
    assert mean(run, "format_error_rate") == 0.0
    recalls = [expected_search(t.question)[1] for t in TASKS]
    assert [r.evidence_recall for r in run.records] == pytest.approx(recalls)
    assert run.records[0].trajectory["loss_mask"].count(0) > 0  # env tokens are in the trajectory, masked


def test_format_errors_and_unanswered_episodes(scripted, tmp_path):
    # turn 1 malformed, turn 2 answers on the bridge questions; the comparison questions never answer
    def script(task, prompt):
        if "Format error" not in prompt:
            return "let me think"
        return f"<answer>{task.answer}</answer>" if task.type == "bridge" else "still thinking"

    run = evaluate(scripted(script), "agent", tmp_path)
    by_type = {t: [r for r in run.records if r.question_type == t] for t in ("bridge", "comparison")}
    assert all(r.format_errors == 1 and r.model_turns == 2 and r.answered for r in by_type["bridge"])
    assert all(r.format_errors == 3 and not r.answered and r.stop_reason == "max_turns" for r in by_type["comparison"])
    assert all(r.scores == {"em": 0.0, "f1": 0.0, "substring": 0.0} for r in by_type["comparison"])
    assert mean(run, "format_error_rate") == pytest.approx((6 * 0.5 + 2 * 1.0) / 8)
    assert mean(run, "answer_rate") == pytest.approx(6 / 8) and mean(run, "em") == pytest.approx(6 / 8)
    assert mean(run, "evidence_recall") == 0.0


def test_a_reply_without_an_action_ends_the_episode_unanswered_with_on_no_action_end(scripted, tmp_path):
    # the same script as above; with on_no_action="end" the first (plain) reply ends every episode
    def script(task, prompt):
        return "let me think" if "Format error" not in prompt else f"<answer>{task.answer}</answer>"

    run = evaluate(scripted(script), "agent", tmp_path, env_kwargs={**TEST_SPLIT, "on_no_action": "end"})
    assert all(r.stop_reason == "no_action" and not r.answered and r.answer is None for r in run.records)
    assert all(r.model_turns == 1 and r.format_errors == 1 for r in run.records)
    assert all(r.scores == {"em": 0.0, "f1": 0.0, "substring": 0.0} for r in run.records)  # wrong, not missing
    assert (mean(run, "answer_rate"), mean(run, "em"), mean(run, "format_error_rate")) == (0.0, 0.0, 1.0)


class RenamedMetricEnv(LookupEnv):
    """Reports ``answer_exact`` instead of ``answer_em``."""

    def _episode_metrics(self, state):
        metrics = super()._episode_metrics(state)
        metrics["answer_exact"] = metrics.pop("answer_em")
        return metrics


if "Test/EvalRenamed-v0" not in gym.registry:
    gym.register("Test/EvalRenamed-v0", entry_point=RenamedMetricEnv, max_episode_steps=3,
                 additional_wrappers=(_STOP_REASON,))  # fmt: skip


@pytest.mark.parametrize("method", ["closed-book", "agent"])
def test_a_renamed_metric_fails_loudly(smollm2_tokenizer, tmp_path, method):
    from agent_trainers.policies import ScriptedPolicy

    policy = ScriptedPolicy(smollm2_tokenizer, lambda _ids: "<answer>Paris</answer>")
    spec = EvalSpec("Test/EvalRenamed-v0", Method(method), limit=1)
    with pytest.raises(MissingMetricError, match="lack 'answer_em'"):
        run_eval(spec, policy, tmp_path, progress=False)


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("Paris", "Paris"),
        ("  The answer is <answer> Paris </answer> surely", "Paris"),
        ("<answer>Rome</answer> no wait <answer>Paris</answer>", "Paris"),
        ("<answer>Paris", "Paris"),  # cut at the stop string budget: the open tag is enough
        ("Paris</answer>", "Paris"),
        ("", ""),
    ],
)
def test_baseline_answer(reply, answer):
    assert baseline_answer(reply) == answer


def test_question_only_data_has_no_evidence_recall_at_all(scripted, tmp_path):
    """Open retrieval over a corpus, questions without gold paragraphs: recall is absent, never 0.0."""
    import json as _json

    questions = [{"question": t.question, "answer": t.answer} for t in TASKS]
    (tmp_path / "qa.jsonl").write_text("".join(_json.dumps(q) + "\n" for q in questions))
    passages = {p.id: p for t in TASKS for p in t.paragraphs}
    corpus = [{"id": p.id, "contents": f'"{p.title}"\n{p.text}'} for p in passages.values()]
    (tmp_path / "corpus.jsonl").write_text("".join(_json.dumps(c) + "\n" for c in corpus))
    kwargs = {"data_path": str(tmp_path / "qa.jsonl"), "corpus": str(tmp_path / "corpus.jsonl")}
    for method in ("naive-rag", "agent"):
        run = evaluate(scripted(agent_script if method == "agent" else lambda t, _: t.answer), method, tmp_path,
                       env_kwargs=kwargs)  # fmt: skip
        assert all(r.evidence_recall is None for r in run.records)
        assert "evidence_recall" not in run.summary["metrics"] and mean(run, "f1") > 0
