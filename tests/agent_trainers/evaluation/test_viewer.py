"""The HTML trajectory viewer: card data, escaping, and the page itself in a real headless Chromium."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import warnings
from pathlib import Path

import pytest

from agent_trainers.evaluation import EvalSpec, Method, run_eval
from agent_trainers.evaluation.viewer import card_data, read_cards, render_html, write_viewer
from agent_trainers.rollout import RolloutConfig, StopReason, save_jsonl, trajectory_to_dict
from tests.agent_trainers.evaluation.conftest import HOTPOT, TEST_SPLIT, search_call

CHROMIUM = os.environ.get("AGENT_R1_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT_DIR = os.environ.get("AGENT_R1_SCREENSHOTS")  # set it to keep the screenshots


def script(task, prompt):
    """Search then answer: right on bridge questions of even id, partly right on odd ones, never on comparisons."""
    if "Doc 1" not in prompt:
        return search_call(task.question)
    if task.type == "comparison":
        return "I am not sure yet"  # never answers -> max_turns
    return f"<answer>{task.answer if int(task.id[-1]) % 2 == 0 else task.answer + ' or so'}</answer>"


@pytest.fixture(scope="module")
def episodes(tmp_path_factory, smollm2_tokenizer):
    from tests.agent_trainers.evaluation.conftest import PromptScripted

    out = tmp_path_factory.mktemp("viewer")
    spec = EvalSpec(
        HOTPOT, Method.AGENT, env_kwargs=dict(TEST_SPLIT), rollout=RolloutConfig(max_turns=3, temperature=0.0)
    )
    run_eval(spec, PromptScripted(smollm2_tokenizer, script), out / "eval", progress=False)
    return out / "eval" / "episodes.jsonl"


def test_cards_carry_outcome_stop_reason_turns_and_tokens_by_loss_mask(episodes, smollm2_tokenizer):
    cards = read_cards(episodes, smollm2_tokenizer)
    assert [c["outcome"] for c in cards] == ["correct", "partial", "no answer", "partial", "correct", "no answer",
                                             "correct", "partial"]  # fmt: skip
    assert {c["stop"] for c in cards} == {"answer", "max_turns"}
    line = json.loads(episodes.read_text().splitlines()[0])
    traj = line["trajectory"]
    card = cards[0]
    assert [s[0] for s in card["segments"]] == [1, 0, 1, 0]  # model call, env result, model answer, its closing
    model_ids = [i for i, m in zip(traj["completion_ids"], traj["loss_mask"], strict=True) if m]
    assert sum(s[2] for s in card["segments"] if s[0] == 1) == len(model_ids)
    assert "".join(s[1] for s in card["segments"]) == smollm2_tokenizer.decode(traj["completion_ids"])
    assert card["turns"][0]["terms"]["evidence"] == 0  # the default (gated) reward pays the evidence on the answer
    assert card["turns"][-1]["terms"]["evidence"] > 0 and card["question"] == line["question"]
    assert card_data(traj, 0, None)["segments"] == []  # no tokenizer: no token view, everything else
    assert card_data(traj, 0, None)["outcome"] == "correct"  # a bare trajectory: scored from its metrics


def test_a_bad_line_names_itself(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"format": 1}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: not a trajectory"):
        read_cards(path)


def test_text_cannot_close_the_script_element():
    page = render_html([{"x": "</script><script>alert(1)</script>"}], title="<b>t</b>")
    assert "</script><script>alert(1)" not in page and "\\u003c/script>" in page
    assert "<title>&lt;b&gt;t&lt;/b&gt;</title>" in page


def thousand(episodes, tmp_path):
    """1,000 trajectories: the 8 real ones with new ids, plus hostile text and a text-mode one."""
    lines = [json.loads(x) for x in episodes.read_text().splitlines()]
    out = []
    for k in range(1000):
        line = json.loads(json.dumps(lines[k % 8]))
        line["trajectory"]["task_id"] = line["task_id"] = f"copy-{k}"
        if k == 999:
            line["question"] = "</script><script>window.pwned = 1</script>"
        out.append(line)
    text_mode = {**out[0]["trajectory"], "completion_ids": [], "loss_mask": [], "logprobs": [], "task_id": "text"}
    path = tmp_path / "thousand.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in out) + json.dumps(text_mode) + "\n")
    return path


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium here: `apt-get install chromium` (Debian) to run the browser test"
)


@contextlib.contextmanager
def browser_page(page_path: Path, profile: Path):
    """A headless Chromium page showing ``page_path``, and the list its script errors go to."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (no browser download needed)")
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"]  # fmt: skip
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=args, offline=True
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.as_uri())
        try:
            yield page, errors
        finally:
            context.close()


@pytest.mark.slow  # ~17 s (a browser); CI runs it after the default suite
@needs_chromium
def test_the_page_in_headless_chromium(episodes, tmp_path, smollm2_tokenizer):
    page_path = write_viewer(thousand(episodes, tmp_path), tmp_path / "view.html", smollm2_tokenizer)
    with browser_page(page_path, tmp_path / "profile") as (page, errors):
        count = page.locator("#count")
        assert count.text_content() == "1001 of 1001 trajectories match; 50 shown"
        assert page.locator("article.card").count() == 50  # drawn lazily
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        page.wait_for_function("document.querySelectorAll('article.card').length === 100")
        # colours by loss mask
        colour = "el => getComputedStyle(el).backgroundColor"
        first = page.locator("article.card").first
        assert first.locator(".tok.m1").first.evaluate(colour) == "rgb(200, 236, 200)"
        assert first.locator(".tok.m0").first.evaluate(colour) == "rgb(214, 224, 245)"
        assert first.locator(".tok.m1").count() == 2 and first.locator(".tok.m0").count() == 2
        # outcome filter: only "no answer" (2 of every 8 real ones, none among the text-mode extra)
        for box in page.locator("#outcome-filter input").all():
            if box.get_attribute("value") != "no answer":
                box.uncheck()
        assert count.text_content() == "250 of 1001 trajectories match; 50 shown"
        assert set(page.locator("article.card").evaluate_all("cs => cs.map(c => c.dataset.outcome)")) == {"no answer"}
        # stop-reason filter on top of every outcome
        for box in page.locator("#outcome-filter input").all():
            box.check()
        page.select_option("#stop-filter", str(StopReason.MAX_TURNS))
        assert count.text_content() == "250 of 1001 trajectories match; 50 shown"
        assert set(page.locator("article.card").evaluate_all("cs => cs.map(c => c.dataset.stop)")) == {"max_turns"}
        page.select_option("#stop-filter", "")
        page.fill("#text-filter", "window.pwned")
        assert count.text_content() == "1 of 1001 trajectories match; 1 shown"
        assert "window.pwned = 1" in page.locator("article.card .qa").first.text_content()
        assert page.evaluate("window.pwned") is None and errors == []
        page.fill("#text-filter", "text")
        assert "no token ids" in page.locator("article.card .tokens").first.text_content()
        page.fill("#text-filter", "")
        tokens = page.locator("article.card").first.locator("details").last
        tokens.evaluate("d => { d.open = true; }")
        tokens.scroll_into_view_if_needed()
        shot = Path(SCREENSHOT_DIR or tmp_path) / "viewer.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000


def test_trajectory_jsonl_from_the_rollout_engine_works_too(episodes, tmp_path, smollm2_tokenizer):
    from agent_trainers.rollout import trajectory_from_dict

    lines = [json.loads(x)["trajectory"] for x in episodes.read_text().splitlines()]
    path = save_jsonl([trajectory_from_dict(t) for t in lines], tmp_path / "rollout.jsonl")
    cards = read_cards(path, smollm2_tokenizer)
    assert [c["outcome"] for c in cards][:3] == ["correct", "partial", "no answer"]
    assert cards[0]["question"] is None and cards[0]["messages"] == lines[0]["messages"]
    assert trajectory_to_dict(trajectory_from_dict(lines[0])) == lines[0]


# ------------------------------------------------------------ odd and hostile records (issue 25, item 11)
def _first(episodes) -> dict:
    return json.loads(episodes.read_text().splitlines()[0])


def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_nan_and_infinite_numbers_are_drawn_and_the_page_data_stays_json(episodes, tmp_path):
    line = _first(episodes)
    line["reward"] = float("nan")
    line["scores"]["f1"] = float("inf")
    line["trajectory"]["metrics"]["answer_em"] = float("-inf")
    line["trajectory"]["turns"][0]["reward"] = float("nan")
    cards = read_cards(_write(tmp_path / "nan.jsonl", [line, _first(episodes)]))
    assert len(cards) == 2 and math.isnan(cards[0]["reward"]) and cards[0]["metrics"]["answer_em"] == float("-inf")
    page = render_html(cards, "t")
    data = page.split('id="data">', 1)[1].split("</script>", 1)[0]

    def refuse(name):
        raise AssertionError(f"{name} in the embedded data: the page's JSON.parse would refuse it")

    embedded = json.loads(data, parse_constant=refuse)
    assert embedded[0]["reward"] == "NaN" and embedded[0]["metrics"]["answer_em"] == "-Infinity"
    assert embedded[0]["turns"][0]["reward"] == "NaN" and embedded[1]["reward"] == cards[1]["reward"]


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (("trajectory", "messages"), "hello", r"messages: Input should be a valid list"),
        (("trajectory", "messages", 0), None, r"messages\.0: Input should be a valid dictionary"),
        (("trajectory", "metrics"), None, r"metrics: Input should be a valid dictionary"),
        (("trajectory", "completion_ids", 3), -5, r"completion_ids\.3: Input should be greater than or equal to 0"),
        (("trajectory", "loss_mask", 0), 7, r"loss_mask\.0: Input should be less than or equal to 1"),
        (("trajectory", "turns", 0, "reward_terms"), "evidence", r"turns\.0\.reward_terms: Input should be"),
        (("trajectory", "task_index"), "3", r"task_index: Input should be a valid integer"),
        (("gold",), "Paris", r"gold: Input should be a valid list"),
        (("scores",), None, r"scores: Input should be a valid dictionary"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_naming_line_and_field(episodes, tmp_path, where, value, message):
    line = _first(episodes)
    target = line
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    path = _write(tmp_path / "odd.jsonl", [_first(episodes), line])
    with pytest.raises(
        ValueError,
        match=r"odd\.jsonl:2: not a trajectory or episode record \(bad trajectory record: " + message
        if where[0] == "trajectory"
        else r"odd\.jsonl:2: .*" + message,
    ):
        read_cards(path)


def test_token_ids_outside_the_vocabulary_are_refused_with_a_tokenizer_and_kept_without(
    episodes, tmp_path, smollm2_tokenizer
):
    line = _first(episodes)
    line["trajectory"]["completion_ids"][0] = 10**12
    path = _write(tmp_path / "ids.jsonl", [line])
    with pytest.raises(
        ValueError,
        match=r"ids\.jsonl:1: .*token id 1000000000000 is outside the tokenizer's "
        rf"vocabulary of {len(smollm2_tokenizer)}",
    ):
        read_cards(path, smollm2_tokenizer)
    assert read_cards(path)[0]["segments"] == []  # no tokenizer: no token view, the card is drawn


def test_json_nested_100k_deep_is_one_line_error(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n{}\n")
    with pytest.raises(ValueError, match=r"deep\.jsonl:1: JSON nested too deeply"):
        read_cards(path)
    nested = _write(tmp_path / "deep2.jsonl", ['{"trajectory": ' + "[" * 100_000 + "]" * 100_000 + "}"])
    with pytest.raises(ValueError, match=r"deep2\.jsonl:1: JSON nested too deeply"):
        read_cards(nested)


def test_a_last_line_cut_short_is_dropped_with_a_warning_as_eval_drops_it(episodes, tmp_path):
    text = episodes.read_text()
    whole = text.splitlines()
    path = tmp_path / "cut.jsonl"
    path.write_bytes((text.rstrip("\n") + "\n" + whole[1][:-40]).encode())  # the 9th line cut mid-record
    with pytest.warns(UserWarning, match=r"cut\.jsonl:9: the last line is not whole JSON"):
        cards = read_cards(path)
    assert len(cards) == 8 == len(whole)
    cut_in_char = tmp_path / "cut_utf8.jsonl"
    cut_in_char.write_bytes(text.encode() + '{"question": "Ü'.encode()[:-1])  # inside a UTF-8 character
    with pytest.warns(UserWarning, match=r"cut_utf8\.jsonl:9"):
        assert len(read_cards(cut_in_char)) == 8
    middle = tmp_path / "middle.jsonl"
    middle.write_text(whole[0] + "\n" + whole[1][:-40] + "\n" + whole[2] + "\n")
    with pytest.raises(ValueError, match=r"middle\.jsonl:2: not JSON"), warnings.catch_warnings():
        warnings.simplefilter("error")
        read_cards(middle)  # a broken line that is not the last is an error, not a silent drop


@needs_chromium
def test_odd_records_draw_their_cards_in_chromium(episodes, tmp_path):
    """NaN rewards draw as NaN; a record the script cannot draw (tool_calls not a list) costs its own card only."""
    good, nan, broken = _first(episodes), _first(episodes), _first(episodes)
    nan["reward"] = float("nan")
    nan["task_id"] = nan["trajectory"]["task_id"] = "nan-card"
    broken["trajectory"]["messages"][1]["tool_calls"] = 5
    broken["task_id"] = broken["trajectory"]["task_id"] = "broken-card"
    page_path = write_viewer(_write(tmp_path / "odd.jsonl", [good, nan, broken]), tmp_path / "odd.html")
    with browser_page(page_path, tmp_path / "profile") as (page, errors):
        assert page.locator("#count").text_content() == "3 of 3 trajectories match; 3 shown"
        heads = page.locator("article.card .card-head").all_text_contents()
        assert "reward NaN" in heads[1]
        assert "broken-card: this record could not be drawn (TypeError" in heads[2]
        assert page.locator("article.card").nth(0).locator(".msg").count() == len(good["trajectory"]["messages"])
        assert errors == []


@needs_chromium
def test_a_rollout_file_is_filtered_by_question_words_and_blank_turns_are_named(episodes, tmp_path):
    """A rollout file has no question field: the filter searches the first user message (the question) too; a
    turn of 64 newlines is drawn as a one-line note, not 64 blank lines (issue 26, item 5)."""
    lines = [json.loads(x) for x in episodes.read_text().splitlines()]
    trajs = [line["trajectory"] for line in lines]
    trajs[1]["messages"][2]["content"] = "\n" * 64  # the first assistant turn (after system, user)
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in trajs))
    word = max(lines[3]["question"].split(), key=len).strip("?,.'\"").lower()
    want = sum(word in line["question"].lower() for line in lines)
    with browser_page(write_viewer(path, tmp_path / "rollout.html"), tmp_path / "profile") as (page, errors):
        page.fill("#text-filter", word)
        assert page.locator("#count").text_content() == f"{want} of 8 trajectories match; {want} shown"
        heads = " ".join(page.locator("article.card .card-head").all_text_contents())
        assert want >= 1 and lines[3]["task_id"] in heads
        page.fill("#text-filter", "")
        second = page.locator("article.card").nth(1)
        assert "(64 whitespace characters)" in second.locator(".msg").nth(2).text_content()
        assert errors == []
