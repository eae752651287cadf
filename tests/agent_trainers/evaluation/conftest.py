"""Shared pieces of the evaluation tests: the embedded HotpotQA test split and policies scripted from the prompt."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from agent_gym.datasets import QATask
from agent_gym.envs.qa import load_tasks
from agent_trainers.policies import ScriptedPolicy

HOTPOT = "AgentR1/HotpotQA-v0"
TEST_SPLIT = {"split": "test"}
TASKS: tuple[QATask, ...] = load_tasks(source="hotpotqa", split="test")
"""The 8 held-aside questions of the embedded HotpotQA sample, in task-index order."""


def search_call(query: str) -> str:
    return f"<tool_call>\n{json.dumps({'name': 'search', 'arguments': {'query': query}})}\n</tool_call>"


class PromptScripted(ScriptedPolicy):
    """A scripted policy that sees the decoded prompt and the task it is about; it records every prompt and call."""

    def __init__(self, tokenizer, respond: Callable[[QATask, str], str]):
        self.prompts: list[str] = []
        self.calls: list[int] = []

        def by_prompt(ids: list[int]) -> str:
            text = tokenizer.decode(ids)
            self.prompts.append(text)
            task = next(t for t in TASKS if t.question in text)
            return respond(task, text)

        super().__init__(tokenizer, by_prompt)

    def generate(self, prompts, params):
        self.calls.append(len(prompts))
        return super().generate(prompts, params)


@pytest.fixture
def scripted(smollm2_tokenizer):
    """``scripted(respond)`` -> a :class:`PromptScripted` over SmolLM2's tokenizer."""
    return lambda respond: PromptScripted(smollm2_tokenizer, respond)
