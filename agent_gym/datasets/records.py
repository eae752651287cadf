"""Typed records of multi-hop QA tasks, shared by every loader.

One :class:`QATask` describes a question from HotpotQA, 2WikiMultihopQA or
MuSiQue: the question, its gold answers (aliases included), the context
paragraphs, and which of them support the answer. Paragraph ids are
:func:`agent_gym.core.passages.passage_id` of the paragraph's title and text, so a
retriever's hits map straight onto gold supporting paragraphs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_gym.core.files import DatasetFormatError
from agent_gym.core.passages import Passage, passage_id

__all__ = ["DatasetFormatError", "Paragraph", "QATask", "SubQuestion"]


@dataclass(frozen=True)
class Paragraph:
    """One context paragraph.

    Attributes:
        title: The Wikipedia-style title.
        sentences: Its sentences (MuSiQue paragraphs are one "sentence").
        text: The sentences joined by single spaces (derived).
        id: ``passage_id(title, text)`` (derived).
    """

    title: str
    sentences: tuple[str, ...]
    text: str = field(init=False, repr=False, compare=False)
    id: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        text = " ".join(s.strip() for s in self.sentences if s.strip())
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "id", passage_id(self.title, text))

    def to_passage(self) -> Passage:
        """This paragraph as a retrieval :class:`~agent_gym.core.passages.Passage`."""
        return Passage(id=self.id, title=self.title, text=self.text)


@dataclass(frozen=True)
class SubQuestion:
    """One step of a MuSiQue question decomposition.

    Attributes:
        question: The single-hop question (may refer to earlier answers as ``#1``).
        answer: Its answer.
        paragraph_id: Id of the paragraph that supports it, if any.
    """

    question: str
    answer: str
    paragraph_id: str | None = None


@dataclass(frozen=True)
class QATask:
    """A multi-hop question with its context and gold annotations.

    Attributes:
        id: The dataset's id of the question.
        question: The question text.
        answers: The gold answer first, then its aliases (never empty).
        paragraphs: The context paragraphs, in dataset order (empty for
            question-only data, which needs an external corpus).
        supporting: Ids of the gold supporting paragraphs found in the
            context, in the order the annotation names them.
        supporting_facts: Gold supporting sentences as ``(title, sent_id)``
            pairs (empty for MuSiQue, which annotates paragraphs only).
        missing_supporting: Titles of gold supporting paragraphs absent from
            the context (HotpotQA fullwiki); empty in the distractor setting.
        type: Question type (``bridge``, ``comparison``, ``compositional``,
            ``2hop``, ...), or ``None`` when the dataset has none.
        level: HotpotQA difficulty level, else ``None``.
        hops: Reasoning hops: 2 for HotpotQA, the number of gold paragraphs
            for 2Wiki, the length of the decomposition for MuSiQue.
        source: ``"hotpotqa"``, ``"2wikimultihopqa"``, ``"musique"``, or
            ``"open"`` for question-only data of unknown origin (NQ, Bamboogle, ...).
        decomposition: MuSiQue sub-questions, in order (else empty).
        evidences: 2WikiMultihopQA evidence triples ``(subject, relation, object)``.
        answerable: ``False`` for MuSiQue-Full's unanswerable variants (their
            context lacks a needed paragraph); ``True`` everywhere else.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    paragraphs: tuple[Paragraph, ...]
    supporting: tuple[str, ...]
    supporting_facts: tuple[tuple[str, int], ...] = ()
    missing_supporting: tuple[str, ...] = ()
    type: str | None = None
    level: str | None = None
    hops: int | None = None
    source: str = "hotpotqa"
    decomposition: tuple[SubQuestion, ...] = ()
    evidences: tuple[tuple[str, str, str], ...] = ()
    answerable: bool = True

    @property
    def answer(self) -> str:
        """The gold answer (the first of :attr:`answers`)."""
        return self.answers[0]

    @property
    def paragraph_ids(self) -> tuple[str, ...]:
        """Ids of the context paragraphs, in order."""
        return tuple(p.id for p in self.paragraphs)

    def paragraph(self, paragraph_id: str) -> Paragraph:
        """The context paragraph with id ``paragraph_id`` (``KeyError`` if absent)."""
        for p in self.paragraphs:
            if p.id == paragraph_id:
                return p
        raise KeyError(f"task {self.id!r} has no paragraph {paragraph_id!r}")
