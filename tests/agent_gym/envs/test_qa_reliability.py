"""QA envs: retrieval noise is reported, bad arguments fail at construction, the reward range is exact and reached."""

import gymnasium as gym
import pytest

from agent_gym.envs.qa import MultiHopQAEnv


def _search_once(noise: dict, seed: int = 0) -> dict:
    env = gym.make("AgentR1/HotpotQA-v0", tool_noise={"retrieval": noise})
    env.reset(seed=seed, options={"task_index": 0})
    question = env.unwrapped.state.task.question  # matches several of the question's 10 paragraphs
    return env.step(env.unwrapped.parser.format_call("search", {"query": question}))[4]


@pytest.mark.parametrize(
    ("noise", "events"),
    [
        ({"drop_prob": 1.0}, ["drop"]),
        ({"shuffle_prob": 1.0}, ["shuffle"]),
        ({"distractor_prob": 1.0}, ["distractor", "distractor", "distractor"]),
        ({}, []),
    ],
)
def test_retrieval_noise_is_recorded_in_info(noise, events):
    info = _search_once(noise)
    assert info["noise_events"] == events
    if events == ["drop"]:
        assert info["tool_calls"][0]["content"].startswith("No results found") and info["new_evidence"] == []


def test_recorded_retrieval_noise_replays_under_a_seed():
    noise = {"drop_prob": 0.3, "shuffle_prob": 0.5, "distractor_prob": 0.3}
    runs = {seed: [_search_once(noise, seed)["noise_events"] for _ in range(2)] for seed in range(8)}
    assert all(a == b for a, b in runs.values())
    assert len({tuple(a) for a, _ in runs.values()}) > 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"top_k": 0}, "top_k must be a positive int"),
        ({"top_k": -1}, "top_k must be a positive int"),
        ({"top_k": True}, "top_k must be a positive int"),
        ({"top_k": 2.5}, "top_k must be a positive int"),
        ({"max_passage_chars": 0}, "max_passage_chars must be a positive int"),
        ({"max_result_length": -5}, "max_result_length must be a positive int"),
        ({"max_observation_length": 0}, "max_observation_length must be a positive int"),
        ({"retriever": "bm26"}, r"retriever must be one of \['bm25', 'lucene', 'dense', 'remote'\]"),
        ({"reward": "bogus"}, "reward must be one of"),
        ({"answer_metric": "bleu"}, "answer_metric must be one of"),
        ({"action_format": "json"}, "action_format must be one of"),
        ({"shaping_gamma": 2.0}, "shaping_gamma must lie in"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHopQAEnv(**kwargs)
    with pytest.raises(ValueError, match=match):
        gym.make("AgentR1/HotpotQA-v0", **kwargs)


def test_numpy_task_index_through_gym_make():
    np = pytest.importorskip("numpy")
    env = gym.make("AgentR1/MuSiQue-v0")
    _, info = env.reset(seed=0, options={"task_index": np.int64(3)})
    assert info["task_index"] == 3


@pytest.mark.parametrize("env_id", ["AgentR1/HotpotQA-v0", "AgentR1/2WikiMultihopQA-v0", "AgentR1/MuSiQue-v0"])
def test_reward_range_is_exact_and_both_ends_are_reached(env_id):
    env = gym.make(env_id, max_episode_steps=20, reward="process")
    assert env.unwrapped.reward_range == pytest.approx((-0.16, 1.0))
    env.reset(seed=0, options={"task_index": 1})
    call = env.unwrapped.oracle_action()
    env.step(call)
    _, reward, *_ = env.step(call + "<tool_call>{oops</tool_call>")  # malformed + a repeated call
    assert reward == pytest.approx(-0.1 - 0.05 - 0.01)
    rewards = []
    while True:
        _, reward, terminated, truncated, _ = env.step(env.unwrapped.oracle_action())
        rewards.append(reward)
        if terminated or truncated:
            break
    assert terminated and rewards[-1] == 1.0  # the oracle's exact answer
    assert max(rewards[:-1], default=0.0) <= 0.2 - 0.01 + 1e-12  # a non-final step earns at most evidence - cost


def test_the_readme_example_of_refused_calls():
    env = gym.make("AgentR1/HotpotQA-v0")
    env.reset(seed=0, options={"task_index": 0})
    call = env.unwrapped.parser.format_call("search", {"query": "Odile Marchetti"})
    broken = "<tool_call>{oops</tool_call>"
    _, _, _, _, info = env.step(call + broken + call + broken + call)
    assert "Ran tool call(s) 1, 3 of 5 (search, search); refused 2, 4-5." in info["new_messages"][-1]["content"]
    assert len(info["tool_calls"]) == 2 and info["new_evidence"]  # the calls that ran found evidence


def test_oracle_takes_over_after_a_failed_foreign_call_instead_of_repeating_it():
    # The oracle retries only a failed call of its own shape (a transient noise failure);
    # a failed unknown-tool or bad-argument call written by someone else would fail forever.
    env = gym.make("AgentR1/HotpotQA-v0", max_episode_steps=6)
    env.reset(seed=0, options={"task_index": 0})
    for foreign in ('{"name": "lookup", "arguments": {"title": "x"}}', '{"name": "search", "arguments": {"query": 3}}'):
        env.step(f"<tool_call>{foreign}</tool_call>")
        assert env.unwrapped.oracle_action() != f"<tool_call>\n{foreign}\n</tool_call>"
    terminated = False
    while not terminated:
        _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        assert not truncated
    assert info["metrics"]["answer_em"] == 1.0


# ---------------------------------------------------------------------------- README: "nothing is built on reset"
@pytest.mark.parametrize("env_id", ["AgentR1/HotpotQA-v0", "AgentR1/2WikiMultihopQA-v0", "AgentR1/MuSiQue-v0"])
def test_question_corpus_builds_one_shared_index_and_nothing_on_reset(env_id, monkeypatch):
    """corpus="question": one BM25 index over the split's paragraphs, built once; resets and searches build none."""
    from agent_gym.retrieval import BM25Retriever

    builds = []
    original = BM25Retriever.__init__

    def counting_init(self, *args, **kwargs):
        builds.append(len(args[0]) if args else len(kwargs["passages"]))
        original(self, *args, **kwargs)

    monkeypatch.setattr(BM25Retriever, "__init__", counting_init)
    BM25Retriever.clear_cache()
    env = gym.make(env_id, corpus="question")
    second = gym.make(env_id, corpus="question")
    base = env.unwrapped
    assert len(builds) == 1 and builds[0] == len({p.id for t in base.tasks for p in t.paragraphs})
    assert second.unwrapped.retriever is base.retriever  # shared between envs of the same split
    for index in range(base.num_tasks()):  # every task: reset, then a search in its own paragraphs
        env.reset(seed=index, options={"task_index": index})
        _, _, _, _, info = env.step(base.oracle_action())
        assert info["tool_calls"] and info["tool_calls"][0]["ok"]
        assert set(base.tools["search"].allowed) == set(base.state.task.paragraph_ids)  # its own paragraphs
    assert len(builds) == 1
    BM25Retriever.clear_cache()  # the counted index leaves no trace for other tests


# ---------------------------------------------------------------------------- README: every noise event is listed
@pytest.mark.parametrize(
    ("noise", "events", "content"),
    [
        ({"failure_prob": 1.0}, ["failure"], "Error: search is temporarily unavailable, try again"),
        ({"timeout_prob": 1.0}, ["timeout"], "Error: search timed out"),
        ({"truncate_prob": 1.0, "truncate_length": 12}, ["truncate"], None),
    ],
)
def test_generic_noise_events_are_listed_in_info(noise, events, content):
    clean = _search_once({})
    env = gym.make("AgentR1/HotpotQA-v0", tool_noise=noise)
    env.reset(seed=0, options={"task_index": 0})
    question = env.unwrapped.state.task.question
    info = env.step(env.unwrapped.parser.format_call("search", {"query": question}))[4]
    assert info["noise_events"] == events
    expected = content or clean["tool_calls"][0]["content"][:12] + " [truncated]"
    assert info["tool_calls"][0]["content"] == expected


@pytest.mark.parametrize("source", ["hotpotqa", "2wikimultihopqa", "musique"])
def test_the_embedded_split_is_the_leading_three_quarters_for_train(source):
    every = MultiHopQAEnv(source=source).tasks
    train, test = MultiHopQAEnv(source=source, split="train").tasks, MultiHopQAEnv(source=source, split="test").tasks
    assert train + test == every and len(train) == int(0.75 * len(every))
