"""TRL's own tool loop out of the box: generated tool methods, schemas, rewards, answer-tool prompts, a real step."""

import gymnasium as gym
import pytest
from transformers.utils import get_json_schema

import agent_gym
from agent_trainers.algorithms.trl_adapter.env_factory import (
    ANSWER_METHOD,
    ANSWER_TOOL_INSTRUCTION,
    make_environment_factory,
    trl_dataset_rows,
)
from tests.conftest import LookupEnv

ENV_ID = "Test/FactoryLookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=3)


@pytest.fixture(scope="module")
def factory():
    return make_environment_factory(ENV_ID, seed=7)


def test_one_method_per_tool_with_a_schema_trl_can_read(factory):
    env = factory()  # TRL reads the schemas of the bound methods
    schema = get_json_schema(env.lookup)["function"]
    assert schema["name"] == "lookup"
    assert schema["description"] == "Look up the capital city of a country."
    assert schema["parameters"]["properties"]["country"] == {"type": "string", "description": "The country's name."}
    assert schema["parameters"]["required"] == ["country"]
    answer = get_json_schema(getattr(env, ANSWER_METHOD))["function"]
    assert answer["parameters"]["required"] == ["answer"]


def test_episode_through_methods_earns_the_env_reward(factory):
    env = factory()
    question = env.reset(task_index=1, prompt=[{"role": "user", "content": ""}])
    assert question == "What is the capital of Japan?"
    assert "Tokyo" in env.lookup(country="Japan")
    assert env.get_reward() > 0  # process reward: new gold evidence
    assert "episode is over" in env.answer(answer="Tokyo")
    reference = LookupEnv()
    reference.reset(seed=0, options={"task_index": 1})
    total = reference.step(reference.oracle_action())[1] + reference.step(reference.oracle_action())[1]
    assert env.get_reward() == pytest.approx(total)
    assert env.lookup(country="Peru").startswith("Error: the episode is over")
    # a new reset starts from zero
    env.reset(task_index=0)
    assert env.get_reward() == 0.0 and "not" not in env.lookup(country="France")


def test_tool_errors_become_observations(factory):
    env = factory()
    env.reset(task_index=0)
    assert "no country named" in env.lookup(country="Atlantis")


def test_trl_documented_usage_runs_one_step_without_extra_steps(tmp_path):
    """As TRL documents ``environment_factory``: our loader's tokenizer, our rows, a plain GRPOTrainer.

    ``make_grpo_config`` returns a plain ``GRPOConfig`` whose device/bf16 fields fit the machine (TRL's
    default ``bf16=True`` refuses a CPU-only machine unless ``use_cpu`` is set).
    """
    from datasets import Dataset
    from trl import GRPOTrainer

    from agent_trainers.algorithms.trl_adapter.trl_args import make_grpo_config
    from agent_trainers.policies import load_model

    model, tokenizer = load_model("tiny-random", device="cpu")
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=make_grpo_config(
            output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
            max_completion_length=16, max_tool_calling_iterations=2,
        ),
        train_dataset=Dataset.from_list(trl_dataset_rows([0, 1], env_id=ENV_ID)),
        environment_factory=make_environment_factory(ENV_ID),
    )  # fmt: skip
    assert sorted(t.__name__ for t in trainer.tools) == ["answer", "lookup"]
    trainer.train()
    assert trainer.state.global_step == 1
    assert any(k.startswith("rewards/") for k in trainer.state.log_history[0])


@pytest.mark.parametrize("env_id", [env_id for env_id, _ in agent_gym.list_envs()])
def test_prompts_ask_for_the_answer_tool_not_answer_tags(env_id):
    row = trl_dataset_rows([0], env_id=env_id)[0]
    question = make_environment_factory(env_id)().reset(**row)
    system = row["prompt"][0]["content"]
    assert row["prompt"][0]["role"] == "system" and system.endswith(ANSWER_TOOL_INSTRUCTION)
    for text in (system, question):
        assert "<answer>" not in text and "</answer>" not in text, text
    assert "<tool_call>" not in system  # TRL's template lists the tools and the call format itself


def test_unusable_tool_names_are_rejected():
    class Bad(LookupEnv):
        def make_tools(self, task):
            tool = super().make_tools(task)[0]
            tool.name = "answer"
            return [tool]

    gym.register("Test/BadFactory-v0", entry_point=Bad)
    with pytest.raises(ValueError, match="cannot be a TRL tool method"):
        make_environment_factory("Test/BadFactory-v0")
