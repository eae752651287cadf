"""Incremental tokenisation of chats: the one place where chat text becomes token ids.

Shared by the rollout engine (env tokens between model turns), SFT (oracle
chats laid out exactly like rollouts) and the checker (its primitives).

The model's ids are never decoded and re-encoded; only the *environment's*
share of the chat template is tokenized, and the history is never re-rendered:

* the prompt (system + user messages, generation prompt) is rendered once;
* after a model turn, the env's text is the *delta* the template adds: it is
  read off a short render of a fixed two-message anchor chat, the assistant
  turn and the env's new messages -
  ``render(anchor + [assistant] + new) - render(anchor, generation prompt) - model text``.
  It holds the assistant turn's closing (``<|im_end|>\\n``, or only ``\\n`` when
  the model itself emitted ``<|im_end|>``), the env's messages and the next
  generation prompt (``<|im_start|>assistant\\n``).

Message content from the environment (tool results, questions) is text, never
control tokens: a passage holding ``<|im_end|><|im_start|>assistant`` must not
open a turn the model did not write. When a message's content holds the text of
a special token, that content is encoded with special-token parsing off
(:meth:`ChatTokenizer.encode_text`) and the template around it as usual (the
template's own ``<|im_start|>`` stay control tokens); any other content is
encoded with the template in one piece, so ordinary chats keep the ids of one
whole render.

This needs a template that renders each message independently of the ones
before the anchor (ChatML and the shipped tool template do). A template that
does not is refused when a :class:`ChatTokenizer` is built
(:class:`TemplateDriftError`), and :func:`agent_trainers.rollout.check_trajectory`
re-renders whole chats to verify trajectories.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from transformers import PreTrainedTokenizerBase

from agent_trainers.policies.sampling import end_of_turn_id, end_token_ids

__all__ = ["ChatTokenizer", "TemplateDriftError", "TokenizedChat", "tokenize_chat"]

_MARK = "\ue000{}\ue001"  # stands for a message's content while the template renders around it (private use)

_ANCHOR: tuple[dict[str, str], ...] = ({"role": "system", "content": "."}, {"role": "user", "content": "."})
_SAMPLE: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "Solve the task."},
    {"role": "user", "content": "Question: what is 2 + 3?"},
    {"role": "assistant", "content": "Let me compute it."},
    {"role": "user", "content": "Go on."},
    {"role": "assistant", "content": "It is 5."},
)


class TemplateDriftError(RuntimeError):
    """The chat template renders a message differently depending on what came before it."""


def _diff(expected: str, got: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), min(len(expected), len(got)))
    return f"at character {at}: expected {expected[at : at + 60]!r}, got {got[at : at + 60]!r}"


class ChatTokenizer:
    """Chat rendering and tokenization for one tokenizer (its chat template must be context-free).

    Args:
        tokenizer: A tokenizer with a chat template (see
            :func:`agent_trainers.policies.load_tokenizer`).
        check: Verify once that the template is context-free (the checker,
            which verifies whole chats itself, skips it).

    Raises:
        TemplateDriftError: The template renders a message differently
            depending on the messages before it.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, check: bool = True):
        self.tokenizer = tokenizer
        self.end_ids = end_token_ids(tokenizer)
        self.end_of_turn = end_of_turn_id(tokenizer)
        self._heads: dict[str, str] = {}
        self.control_tokens = sorted(
            {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}, key=len, reverse=True
        )
        """The text of every special token (``<|im_start|>``, ``<|im_end|>``, ...): control, never content."""
        # a list of tokens gives a list of ids (transformers types the result as either)
        self.control_ids = frozenset(cast(list[int], tokenizer.convert_tokens_to_ids(self.control_tokens)))
        if check:
            self._check_context_free()

    # ---------------------------------------------------------- primitives
    def render(
        self, messages: Sequence[Mapping[str, Any]], *, generation_prompt: bool, tools: Sequence[Any] | None = None
    ) -> str:
        """The template's text for ``messages``."""
        rendered = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=generation_prompt,
        )
        return cast(str, rendered)  # tokenize=False: the text (transformers types every output kind)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def encode_text(self, text: str) -> list[int]:
        """Token ids of ``text`` as plain text: a special token's text in it is spelt out, never the control id."""
        if not text:
            return []
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])

    def holds_control(self, text: str) -> bool:
        """Whether ``text`` contains the text of a special token."""
        return any(token in text for token in self.control_tokens)

    def count_control(self, ids: Sequence[int]) -> int:
        """How many of ``ids`` are special (control) tokens."""
        return sum(1 for i in ids if i in self.control_ids)

    def encode_messages(self, render: Any, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Ids of ``render(messages)`` with each message's content encoded as plain text where it needs it.

        ``render`` maps messages to the template text (a whole render, or the part after a model turn). A
        content holding a special token's text is replaced by a marker while the template renders; the
        template pieces are encoded as usual, that content with :meth:`encode_text`. Without such content this
        is ``encode(render(messages))``.

        Raises:
            TemplateDriftError: The template does not render such a content verbatim.
        """
        masked: list[dict[str, Any]] = []
        hidden: list[str] = []
        for m in messages:
            content = m.get("content")
            if isinstance(content, str) and self.holds_control(content):
                masked.append({**m, "content": _MARK.format(len(hidden))})
                hidden.append(content)
            else:
                masked.append(dict(m))
        if not hidden:
            return self.encode(render(messages))
        frame, ids = render(masked), []
        for k, content in enumerate(hidden):
            before, mark, frame = frame.partition(_MARK.format(k))
            if not mark:
                raise TemplateDriftError(
                    "the chat template does not render a message's content verbatim, so content holding "
                    "special-token text cannot be kept out of the control tokens"
                )
            ids += self.encode(before) + self.encode_text(content)
        return ids + self.encode(frame)

    def decode(self, ids: Sequence[int]) -> str:
        """The exact text of ``ids`` (special tokens kept, no clean-up)."""
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return cast(str, text)  # one sequence decodes to one string (transformers types a batch's list too)

    # -------------------------------------------------------- incremental
    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None) -> list[int]:
        """Ids of the opening messages plus the generation prompt (rendered once per episode)."""
        return self.encode_messages(lambda ms: self.render(ms, generation_prompt=True, tools=tools), messages)

    def split_turn(self, ids: Sequence[int]) -> tuple[str, str]:
        """``(content, text)`` of a model turn: its message content (no final end-of-turn id) and all its text."""
        content_ids = ids[:-1] if ids and ids[-1] in self.end_ids else ids
        return self.decode(content_ids), self.decode(ids)

    def env_text(
        self,
        model_text: str,
        content: str,
        new_messages: Sequence[Mapping[str, Any]],
        *,
        generation_prompt: bool,
        tools: Sequence[Any] | None = None,
    ) -> str:
        """The template text after a model turn: its closing, ``new_messages`` and (optionally) the generation prompt.

        Args:
            model_text: The decoded model ids of the turn (maybe ending in ``<|im_end|>``).
            content: The turn's message content (``model_text`` without that end token).
            new_messages: The env's messages after the turn (tool results, feedback).
            generation_prompt: Add the next assistant header (the episode goes on).
            tools: As passed to the template for the prompt.

        Raises:
            TemplateDriftError: The template renders the model's turn differently from its text.
        """
        head = self._head(tools)
        turn = [*_ANCHOR, {"role": "assistant", "content": content}, *new_messages]
        full = self.render(turn, generation_prompt=generation_prompt, tools=tools)
        if not full.startswith(head + model_text):
            raise TemplateDriftError(
                "the chat template does not render the assistant turn as the model wrote it; "
                + _diff(head + model_text, full[: len(head) + len(model_text)])
            )
        return full[len(head) + len(model_text) :]

    def env_ids(self, model_text: str, content: str, new_messages: Sequence[Mapping[str, Any]], **kw: Any) -> list[int]:
        """Token ids of :meth:`env_text` (same arguments); env content never becomes control tokens."""
        return self.encode_messages(lambda ms: self.env_text(model_text, content, ms, **kw), new_messages)

    def _head(self, tools: Sequence[Any] | None) -> str:
        key = json.dumps(list(tools or []), sort_keys=True, default=str)
        if key not in self._heads:
            self._heads[key] = self.render(_ANCHOR, generation_prompt=True, tools=tools)
        return self._heads[key]

    def _check_context_free(self) -> None:
        """Assemble a sample chat incrementally and compare with one full render."""
        chat = [dict(m) for m in _SAMPLE]
        full = self.render(chat, generation_prompt=False)
        text = self.render(chat[:2], generation_prompt=True)
        try:
            for k in (2, 4):
                content = chat[k]["content"]
                model_text = content + self.decode([self.end_of_turn])
                nxt = chat[k + 1 : k + 2]
                text += model_text + self.env_text(model_text, content, nxt, generation_prompt=bool(nxt))
            problem = "" if text == full else _diff(full, text)
        except TemplateDriftError as err:
            problem = str(err)
        if problem:
            raise TemplateDriftError(
                "the chat template is not context-free (a message renders differently after other messages), "
                f"so turns cannot be tokenized incrementally; {problem}. "
                "Use agent_trainers.policies.tool_chat_template()"
            )


@dataclass
class TokenizedChat:
    """A whole chat as ids with an assistant mask, laid out exactly as a rollout would be.

    Attributes:
        input_ids: Prompt, then per assistant turn its ids and the env ids after it.
        assistant_masks: 1 on assistant content and its end-of-turn id, else 0.
    """

    input_ids: list[int]
    assistant_masks: list[int]


def tokenize_chat(
    chat: ChatTokenizer, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None
) -> TokenizedChat:
    """Tokenize a finished chat turn by turn (each message rendered once), as the engine does.

    Each assistant message becomes ``encode_text(content) + [end_of_turn]``
    (mask 1), exactly what a model writing it would emit (a special token's
    text in it stays text); everything else is template text (mask 0).

    Raises:
        ValueError: The chat has no assistant message.
    """
    msgs = [dict(m) for m in messages]
    turns = [i for i, m in enumerate(msgs) if m.get("role") == "assistant"]
    if not turns:
        raise ValueError("the chat has no assistant message to learn from")
    ids = chat.prompt_ids(msgs[: turns[0]], tools)
    mask = [0] * len(ids)
    for n, k in enumerate(turns):
        content = str(msgs[k].get("content") or "")
        model_ids = [*chat.encode_text(content), chat.end_of_turn]
        nxt = turns[n + 1] if n + 1 < len(turns) else len(msgs)
        env = chat.env_ids(
            chat.decode(model_ids), content, msgs[k + 1 : nxt], generation_prompt=nxt < len(msgs), tools=tools
        )
        ids += model_ids + env
        mask += [1] * len(model_ids) + [0] * len(env)
    return TokenizedChat(input_ids=ids, assistant_masks=mask)
