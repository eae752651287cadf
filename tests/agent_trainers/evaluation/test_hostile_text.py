"""An evaluation whose model writes hostile but valid text: records are written, read back, resumed and viewed.

The model's call spells a lone surrogate as a JSON escape (``"\\ud800"``: valid JSON, no valid UTF-8) and its
answer holds U+2028, U+2029 and U+0085 (which ``str.splitlines()`` takes for line ends).
"""

from __future__ import annotations

import pytest

from agent_trainers.evaluation import EvalSpec, Method, read_records, run_eval
from agent_trainers.evaluation.viewer import read_cards
from agent_trainers.rollout import RolloutConfig
from tests.agent_trainers.evaluation.conftest import HOTPOT, TEST_SPLIT, search_call

ROLLOUT = RolloutConfig(max_turns=3, max_new_tokens_per_turn=96, max_total_tokens=2048, temperature=0.0)
ANSWER = "one\u2028two\u2029three\u0085four"


def hostile(task, prompt):
    """Search with a lone-surrogate escape in the query, then answer with Unicode line breaks in the text."""
    if "<tool_response>" not in prompt and "Doc 1" not in prompt:
        return search_call(task.question[:20] + "\ud800")  # json.dumps writes the six characters \ud800
    return f"<answer>{ANSWER}</answer>"


@pytest.mark.parametrize("context", [{}, {"context": "fold", "context_turns": 1}], ids=["append", "fold"])
def test_hostile_text_is_recorded_read_back_resumed_and_viewed(scripted, tmp_path, context):
    spec = EvalSpec(HOTPOT, Method.AGENT, env_kwargs={**TEST_SPLIT, **context}, rollout=ROLLOUT, chunk_size=3)
    run = run_eval(spec, scripted(hostile), tmp_path, progress=False)
    assert len(run.records) == 8 and all(r.answer == ANSWER for r in run.records)
    assert all(r.tool_calls == 1 and r.format_errors == 0 for r in run.records)
    back = read_records(tmp_path / "episodes.jsonl")
    assert [r.to_dict() for r in back] == [r.to_dict() for r in run.records]  # every record, whole
    again = scripted(hostile)
    resumed = run_eval(spec, again, tmp_path, progress=False)
    assert again.prompts == [] and len(resumed.records) == 8  # nothing is played again
    assert len(read_cards(tmp_path / "episodes.jsonl")) == 8
