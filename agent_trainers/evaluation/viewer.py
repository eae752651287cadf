"""A self-contained HTML trajectory viewer: ``agent-r1 view FILE.jsonl -o view.html`` (:func:`write_viewer`).

Reads rollout JSONL (:func:`agent_trainers.rollout.save_jsonl`) or an
evaluation's ``episodes.jsonl`` (records that carry a trajectory) and writes
one HTML file that needs no server and no network: the data is embedded as
JSON and drawn by a small script in the page. Each trajectory is a card with
its messages by who wrote them (the task, the model, a tool, the env's own
feedback), the tool calls and their results, the reward terms of every turn
(a reply cut at a token limit is marked), the final metrics and stop reason,
and the completion's tokens coloured by loss mask (model tokens vs env
tokens). Runs of blank lines are drawn as one line that counts them. Filters
pick cards by outcome and stop reason; cards are drawn 50 at a time as the
page scrolls, so a file of thousands of trajectories opens at once.

It imports nothing heavy (no torch, no transformers): the token view decodes
with :func:`agent_trainers.policies.decoder.load_decoder`.
"""

from __future__ import annotations

import html
import json
import math
import re
import warnings
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from agent_gym.core.files import write_atomic
from agent_trainers.evaluation.outputs import read_lines
from agent_trainers.rollout.export import first_error, trajectory_from_dict
from agent_trainers.rollout.types import Trajectory

__all__ = ["Outcome", "card_data", "message_views", "read_cards", "render_html", "write_viewer"]

TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "viewer.html"
"""The page: CSS and script inline; ``__DATA__`` and ``__TITLE__`` are filled in."""


class _RecordShape(TypedDict, total=False):
    """The fields of an evaluation record the viewer draws (besides its trajectory)."""

    question: str | None
    gold: list[str] | None
    answer: str | None
    scores: dict[str, float]
    reward: float


_RECORD = TypeAdapter(_RecordShape)


class Outcome(StrEnum):
    """How a trajectory ended, for the outcome filter."""

    CORRECT = "correct"
    """Answered with exact match 1 (or every reported score 1)."""
    PARTIAL = "partial"
    """Answered, not exact, token F1 above 0."""
    WRONG = "wrong"
    """Answered, every score 0."""
    ANSWERED = "answered"
    """Answered, but the env reported no answer scores."""
    NO_ANSWER = "no answer"
    """Ended without an answer (turn limit, token budget, time-out, error)."""


def _outcome(answered: bool, scores: Mapping[str, float]) -> Outcome:
    if not answered:
        return Outcome.NO_ANSWER
    if not scores:
        return Outcome.ANSWERED
    if scores.get("em", min(scores.values())) >= 1:
        return Outcome.CORRECT
    if scores.get("f1", max(scores.values())) > 0:
        return Outcome.PARTIAL
    return Outcome.WRONG


def _segments(traj: Trajectory, tokenizer: Any) -> list[list[Any]]:
    """Runs of equal loss mask over the completion: ``[[mask, text, n_tokens], ...]``."""
    ids, mask = traj.completion_ids, traj.loss_mask
    if tokenizer is None or not ids or len(mask) != len(ids):
        return []
    vocab = len(tokenizer)
    if max(ids) >= vocab:
        raise ValueError(f"token id {max(ids)} is outside the tokenizer's vocabulary of {vocab} (another model's ids?)")
    runs: list[list[Any]] = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            text = tokenizer.decode(ids[start:i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            runs.append([int(mask[start]), text, i - start])
            start = i
    return runs


CUT_NOTE = "cut at the token limit"
"""How a reply that hit a token limit is marked (the page draws the note in its own colour)."""

_BLANK_RUN = re.compile(r"\n(?:[^\S\n]*\n){3,}")
"""Three or more blank (empty or whitespace-only) lines in a row."""


def _collapse_blank_lines(text: str) -> str:
    """``text`` with each run of three or more blank lines drawn as one line that counts them."""
    return _BLANK_RUN.sub(lambda m: f"\n[{m.group(0).count(chr(10)) - 1} blank lines]\n", text)


def message_views(traj: Trajectory) -> list[dict[str, Any]]:
    """How the page draws each message: ``label`` (who wrote it), ``text`` and ``note``.

    A ``user`` message after the model's first turn is the env's (format feedback, or tool results sent
    as user text), labelled ``env feedback``, not ``user``; the model's ``k``-th reply carries a note when
    turn ``k`` hit a token limit; a whitespace-only text is a note of its length, and runs of blank lines
    inside a text are one counted line.
    """
    views: list[dict[str, Any]] = []
    replies = 0
    for m in traj.messages:
        role, content = m.get("role"), m.get("content")
        text = content if isinstance(content, str) else ("" if content is None else json.dumps(content))
        label, notes = str(role), []
        if role == "user" and replies:
            label = "env feedback (user message)"
        elif role == "tool":
            label = f"tool result: {m.get('name') or ''}"
        elif role == "assistant":
            turn = traj.turns[replies] if replies < len(traj.turns) else None
            if turn is not None and turn.cut:
                size = f" ({turn.end - turn.start} tokens)" if turn.end > turn.start else ""  # text mode: no ids
                notes.append(f"{CUT_NOTE}{size}: the reply is unfinished")
            replies += 1
        if text and not text.strip():
            notes.append(f"({len(text)} whitespace characters)")
            text = ""
        views.append({"label": label, "text": _collapse_blank_lines(text), "note": "; ".join(notes) or None})
    return views


def card_data(line: Mapping[str, Any], index: int, tokenizer: Any = None) -> dict[str, Any]:
    """The viewer's data for one JSONL line (a trajectory, or an evaluation record holding one).

    Raises:
        ValueError: The line is neither, or a field has the wrong type (the message names it).
    """
    if not isinstance(line, Mapping):
        raise ValueError(f"a JSON object was expected, not {type(line).__name__}")
    record = line if "trajectory" in line else None
    traj = trajectory_from_dict(record["trajectory"] if record else dict(line))
    if record is not None:
        try:
            fields = _RECORD.validate_python({k: record[k] for k in _RecordShape.__annotations__ if k in record})
        except ValidationError as exc:
            raise ValueError(first_error(exc)) from None
        scores = fields.get("scores", {})
    else:
        scores = {k.removeprefix("answer_"): v for k, v in traj.metrics.items() if k.startswith("answer_")}
    question = record.get("question") if record else None
    return {
        "i": index,
        "search": _search_text(traj, question, record.get("answer") if record else None),
        "task_id": traj.task_id,
        "task_index": traj.task_index,
        "env_id": traj.env_id,
        "seed": traj.seed,
        "stop": traj.stop_reason or "(none)",
        "outcome": str(_outcome(traj.answered, scores)),
        "reward": traj.total_reward if record is None else fields.get("reward", traj.total_reward),
        "metrics": traj.metrics,
        "question": question,
        "gold": (record.get("gold") or None) if record else None,  # [] (not recorded) shows as such
        "answer": record.get("answer") if record else None,
        "messages": traj.messages,
        "views": message_views(traj),
        "turns": [
            {
                "reward": t.reward,
                "terms": t.reward_terms,
                "format_errors": t.format_errors,
                "tokens": t.end - t.start,
                "cut": t.cut,
            }
            for t in traj.turns
        ],
        "segments": _segments(traj, tokenizer),
        "prompt_tokens": len(traj.prompt_ids),
        "error": traj.error,
    }


def _search_text(traj: Trajectory, question: Any, answer: Any) -> str:
    """What the page's text filter searches (lower case): the task id, the question - a rollout file has none
    of its own, so the first user message, which holds it - and the answer (an evaluation record's, or the
    final assistant message of a rollout)."""
    users = [m.get("content") for m in traj.messages if m.get("role") == "user"]
    replies = [m.get("content") for m in traj.messages if m.get("role") == "assistant"]
    if question is None and users:
        question = users[0]
    if answer is None and replies and traj.answered:
        answer = replies[-1]
    return "\n".join(str(x) for x in (traj.task_id, question, answer) if x is not None).lower()


def read_cards(path: str | Path, tokenizer: Any = None) -> list[dict[str, Any]]:
    """Every line of a trajectory / episode JSONL file as card data.

    A last line that is not JSON (a write cut short) is dropped with a warning, as the evaluation's
    reader drops it.

    Raises:
        FileNotFoundError: No such file.
        ValueError: A line is not JSON (other than the last) or not a trajectory (the message names the line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    lines = read_lines(path)
    cards: list[dict[str, Any]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == len(lines):
                warnings.warn(f"{path}:{n}: the last line is not whole JSON (cut short?); dropped", stacklevel=2)
                break
            raise ValueError(f"{path}:{n}: not JSON ({exc})") from None
        except RecursionError:
            raise ValueError(f"{path}:{n}: JSON nested too deeply") from None
        try:
            cards.append(card_data(data, len(cards), tokenizer))
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"{path}:{n}: not a trajectory or episode record ({exc})") from exc
    return cards


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinite floats as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
    (JSON has no such numbers, so the page's ``JSON.parse`` would refuse them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def render_html(cards: Iterable[Mapping[str, Any]], title: str) -> str:
    """The page with ``cards`` embedded (``<`` escaped so no text can close the script element; NaN and
    infinite numbers as strings, so the embedded data stays JSON)."""
    data = json.dumps(_finite(list(cards)), ensure_ascii=False, allow_nan=False).replace("<", "\\u003c")
    fill = {"__TITLE__": html.escape(title), "__DATA__": data}
    return re.sub("__TITLE__|__DATA__", lambda m: fill[m.group(0)], TEMPLATE.read_text(encoding="utf-8"))


def write_viewer(path: str | Path, out: str | Path, tokenizer: Any = None, title: str | None = None) -> Path:
    """Write the viewer page of a JSONL file.

    Args:
        path: Rollout JSONL or an evaluation's ``episodes.jsonl``.
        out: The HTML file to write.
        tokenizer: Decodes the token ids for the loss-mask view (``None``: no token view).
        title: Page title (default: the input's file name).

    Returns:
        The HTML path.
    """
    target = Path(out)
    if target.exists() and target.resolve() == Path(path).resolve():
        raise ValueError(f"the page would overwrite its input {path}; write it elsewhere (e.g. -o view.html)")
    cards = read_cards(path, tokenizer)
    return write_atomic(target, render_html(cards, title or f"{Path(path).name} ({len(cards)} trajectories)"))
