"""Context policies: the exact views of append, window and fold, their settings, and their use in every env."""

from dataclasses import dataclass

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import data_equivalence
from hypothesis import given
from hypothesis import strategies as st

import agent_gym
from agent_gym.core import context as context_module
from agent_gym.core.context import FOLD_HEADER, Append, ContextPolicy, Fold, Window, make_context, split_turns
from agent_gym.core.history import Message, Role, ToolCall, ToolResult, render_message
from agent_gym.testing import check_context_policy, check_text_env
from agent_gym.testing.strategies import histories
from tests.conftest import LookupEnv

IDS = [env_id for env_id, _ in agent_gym.list_envs()]

# ---------------------------------------------------------------------------- a hand-built history of four turns
SYS = Message.system("Answer with tools.")
QUESTION = Message.user("Who directed Jaws?")
SEARCH = ToolCall("search", {"query": "Jaws director"}, id="call_1_0")
A1 = Message.assistant("<tool_call>search Jaws director</tool_call>", (SEARCH,))
T1 = Message.tool(SEARCH, ToolResult("Jaws is a 1975 film directed by Steven Spielberg."))  # 49 characters
A2 = Message.assistant("I am not\nsure yet")  # no call: its text is folded, on one line
F2 = Message.user("Format error: no tool call and no answer.")  # 41 characters
LOOKUP = ToolCall("lookup", {"title": "Steven Spielberg", "k": 2}, id="call_3_0")
A3 = Message.assistant("<tool_call>lookup Steven Spielberg</tool_call>", (LOOKUP,))
T3 = Message.tool(LOOKUP, ToolResult.error("no page named 'Steven Spielberg'"))
A4 = Message.assistant("<answer>Steven Spielberg</answer>")
HISTORY = (SYS, QUESTION, A1, T1, A2, F2, A3, T3, A4)


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        (1, [SYS, QUESTION, A4]),
        (2, [SYS, QUESTION, A3, T3, A4]),
        (3, [SYS, QUESTION, A2, F2, A3, T3, A4]),
    ],
)
def test_window_keeps_the_task_and_the_last_turns(turns, expected):
    assert Window(turns).view(HISTORY) == expected


def test_fold_turns_older_turns_into_lines_inside_the_question():
    folded = Message.user(
        "Who directed Jaws?\n"
        "\n"
        "Earlier turns, one line each (action -> result):\n"
        'turn 1: search(query="Jaws director") -> Jaws is a 1975 film directed b [... 19 characters cut]\n'
        "turn 2: I am not sure yet -> Format error: no tool call and [... 11 characters cut]"
    )
    assert Fold(2, digest_chars=30).view(HISTORY) == [SYS, folded, A3, T3, A4]


def test_fold_cuts_a_long_call_as_well_as_a_long_result():
    note = Fold(1, digest_chars=12).view(HISTORY)[1].content.splitlines()
    assert note[-1] == "turn 3: lookup(title [... 25 characters cut] -> Error: no pa [... 27 characters cut]"


def test_fold_with_the_default_digest_keeps_short_lines_whole():
    folded = Message.user(
        "Who directed Jaws?\n\nEarlier turns, one line each (action -> result):\n"
        'turn 1: search(query="Jaws director") -> Jaws is a 1975 film directed by Steven Spielberg.'
    )
    assert make_context("fold", context_turns=3).view(HISTORY) == [SYS, folded, A2, F2, A3, T3, A4]


def test_fold_joins_several_calls_and_results_and_names_an_empty_result():
    a, b = ToolCall("search", {"query": "a"}, id="c1"), ToolCall("search", {"query": "b"}, id="c2")
    both = Message.assistant("two calls", (a, b))
    silent = Message.assistant("  ")  # no call, no text, nothing came back
    history = [SYS, QUESTION, both, Message.tool(a, ToolResult("A")), Message.tool(b, ToolResult("B")), silent, A4]
    lines = Fold(1).view(history)[1].content.splitlines()
    assert lines[-2:] == ['turn 1: search(query="a"); search(query="b") -> A | B', "turn 2: (nothing) -> (nothing)"]
    assert Fold(1, digest_chars=3).view(history)[1].content.splitlines()[-1] == "turn 2: (nothing) -> (nothing)"


def test_fold_digests_each_turn_once_over_an_episode(monkeypatch):
    """Step n folds n - 1 turns; each is digested the first time it folds, never again (was: every step)."""
    calls, real = [], context_module.digest
    policy, history, views = Fold(1), [SYS, QUESTION], []
    for turn in range(1, 31):
        call = ToolCall("search", {"query": f"q{turn}"}, id=f"call_{turn}_0")
        history += [Message.assistant(f"action {turn}", (call,)), Message.tool(call, ToolResult(f"result {turn}"))]
        with monkeypatch.context() as m:
            m.setattr(context_module, "digest", lambda text, limit: calls.append(text) or real(text, limit))
            views.append(policy.view(history))
    assert calls == [t for n in range(1, 30) for t in (f'search(query="q{n}")', f"result {n}")]  # 58, was 870
    assert views[-1] == Fold(1).view(history)  # the same view as a policy that kept nothing


def test_fold_kept_lines_never_leak_into_another_history():
    policy = Fold(1)
    assert policy.view(HISTORY)[1].content.endswith(
        "turn 3: lookup(title=\"Steven Spielberg\", k=2) -> Error: no page named 'Steven Spielberg'"
    )
    other = [SYS, QUESTION, A2, F2, A1, T1, A4]  # the same positions, other turns: the kept lines do not match
    assert policy.view(other) == Fold(1).view(other) != Fold(1).view(HISTORY)
    copy = [Message(m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.ok) for m in HISTORY]
    assert policy.view(copy) == Fold(1).view(HISTORY)  # equal messages, other objects: digested again, the same


@pytest.mark.parametrize("turns", [4, 5, 100])
def test_k_at_least_the_number_of_turns_is_append(turns):
    assert Window(turns).view(HISTORY) == Fold(turns).view(HISTORY) == Append().view(HISTORY) == list(HISTORY)


@pytest.mark.parametrize("policy", [Append(), Window(1), Fold(1, digest_chars=1)])
def test_a_history_of_the_task_alone_is_shown_whole(policy):
    assert policy.view(HISTORY[:2]) == [SYS, QUESTION]


def test_split_turns_gives_the_task_and_each_turn():
    assert split_turns(HISTORY) == ([SYS, QUESTION], [[A1, T1], [A2, F2], [A3, T3], [A4]])
    assert split_turns([]) == ([], [])


# ---------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"context": "windw", "context_turns": 1}, ValueError, r"unknown context 'windw' \(did you mean 'window'\?\)"),
        ({"context": "lru"}, ValueError, r"unknown context 'lru'; choose one of \['append', 'window', 'fold'\]"),
        ({"context": "window"}, ValueError, r"context='window' needs context_turns=K"),
        ({"context": "fold"}, ValueError, r"context='fold' needs context_turns=K"),
        ({"context": "window", "context_turns": 0}, ValueError, r"context_turns must be a positive int \(got 0\)"),
        ({"context": "fold", "context_turns": -2}, ValueError, r"context_turns must be a positive int \(got -2\)"),
        ({"context": "window", "context_turns": 1.5}, ValueError, r"context_turns must be a positive int \(got 1.5\)"),
        ({"context": "window", "context_turns": True}, ValueError, r"context_turns must be a positive int"),
        (
            {"context": "fold", "context_turns": 1, "context_digest_chars": 0},
            ValueError,
            r"context_digest_chars must be a positive int \(got 0\)",
        ),
        ({"context": "append", "context_turns": 2}, ValueError, r"context_turns only applies to 'window' and 'fold'"),
        (
            {"context": "window", "context_turns": 2, "context_digest_chars": 50},
            ValueError,
            r"context_digest_chars only applies to context='fold' \(got context='window'\)",
        ),
        ({"context": Window(2), "context_turns": 2}, ValueError, r"a ContextPolicy object carries its own settings"),
        ({"context": 3}, TypeError, r"context must be a policy name .* or a ContextPolicy .*, got int"),
        ({"context": None}, TypeError, r"got NoneType"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error, match=message):
        make_context(**kwargs)
    with pytest.raises(error, match=message):
        gym.make("AgentR1/Bandit-v0", **kwargs)


def test_make_context_builds_each_builtin_and_passes_a_policy_through():
    assert make_context() == Append() and make_context("append").name == "append"
    assert make_context("window", context_turns=3) == Window(3)
    assert make_context("fold", context_turns=2) == Fold(2, digest_chars=120)
    assert make_context("fold", context_turns=2, context_digest_chars=7) == Fold(2, digest_chars=7)
    mine = TaskAndLastMessage()
    assert make_context(mine) is mine and isinstance(mine, ContextPolicy)


# ---------------------------------------------------------------------------- in envs
@dataclass(frozen=True)
class TaskAndLastMessage:
    """A user's policy: the task and the latest message only."""

    name = "task_and_last"

    def view(self, history):
        task, turns = split_turns(history)
        return [*task, history[-1]] if turns else list(history)


def test_a_users_policy_plugs_in_through_gym_make():
    env = gym.make("AgentR1/Calculator-v0", context=TaskAndLastMessage())
    assert isinstance(env.unwrapped.context, TaskAndLastMessage)
    env.reset(seed=0, options={"task_index": 3})
    obs, *_, info = env.step(env.unwrapped.oracle_action())
    history = info["history"]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool"]
    assert info["messages"] == [history[0], history[1], history[3]]
    assert obs == f"<|system|>\n{history[0]['content']}\n<|user|>\n{history[1]['content']}\n<|tool:calculator|>\n180\n"
    check_text_env(env)


def _lookup_then_junk(**kwargs):
    """LookupEnv on France: the oracle's lookup, then an action that is no call and no answer."""
    env = LookupEnv(**kwargs)
    env.reset(seed=0, options={"task_index": 0})
    env.step(env.oracle_action())
    return env.step("junk")


def test_window_in_an_env_shows_the_task_and_the_last_turn():
    obs, *_, info = _lookup_then_junk(context="window", context_turns=1)
    history = info["history"]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert info["messages"] == [history[0], history[1], history[4], history[5]]
    assert info["new_messages"] == history[4:]  # what this step appended to the history, not a change of the view
    expected = f"<|system|>\n{history[0]['content']}\n<|user|>\nWhat is the capital of France?\n<|assistant|>\njunk\n"
    assert obs == expected + f"<|user|>\n{history[5]['content']}\n"


def test_fold_in_an_env_folds_the_lookup_into_the_question():
    obs, *_, info = _lookup_then_junk(context="fold", context_turns=1)
    history = info["history"]
    assert info["messages"][1]["content"] == (
        "What is the capital of France?\n\nEarlier turns, one line each (action -> result):\n"
        'turn 1: lookup(country="France") -> The capital of France is Paris.'
    )
    assert info["messages"][0] == history[0] and info["messages"][2:] == history[4:]
    assert obs.count("The capital of France is Paris.") == 1  # only in the folded line


def _scripted_episode(env):
    """A junk action, then the oracle to the end (every id has an oracle that finishes in the turn limit)."""
    record = [env.reset(seed=0)]
    for action in ["junk", *[None] * 12]:
        step = env.step(action if action is not None else env.unwrapped.oracle_action())
        record.append(step)
        if step[2] or step[3]:
            return record
    raise AssertionError("the oracle did not finish")


@pytest.mark.parametrize("env_id", IDS)
def test_append_is_todays_observation_and_info_for_every_id(env_id):
    default, append = gym.make(env_id), gym.make(env_id, context="append")
    assert append.unwrapped.context == Append()
    first, second = _scripted_episode(default), _scripted_episode(append)
    assert data_equivalence(first, second)
    before = []
    for *head, info in second:
        state = append.unwrapped.state
        history = state.history.messages[: len(info["history"])]
        assert info["messages"] == info["history"] == [m.to_chat() for m in history]
        assert head[0] == "".join(render_message(m) for m in history)  # the whole history, rendered as before
        assert info["new_messages"] == info["history"][len(before) :]
        before = info["history"]


@pytest.mark.parametrize("env_id", IDS)
def test_every_id_accepts_the_context_settings(env_id):
    env = gym.make(env_id, context="window", context_turns=1)
    assert env.unwrapped.context == Window(1)
    for *_, info in _scripted_episode(env)[1:]:
        shown = [m["role"] for m in info["messages"]].count("assistant")
        assert shown == 1 and [m["role"] for m in info["history"]].count("assistant") == info["turn"]
    assert gym.make(env_id, context="fold", context_turns=2, context_digest_chars=40).unwrapped.context == Fold(2, 40)


# ---------------------------------------------------------------------------- properties over random histories
def _assistants(history):
    return [i for i, m in enumerate(history) if m.role is Role.ASSISTANT]


def _expected_window(history, k):
    """The task (before the first assistant message) and the suffix from the ``k``-th last assistant message."""
    starts = _assistants(history)
    task = starts[0] if starts else len(history)
    keep = min(k, len(starts))
    return list(history[:task]) + (list(history[starts[-keep] :]) if keep else [])


@given(histories())
def test_append_is_the_identity(history):
    assert Append().view(history) == history


@given(histories(), st.integers(1, 10))
def test_window_is_the_task_and_exactly_the_last_k_turns(history, k):
    view = Window(k).view(history)
    task = (_assistants(history) or [len(history)])[0]
    assert view[:task] == history[:task]
    rest = view[task:]
    assert rest == history[len(history) - len(rest) :]  # a suffix of the history
    assert [m.role for m in rest].count(Role.ASSISTANT) == min(k, len(_assistants(history)))
    assert not rest or rest[0].role is Role.ASSISTANT  # whole turns
    assert view == _expected_window(history, k)


@given(histories(), st.integers(1, 10), st.integers(1, 60))
def test_fold_ends_with_the_windows_turns_and_folds_the_rest_into_bounded_lines(history, k, digest_chars):
    view = Fold(k, digest_chars).view(history)
    window = _expected_window(history, k)
    task = (_assistants(history) or [len(history)])[0]
    assert len(view) == len(window) and view[task:] == window[task:] and view[: task - 1] == history[: task - 1]
    older = len(_assistants(history)) - k
    if older <= 0:
        assert view == history
        return
    question = history[task - 1].content
    assert view[task - 1].content.startswith(f"{question}\n\n{FOLD_HEADER}\n")
    lines = view[task - 1].content[len(question) + 2 :].split("\n")[1:]
    assert len(lines) == older
    for n, line in enumerate(lines, start=1):
        cut_note = len(" [... 999 characters cut]")  # texts are at most 200 characters, joined at most 3
        bound = len(f"turn {n}: ") + len(" -> ") + 2 * (digest_chars + cut_note)
        assert line.startswith(f"turn {n}: ") and len(line) <= bound


@given(histories(), st.integers(1, 4))
def test_every_builtin_view_is_faithful_to_the_history(history, k):
    for policy in (Append(), Window(k), Fold(k, digest_chars=10)):
        check_context_policy(policy, [history])  # task first, nothing invented, the latest message kept
    assert all(m in history for m in Window(k).view(history))
