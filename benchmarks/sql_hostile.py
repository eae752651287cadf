"""Hostile SQL: the time, memory and disk one query can cost the ``sql`` tool.

Runs every query of :data:`HOSTILE` (the attacks of issue 10 point 3 and their
relatives: quadratic ``LIKE``/``GLOB``/``trim``, sorts and ``UNION``\\ s over
large values, blow-ups of ``replace``/``zeroblob``/``group_concat``,
unbounded recursive CTEs and cross joins, per-row linear work, refused
functions) through ``SqlTool`` on a generated ``SQLite-v0`` database, each in
a fresh subprocess so that its memory is measured honestly:

* time: wall time of ``SqlTool.call``;
* memory: peak RSS during the call minus RSS before it (the peak is reset
  through ``/proc/self/clear_refs`` first);
* disk: bytes the process wrote (``wchar`` of ``/proc/self/io``) during the
  call: SQLite's temporary files (the child prints nothing meanwhile).

The reference, measured in the same run, is the ``sql`` tool at another git
revision (``--reference-rev``, e.g. the commit before the budgets were
added), each query killed after ``--timeout-s``; without it, the reference is
the slowest gold query of the first 300 tasks (then the ratio is the worst
hostile time over it); with it, the ratio is the reference's worst time over
the current one.

Usage:
    python benchmarks/sql_hostile.py
    python benchmarks/sql_hostile.py --reference-rev 837628b --timeout-s 200
    python benchmarks/sql_hostile.py --only like glob
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tyro
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]

_A_1MB = "replace(hex(zeroblob(499999)), '0', 'a')"  # 999,998 'a's (the old 1 MB value limit)
_COUNT = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)"
_DIGITS = "WITH t(x) AS (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9))"
_WIDE = (
    "WITH RECURSIVE r(n, s) AS MATERIALIZED "
    "(SELECT 1, hex(zeroblob(240)) UNION ALL SELECT n + 1, s FROM r WHERE n < 1000)"
)
_UNION = "WITH RECURSIVE r(n, s) AS (SELECT 1, {value} UNION SELECT n + 1, s FROM r{where}) SELECT count(*) FROM r"
_NEST = "replace(" * 9 + "'x'" + ", 'x', 'xxxxxxxxxx')" * 9
_X = "substr(hex(zeroblob(499)), n % 2)"  # 997-998 characters that differ from row to row
_FRAMES = "max(n) OVER (ORDER BY n ROWS BETWEEN 5000 PRECEDING AND 5000 FOLLOWING)"


def _per_row(condition: str) -> str:
    """Count the rows of an unbounded recursive CTE that meet ``condition`` (work per row, without end)."""
    return f"{_COUNT} SELECT count(*) FROM r WHERE {condition}"


def _nested_ctes(levels: int, mentions: int, materialized: str = "") -> str:
    """CTE ``a<i>`` names ``a<i-1>`` ``mentions`` times: mentions**levels copies while preparing."""
    parts = ["a0(x) AS (SELECT 1)"]
    for i in range(1, levels + 1):
        body = " UNION ALL ".join([f"SELECT x FROM a{i - 1}"] * mentions)
        parts.append(f"a{i}(x) AS {materialized}({body})")
    return f"WITH {', '.join(parts)} SELECT count(*) FROM a{levels}"


_WORK = "units of work"
HOSTILE: list[tuple[str, str, str]] = [
    # (name, query, what the error says now)
    ("like_1mb_49k", f"SELECT {_A_1MB} LIKE ('%' || replace(hex(zeroblob(24500)), '0', 'a') || 'b')", "too big"),
    ("glob_1mb_49k", f"SELECT {_A_1MB} GLOB ('*' || replace(hex(zeroblob(24500)), '0', 'a') || 'b')", "too big"),
    ("trim_1mb_16k", "SELECT trim(hex(zeroblob(499999)), replace(hex(zeroblob(8000)), '0', 'b') || '0')", "too big"),
    ("like_max_sizes", "SELECT hex(zeroblob(499)) || 'a' LIKE '%' || hex(zeroblob(49)) || 'b'", ""),
    ("like_per_row", _per_row(f"{_X} LIKE '%' || hex(zeroblob(48)) || 'b'"), _WORK),
    ("glob_per_row", _per_row(f"{_X} GLOB '*' || hex(zeroblob(48)) || 'b'"), _WORK),
    ("trim_per_row", _per_row(f"trim({_X}, replace(hex(zeroblob(40)), '0', 'b') || '0') = 'x'"), _WORK),
    ("instr_per_row", _per_row(f"instr({_X}, hex(zeroblob(499)) || 'b') > 0"), _WORK),
    ("replace_per_row", _per_row(f"replace({_X}, '00', '0') = 'x'"), _WORK),
    ("upper_per_row", _per_row("upper(hex(zeroblob(490 + n % 2))) = 'x'"), _WORK),
    ("substr_per_row", _per_row(f"substr({_X}, 3, 400) = 'x'"), _WORK),
    ("nocase_compare_per_row", _per_row(f"{_X} = substr(hex(zeroblob(499)), 1 + n % 2) COLLATE NOCASE"), _WORK),
    ("date_per_row", _per_row("date('2000-01-01', '+' || n || ' days') = 'x'"), _WORK),
    ("json_patch", """SELECT json_patch('{"a": 1}', '{"b": 2}')""", "json_patch"),
    ("order_by_1mb_rows", f"{_COUNT} SELECT n, zeroblob(999000) AS b FROM r ORDER BY n DESC", "too big"),
    ("order_by_1kb_rows", f"{_COUNT} SELECT n, hex(zeroblob(490 + n % 2)) AS b FROM r ORDER BY n DESC", _WORK),
    ("union_1mb_rows", _UNION.format(value="zeroblob(999000)", where=" WHERE n < 1900"), "too big"),
    ("union_1kb_rows", _UNION.format(value="hex(zeroblob(490))", where=""), _WORK),
    ("sort_dense_1kb_rows", f"{_WIDE} SELECT a.s, b.s, a.n, b.n FROM r a, r b ORDER BY a.n + b.n", _WORK),
    ("distinct_dense_1kb_rows", f"{_WIDE} SELECT count(DISTINCT a.s || b.s || a.n || '-' || b.n) FROM r a, r b", _WORK),
    ("group_concat_blowup", f"{_COUNT} SELECT length(group_concat(hex(zeroblob(400)))) FROM r", _WORK),
    (
        "window_max_frames",
        f"{_COUNT}, w AS (SELECT n FROM r LIMIT 100000) SELECT count(*) FROM (SELECT {_FRAMES} FROM w)",
        _WORK,
    ),
    ("replace_nested_blowup", f"SELECT length({_NEST})", "too big"),
    ("format_width", "SELECT format('%.*c', 2000000000, 'x')", "function format()"),
    ("printf_width", "SELECT printf('%.*c', 2000000000, 'x')", "function printf()"),
    ("zeroblob_2g", "SELECT zeroblob(2000000000)", "too big"),
    ("randomblob_2g", "SELECT randomblob(2000000000)", "function randomblob()"),
    ("recursive_cte_unbounded", f"{_COUNT} SELECT count(*) FROM r", _WORK),
    ("cross_join_1e9", f"{_DIGITS} SELECT count(*) FROM t a, t b, t c, t d, t e, t f, t g, t h, t i", _WORK),
    ("cte_copies_prepare_1.3gb", _nested_ctes(10, 4), "common table expressions"),
    ("cte_inlined_prepare_25s", _nested_ctes(8, 4, "NOT MATERIALIZED "), "common table expressions"),
    ("expression_depth", "SELECT " + "(" * 120 + "1" + ")" * 120, "parser stack overflow"),
    ("compound_select", "SELECT 1" + " UNION SELECT 1" * 60, "too many terms"),
    ("date_now", "SELECT date('now')", "clock"),
    ("random", "SELECT random()", "function random()"),
]
"""The hostile queries: ``(name, query, a substring of the tool's error message)``."""


@dataclass
class Args:
    """Benchmark settings."""

    reference_rev: str = ""
    """Git revision whose ``agent_gym/tools/sql.py`` is the reference (empty: the slowest gold query)."""
    timeout_s: float = 300.0
    """Kill a query's subprocess after this many seconds (reported as ``>timeout``)."""
    task_index: int = 0
    """The ``SQLite-v0`` task whose database the queries run on."""
    only: list[str] = field(default_factory=list)
    """Run only the queries whose name contains one of these words."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


_CHILD = r"""
import importlib.util, json, sys, time
path, database, query = sys.argv[1], sys.argv[2], sys.argv[3]
spec = importlib.util.spec_from_file_location("sql_under_test", path)
module = importlib.util.module_from_spec(spec)
sys.modules["sql_under_test"] = module
spec.loader.exec_module(module)
with open(database, "rb") as f:  # made by the parent: importing the current env here would set its heap limit
    tool = module.SqlTool(module.SqlDatabase.from_bytes(f.read()))
tool.call({"query": "SELECT 1"})
def field(path, key):
    for line in open(path):
        if line.startswith(key):
            return int(line.split()[1])
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak-RSS mark
rss, written = field("/proc/self/status", "VmRSS:"), field("/proc/self/io", "wchar:")
start = time.perf_counter()
result = tool.call({"query": query})
seconds = time.perf_counter() - start
written = field("/proc/self/io", "wchar:") - written
peak = field("/proc/self/status", "VmHWM:") - rss
print(json.dumps({"seconds": seconds, "rss_mb": peak / 1024, "disk_mb": written / 2**20, "ok": result.ok,
                  "content": result.content[:300]}))
"""


def run_query(module_path: Path, database: Path, query: str, args: Args) -> dict:
    """One query in a fresh subprocess; ``{"seconds": inf, "killed": True}`` past the time-out."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SQLITE_TMPDIR=tmp, PYTHONPATH=str(ROOT))
        cmd = [sys.executable, "-c", _CHILD, str(module_path), str(database), query]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, env=env, check=True)
        except subprocess.TimeoutExpired:
            return {"seconds": float("inf"), "rss_mb": float("nan"), "disk_mb": float("nan"), "killed": True}
    return json.loads(done.stdout.strip().splitlines()[-1])


def gold_reference(limit: int = 300) -> float:
    """Seconds of the slowest gold query over the first ``limit`` tasks (current code, in process)."""
    from agent_gym.envs.sqlite import generate_sql_task
    from agent_gym.tools.sql import SqlDatabase

    worst = 0.0
    for i in range(limit):
        task = generate_sql_task(i)
        db = SqlDatabase.from_bytes(task.database)
        for query in task.gold_queries:
            start = time.perf_counter()
            db.query(query)
            worst = max(worst, time.perf_counter() - start)
    return worst


def _show(r: dict | None) -> str:
    if r is None:
        return f"{'-':>9s} {'-':>8s} {'-':>8s}"
    seconds = f">{r['seconds']:.0f}" if r.get("killed") else f"{r['seconds']:.3f}"
    return f"{seconds:>9s} {r['rss_mb']:8.1f} {r['disk_mb']:8.1f}"


def main() -> None:
    args = parse_args()
    cases = [c for c in HOSTILE if not args.only or any(w in c[0] for w in args.only)]
    current = ROOT / "agent_gym" / "tools" / "sql.py"
    reference = None
    if args.reference_rev:
        source = subprocess.run(
            ["git", "show", f"{args.reference_rev}:agent_gym/tools/sql.py"], cwd=ROOT, capture_output=True, text=True,
            check=True,
        ).stdout  # fmt: skip
        reference = Path(tempfile.mkdtemp()) / "sql_reference.py"
        reference.write_text(source)
    from agent_gym.envs.sqlite import generate_sql_task

    database = Path(tempfile.mkdtemp()) / "task.sqlite"
    database.write_bytes(generate_sql_task(args.task_index).database)
    rows = []
    for name, query, _ in tqdm(cases, desc="hostile queries", unit="query"):
        now = run_query(current, database, query, args)
        rows.append((name, now, reference and run_query(reference, database, query, args)))
    title = f"reference ({args.reference_rev})" if reference else "reference"
    columns = f"{'s':>9s} {'RSS MB':>8s} {'disk MB':>8s}"
    print(f"\n{'query':26s} {columns} | {columns}  ({title} on the right)")
    for name, now, ref in rows:
        print(f"{name:26s} {_show(now)} | {_show(ref)}   {now['content'][:70]!r}")
    worst = max(r["seconds"] for _, r, _ in rows)
    print(f"\nnow: worst time {worst:.3f} s, worst extra RSS {max(r['rss_mb'] for _, r, _ in rows):.1f} MB, "
          f"disk written {sum(r['disk_mb'] for _, r, _ in rows):.1f} MB in all")  # fmt: skip
    if reference:
        ref_worst = max(r["seconds"] for _, _, r in rows)
        ref_rss = max((r["rss_mb"] for _, _, r in rows if not r.get("killed")), default=float("nan"))
        print(f"reference {args.reference_rev}: worst time {ref_worst:.3f} s, worst extra RSS {ref_rss:.1f} MB, "
              f"disk written {sum(r['disk_mb'] for _, _, r in rows if not r.get('killed')):.1f} MB in all")  # fmt: skip
        print(f"ratio (reference worst time / current worst time): {ref_worst / worst:.1f}")
    else:
        gold = gold_reference()
        print(f"reference: slowest gold query of tasks 0-299 {gold * 1e3:.3f} ms")
        print(f"ratio (current worst hostile time / slowest gold query): {worst / gold:.0f}")


if __name__ == "__main__":
    main()
