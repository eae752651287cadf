"""``import agent_gym`` (and the integrations package) must not import any framework or torch."""

import subprocess
import sys

HEAVY = ("verifiers", "skyrl_gym", "openenv", "torch", "transformers", "trl", "fastapi", "uvicorn")


def test_importing_agent_gym_and_integrations_pulls_in_no_framework():
    code = (
        "import sys, agent_gym, agent_gym.integrations, agent_gym.integrations.session\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
