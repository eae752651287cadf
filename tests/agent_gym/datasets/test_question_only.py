"""Question-only data (Search-R1 / FlashRAG / the shared qa_only lists) and in-memory datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_gym.datasets import DatasetFormatError, Layout, detect_layout, embedded_path, load_qa

QA_ONLY = [
    # file, count, source, first answers
    ("hotpotqa_dev_7405_qa.json", 7405, "open", ("yes",)),
    ("2wikimultihopqa_dev_12576_qa.json", 12576, "open", ("Małgorzata Braunek",)),
    ("musique_ans_dev_2417_qa.json", 2417, "open", ("Miquette Giraudy",)),
    ("nq_open_test_3610_qa.json", 3610, "open", ("14 December 1972 UTC", "December 1972")),
    ("bamboogle_test_125.csv", 125, "open", ("james madison",)),
    ("musique_ans_dev_2417_decomp_no_paragraphs.json", 2417, "musique", ("Miquette Giraudy",)),
    ("2wikimultihopqa_dev_4000_evidences_no_context.json", 4000, "2wikimultihopqa", ("What Price Hollywood?",)),
]


@pytest.mark.parametrize(("name", "count", "source", "first"), QA_ONLY)
def test_shared_question_only_files(shared_data: Path, name: str, count: int, source: str, first) -> None:
    tasks = load_qa(shared_data / "qa_only" / name)
    assert len(tasks) == count
    assert {t.source for t in tasks} == {source}
    assert tasks[0].answers == first
    assert all(t.paragraphs == () and t.supporting == () for t in tasks)
    assert len({t.id for t in tasks}) == count  # ids are unique (generated "<stem>-<n>" where the file has none)


def test_2wiki_without_context_keeps_gold_titles_for_open_retrieval(shared_data: Path) -> None:
    tasks = load_qa(shared_data / "qa_only/2wikimultihopqa_dev_4000_evidences_no_context.json")
    first = tasks[0]
    assert first.missing_supporting == ("Taxi!", "What Price Hollywood?", "Roy Del Ruth", "George Cukor")
    assert first.hops == 4 and first.type == "bridge_comparison" and first.evidences
    assert all(t.missing_supporting for t in tasks)


def test_generated_ids_and_answer_fields(tmp_path: Path) -> None:
    rows = [
        {"question": "q0?", "golden_answers": ["a", "b"]},  # FlashRAG / Search-R1
        {"question": "q1?", "answers": ["c"], "id": "x1"},
        {"question": "q2?", "answer": 7},
    ]
    path = tmp_path / "open.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    tasks = load_qa(path)
    assert [(t.id, t.answers, t.source) for t in tasks] == [
        ("open-0", ("a", "b"), "open"),
        ("x1", ("c",), "open"),
        ("open-2", ("7",), "open"),
    ]
    assert detect_layout(rows[0]) is Layout.QUESTION_ONLY
    assert [t.source for t in load_qa(path, source="hotpotqa")] == ["hotpotqa"] * 3


@pytest.mark.parametrize(
    ("row", "pattern"),
    [
        ({"question": "q?", "answers": []}, "the gold answer is empty"),
        ({"question": "q?", "answer": None}, "field 'answer' must be a string or a list of strings"),
        ({"question": ["q?"], "answer": "a"}, "field 'question' must be a str"),
        ({"question": "q?"}, "unknown record layout"),
    ],
)
def test_bad_question_only_records(tmp_path: Path, row: dict, pattern: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"question": "fine?", "answer": "yes"}, row]), encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=rf"bad\.json: record 1: .*{pattern}"):
        load_qa(path)


def test_datasets_dataset_and_record_lists_are_accepted(tmp_path: Path) -> None:
    # Hugging Face datasets: the submodule, since a bare "datasets" folder on sys.path (tests/agent_gym/datasets)
    # imports as an empty namespace package where the library is not installed
    pytest.importorskip("datasets.arrow_dataset")
    import datasets

    records = json.loads(embedded_path("hotpotqa").read_text(encoding="utf-8"))
    hf_rows = [
        {
            "id": r["_id"],
            "question": r["question"],
            "answer": r["answer"],
            "type": r["type"],
            "level": r["level"],
            "supporting_facts": {
                "title": [t for t, _ in r["supporting_facts"]],
                "sent_id": [s for _, s in r["supporting_facts"]],
            },
            "context": {"title": [t for t, _ in r["context"]], "sentences": [s for _, s in r["context"]]},
        }
        for r in records
    ]
    dataset = datasets.Dataset.from_list(hf_rows)
    official = load_qa(embedded_path("hotpotqa"))
    assert load_qa(dataset) == official
    assert load_qa(records) == official  # a plain list of official records
    assert load_qa(dataset, limit=3) == official[:3]
    open_rows = datasets.Dataset.from_list([{"question": "q?", "golden_answers": ["a"]}])
    assert [(t.id, t.answers) for t in load_qa(open_rows)] == [("record-0", ("a",))]
    with pytest.raises(DatasetFormatError, match=r"a DatasetDict holds several splits \(train, validation\)"):
        load_qa(datasets.DatasetDict({"train": dataset, "validation": dataset}))
    broken = datasets.Dataset.from_list([{"question": "q?", "context": "nope"}])
    with pytest.raises(DatasetFormatError, match=r"<datasets\.Dataset .*>: record 0: unknown record layout"):
        load_qa(broken)
    with pytest.raises(TypeError, match=r"expected a path, a datasets\.Dataset or a list"):
        load_qa(42)
