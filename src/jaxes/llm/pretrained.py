"""A Hugging Face model directory in (``load``) and a fine-tuned one out (``export``).

Nothing is downloaded: ``load`` reads a directory already on disk (``config.json``, the
safetensors, the tokenizer files) and says so in one line when given a hub name instead.
``export`` writes what transformers and the tools that serve these models read: the same
``config.json`` (its dtype set to what was written), the weights as safetensors under the
checkpoint's names, and the source's tokenizer and generation files copied. It writes into a
new folder beside the target and renames it into place, so a failed export leaves nothing
half-written, and it never writes over a folder that holds anything.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile

import jax
import jax.numpy as jnp

from jaxes.llm import weights
from jaxes.llm.decoder import CausalLM
from jaxes.llm.families import ModelConfig, ModelError, check_directory, read_config
from jaxes.llm.tokenizer import Tokenizer, load_tokenizer

# The files a model directory carries besides its config and weights; copied by ``export``.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
)
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@dataclasses.dataclass(frozen=True, eq=False)
class Pretrained:
    """A checkpoint read into jaxes.

    Attributes:
      model: the ``CausalLM`` (its ``cache_len``, ``dtype`` and ``stream_weights`` as asked).
      params: its ``"params"`` collection.
      tokenizer: the directory's ``Tokenizer``.
      config: the ``ModelConfig``.
      directory: where it was read from (``export`` copies its tokenizer files).
    """

    model: CausalLM
    params: dict
    tokenizer: Tokenizer
    config: ModelConfig
    directory: str


def _dtype(name: str, value):
    if value is None or value in DTYPES.values():
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    raise ValueError(f"{name}: expected one of {sorted(DTYPES)} or None, got {value!r}")


def abstract_params(model: CausalLM, dtype=jnp.float32):
    """The model's parameter tree as ``ShapeDtypeStruct``s in ``dtype`` (nothing allocated):
    what a checkpoint must hold, and what a memory plan compiles against."""
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 1), jnp.int32))
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, dtype), shapes["params"])


def load(
    directory: str,
    *,
    dtype=None,
    compute_dtype=None,
    cache_len: int | None = None,
    stream_weights: bool = False,
) -> Pretrained:
    """Reads the model directory ``directory``.

    Args:
      directory: a Hugging Face model directory on disk (never a hub name).
      dtype: the params' dtype (``"float32"``, ``"bfloat16"``, ``"float16"``; ``None``: the
        checkpoint's own).
      compute_dtype: the dtype the layers compute in (``None``: the params').
      cache_len: slots a generation cache holds (prompt and answer; ``None``: the config's
        ``max_position_embeddings``).
      stream_weights: ``CausalLM.stream_weights``.

    Example:
      >>> load("Qwen/Qwen2.5-0.5B")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.llm.families.ModelError: model: Qwen/Qwen2.5-0.5B is not a directory (a hub name? ...
    """
    dtype, compute_dtype = _dtype("dtype", dtype), _dtype("compute_dtype", compute_dtype)
    config = read_config(directory)
    tokenizer = load_tokenizer(directory)
    model = CausalLM(config, cache_len, compute_dtype, stream_weights)
    params = weights.load_params(directory, abstract_params(model), dtype)
    return Pretrained(model, params, tokenizer, config, os.fspath(directory))


def export(pretrained: Pretrained, params, out: str, *, dtype=None) -> list[str]:
    """Writes ``params`` (``pretrained``'s tree, e.g. a fine-tuned centre) as a Hugging Face
    model directory ``out``, in ``dtype`` (``None``: the source checkpoint's). Returns the
    files written. ``out`` must not exist or be empty."""
    dtype = _dtype("dtype", dtype)
    if dtype is None:
        dtype = DTYPES.get(pretrained.config.dtype, jnp.float32)
    expected = jax.tree.structure(abstract_params(pretrained.model))
    if jax.tree.structure(params) != expected:
        raise ValueError("params: not the parameter tree of this model")
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ModelError(f"out: {out} exists and is not an empty folder; nothing was written")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        files = weights.save_params(params, staging, dtype)
        raw = dict(pretrained.config.raw or {})
        raw["torch_dtype" if "dtype" not in raw else "dtype"] = jnp.dtype(dtype).name
        with open(os.path.join(staging, "config.json"), "w") as f:
            json.dump(raw, f, indent=2)
        files.append("config.json")
        for name in TOKENIZER_FILES:
            source = os.path.join(check_directory(pretrained.directory), name)
            if os.path.isfile(source):
                shutil.copy2(source, os.path.join(staging, name))
                files.append(name)
        if os.path.isdir(out):
            os.rmdir(out)  # empty, checked above
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return files
