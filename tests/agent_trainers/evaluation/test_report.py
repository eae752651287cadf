"""Table 3 from evaluation folders, and the demo's comparison lines, on hand-made records."""

from __future__ import annotations

import csv
import io
import json

import pytest

from agent_trainers.evaluation import EvalFolder
from agent_trainers.evaluation.compare import change_statement, changed_answers, comparison_markdown, load_run
from agent_trainers.evaluation.report import build_report
from tests.agent_trainers.evaluation.test_records import make


def folder(tmp_path, label, dataset, ems, f1s=None, answers=None):
    """An evaluation folder with one record per EM value (as ``run_eval`` writes it)."""
    path = tmp_path / f"{label}-{dataset}".replace(" ", "_")
    out = EvalFolder(path)
    out.start({"label": label}, resume=False)
    records = [make(i, em=em, f1=(f1s or ems)[i]) for i, em in enumerate(ems)]
    for r, answer in zip(records, answers or [None] * len(records), strict=True):
        r.answer = answer if answer is not None else r.answer
        out.append(r)
    summary = {"label": label, "dataset": dataset, "episodes": len(records), "metrics": {}, "by_type": {}}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_table3_layout_cells_and_average(tmp_path):
    dirs = [
        folder(tmp_path, "naive RAG", "hotpotqa", [1, 0, 0, 0]),  # 0.25
        folder(tmp_path, "naive RAG", "2wikimultihopqa", [1, 1, 0, 0]),  # 0.5
        folder(tmp_path, "naive RAG", "musique", [0, 0, 0, 0]),  # 0.0
        folder(tmp_path, "agent", "musique", [1, 1, 1, 1]),
        folder(tmp_path, "agent", "hotpotqa", [1, 1, 1, 0]),
    ]
    report = build_report(dirs)
    assert report.columns == ["hotpotqa", "2wikimultihopqa", "musique"]  # the paper's order, whatever the input's
    assert list(report.rows) == ["naive RAG", "agent"]
    assert report.rows["naive RAG"]["2wikimultihopqa"].mean == 0.5
    assert report.average["naive RAG"].mean == pytest.approx(0.25)  # (0.25 + 0.5 + 0) / 3
    assert "agent" not in report.average  # no 2Wiki evaluation: no average
    md = report.to_markdown()
    head, _, naive, agent = md.splitlines()[:4]
    assert head == "| method | HotpotQA (in-domain) | 2Wiki (in-domain) | MuSiQue (out-of-domain) | average |"
    assert naive.startswith("| naive RAG | 0.250 [") and "| 0.000 [0.000, 0.000] |" in naive
    assert agent.startswith("| agent | 0.750 [") and agent.endswith("| — | 1.000 [1.000, 1.000] | — |")
    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert [(r["method"], r["dataset"], r["domain"]) for r in rows][:4] == [
        ("naive RAG", "hotpotqa", "in-domain"),
        ("naive RAG", "2wikimultihopqa", "in-domain"),
        ("naive RAG", "musique", "out-of-domain"),
        ("naive RAG", "average", ""),
    ]
    assert float(rows[3]["mean"]) == pytest.approx(0.25) and rows[3]["n"] == "12"


def test_in_domain_is_configurable_and_other_metrics_work(tmp_path):
    dirs = [folder(tmp_path, "a", "hotpotqa", [1, 0], f1s=[1.0, 0.5]), folder(tmp_path, "a", "musique", [0, 0])]
    report = build_report(dirs, metric="f1", in_domain=["hotpotqa"])
    assert report.title("hotpotqa") == "HotpotQA (in-domain)" and report.title("musique") == "MuSiQue (out-of-domain)"
    assert report.rows["a"]["hotpotqa"].mean == 0.75


def test_bad_inputs_are_clear_errors(tmp_path):
    a = folder(tmp_path, "a", "hotpotqa", [1])
    with pytest.raises(ValueError, match="two evaluations of 'a' on 'hotpotqa'"):
        build_report([a, a])
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(FileNotFoundError, match="not a finished evaluation"):
        build_report([tmp_path / "unfinished"])
    with pytest.raises(ValueError, match="no question has metric 'substring'"):
        build_report([a], metric="substring")


def test_change_statements(tmp_path):
    base = load_run(folder(tmp_path, "base", "hotpotqa", [0] * 10, f1s=[0.0] * 10, answers=["x"] * 10))
    better = load_run(folder(tmp_path, "sft", "hotpotqa", [0] * 10, f1s=[0.5] * 10, answers=["x"] * 5 + ["y"] * 5))
    line = change_statement("SFT", better, base)
    assert line.startswith("SFT changed f1 +0.500 [+0.500, +0.500] ")
    assert line.endswith("(vs base; 10 questions, 5 answers changed)")
    assert " em " not in line  # EM did not move: not named
    same = change_statement("RL", base, base)
    assert same == "RL changed no metric measurably (every 95% interval includes 0; f1 +0.000 [+0.000, +0.000]) " \
                   "(vs base; 10 questions, 0 answers changed)"  # fmt: skip
    assert changed_answers(better, base) == (5, 10)
    table = comparison_markdown([base, better])
    assert (
        table.splitlines()[2].startswith("| base | 0.000 [0.000, 0.000] | 0.000 [")
        and "| — |" not in table.splitlines()[2][:40]
    )


def test_a_pipe_or_line_break_in_a_label_stays_inside_its_cell(tmp_path):
    """`agent-r1 report` once wrote a `|` in a label raw: the row gained a column (issue 25, item 12)."""
    dirs = [folder(tmp_path, "GRPO | lr 5e-6", "hotpotqa", [1, 0]), folder(tmp_path, "two\nlines", "hotpotqa", [1, 1])]
    lines = build_report(dirs).to_markdown().splitlines()
    assert lines[2].startswith("| GRPO \\| lr 5e-6 | 0.500 [") and lines[3].startswith("| two lines | 1.000 [")
    for row in lines[:4]:  # every row has the header's 3 cells: unescaped pipes are only the separators
        assert row.replace("\\|", "").count("|") == 4
    table = comparison_markdown([load_run(d) for d in dirs])
    assert "| GRPO \\| lr 5e-6 |" in table and all(r.replace("\\|", "").count("|") == table.splitlines()[0].count("|")
                                                  for r in table.splitlines())  # fmt: skip


def test_a_column_refuses_evaluations_of_other_questions(tmp_path):
    """`agent-r1 report` merged runs on different data into one HotpotQA column (issue 26, item 6)."""

    def spec(path, **fields):
        (path / "spec.json").write_text(json.dumps({"label": path.name, **fields}))
        return path

    a = spec(folder(tmp_path, "naive RAG", "hotpotqa", [1, 0]), env_kwargs={"data_path": "dev_a.jsonl"}, limit=2)
    b = spec(folder(tmp_path, "agent", "hotpotqa", [1, 1]), env_kwargs={"data_path": "dev_b.jsonl"}, limit=2)
    with pytest.raises(ValueError, match=r"'hotpotqa' column would mix .* data_path 'dev_a.jsonl' vs 'dev_b.jsonl'"):
        build_report([a, b])
    spec(b, env_kwargs={"data_path": "dev_a.jsonl", "top_k": 5}, limit=2)  # same questions, another retrieval setting
    assert build_report([a, b]).rows["agent"]["hotpotqa"].mean == 1.0
    spec(b, env_kwargs={"data_path": "dev_a.jsonl"}, limit=2, start=100)  # same file, other task range
    with pytest.raises(ValueError, match=r"start 0 vs 100"):
        build_report([a, b])
    c = spec(folder(tmp_path, "agent", "musique", [0, 1]), env_kwargs={"data_path": "musique.jsonl"}, limit=2)
    assert build_report([a, c]).columns == ["hotpotqa", "musique"]  # other columns may use other data
