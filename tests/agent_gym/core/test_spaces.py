import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.core.spaces import TextSpace
from tests.conftest import LookupEnv

WEIRD = 'naïve 日本 🙂 \x00\x1f\ufffd <tool_call>{"a": 1}</tool_call>\n\t\\'


@given(st.text(max_size=64))
def test_contains_every_string_up_to_max_length(text):
    assert TextSpace(64).contains(text)


def test_rejects_too_long_and_non_strings():
    space = TextSpace(4, min_length=1)
    assert not space.contains("12345")
    assert not space.contains("")
    assert not space.contains(b"abc")
    assert not space.contains(None)


def test_sample_is_varied_and_in_space():
    space = TextSpace(300, seed=3)
    samples = [space.sample() for _ in range(200)]
    assert all(space.contains(s) for s in samples)
    assert len(set(samples)) > 150
    assert any("<tool_call>" in s for s in samples)
    assert any(not s.isascii() for s in samples)
    assert any(not s.isalnum() for s in samples)


def test_sample_is_seeded():
    a, b = TextSpace(100, seed=7), TextSpace(100, seed=7)
    assert [a.sample() for _ in range(10)] == [b.sample() for _ in range(10)]


def test_invalid_lengths_raise():
    with pytest.raises(ValueError, match="min_length"):
        TextSpace(3, min_length=5)


def _vector_roundtrip(vec_cls, **kwargs):
    envs = vec_cls([lambda: LookupEnv(max_observation_length=4096) for _ in range(2)], **kwargs)
    try:
        obs, _ = envs.reset(seed=[0, 1])
        singles = [LookupEnv(max_observation_length=4096).reset(seed=s)[0] for s in (0, 1)]
        assert tuple(obs) == tuple(singles)
        action = '<tool_call>{"name": "lookup", "arguments": {"country": "Japan ' + WEIRD + '"}}</tool_call>'
        obs, rewards, term, trunc, infos = envs.step((action, "<answer>" + WEIRD + "</answer>"))
        assert WEIRD in obs[1]
        assert all(isinstance(o, str) for o in obs)
        assert np.isfinite(rewards).all()
    finally:
        envs.close()


def test_sync_vector_env():
    _vector_roundtrip(gym.vector.SyncVectorEnv)


def test_async_vector_env_default_shared_memory_roundtrips_unicode():
    _vector_roundtrip(gym.vector.AsyncVectorEnv)


def test_async_vector_env_without_shared_memory():
    _vector_roundtrip(gym.vector.AsyncVectorEnv, shared_memory=False)
