"""The model: a Qwen2 configuration small enough to pre-train on a CPU in minutes, its
random initial weights, and the Hugging Face directory it is written as.

``Setup`` holds every choice that changes the pre-trained weights (the architecture, the
corpus mix, the optimiser and its length); ``config_json`` is the ``config.json`` a Qwen2
checkpoint of that size carries (tied embeddings and grouped-query attention, as Qwen2.5-0.5B),
so ``jaxes.llm.load`` and transformers both read the directory ``write_directory`` makes.

Example:
  >>> from jaxes.llm import from_dict
  >>> config = from_dict(config_json(Setup(), vocab=474, end_id=471))
  >>> config.family, config.vocab, config.d_model, config.kv_heads, config.qkv_bias, config.tied
  ('qwen2', 512, 128, 2, True, True)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile

import jax
import jax.numpy as jnp

from jaxes.llm import CausalLM
from jaxes.llm.weights import save_params

from .tokenizer import SPECIALS, save_tokenizer


@dataclasses.dataclass(frozen=True)
class Setup:
    """The model, its corpus and its pre-training.

    Attributes:
      d_model, layers, heads, kv_heads, mlp: the Qwen2 decoder's sizes.
      max_len: ``max_position_embeddings`` (the prompt and answer fit well inside).
      steps, batch, learning_rate, weight_decay, warmup: AdamW with a warm-up and a cosine
        decay, ``batch`` sequences a step.
      problems: training problems in the corpus (``steps * batch``: each seen once).
      correct_fraction: the share of them written with a correct equation (the rest get a
        plausible wrong one, ``wrong``: ``"sum"`` or ``"random"``, ``problems.wrong_answer``).
      numbers: how many numbers a problem has (``countdown_problems``' ``numbers``).
      seed: the initial weights' and the batches' seed.
    """

    d_model: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    mlp: int = 384
    max_len: int = 256
    steps: int = 600
    batch: int = 64
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 100
    problems: int = 38_400
    correct_fraction: float = 0.5
    wrong: str = "random"
    numbers: tuple[int, ...] = (3, 4)
    seed: int = 0


def config_json(setup: Setup, vocab: int, end_id: int) -> dict:
    """The ``config.json`` of a Qwen2 model of ``setup``'s sizes (float32, tied embeddings)
    for a tokenizer of ``vocab`` tokens, ``<|endoftext|>`` (``end_id``) its bos and eos. The
    embedding table has ``vocab`` rounded up to a multiple of 64 rows, as Qwen pads its own
    (151,936 rows for 151,665 tokens); the rows no token has are never a training target."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": -(-vocab // 64) * 64,
        "hidden_size": setup.d_model,
        "intermediate_size": setup.mlp,
        "num_hidden_layers": setup.layers,
        "num_attention_heads": setup.heads,
        "num_key_value_heads": setup.kv_heads,
        "max_position_embeddings": setup.max_len,
        "max_window_layers": setup.layers,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": end_id,
        "eos_token_id": end_id,
        "torch_dtype": "float32",
    }


def init_params(model: CausalLM, key) -> dict:
    """Random float32 params of ``model`` (flax's initialisers)."""
    return jax.jit(model.init)(key, jnp.zeros((1, 1), jnp.int32))["params"]


def check_out(out: str) -> str:
    """``out`` as an absolute path if ``write_directory`` may write it (new, empty, or a model
    this example wrote: one with ``lm_countdown.json``); ``FileExistsError`` otherwise."""
    out = os.path.abspath(os.fspath(out))
    ours = os.path.isfile(os.path.join(out, "lm_countdown.json"))
    if os.path.exists(out) and not ours and (not os.path.isdir(out) or os.listdir(out)):
        raise FileExistsError(f"{out} exists and is neither empty nor a model this example wrote")
    return out


def write_directory(params, config: dict, tokenizer, out: str, extra: dict | None = None) -> str:
    """Writes a Hugging Face model directory ``out``: ``config.json``, ``model.safetensors``
    (``jaxes.llm.weights.save_params``, float32), ``generation_config.json``, the tokenizer's
    three files and, with ``extra``, ``lm_countdown.json`` (how it was made). It is written
    beside ``out`` and renamed into place, replacing an older ``out`` that this function
    wrote (one with ``lm_countdown.json``) or an empty folder, and nothing else. Returns
    ``out``."""
    out = check_out(out)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".lm_countdown-", dir=parent)
    try:
        save_params(params, staging, jnp.float32)
        with open(os.path.join(staging, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        end, _, im_end = (tokenizer.token_to_id(s) for s in SPECIALS)
        generation = {"bos_token_id": end, "eos_token_id": [end, im_end], "pad_token_id": end}
        with open(os.path.join(staging, "generation_config.json"), "w") as f:
            json.dump(generation, f, indent=2)
        save_tokenizer(tokenizer, staging)
        if extra is not None:
            with open(os.path.join(staging, "lm_countdown.json"), "w") as f:
                json.dump(extra, f, indent=2)
        if os.path.isdir(out):  # ours or empty: moved aside, then removed
            aside = tempfile.mkdtemp(prefix=".lm_countdown-old-", dir=parent)
            os.rename(out, os.path.join(aside, "model"))
            os.rename(staging, out)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
