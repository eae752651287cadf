"""Multi-hop QA environments: ``AgentR1/HotpotQA-v0``, ``AgentR1/2WikiMultihopQA-v0``, ``AgentR1/MuSiQue-v0``.

The agent answers a multi-hop question by calling a ``search`` tool (BM25
over the questions' paragraphs) as often as it needs, then writing a short
final answer. Gold evidence is the set of gold supporting paragraphs: a
search result that shows one for the first time earns the ``evidence``
process reward (and moves the shaping potential). The answer is scored by
exact match, token F1 and substring match against every gold alias.

Three corpus modes (``corpus=``):

* ``"question"`` - the distractor setting: each search only sees the
  question's own context paragraphs, served from one pooled BM25 index over
  the loaded split (no index is built on ``reset``);
* ``"pooled"`` - every paragraph of every loaded question is searchable;
* a path to a corpus file (``{"id", "contents"}`` or ``{"title", "text"}``
  JSON lines / list) - open retrieval over that corpus; gold evidence is then
  matched by title. Question-only data (no paragraphs) needs this mode.

``retriever="remote", retriever_url=...`` searches a Search-R1 ``/retrieve``
server (:mod:`agent_gym.retrieval.server`) instead of a local index: with
``"question"``/``"pooled"`` the server must index the loaded paragraphs
(``--qa-data`` the same file); with a corpus path, that path is not read here
(the server holds it, e.g. ``--corpus`` the same file).

Example:
    >>> import gymnasium as gym, agent_gym
    >>> env = gym.make("AgentR1/HotpotQA-v0", split="train")
    >>> obs, info = env.reset(seed=0, options={"task_index": 0})
    >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
    >>> info["new_evidence"]
    ['Odile Marchetti#9faa928859']
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping, Sequence
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any

from agent_gym.core.env import EpisodeState, ToolEnv
from agent_gym.core.history import Role, ToolCall, ToolResult
from agent_gym.core.noise import ToolNoise
from agent_gym.core.rubric import Rubric
from agent_gym.core.tool import Tool
from agent_gym.core.validation import positive_int
from agent_gym.datasets import QATask, Source, Split, embedded_path, load_qa, score_answer, select_split
from agent_gym.retrieval import BM25Retriever, Passage, RemoteRetriever, dedupe_passages, load_corpus
from agent_gym.rewards import env_rubric
from agent_gym.tools.search import SearchTool

__all__ = ["CorpusMode", "MultiHopQAEnv", "RetrieverBackend", "load_tasks"]

TASK_PROMPT = (
    "Answer the multi-hop question from the user. The answer depends on facts spread over more than one "
    "document, so search for one entity or fact at a time, read the results, and search again with what you "
    "learned, as often as you need. When you are sure, give the final answer as briefly as possible: only the "
    "exact entity, date, number, or yes/no, with no explanation."
)


class CorpusMode(StrEnum):
    """Built-in corpus modes (anything else given as ``corpus=`` is a corpus file path)."""

    QUESTION = "question"
    POOLED = "pooled"


@lru_cache(maxsize=8)
def _load_cached(path: str, source: str | None, mtime_ns: int, size: int, **options: Any) -> tuple[QATask, ...]:
    del mtime_ns, size  # part of the cache key only: a changed file is reloaded
    return tuple(load_qa(path, source=source, **options))


def load_tasks(
    data_path: Any = None,
    *,
    source: str | Source | None = None,
    split: str | Split = Split.ALL,
    limit: int | None = None,
    data_files: str | None = None,
    include_unanswerable: bool = False,
) -> tuple[QATask, ...]:
    """The tasks an env poses: a file/folder/dataset (or the embedded sample), then the split, then ``limit``.

    Loaded files are cached per process (keyed by path and modification
    time), so N environments over one file parse it once. ``data_path`` may
    also be a ``datasets.Dataset`` or a list of records (not cached);
    ``data_files`` and ``include_unanswerable`` go to :func:`~agent_gym.datasets.load_qa`.
    """
    src = Source(source) if source is not None else None
    if data_path is not None and not isinstance(data_path, str | Path):
        loaded: Sequence[QATask] = load_qa(
            data_path, source=src, data_files=data_files, include_unanswerable=include_unanswerable
        )
        path: Any = f"<{type(data_path).__name__}>"
    else:
        path = Path(data_path) if data_path is not None else embedded_path(src or Source.HOTPOTQA)
        if not path.exists():
            raise FileNotFoundError(f"data_path does not exist: {path}")
        stat = path.stat()
        loaded = _load_cached(
            str(path.resolve()),
            src.value if src else None,
            stat.st_mtime_ns,
            stat.st_size,
            data_files=data_files,
            include_unanswerable=include_unanswerable,
        )
    tasks = select_split(loaded, split)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int or None (got {limit!r})")
        tasks = tasks[:limit]
    if not tasks:
        raise ValueError(f"no tasks in split {Split(split).value!r} of {path}")
    return tuple(tasks)


class RetrieverBackend(StrEnum):
    """Search backends for the QA envs (``retriever=``); all share the ``Retriever`` protocol."""

    BM25 = "bm25"
    """bm25s + PyStemmer (the default; no extra needed)."""
    LUCENE = "lucene"
    """pyserini / Anserini BM25 (extra ``lucene``; needs Java 21+)."""
    DENSE = "dense"
    """sentence-transformers all-MiniLM-L6-v2 embeddings (extra ``dense``; slow to encode on CPU)."""
    REMOTE = "remote"
    """A Search-R1 ``/retrieve`` server at ``retriever_url`` (see :mod:`agent_gym.retrieval.server`)."""


def _make_retriever(backend: str | RetrieverBackend, passages: Sequence[Passage], url: str | None = None) -> Any:
    backend = RetrieverBackend(backend)
    if (backend is RetrieverBackend.REMOTE) != (url is not None):
        raise ValueError(
            f"retriever_url= goes with retriever='remote' and only with it (got {backend.value!r}, {url!r})"
        )
    if backend is RetrieverBackend.REMOTE:
        return RemoteRetriever(url)  # type: ignore[arg-type]
    if backend is RetrieverBackend.LUCENE:
        from agent_gym.retrieval.lucene import LuceneRetriever

        return LuceneRetriever.cached(passages)
    if backend is RetrieverBackend.DENSE:
        from agent_gym.retrieval.dense import DenseRetriever

        return DenseRetriever.cached(passages)
    return BM25Retriever.cached(passages)


class MultiHopQAEnv(ToolEnv[QATask]):
    """Multi-hop QA through a ``search`` tool (HotpotQA, 2WikiMultihopQA, MuSiQue).

    Without ``data_path`` the env poses the embedded original sample in the
    layout of ``source`` (HotpotQA: 32 questions; 2Wiki and MuSiQue: 8 each;
    fictional entities written for this project, offline, for plumbing and
    smoke tests only). Real data: ``data_path=`` a file or folder in any
    official layout (see :func:`agent_gym.datasets.load_qa`).

    Args:
        data_path: A data file or folder; ``None`` for the embedded sample.
        split: ``"train"`` (the leading 75%), ``"test"`` (the rest) or ``"all"``.
        source: Force the dataset (``"hotpotqa"``, ``"2wikimultihopqa"``,
            ``"musique"``); also picks the embedded sample.
        corpus: ``"question"`` (each question's own paragraphs), ``"pooled"``
            (all loaded paragraphs) or a path to a corpus file.
        action_format: ``"tool_call"`` or ``"tags"`` (``<search>q</search>``).
        reward: Rubric preset: ``"gated"`` (the default: evidence paid on the answer), ``"process"`` (evidence
            paid as it is found) or ``"outcome"`` (the paper's).
        answer_metric: ``"f1"`` or ``"em"`` for the answer reward.
        shaping_gamma: Add potential-based shaping with this γ (``None``: off).
        reward_weights: Override rubric term weights by name (of the preset, or of ``rubric``), e.g.
            ``{"evidence": 0.0}`` to log the evidence term without paying it.
        rubric: A complete :class:`~agent_gym.core.rubric.Rubric` of your own
            :class:`~agent_gym.core.rubric.RewardTerm` s, replacing the preset (``reward``,
            ``answer_metric`` and ``shaping_gamma`` are then not read).
        tool_noise: A :class:`~agent_gym.core.noise.ToolNoise` or a dict of its fields.
        top_k: Passages per search (a positive int).
        retriever: Search backend, ``"bm25"`` (default), ``"lucene"``,
            ``"dense"`` or ``"remote"`` (see :class:`RetrieverBackend`); one
            index per corpus is built and shared by every env in the process.
        retriever_url: The ``/retrieve`` endpoint for ``retriever="remote"``.
        max_passage_chars: Each passage is cut to this many characters (a positive int).
        limit: Use only the first ``limit`` tasks of the split.
        data_files: With a folder ``data_path``: a glob choosing its files
            (a folder mixing splits is refused without it).
        include_unanswerable: Pose MuSiQue-Full's ``answerable: false``
            questions too (skipped by default: the answerable setting).
        **kwargs: Further :class:`~agent_gym.core.env.ToolEnv` arguments
            (``max_action_length``, ``max_observation_length``, ``render_mode``, ...).

    Raises:
        ValueError: A bad argument (e.g. ``top_k=0``), caught at construction.
        FileNotFoundError: ``data_path`` does not exist.

    The env pickles and deep-copies, before ``reset`` and mid-episode: the
    copy continues exactly like the original under the same actions. Copies
    share (deep copy) or rebuild (pickle) the read-only retriever index.
    """

    def __init__(
        self,
        *,
        data_path: Any = None,
        split: str = "all",
        source: str | None = None,
        corpus: str | Path = "question",
        action_format: str = "tool_call",
        reward: str = "gated",
        answer_metric: str = "f1",
        shaping_gamma: float | None = None,
        reward_weights: Mapping[str, float] | None = None,
        rubric: Rubric | None = None,
        tool_noise: ToolNoise | Mapping[str, Any] | None = None,
        top_k: int = 3,
        retriever: str = "bm25",
        retriever_url: str | None = None,
        max_passage_chars: int = 600,
        limit: int | None = None,
        data_files: str | None = None,
        include_unanswerable: bool = False,
        **kwargs: Any,
    ) -> None:
        rubric = env_rubric(
            rubric,
            reward=reward,
            answer_metric=answer_metric,
            shaping_gamma=shaping_gamma,
            reward_weights=reward_weights,
        )
        super().__init__(rubric=rubric, action_format=action_format, tool_noise=tool_noise, **kwargs)
        self.top_k = positive_int("top_k", top_k)
        self.max_passage_chars = positive_int("max_passage_chars", max_passage_chars)
        backends = [b.value for b in RetrieverBackend]
        if retriever not in backends:
            raise ValueError(f"retriever must be one of {backends} (got {retriever!r})")
        self._tasks = load_tasks(
            data_path,
            source=source,
            split=split,
            limit=limit,
            data_files=data_files,
            include_unanswerable=include_unanswerable,
        )
        self._index_of = self._index_tasks(self._tasks)
        self._corpus, self._backend, self._retriever_url = corpus, RetrieverBackend(retriever), retriever_url
        self._attach_retriever()
        self._oracle_queries: dict[tuple[int, str], str | None] = {}

    def _attach_retriever(self) -> None:
        """Build (or fetch from the per-process cache) the retriever and the tools that hold it."""
        remote = self._backend == RetrieverBackend.REMOTE
        self.corpus_mode, passages = self._corpus_passages(self._corpus, remote=remote)
        self.retriever = _make_retriever(self._backend, passages, self._retriever_url)
        self._title_of = {p.id: p.title for p in passages}
        self._shared_tool = None if self.corpus_mode is CorpusMode.QUESTION else self._search_tool(None)
        if self.state is not None:
            self._tools = {t.name: t for t in self.make_tools(self.state.task)}

    # ------------------------------------------------------------- copying
    def __getstate__(self) -> dict[str, Any]:
        """Everything but the retriever and the tools holding it (rebuilt from the cache on load).

        A pickled env is small (tasks, episode state, random generator) and
        loads in another process, where the index is built (or found in that
        process's cache) again; the episode goes on exactly where it was.
        """
        state = self.__dict__.copy()
        state.update(retriever=None, _shared_tool=None, _tools={}, _title_of={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._attach_retriever()

    def __deepcopy__(self, memo: dict[int, Any]) -> MultiHopQAEnv:
        """A deep copy that shares the read-only retriever index instead of copying it."""
        memo[id(self.retriever)] = self.retriever
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone

    @staticmethod
    def _index_tasks(tasks: Sequence[QATask]) -> dict[str, int]:
        index: dict[str, int] = {}
        for i, t in enumerate(tasks):
            index.setdefault(t.id, i)
        if len(index) < len(tasks):
            warnings.warn(
                f"{len(tasks) - len(index)} tasks repeat an earlier task id (e.g. a folder mixing the distractor "
                "and fullwiki files of the same questions); options={'task_id': ...} selects the first",
                stacklevel=3,
            )
        return index

    def _corpus_passages(self, corpus: str | Path, remote: bool) -> tuple[CorpusMode | None, list[Passage]]:
        if isinstance(corpus, str) and corpus in {m.value for m in CorpusMode}:
            if not any(t.paragraphs for t in self._tasks):
                raise ValueError(
                    f"corpus={corpus!r} searches the tasks' own paragraphs, but this data is question-only; "
                    "pass corpus= a corpus file (open retrieval)"
                )
            paragraphs = (p.to_passage() for t in self._tasks for p in t.paragraphs)
            return CorpusMode(corpus), dedupe_passages(paragraphs)
        if remote:  # the server holds the corpus; nothing to read here
            return None, []
        path = Path(corpus)
        if not path.is_file():
            raise ValueError(f"corpus must be 'question', 'pooled' or a path to a corpus file (got {corpus!r})")
        return None, load_corpus(path)

    def _search_tool(self, allowed: Sequence[str] | None) -> SearchTool:
        return SearchTool(self.retriever, k=self.top_k, allowed=allowed, max_passage_chars=self.max_passage_chars)

    # ------------------------------------------------------------------ hooks
    @property
    def tasks(self) -> tuple[QATask, ...]:
        """The tasks of the loaded split, in order."""
        return self._tasks

    def num_tasks(self) -> int:
        return len(self._tasks)

    def load_task(self, index: int) -> QATask:
        return self._tasks[index]

    def task_index_of(self, task_id: str) -> int:
        try:
            return self._index_of[task_id]
        except KeyError:
            raise KeyError(f"no task with id {task_id!r}") from None

    def make_tools(self, task: QATask) -> Sequence[Tool]:
        if self._shared_tool is not None:
            return [self._shared_tool]
        return [self._search_tool(task.paragraph_ids)]

    def system_prompt(self, task: QATask, tools: Sequence[Tool]) -> str:
        return f"{TASK_PROMPT}\n\n{self.parser.instructions(tools)}"

    def user_prompt(self, task: QATask) -> str:
        return f"Question: {task.question}"

    def gold_evidence(self, task: QATask) -> frozenset[str]:
        """Gold supporting paragraph ids; gold titles when searching an external corpus."""
        if self.corpus_mode is None:
            return frozenset(task.paragraph(pid).title for pid in task.supporting) | set(task.missing_supporting)
        return frozenset(task.supporting)

    def revealed_evidence(self, call: ToolCall, result: ToolResult, state: EpisodeState[QATask]) -> set[str]:
        shown = super().revealed_evidence(call, result, state)
        if self.corpus_mode is None:
            return {title for pid in shown if (title := self._passage_title(pid)) is not None}
        return shown

    def _passage_title(self, pid: str) -> str | None:
        if isinstance(self.retriever, RemoteRetriever):
            return self.retriever.title_of(pid)
        return self._title_of.get(pid)

    def score_answer(self, task: QATask, answer: str) -> dict[str, float]:
        """``em``, ``f1`` and ``substring`` against every gold answer and alias."""
        return score_answer(answer, task.answers)

    # ----------------------------------------------------------------- oracle
    def oracle_action(self) -> str:
        """Retry a failed search; else search the next unfound gold paragraph; else answer.

        The query for a gold paragraph is its title, or the title plus the
        question, or the title plus the paragraph's opening words (then its
        whole text) - the first that retrieves it with the episode's own
        search settings (same retriever, ``k`` and allowed passages).
        Gold paragraphs no query reaches (e.g. absent from an external corpus)
        are skipped.
        """
        state = self.state
        if state is None or state.done:
            raise RuntimeError("oracle_action() needs a running episode; call reset() first")
        messages = state.history.messages
        last = messages[-1]
        if last.role is Role.TOOL and not last.ok:
            failed = next(m for m in reversed(messages) if m.role is Role.ASSISTANT).tool_calls[-1]
            if _oracle_shaped(failed):  # a call the oracle writes can only fail transiently (noise): retry
                return self.parser.format_call(failed.name, failed.arguments)
        for item in self._ordered_evidence(state.task):
            if item in state.found:
                continue
            query = self._oracle_query(state, item)
            if query is not None:
                return self.parser.format_call("search", {"query": query})
        return self.parser.format_answer(state.task.answers[0])

    def _ordered_evidence(self, task: QATask) -> list[str]:
        if self.corpus_mode is None:
            titles = [task.paragraph(pid).title for pid in task.supporting]
            return list(dict.fromkeys([*titles, *task.missing_supporting]))
        return list(task.supporting)

    def _oracle_query(self, state: EpisodeState[QATask], item: str) -> str | None:
        key = (state.task_index, item)
        if key not in self._oracle_queries:
            self._oracle_queries[key] = self._find_query(state.task, item)
        return self._oracle_queries[key]

    def _find_query(self, task: QATask, item: str) -> str | None:
        tool = self.tools["search"]
        assert isinstance(tool, SearchTool)
        by_title = self.corpus_mode is None
        title = item if by_title else self._title_of.get(item, "")
        paragraph = next((p for p in task.paragraphs if (p.title if by_title else p.id) == item), None)
        candidates = [title, f"{title} {task.question}"]
        if paragraph is not None:
            words = paragraph.text.split()
            candidates += [f"{title} {' '.join(words[:40])}", f"{title} {' '.join(words)}"]
        for query in candidates:
            hits = self.retriever.search(query, k=tool.k, allowed=tool.allowed)
            keys = {h.passage.title if by_title else h.passage.id for h in hits}
            if item in keys:
                return query
        return None


def _oracle_shaped(call: ToolCall) -> bool:
    """A well-formed ``search(query=...)`` call, the only kind the oracle writes.

    Another failed call (an unknown tool, bad arguments - e.g. written by a
    policy the oracle takes over from) would fail again if repeated.
    """
    query = call.arguments.get("query")
    return call.name == "search" and set(call.arguments) == {"query"} and isinstance(query, str) and bool(query.strip())
