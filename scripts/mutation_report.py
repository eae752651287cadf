"""Per-module mutation scores and the surviving mutants of the last ``mutmut run`` (``scripts/mutation.sh``).

Reads mutmut's result files (``mutants/<module>.py.meta``) and prints a Markdown table: per module
the mutants tried, killed (a test failed), timed out (a hang counts as caught), survived, mutants no
selected test reaches, and the score ``(killed + timeout) / tried``; then one line per survivor with
its one-line diff (``mutmut show NAME`` gives the whole function).

Usage:
    .venv/bin/python scripts/mutation_report.py agent_gym/core/parsing.py agent_gym/core/rubric.py ...
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

CAUGHT = frozenset({"killed", "timeout", "segfault", "caught by type check"})
UNTRIED = frozenset({"not checked", "skipped", "check was interrupted by user"})


@dataclass
class ModuleResult:
    """The outcome of every mutant of one module.

    Attributes:
        path: The module, relative to the repository root.
        status: Mutant name -> mutmut's status ("killed", "survived", "no tests", ...).
    """

    path: str
    status: dict[str, str] = field(default_factory=dict)

    @property
    def counts(self) -> Counter[str]:
        """How many mutants ended in each status."""
        return Counter(self.status.values())

    @property
    def tried(self) -> int:
        """Mutants that were run (everything but the unchecked and skipped ones)."""
        return sum(n for s, n in self.counts.items() if s not in UNTRIED)

    @property
    def caught(self) -> int:
        """Killed, timed-out or crashed mutants."""
        return sum(n for s, n in self.counts.items() if s in CAUGHT)

    def survivors(self) -> list[str]:
        """Names of the mutants no test caught (survived, unreached or suspicious), in mutmut's order."""
        bad = [n for n, s in self.status.items() if s not in CAUGHT | UNTRIED]
        return sorted(bad, key=lambda n: (n.rsplit("__mutmut_", 1)[0], int(n.rsplit("_", 1)[1])))


def load(path: str) -> ModuleResult:
    """The results of one module, from ``mutants/<path>.meta``."""
    meta = Path("mutants") / f"{path}.meta"
    if not meta.is_file():
        raise FileNotFoundError(f"{meta} not found: run `bash scripts/mutation.sh` first")
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    return ModuleResult(path, {name: status_by_exit_code[code] for name, code in codes.items()})


def one_line_diff(name: str, path: str) -> str:
    """The changed line of a mutant as ``old -> new`` (stripped; the first changed pair)."""
    lines = get_diff_for_mutant(name, path=path).splitlines()[2:]
    old = [line[1:].strip() for line in lines if line.startswith("-")]
    new = [line[1:].strip() for line in lines if line.startswith("+")]
    return f"`{' / '.join(old)}` → `{' / '.join(new)}`"


def score(caught: int, tried: int) -> str:
    """A percentage with one decimal, or "-" when nothing was tried."""
    return f"{100 * caught / tried:.1f} %" if tried else "-"


def report(paths: list[str]) -> str:
    """The Markdown report of the given modules."""
    results = [load(p) for p in paths]
    out = [
        "| module | mutants | killed | timeout | survived | no tests | score |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.counts
        out.append(
            f"| `{r.path}` | {r.tried} | {c['killed']} | {c['timeout']} | {c['survived'] + c['suspicious']} "
            f"| {c['no tests']} | {score(r.caught, r.tried)} |"
        )
    tried, caught = sum(r.tried for r in results), sum(r.caught for r in results)
    out.append(f"| **all** | {tried} | | | {tried - caught} (not caught) | | **{score(caught, tried)}** |")
    out += ["", "Mutants not caught (status, one-line diff):", ""]
    for r in results:
        for name in r.survivors():
            out.append(f"- `{name}` ({r.status[name]}): {one_line_diff(name, r.path)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the report of the modules named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+", help="module paths, e.g. agent_gym/core/parsing.py")
    print(report(parser.parse_args(argv).modules))
    return 0


if __name__ == "__main__":
    sys.exit(main())
