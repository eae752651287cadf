"""save_jsonl / load_jsonl round-trip trajectories exactly."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_trainers.rollout import Trajectory, TurnSpan, load_jsonl, save_jsonl

floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
text = st.text(max_size=20)


@st.composite
def trajectories(draw):
    n = draw(st.integers(0, 12))
    turns = [TurnSpan(0, n // 2, n, draw(floats), draw(st.dictionaries(text, floats, max_size=3)))] if n else []
    return Trajectory(
        env_id=draw(st.sampled_from(["AgentR1/HotpotQA-v0", "Test/Lookup-v0"])),
        env_kwargs=draw(st.dictionaries(text, st.integers() | text | st.lists(st.integers(), max_size=3), max_size=3)),
        seed=draw(st.integers(0, 2**31)),
        task_id=draw(text),
        task_index=draw(st.integers(0, 100)),
        group_id=draw(st.integers(0, 100)),
        prompt_ids=draw(st.lists(st.integers(0, 50_000), max_size=10)),
        completion_ids=draw(st.lists(st.integers(0, 50_000), min_size=n, max_size=n)),
        loss_mask=[1] * (n // 2) + [0] * (n - n // 2),
        logprobs=draw(st.lists(st.floats(max_value=0.0, allow_nan=False), min_size=n, max_size=n)),
        turns=turns,
        messages=[{"role": "user", "content": draw(text)}],
        metrics=draw(st.dictionaries(text, floats, max_size=3)),
        stop_reason=draw(st.sampled_from(["answer", "max_turns", "token_budget"])),
        terminated=draw(st.booleans()),
        truncated=draw(st.booleans()),
        task_type=draw(st.none() | text),
    )


@given(st.lists(trajectories(), max_size=3))
def test_round_trip_is_exact(tmp_path_factory, trajs):
    path = tmp_path_factory.mktemp("export") / "t.jsonl"
    save_jsonl(trajs, path)
    back = load_jsonl(path)
    assert back == trajs
    for a, b in zip(back, trajs, strict=True):
        assert all(math.copysign(1, x) == math.copysign(1, y) for x, y in zip(a.logprobs, b.logprobs, strict=True))


def test_bad_lines_name_their_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"format": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: bad trajectory record: missing"):
        load_jsonl(path)
    path.write_text(json.dumps({"format": 99}) + "\n")
    with pytest.raises(ValueError, match="unsupported trajectory format 99"):
        load_jsonl(path)
