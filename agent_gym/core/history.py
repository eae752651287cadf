"""The episode history: the state of the paper's extended MDP.

In Agent-R1 the state is not the last observation but the whole interaction
so far: the system prompt, the question, every model turn, every tool call and
every tool result. :class:`History` stores exactly that as an append-only
sequence of typed :class:`Message` objects, and renders it two ways:

* :meth:`History.render` - the observation text handed to a text agent;
* :meth:`History.to_chat` - OpenAI / Hugging Face chat messages, the format
  chat templates and trainers consume (``info["messages"]``).

Example:
    >>> h = History()
    >>> h.append(Message.system("Answer questions."))
    >>> h.append(Message.user("Who wrote Hamlet?"))
    >>> h.append(Message.assistant("<answer>Shakespeare</answer>"))
    >>> [m["role"] for m in h.to_chat()]
    ['system', 'user', 'assistant']
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["History", "Message", "Role", "ToolCall", "ToolResult"]


class Role(StrEnum):
    """Who produced a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class ToolResult:
    """What a tool reports: its text, whether it succeeded, and metadata.

    Attributes:
        content: The text the agent will see.
        ok: ``False`` for any failure (bad arguments, an exception, a time-out).
        metadata: Structured facts for the environment's scoring (e.g. the ids
            of retrieved passages); never shown to the agent.
    """

    content: str
    ok: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def error(cls, message: str, **metadata: Any) -> ToolResult:
        """A failed result whose content starts with ``Error:``."""
        return cls(content=f"Error: {message}", ok=False, metadata=dict(metadata))


@dataclass(frozen=True)
class ToolCall:
    """One tool invocation parsed from an action.

    Attributes:
        name: The tool's name as written by the agent.
        arguments: The decoded arguments (a JSON object).
        id: A call id, unique within an episode (``call_<turn>_<index>``).
    """

    name: str
    arguments: Mapping[str, Any]
    id: str = ""

    def to_chat(self) -> dict[str, Any]:
        """The OpenAI chat ``tool_calls`` entry for this call."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(dict(self.arguments), ensure_ascii=False)},
        }


@dataclass(frozen=True)
class Message:
    """One message of the history.

    Attributes:
        role: Who produced it.
        content: Its text. For assistant messages this is the raw action text
            exactly as the agent wrote it.
        tool_calls: For assistant messages, the calls parsed from ``content``.
        tool_call_id: For tool messages, the id of the call they answer.
        name: For tool messages, the tool's name.
        ok: For tool messages, whether the tool succeeded.
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    ok: bool = True

    @classmethod
    def system(cls, content: str) -> Message:
        return cls(Role.SYSTEM, content)

    @classmethod
    def user(cls, content: str) -> Message:
        return cls(Role.USER, content)

    @classmethod
    def assistant(cls, content: str, tool_calls: tuple[ToolCall, ...] = ()) -> Message:
        return cls(Role.ASSISTANT, content, tool_calls=tuple(tool_calls))

    @classmethod
    def tool(cls, call: ToolCall, result: ToolResult) -> Message:
        return cls(Role.TOOL, result.content, tool_call_id=call.id, name=call.name, ok=result.ok)

    def to_chat(self) -> dict[str, Any]:
        """This message as an OpenAI / Hugging Face chat message dict."""
        out: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_chat() for c in self.tool_calls]
        if self.role is Role.TOOL:
            out["tool_call_id"] = self.tool_call_id
            out["name"] = self.name
        return out


@dataclass
class History:
    """An append-only sequence of messages (the MDP state).

    The list is private; :meth:`append` is the only mutation, so an agent's
    earlier turns can never be rewritten (which keeps token-level rollouts
    prefix-stable).
    """

    _messages: list[Message] = field(default_factory=list)

    def append(self, message: Message) -> None:
        """Add one message at the end."""
        if not isinstance(message, Message):
            raise TypeError(f"History accepts Message objects, got {type(message).__name__}")
        self._messages.append(message)

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages)

    def __getitem__(self, index: int) -> Message:
        return self._messages[index]

    @property
    def messages(self) -> tuple[Message, ...]:
        """An immutable snapshot of the messages."""
        return tuple(self._messages)

    def to_chat(self) -> list[dict[str, Any]]:
        """Fresh chat-format dicts for every message (safe to mutate)."""
        return [m.to_chat() for m in self._messages]

    def render(self, start: int = 0) -> str:
        """The history from message ``start`` on, as observation text.

        Each message is a header line ``<|role|>`` (``<|tool:name|>`` for tool
        results) followed by its content.
        """
        return "".join(render_message(m) for m in self._messages[start:])


def render_message(message: Message) -> str:
    """One message as observation text (see :meth:`History.render`)."""
    header = f"<|tool:{message.name}|>" if message.role is Role.TOOL else f"<|{message.role.value}|>"
    return f"{header}\n{message.content}\n"
