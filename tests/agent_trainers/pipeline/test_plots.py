"""metrics.jsonl read back: records split at newlines only."""

from __future__ import annotations

import json

from agent_trainers.pipeline.plots import read_jsonl


def test_records_holding_unicode_line_breaks_read_back_whole(tmp_path):
    """A record's text may hold U+2028, U+2029 or U+0085 unescaped (ensure_ascii=False); str.splitlines() would
    cut it in two."""
    records = [{"stage": "eval", "note": "a\u2028b\u2029c\x85d"}, {"stage": "rl", "step": 1}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert read_jsonl(path) == records
