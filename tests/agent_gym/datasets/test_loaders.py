"""Loaders: every official layout, the embedded samples, the shared real files, and malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_gym.datasets import (
    EMBEDDED_FILES,
    DatasetFormatError,
    Layout,
    Source,
    embedded_path,
    load_embedded,
    load_qa,
    normalize_answer,
)

# ------------------------------------------------------------------ shared real data
CONTEXT_FILES = [
    ("hotpotqa/dev_distractor_sample_a_300.jsonl", 300, "hotpotqa"),
    ("hotpotqa/dev_distractor_sample_b_300.jsonl", 300, "hotpotqa"),
    ("hotpotqa/dev_distractor_sample_c_500.jsonl", 500, "hotpotqa"),
    ("hotpotqa/dev_distractor_head_53_official.json", 53, "hotpotqa"),
    ("hotpotqa/train_100_official.json", 100, "hotpotqa"),
    ("2wikimultihopqa/dev_503.jsonl", 503, "2wikimultihopqa"),
    ("musique/ans_dev_100.json", 100, "musique"),
    ("musique/ans_train_100.json", 100, "musique"),
]


@pytest.mark.parametrize(("name", "count", "source"), CONTEXT_FILES)
def test_shared_files_load_with_every_gold_paragraph(shared_data: Path, name: str, count: int, source: str) -> None:
    tasks = load_qa(shared_data / name)
    assert len(tasks) == count
    assert {t.source for t in tasks} == {source}
    assert len({t.id for t in tasks}) == count
    for t in tasks:
        assert t.answers and all(a.strip() for a in t.answers)
        assert not t.missing_supporting, f"{t.id}: gold titles missing from the context: {t.missing_supporting}"
        assert len(t.supporting) >= 2
        assert set(t.supporting) <= set(t.paragraph_ids)
    if source == "musique":
        for t in tasks:
            assert t.hops == len(t.decomposition) >= 2
            assert t.type is not None and t.type.startswith(f"{t.hops}hop")
            assert {s.paragraph_id for s in t.decomposition} >= set(t.supporting)
    if source == "2wikimultihopqa":
        assert all(t.evidences for t in tasks)
        assert {t.type for t in tasks} == {"compositional", "bridge_comparison", "comparison", "inference"}


def test_fullwiki_records_missing_gold_paragraphs(shared_data: Path) -> None:
    tasks = load_qa(shared_data / "hotpotqa/dev_fullwiki_500.jsonl")
    assert len(tasks) == 500
    complete = [t for t in tasks if not t.missing_supporting]
    assert len(complete) == 134  # the data README's figure
    for t in tasks:
        gold_titles = {title for title, _ in t.supporting_facts}
        present = {t.paragraph(pid).title for pid in t.supporting}
        assert present | set(t.missing_supporting) == gold_titles
        assert not present & set(t.missing_supporting)


def test_folder_of_one_split_loads_every_data_file_and_skips_the_corpus(shared_data: Path) -> None:
    # 2wikimultihopqa/ holds dev_503.jsonl and corpus_6119_passages.json: the corpus file is not QA data
    assert len(load_qa(shared_data / "2wikimultihopqa")) == 503


@pytest.mark.parametrize(
    ("folder", "groups"),
    [
        ("hotpotqa", ["dev+distractor: dev_distractor_head_53_official.json", "dev+fullwiki:", "train:"]),
        ("musique", ["dev+ans: ans_dev_100.json", "train+ans: ans_train_100.json"]),
    ],
)
def test_folder_mixing_splits_is_refused_with_the_files_listed(shared_data: Path, folder: str, groups) -> None:
    with pytest.raises(DatasetFormatError, match=rf"{folder}: the folder mixes {len(groups)} splits/settings") as err:
        load_qa(shared_data / folder)
    for group in groups:
        assert group in str(err.value)


def test_data_files_glob_chooses_inside_a_folder(shared_data: Path) -> None:
    dev = load_qa(shared_data / "hotpotqa", data_files="dev_distractor_*")
    assert len(dev) == 53 + 300 + 300 + 500  # the four distractor dev files, nothing from train or fullwiki
    assert len(load_qa(shared_data / "musique", data_files="ans_train_*", limit=150)) == 100
    with pytest.raises(DatasetFormatError, match=r"no data file matches data_files='nothing\*'"):
        load_qa(shared_data / "musique", data_files="nothing*")
    with pytest.raises(ValueError, match="selects files inside a folder"):
        load_qa(shared_data / "musique/ans_dev_100.json", data_files="*")


# ------------------------------------------------------------------- embedded samples
@pytest.mark.parametrize(
    ("source", "n", "n_train"), [("hotpotqa", 32, 24), ("2wikimultihopqa", 8, 6), ("musique", 8, 6)]
)
def test_embedded_samples_and_fixed_split(source: str, n: int, n_train: int) -> None:
    everything = load_embedded(source)
    train, test = load_embedded(source, "train"), load_embedded(source, "test")
    assert len(everything) == n and len(train) == n_train and len(test) == n - n_train
    assert train + test == everything
    assert {t.source for t in everything} == {source}


def test_embedded_hotpotqa_sample_is_consistent() -> None:
    """Every gold sentence exists, and every non-yes/no answer is stated in a gold paragraph."""
    tasks = load_embedded("hotpotqa")
    assert {t.type for t in tasks} == {"bridge", "comparison"}
    for t in tasks:
        assert len(t.paragraphs) == 10 and len(t.supporting) == 2
        gold = [t.paragraph(pid) for pid in t.supporting]
        for title, sent_id in t.supporting_facts:
            paragraph = next(p for p in gold if p.title == title)
            assert 0 <= sent_id < len(paragraph.sentences)
        if t.answer not in ("yes", "no"):
            assert normalize_answer(t.answer) in normalize_answer(" ".join(p.text for p in gold)), t.question


def test_embedded_files_are_in_three_layouts() -> None:
    first_lines = {s: embedded_path(s).read_text(encoding="utf-8").lstrip()[:1] for s in EMBEDDED_FILES}
    assert first_lines == {Source.HOTPOTQA: "[", Source.TWOWIKI: "{", Source.MUSIQUE: "{"}
    musique = load_embedded("musique")
    assert {t.hops for t in musique} == {2, 3}
    assert all(len(t.answers) >= 1 for t in musique) and any(len(t.answers) > 1 for t in musique)


# ------------------------------------------------------------------ layouts round trip
def _official_records() -> list[dict]:
    return json.loads(embedded_path("hotpotqa").read_text(encoding="utf-8"))


def _to_hugging_face(rec: dict) -> dict:
    return {
        "id": rec["_id"],
        "question": rec["question"],
        "answer": rec["answer"],
        "type": rec["type"],
        "level": rec["level"],
        "supporting_facts": {
            "title": [t for t, _ in rec["supporting_facts"]],
            "sent_id": [s for _, s in rec["supporting_facts"]],
        },
        "context": {"title": [t for t, _ in rec["context"]], "sentences": [s for _, s in rec["context"]]},
    }


def test_hugging_face_layout_as_json_list_and_lines_matches_official(tmp_path: Path) -> None:
    records = _official_records()
    hf = [_to_hugging_face(r) for r in records]
    (tmp_path / "hf.json").write_text(json.dumps(hf), encoding="utf-8")
    (tmp_path / "hf.jsonl").write_text("\n".join(json.dumps(r) for r in hf) + "\n", encoding="utf-8")
    (tmp_path / "official.jsonl").write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    official = load_qa(embedded_path("hotpotqa"))
    assert load_qa(tmp_path / "hf.json") == official
    assert load_qa(tmp_path / "hf.jsonl") == official
    assert load_qa(tmp_path / "official.jsonl") == official


def test_musique_json_list_matches_json_lines(tmp_path: Path) -> None:
    lines = embedded_path("musique").read_text(encoding="utf-8").splitlines()
    (tmp_path / "m.json").write_text(json.dumps([json.loads(x) for x in lines], indent=2), encoding="utf-8")
    assert load_qa(tmp_path / "m.json") == load_embedded("musique")


def test_source_override_and_mismatch() -> None:
    as_2wiki = load_qa(embedded_path("hotpotqa"), source="2wikimultihopqa", limit=2)
    assert [t.source for t in as_2wiki] == ["2wikimultihopqa"] * 2
    with pytest.raises(DatasetFormatError, match=r"record 0: source='musique' does not match the record layout"):
        load_qa(embedded_path("hotpotqa"), source="musique")
    assert Layout.MUSIQUE.value == "musique"


def test_limit() -> None:
    assert len(load_qa(embedded_path("hotpotqa"), limit=5)) == 5
    assert load_qa(embedded_path("hotpotqa"), limit=0) == []
    with pytest.raises(ValueError, match="limit must be"):
        load_qa(embedded_path("hotpotqa"), limit=-1)


# ------------------------------------------------------------------- malformed files
def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_truncated_json_list_names_file_and_record(tmp_path: Path) -> None:
    text = json.dumps(_official_records()[:4])
    cut = text.index('"_id": "agr1-hotpot-002"') + 40  # inside the third record
    path = _write(tmp_path, "cut.json", text[:cut])
    with pytest.raises(DatasetFormatError, match=r"cut\.json: record 2: invalid JSON .* truncated"):
        load_qa(path)
    unclosed = _write(tmp_path, "unclosed.json", text[:-1])
    with pytest.raises(DatasetFormatError, match=r"unclosed\.json: record 4: the JSON list is not closed"):
        load_qa(unclosed)


def test_truncated_json_lines_names_the_record(tmp_path: Path) -> None:
    lines = embedded_path("2wikimultihopqa").read_text(encoding="utf-8").splitlines()
    path = _write(tmp_path, "cut.jsonl", "\n".join([*lines[:3], lines[3][:100]]))
    with pytest.raises(DatasetFormatError, match=r"cut\.jsonl: record 3 \(line 4\): invalid JSON"):
        load_qa(path)


def test_missing_field_names_the_field_and_record(tmp_path: Path) -> None:
    records = _official_records()[:3]
    del records[1]["question"]
    path = _write(tmp_path, "noq.json", json.dumps(records))
    with pytest.raises(DatasetFormatError, match=r"noq\.json: record 1: missing field 'question'"):
        load_qa(path)


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda r: r.update(context=[["only a title"]]), r"context\[0\] must be \[title, \[sentences\]\]"),
        (lambda r: r.update(supporting_facts=[["T", "zero"]]), r"supporting_facts\[0\] sent_id must be an integer"),
        (lambda r: r.update(supporting_facts=[["T"]]), r"supporting_facts\[0\] must be \[title, sent_id\]"),
        (lambda r: r.update(answer=["a", 1.5, None]), r"field 'answer' must be a string or a list of strings"),
        (lambda r: r.update(answer=float("inf")), r"field 'answer' holds a non-finite number"),
        (lambda r: r.update(evidences=[["a", 2, "c"]]), "evidences must hold strings"),
        (lambda r: r.update(answer=""), "the gold answer is empty"),
        (lambda r: r.update(question=7), "field 'question' must be a str"),
        (lambda r: r.update(context="not paragraphs"), "unknown record layout"),
    ],
)
def test_bad_records_raise_one_clear_error(tmp_path: Path, mutate, pattern: str) -> None:
    records = _official_records()[:2]
    mutate(records[1])
    path = _write(tmp_path, "bad.json", json.dumps(records))
    with pytest.raises(DatasetFormatError, match=rf"bad\.json: record 1: .*{pattern}"):
        load_qa(path)


def test_layout_change_inside_a_file_is_an_error(tmp_path: Path) -> None:
    official = _official_records()[:2]
    mixed = [official[0], _to_hugging_face(official[1])]
    path = _write(tmp_path, "mixed.json", json.dumps(mixed))
    with pytest.raises(DatasetFormatError, match=r"record 1: layout 'context_dict' differs"):
        load_qa(path)


def test_empty_binary_and_missing_inputs(tmp_path: Path) -> None:
    with pytest.raises(DatasetFormatError, match="the file is empty"):
        load_qa(_write(tmp_path, "empty.json", "  \n"))
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DatasetFormatError, match="not UTF-8"):
        load_qa(binary)
    with pytest.raises(DatasetFormatError, match=r"record 0 .*invalid JSON"):
        load_qa(_write(tmp_path, "prose.json", "hello world"))
    with pytest.raises(DatasetFormatError, match="must be a JSON object"):
        load_qa(_write(tmp_path, "numbers.json", "[1, 2]"))
    (tmp_path / "nodata").mkdir()
    with pytest.raises(DatasetFormatError, match=r"holds no \.json, \.jsonl, \.csv data files"):
        load_qa(tmp_path / "nodata")
    with pytest.raises(FileNotFoundError):
        load_qa(tmp_path / "absent.json")
    assert issubclass(DatasetFormatError, ValueError)


def test_musique_full_unanswerable_records_skipped_by_default(tmp_path: Path) -> None:
    records = [json.loads(x) for x in embedded_path("musique").read_text(encoding="utf-8").splitlines()]
    records[1]["answerable"] = False
    records[4]["answerable"] = False
    path = _write(tmp_path, "full.jsonl", "\n".join(json.dumps(r) for r in records))
    kept = load_qa(path)
    assert [t.id for t in kept] == [r["id"] for i, r in enumerate(records) if i not in (1, 4)]
    everything = load_qa(path, include_unanswerable=True)
    assert [t.answerable for t in everything] == [i not in (1, 4) for i in range(8)]
    assert [t.id for t in load_qa(path, limit=2)] == [records[0]["id"], records[2]["id"]]
    for r in records:
        r["answerable"] = False
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=r"all 8 records are unanswerable.*include_unanswerable=True"):
        load_qa(path)
    records[0]["answerable"] = "no"
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    with pytest.raises(DatasetFormatError, match="record 0: field 'answerable' must be true or false"):
        load_qa(path, include_unanswerable=True)


def test_shared_musique_samples_are_all_answerable(shared_data: Path) -> None:
    """The shared MuSiQue files are MuSiQue-Ans: the default skips none (0 of 2,617 records unanswerable)."""
    files = [
        "musique/ans_dev_100.json",
        "musique/ans_train_100.json",
        "qa_only/musique_ans_dev_2417_decomp_no_paragraphs.json",
    ]
    for name in files:
        assert len(load_qa(shared_data / name)) == len(load_qa(shared_data / name, include_unanswerable=True))
    assert sum(len(load_qa(shared_data / name)) for name in files) == 2617
