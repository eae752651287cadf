"""The declared dependency ranges reach the newest releases tested, and the guides say how to install (issue 41.9).

transformers was capped below 5.18 though the suite passes on 5.22, the OpenEnv extra named ``openenv-core`` (which
stopped at 0.3) instead of the maintained ``openenv``, and no guide said how to get torch's CPU build from a stock
index. ``scripts/test_latest_deps.sh`` (in CI, after ``test_min_deps.sh``) runs the suite at the upper ends; these
checks keep the ranges, the guide's record of what it ran on, and CI in step.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
INSTALL = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")


def declared(*extras: str) -> dict[str, Requirement]:
    """The requirements of the core install and the given extras, by (lower-case) name."""
    lines = PROJECT["dependencies"] + [r for extra in extras for r in PROJECT["optional-dependencies"][extra]]
    return {Requirement(line).name.lower(): Requirement(line) for line in lines}


def test_the_ranges_admit_the_newest_versions_the_latest_deps_run_tested():
    found = re.search(r"\(on \d{4}-\d\d-\d\d: ((?:[\w-]+ [\d.]+(?:, )?)+)\)", " ".join(INSTALL.split()))
    assert found, "install.md must name the versions scripts/test_latest_deps.sh last ran on"
    tested = dict(item.split(" ") for item in found.group(1).split(", "))
    assert set(tested) == {"transformers", "accelerate", "datasets", "gymnasium", "numpy"}
    requirements = declared("train")
    for name, version in tested.items():
        assert requirements[name].specifier.contains(version), f"{name} {version} is outside {requirements[name]}"


def test_the_openenv_extra_is_the_maintained_package_and_the_old_one_has_its_own():
    assert [Requirement(r).name for r in PROJECT["optional-dependencies"]["openenv"]] == ["openenv"]
    assert declared("openenv")["openenv"].specifier.contains("0.10.0")
    assert [Requirement(r).name for r in PROJECT["optional-dependencies"]["openenv-core"]] == ["openenv-core"]
    assert PROJECT["optional-dependencies"]["testing"] == ["hypothesis>=6.170.17"]  # Hypothesis alone


def test_ci_runs_the_upper_ends_after_the_lower_ones():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert lines.index("bash scripts/test_min_deps.sh") < lines.index("bash scripts/test_latest_deps.sh")
    assert (ROOT / "scripts" / "test_latest_deps.sh").is_file()


def test_the_install_guide_gets_the_cpu_build_of_torch_from_pytorchs_index():
    torch = declared("train")["torch"]
    command = f"pip install {torch} --index-url https://download.pytorch.org/whl/cpu"
    assert command in INSTALL, command
