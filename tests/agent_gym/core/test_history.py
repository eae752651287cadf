import pytest

from agent_gym.core.history import History, Message, Role, ToolCall, ToolResult


def _history():
    h = History()
    h.append(Message.system("sys"))
    h.append(Message.user("q?"))
    call = ToolCall("search", {"query": "x"}, id="call_1_0")
    h.append(Message.assistant("<tool_call>...</tool_call>", (call,)))
    h.append(Message.tool(call, ToolResult("found", ok=True)))
    return h


def test_chat_format_round_trip():
    chat = _history().to_chat()
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool"]
    assert chat[2]["tool_calls"][0]["function"] == {"name": "search", "arguments": '{"query": "x"}'}
    assert chat[3]["tool_call_id"] == "call_1_0" and chat[3]["name"] == "search"


def test_to_chat_returns_fresh_objects():
    h = _history()
    a, b = h.to_chat(), h.to_chat()
    a[0]["content"] = "changed"
    assert b[0]["content"] == "sys"


def test_render_contains_every_message_in_order():
    text = _history().render()
    positions = [text.index(s) for s in ("<|system|>", "<|user|>", "<|assistant|>", "<|tool:search|>")]
    assert positions == sorted(positions)
    assert _history().render(start=2).startswith("<|assistant|>")


def test_append_only_rejects_non_messages():
    h = History()
    with pytest.raises(TypeError):
        h.append({"role": "user", "content": "x"})  # type: ignore[arg-type]
    assert h.messages == ()
    assert Role("tool") is Role.TOOL
