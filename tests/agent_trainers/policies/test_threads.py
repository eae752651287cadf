"""The ``threads`` setting: one type, one parser, one function that applies it."""

from __future__ import annotations

import argparse

import pytest
import torch
from pydantic import TypeAdapter, ValidationError

from agent_trainers.policies import threads
from agent_trainers.policies.threads import Threads, apply_threads, parse_threads, resolve_threads


@pytest.mark.parametrize(("text", "value"), [("auto", "auto"), ("0", 0), ("1", 1), ("12", 12)])
def test_parse_threads_reads_auto_and_whole_numbers(text, value):
    assert parse_threads(text) == value and type(parse_threads(text)) is type(value)


@pytest.mark.parametrize("text", ["-1", "two", "AUTO", "", "1.5", "100000"])
def test_parse_threads_refuses_the_rest_in_one_line(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected a number from 0 to 1024 or 'auto' \(got "):
        parse_threads(text)


def test_the_type_checks_config_values_the_same_way():
    adapter = TypeAdapter(Threads)
    assert (adapter.validate_python(3), adapter.validate_python("auto")) == (3, "auto")
    for bad in (-1, "all", 100_000):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)


@pytest.mark.parametrize(("load", "cores"), [(0.0, 2), (1.0, 1), (3.0, 1)])
def test_auto_is_the_idle_cores(monkeypatch, load, cores):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert resolve_threads("auto") == cores
    assert resolve_threads(0) is None and resolve_threads(3) == 3


def test_apply_threads_sets_torch_s_count_and_zero_keeps_its_default(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    assert (apply_threads(2), apply_threads(0), apply_threads("1")) == (2, None, 1)
    assert calls == [2, 1]
