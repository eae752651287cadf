"""`agent-r1 eval / report / view / serve-retrieval` end to end (tiny random model, scripted servers)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import agent_gym
from agent_gym.datasets import embedded_path
from agent_gym.envs.qa import load_tasks
from agent_trainers.pipeline.cli import main

TINY = ["--model", "tiny-random", "--max-turns", "1", "--max-new-tokens-per-turn", "4", "--max-total-tokens", "1024"]


def summary(folder):
    return json.loads((folder / "summary.json").read_text())


@pytest.mark.parametrize("env_id", [e for e, _ in agent_gym.list_envs()])
def test_the_defaults_work_on_every_registered_env(env_id, tmp_path, one_thread):
    out = tmp_path / "ev"
    assert main(["eval", "--env", env_id, *TINY, "--limit", "2", "--out", str(out)]) == 0
    s = summary(out)
    assert (s["episodes"], s["method"], s["env_id"]) == (2, "agent", env_id)
    spec = json.loads((out / "spec.json").read_text())
    qa = "QA" in env_id or "MuSiQue" in env_id
    assert spec["env_kwargs"] == ({"split": "test"} if qa else {})  # SQLite/Calculator take no split


def test_data_path_env_kwargs_and_the_baselines(tmp_path, one_thread, capsys):
    data = embedded_path("musique")
    for method in ("closed-book", "naive-rag", "base-tool-call"):
        out = tmp_path / method
        argv = ["eval", "--env", "AgentR1/MuSiQue-v0", "--data-path", str(data), "--method", method, *TINY]
        assert main([*argv, "--env-kwargs", '{"top_k": 1}', "--limit", "3", "--out", str(out)]) == 0
        s = summary(out)
        assert (s["dataset"], s["episodes"], s["label"]) == ("musique", 3, method)
        assert json.loads((out / "spec.json").read_text())["env_kwargs"] == {"top_k": 1, "data_path": str(data)}
    assert "3 questions in" in capsys.readouterr().out


def test_a_folder_mixing_splits_is_refused_and_a_glob_chooses(shared_data, tmp_path, capsys, one_thread):
    argv = ["eval", "--data-path", str(shared_data / "hotpotqa"), "--method", "closed-book", *TINY, "--limit", "1"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-r1 eval: error: ") and "data_files" in err and len(err.strip().splitlines()) == 1
    glob = "dev_distractor_sample_a_*"
    assert main([*argv, "--data-files", glob, "--out", str(tmp_path / "b")]) == 0
    assert summary(tmp_path / "b")["dataset"] == "hotpotqa"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env-kwargs", "{nope"], "--env-kwargs must be a JSON object"),
        (["--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
        (["--env-kwargs", '{"a":' * 20_000 + "1" + "}" * 20_000], "--env-kwargs is nested too deeply"),
        (["--data-path", "/no/such/file.jsonl"], "does not exist"),
        (["--base-url", "http://127.0.0.1:9/v1", "--timeout-s", "0"], "timeout_s and max_response_bytes must be > 0"),
    ],
)
def test_bad_arguments_give_one_line(args, message, tmp_path, capsys):
    assert main(["eval", "--method", "closed-book", *TINY, "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_openai_compatible_server_is_evaluated_with_base_url(tmp_path):
    from agent_gym.integrations.scripted import background_uvicorn, make_chat_app

    answers = {t.question: t.answer for t in load_tasks(source="hotpotqa", split="test")}

    def model(messages, tools):  # right on every question, in <answer> tags
        question = next(m["content"] for m in messages if m["role"] == "user").removeprefix("Question: ")
        return {"content": f"<answer>{answers[question]}</answer>", "tool_calls": []}

    app = make_chat_app(model)
    with background_uvicorn(app) as url:
        argv = ["eval", "--base-url", f"{url}/v1", "--api-model", "scripted", "--limit", "3", "--out", str(tmp_path)]
        argv += ["--timeout-s", "20"]
        assert main(argv) == 0
    s = summary(tmp_path)
    assert s["metrics"]["em"]["mean"] == 1.0 and s["model"] == f"{url}/v1 (scripted)" and app.state.requests == 3


def test_report_and_view_commands(tmp_path, one_thread, capsys):
    folders = []
    for env_id in ("AgentR1/HotpotQA-v0", "AgentR1/2WikiMultihopQA-v0", "AgentR1/MuSiQue-v0"):
        folders.append(str(tmp_path / env_id.split("/")[1]))
        assert (
            main(["eval", "--env", env_id, "--method", "closed-book", *TINY, "--limit", "2", "--out", folders[-1]]) == 0
        )
    capsys.readouterr()
    assert main(["report", *folders, "--out", str(tmp_path / "table"), "--in-domain", "hotpotqa"]) == 0
    printed = capsys.readouterr().out
    head = "| method | HotpotQA (in-domain) | 2Wiki (out-of-domain) | MuSiQue (out-of-domain) | average |"
    assert head in printed and "| closed-book | 0.000 [0.000, 0.000] |" in printed
    assert (tmp_path / "table" / "table3.csv").read_text().startswith("method,dataset,domain,metric,mean,low,high,n")
    page = tmp_path / "view.html"
    assert main(["view", f"{folders[0]}/episodes.jsonl", "-o", str(page)]) == 0
    html = page.read_text()
    assert html.count('"outcome": ') == 2 and "cdn" not in html.lower() and "http" not in html.split("<body>")[0]
    assert main(["report", str(tmp_path / "nothing")]) == 2
    cut = tmp_path / "cut.jsonl"  # a last line cut short: dropped, told in one line on stderr
    text = Path(f"{folders[0]}/episodes.jsonl").read_text()
    cut.write_text(text + text.splitlines()[0][:50])
    capsys.readouterr()
    assert main(["view", str(cut), "-o", str(tmp_path / "cut.html"), "--tokenizer", "none"]) == 0
    err = capsys.readouterr().err
    assert err == f"agent-r1 view: warning: {cut}:3: the last line is not whole JSON (cut short?); dropped\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_retrieval_serves_and_stops_gracefully(tmp_path):
    pytest.importorskip("uvicorn", reason="the server extra is not installed")
    corpus = tmp_path / "corpus.jsonl"
    docs = [{"id": "1", "contents": '"Jaws"\nJaws is a 1975 film directed by Steven Spielberg.'},
            {"id": "2", "contents": '"Paris"\nParis is the capital of France.'}]  # fmt: skip
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    port = free_port()
    cmd = [sys.executable, "-m", "agent_trainers.pipeline.cli", "serve-retrieval", "--corpus", str(corpus),
           "--backend", "bm25", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.3)
        body = {"queries": ["who directed Jaws"], "topk": 1, "return_scores": True}
        hits = httpx.post(f"http://127.0.0.1:{port}/retrieve", json=body, timeout=10).json()["result"]
        assert hits[0][0]["document"]["id"] == "1" and health["backend"] == "bm25"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status tells why it stopped
    assert proc.returncode == -signal.SIGTERM, out
    assert "2 passages loaded" in out and "Finished server process" in out


def test_serve_retrieval_errors_are_one_line(tmp_path, capsys):
    pytest.importorskip("uvicorn", reason="the server extra is not installed")
    assert main(["serve-retrieval", "--corpus", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-r1 serve-retrieval: error:") and len(err.strip().splitlines()) == 1


def test_the_rollout_options_are_rollout_config_s_fields_with_greedy_defaults(capsys):
    import dataclasses

    from agent_trainers.pipeline.eval_commands import build_eval_parser, eval_rollout
    from agent_trainers.rollout import RolloutConfig
    from agent_trainers.rollout.cli import rollout_config_from_args

    parser = build_eval_parser()
    assert rollout_config_from_args(parser.parse_args([]), eval_rollout()) == RolloutConfig(temperature=0.0)
    assert eval_rollout().max_new_tokens_per_turn == RolloutConfig().max_new_tokens_per_turn == 256
    given = parser.parse_args(["--max-new-tokens-per-turn", "16", "--max-turns", "2", "--render-tools", "true"])
    config = rollout_config_from_args(given, eval_rollout())
    assert (config.max_new_tokens_per_turn, config.max_turns, config.render_tools, config.temperature) == (
        16,
        2,
        True,
        0,
    )
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for f in dataclasses.fields(RolloutConfig):
        doc = " ".join(RolloutConfig.__pydantic_fields__[f.name].description.split())
        assert f"--{f.name.replace('_', '-')}" in text and doc in text
    assert "Sampling temperature; 0 means greedy. (default: 0.0)" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-new-tokens-per-turn", "64", "--max-total-tokens", "32"], "max_total_tokens must exceed"),
        (["--max-turns", "two"], "max_turns: Input should be a valid integer"),
        (["--threads", "many"], "expected a number from 0 to 1024 or 'auto' (got 'many')"),
    ],
)
def test_bad_rollout_and_thread_options_are_one_line_errors(args, message, tmp_path, capsys):
    try:
        status = main(["eval", "--method", "closed-book", "--out", str(tmp_path), *args])
    except SystemExit as exit_:  # argparse's own errors: usage line + one error line
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2 and message in err and err.strip().splitlines()[-1].startswith("agent-r1 eval: error: ")


def test_agent_r1_parses_its_other_commands_without_importing_torch():
    """``eval``'s parser is made from RolloutConfig (torch) only when ``agent-r1 eval`` runs."""
    code = (
        "import sys; from agent_trainers.pipeline.cli import build_parser; "
        "build_parser().parse_args(['report', 'x']); assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "Nope/Nope-v0"], "--env Nope/Nope-v0: Namespace Nope not found"),
        (["--env", "AgentR1/Calculatr-v0"], "Did you mean: `Calculator`?"),
        (["--env", "CartPole-v1"], "CartPole-v1 has no indexed tasks (num_tasks)"),
        (["--env", "AgentR1/Calculator-v0", "--env-kwargs", '{"bogus": 1}'], "unexpected keyword argument 'bogus'"),
    ],
)
def test_a_wrong_env_is_a_one_line_error(args, message, tmp_path, capsys):
    """Issue 25, item 12: these were tracebacks (NamespaceNotFound, AttributeError num_tasks, TypeError)."""
    assert main(["eval", "--method", "closed-book", *TINY, "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and err.startswith("agent-r1 eval: error: ")


def test_out_naming_an_existing_file_is_a_one_line_error(tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    assert main(["eval", "--method", "closed-book", *TINY, "--limit", "1", "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"--out {target} is a file" in err and len(err.strip().splitlines()) == 1
    assert target.read_text() == "keep me"
