"""The API reference renders: the docstrings' Sphinx roles become links, signatures are formatted (issue 41.7).

The pages printed 376 raw roles (``:func: check_text_env ...``) on 9 pages, and in an environment made from
``docs/requirements.txt`` alone mkdocstrings said "Formatting signatures requires either Black or Ruff" and left
each signature on one line. The build test runs ``mkdocs build --strict`` as a reader of the docs would; it
skips where the doc tools are not installed (``.ci/run`` installs them before the suite).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|data|attr|exc|obj):")


def _roles_module():
    spec = importlib.util.spec_from_file_location("_docs_griffe_roles", ROOT / "docs" / "_ext" / "griffe_roles.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_roles_become_optional_references_resolved_from_the_docstrings_scope():
    griffe = pytest.importorskip("griffe")
    roles = _roles_module()
    package = griffe.load("agent_gym", search_paths=[str(ROOT)], resolve_aliases=True, resolve_external=False)
    testing = package["testing"]
    text = roles.rewrite_roles(
        testing,
        "see :func:`check_text_env`, :class:`~agent_gym.core.env.ToolEnv`, :mod:`.strategies`, "
        ":func:`gymnasium.make` and :meth:`ToolEnv.step <agent_gym.core.env.ToolEnv.step>`",
    )
    assert text == (
        'see <autoref identifier="agent_gym.testing.check_text_env" optional><code>check_text_env()</code></autoref>, '
        '<autoref identifier="agent_gym.core.env.ToolEnv" optional><code>ToolEnv</code></autoref>, '
        '<autoref identifier="agent_gym.testing.strategies" optional><code>strategies</code></autoref>, '
        '<autoref identifier="gymnasium.make" optional><code>gymnasium.make()</code></autoref> and '
        '<autoref identifier="agent_gym.core.env.ToolEnv.step" optional><code>ToolEnv.step</code></autoref>'
    )


def test_the_doc_tools_can_format_signatures():
    """mkdocstrings-python formats a separate signature with Ruff or Black, if one is importable."""
    names = [re.split(r"[=<>!~\[ ]", line, maxsplit=1)[0].lower() for line in (ROOT / "docs" / "requirements.txt")
             .read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]  # fmt: skip
    assert {"ruff", "black"} & set(names), names


@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("mkdocs", "material", "mkdocstrings_handlers.python", "ruff")),
    reason="the doc tools are not installed (pip install -r docs/requirements.txt)",
)
@pytest.mark.slow  # ~20 s (a site build); CI runs it after the default suite
def test_the_strict_build_links_every_role_and_formats_signatures(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Formatting signatures requires" not in done.stderr
    pages = sorted((site / "api").glob("*/index.html"))
    assert len(pages) >= 9
    raw = {page.parent.name: len(ROLE.findall(page.read_text(encoding="utf-8"))) for page in pages}
    assert not any(raw.values()), raw
    testing = (site / "api" / "gym_testing" / "index.html").read_text(encoding="utf-8")
    assert 'href="#agent_gym.testing.check_text_env"><code>check_text_env()</code></a>' in testing
    assert 'href="../gym/#agent_gym.register_env"><code>agent_gym.register_env()</code></a>' in testing
    signature = re.search(r'id="agent_gym.testing.check_text_env".*?<pre.*?>(.*?)</pre>', testing, re.DOTALL)
    assert signature is not None
    text = re.sub(r"<[^>]+>", "", signature.group(1))
    assert "\n    seeds: Sequence[int] = (0, 1, 2),\n" in text  # one parameter a line, not one long line
