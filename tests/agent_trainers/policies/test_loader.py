"""The one model loader: names, folders, chat/response templates, padding, dtype, device."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch

from agent_trainers.policies import Device, load_model, load_tokenizer, resolve_device, tool_chat_template


def _check_prepared(tok):
    assert tok.chat_template == tool_chat_template()
    assert tok.padding_side == "left" and tok.eos_token == "<|im_end|>" and tok.pad_token_id is not None
    assert tok.response_template["start_anchor"] == "<|im_start|>assistant\n"


def test_tiny_random_loads_on_the_cpu_with_a_prepared_tokenizer():
    model, tok = load_model("tiny-random", device="cpu", seed=3)
    assert next(model.parameters()).device.type == "cpu" and not model.training
    assert model.config.num_hidden_layers == 2 and model.config.vocab_size == len(tok)
    _check_prepared(tok)
    again, _ = load_model("tiny-random", device="cpu", seed=3)
    other, _ = load_model("tiny-random", device="cpu", seed=4)
    first = next(model.parameters())
    assert torch.equal(first, next(again.parameters())) and not torch.equal(first, next(other.parameters()))


def test_a_checkpoint_folder_loads_the_same_way_with_the_asked_dtype(tmp_path):
    model, tok = load_model("tiny-random", device="cpu")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    back, tok2 = load_model(tmp_path, device="cpu", dtype="bfloat16")
    assert next(back.parameters()).dtype == torch.bfloat16
    _check_prepared(tok2)
    assert torch.equal(next(back.parameters()), next(model.parameters()).to(torch.bfloat16))


def test_the_tokenizer_parses_the_tool_calls_its_template_writes(smollm2_tokenizer):
    tok = load_tokenizer("smollm2")
    prompt = tok.apply_chat_template([{"role": "user", "content": "q"}], tokenize=True, add_generation_prompt=True)
    if isinstance(prompt, Mapping):  # a dict up to transformers 5.24, a BatchEncoding (a UserDict) from 5.25
        prompt = prompt["input_ids"]
    text = '<tool_call>\n{"name": "search", "arguments": {"query": "Jaws"}}\n</tool_call><|im_end|>'
    parsed = tok.parse_response(tok(text, add_special_tokens=False)["input_ids"], prefix=prompt)
    assert parsed["tool_calls"] == [
        {"type": "function", "function": {"name": "search", "arguments": {"query": "Jaws"}}}
    ]
    plain = tok.parse_response(tok("Paris<|im_end|>", add_special_tokens=False)["input_ids"], prefix=prompt)
    assert plain == {"role": "assistant", "content": "Paris"}


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("gpt-9000", "unknown model 'gpt-9000'.*'smollm2' or 'tiny-random'"),
        ("no/such-model", "cannot load a tokenizer"),
    ],
)
def test_unknown_models_are_clear_errors(name, match):
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        load_model(name, device="cpu")


def test_devices():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device(Device.AUTO).type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match=r"device must be one of \['auto', 'cpu', 'cuda'\]"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="dtype must be 'auto' or one of"):
        load_model("tiny-random", device="cpu", dtype="float8")


@pytest.mark.slow  # converts SmolLM2's tokenizer alone (~22 s) and then the whole checkpoint (~75 s); CI runs it
def test_the_tokenizer_converted_alone_is_the_one_saved_with_the_checkpoint(tmp_path, monkeypatch):
    """Before the checkpoint is converted, the tokenizer is converted on its own; both conversions must write the
    same files, byte for byte, so that a run tokenizes the same way whichever of the two it found."""
    from agent_trainers.policies.cache import smollm2_cache_dir, smollm2_tokenizer_cache_dir

    monkeypatch.setenv("AGENT_R1_CACHE", str(tmp_path))
    alone = load_tokenizer("smollm2")
    assert smollm2_tokenizer_cache_dir().is_dir() and not smollm2_cache_dir().exists()
    _, with_checkpoint = load_model("smollm2", device="cpu")
    files = sorted(p.name for p in smollm2_tokenizer_cache_dir().iterdir())
    assert "tokenizer_config.json" in files and "tokenizer.json" in files
    for name in files:
        assert (smollm2_tokenizer_cache_dir() / name).read_bytes() == (smollm2_cache_dir() / name).read_bytes(), name
    text = "<|im_start|>user\nWhat is 12 * 3.5?<|im_end|>\n<search>Harvey Pekar</search>"
    assert alone(text)["input_ids"] == with_checkpoint(text)["input_ids"]
