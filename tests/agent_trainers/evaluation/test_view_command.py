"""``agent-r1 view`` as a user runs it, from a folder outside the repository (issue 41.8).

SQLite and Calculator pages showed ``gold: ·`` (the gold answer was stored as ``[]``), the env's feedback was
labelled USER, a reply cut at the token limit was not marked, a run of blank lines drew ~1,000 px, and the
command imported torch (9-11 s) even to say "no such file".
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import gymnasium as gym
import pytest

from agent_trainers.evaluation.records import describe_tasks, gold_texts
from agent_trainers.rollout import StopReason, Trajectory, TurnSpan, save_jsonl
from tests.conftest import AGENT_R1_IMPORT, REPO_ROOT, run_agent_r1

HEAVY = ("torch", "transformers", "trl")
_PROBE = f"""
import sys
{AGENT_R1_IMPORT}
code = main(sys.argv[1:])
print("exit", code, *sorted(m for m in {HEAVY!r} if m in sys.modules))
"""


def page_data(page: Path) -> list[dict]:
    """The cards embedded in a viewer page."""
    html = page.read_text(encoding="utf-8")
    start = html.index('<script type="application/json" id="data">') + len('<script type="application/json" id="data">')
    return json.loads(html[start : html.index("</script>", start)])


def run_probe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``agent-r1 ARGS`` in ``cwd``, reporting which heavy modules the process imported."""
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": str(Path(sys.executable).parent)}
    return subprocess.run(
        [sys.executable, "-P", "-c", _PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


@pytest.fixture(scope="module")
def sqlite_eval(tmp_path_factory) -> Path:
    """``agent-r1 eval --env AgentR1/SQLite-v0 --model tiny-random --limit 2``: replies of 6 tokens, all cut."""
    work = tmp_path_factory.mktemp("user")
    args = ["--model", "tiny-random", "--limit", "2", "--max-turns", "3", "--max-new-tokens-per-turn", "6"]
    done = run_agent_r1("eval", "--env", "AgentR1/SQLite-v0", *args, "--out", "ev", cwd=work)
    assert done.returncode == 0, done.stderr
    return work


@pytest.mark.slow  # its fixture runs agent-r1 eval in a subprocess (~20 s); CI runs it after the default suite
def test_the_eval_page_shows_the_gold_the_env_feedback_and_the_cut_replies(sqlite_eval):
    done = run_agent_r1("view", "ev/episodes.jsonl", "-o", "view.html", cwd=sqlite_eval)
    assert done.returncode == 0, done.stderr
    cards = page_data(sqlite_eval / "view.html")
    tasks = describe_tasks(gym.make("AgentR1/SQLite-v0"), [0, 1])
    assert [c["gold"] for c in cards] == [list(t.answers) for t in tasks] and all(c["gold"] for c in cards)
    for card in cards:
        labels = [v["label"] for v in card["views"]]
        first_reply = labels.index("assistant")
        assert labels[:first_reply] == ["system", "user"] and "user" not in labels[first_reply:]
        assert "env feedback (user message)" in labels  # the random model's replies are malformed: feedback
        replies = [v for v in card["views"] if v["label"] == "assistant"]
        assert all(t["cut"] for t in card["turns"]) and len(replies) == len(card["turns"])
        assert all(v["note"].startswith("cut at the token limit (6 tokens): the reply is unfinished") for v in replies)


def test_the_gold_of_every_kind_of_task_is_drawn():
    gold = gold_texts([(26.74,), Fraction(2078, 25), Fraction(1, 3), "Paris", None])
    assert gold == ["26.74", "83.12", "1/3", "Paris"]
    calculator = describe_tasks(gym.make("AgentR1/Calculator-v0"), [0])[0]
    assert calculator.answers == ("83.12",)  # Fraction(2078, 25), as the agent writes it


def test_runs_of_blank_lines_are_one_counted_line(tmp_path):
    traj = Trajectory("AgentR1/Calculator-v0", {}, 0, "calc-0-0", 0, 0, stop_reason=StopReason.MAX_TURNS)
    traj.messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "let me think" + "\n" * 60 + "  \n\t\n" + "done"},
        {"role": "user", "content": "Format error: no tool call and no answer."},
        {"role": "assistant", "content": "\n" * 64},
    ]
    traj.turns = [TurnSpan(0, 0, 0), TurnSpan(0, 0, 0, cut=True)]
    save_jsonl([traj], tmp_path / "rollout.jsonl")
    done = run_agent_r1("view", "rollout.jsonl", "--tokenizer", "none", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    views = page_data(tmp_path / "rollout.html")[0]["views"]
    assert views[2] == {"label": "assistant", "text": "let me think\n[61 blank lines]\ndone", "note": None}
    assert views[3]["label"] == "env feedback (user message)"
    note = "cut at the token limit: the reply is unfinished; (64 whitespace characters)"  # text mode: no ids
    assert views[4] == {"label": "assistant", "text": "", "note": note}


@pytest.mark.slow  # the same fixture, and two subprocesses; CI runs it after the default suite
def test_view_imports_nothing_heavy(sqlite_eval, smollm2_tokenizer):
    """Not even to draw the tokens: SmolLM2's converted tokenizer.json is read by the tokenizers library (the
    fixture makes that file, as the first load of smollm2 does)."""
    missing = run_probe("view", "no-such-file.jsonl", cwd=sqlite_eval)
    assert missing.stderr == "agent-r1 view: error: no-such-file.jsonl: no such file\n"
    assert missing.stdout.split() == ["exit", "2"]  # no heavy module named after the exit code
    drawn = run_probe("view", "ev/episodes.jsonl", "-o", "tokens.html", cwd=sqlite_eval)
    assert drawn.stdout.splitlines()[-1] == "exit 0", drawn.stderr
    cards = page_data(sqlite_eval / "tokens.html")
    assert all(c["segments"] and {s[0] for s in c["segments"]} == {0, 1} for c in cards)  # model and env tokens
