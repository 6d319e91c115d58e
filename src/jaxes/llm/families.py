"""A Hugging Face model directory's ``config.json``, read into one ``ModelConfig``.

The families read are those the ES fine-tuning papers use: Qwen2 / Qwen2.5 (``qwen2``),
Qwen3 (``qwen3``) and Llama 3 (``llama``, including Llama 3.1's ``llama3`` RoPE scaling).
They share one decoder (RMSNorm, rotary positions, grouped-query attention, a SwiGLU MLP) and
differ in a few switches, which ``ModelConfig`` names: biases on q/k/v (Qwen2), an RMSNorm
on each head's queries and keys (Qwen3), tied input and output embeddings (the smaller
models of every family), and RoPE's frequencies.

Both spellings of RoPE's settings are read: ``rope_theta`` / ``rope_scaling`` (transformers
4) and ``rope_parameters`` (transformers 5).

Example:
  >>> config = from_dict({"model_type": "qwen2", "vocab_size": 32, "hidden_size": 16,
  ...     "intermediate_size": 24, "num_hidden_layers": 1, "num_attention_heads": 4,
  ...     "num_key_value_heads": 2, "tie_word_embeddings": True})
  >>> config.family, config.head_dim, config.qkv_bias, config.kv_heads
  ('qwen2', 4, True, 2)
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

FAMILIES = ("qwen2", "qwen3", "llama")
SUPPORTED = "Qwen2/Qwen2.5 (qwen2), Qwen3 (qwen3) and Llama 3 (llama)"


class ModelError(ValueError):
    """A model directory jaxes cannot read: the message is one line naming what and why."""


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1's frequency-dependent RoPE scaling (``rope_type: llama3``)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position: int


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The decoder a checkpoint describes.

    Attributes:
      family: ``"qwen2"``, ``"qwen3"`` or ``"llama"`` (config.json's ``model_type``).
      vocab: rows of the embedding table (may exceed the tokenizer's ids).
      d_model: the residual stream's width (``hidden_size``).
      mlp: the SwiGLU MLP's hidden width (``intermediate_size``).
      layers: decoder blocks.
      heads: query heads; ``kv_heads``: key/value heads (grouped-query attention).
      head_dim: each head's width (``hidden_size // heads`` unless the config says).
      max_len: positions the model was trained for (``max_position_embeddings``).
      rope_theta: RoPE's base; ``rope_scaling``: Llama 3.1's scaling or ``None``.
      norm_eps: RMSNorm's epsilon.
      tied: the output head reads the input embedding table (``tie_word_embeddings``).
      qkv_bias: q, k and v projections carry a bias (Qwen2; ``attention_bias`` elsewhere).
      mlp_bias: the MLP's projections carry a bias (Llama's ``mlp_bias``).
      qk_norm: an RMSNorm on each head's queries and keys before RoPE (Qwen3).
      dtype: the checkpoint's dtype as config.json names it (``torch_dtype`` / ``dtype``).
      raw: config.json as read, written back unchanged by ``jaxes.llm.export``.
    """

    family: str
    vocab: int
    d_model: int
    mlp: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    max_len: int = 4096
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    norm_eps: float = 1e-6
    tied: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    dtype: str = "float32"
    raw: Any = dataclasses.field(default=None, compare=False, repr=False, hash=False)


def _int(raw: dict, key: str, default=None, minimum: int = 1) -> int:
    value = raw.get(key, default)
    if value is None:
        raise ModelError(f"config.json: {key} is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelError(f"config.json: {key} must be an integer >= {minimum}, got {value!r}")
    return value


def _rope(raw: dict) -> tuple[float, RopeScaling | None]:
    """RoPE's base and scaling from either spelling (``rope_parameters`` or the older keys)."""
    params = raw.get("rope_parameters") or {}
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    scaling = raw.get("rope_scaling") or params
    kind = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    if kind == "default":
        return float(theta), None
    if kind != "llama3":
        raise ModelError(
            f"config.json: rope_scaling of type {kind!r} is not supported (default and llama3 are)"
        )
    return float(theta), RopeScaling(
        factor=float(scaling["factor"]),
        low_freq_factor=float(scaling["low_freq_factor"]),
        high_freq_factor=float(scaling["high_freq_factor"]),
        original_max_position=int(scaling["original_max_position_embeddings"]),
    )


def _check_switches(raw: dict, family: str) -> None:
    """Refuse what the shared decoder does not compute, rather than compute it wrong."""
    if raw.get("use_sliding_window"):
        raise ModelError(
            "config.json: use_sliding_window is true; sliding-window attention is not supported"
        )
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ModelError(f"config.json: hidden_act {act!r} is not supported (silu is)")
    if family == "llama" and raw.get("pretraining_tp", 1) not in (1, None):
        raise ModelError("config.json: pretraining_tp > 1 is not supported")


def from_dict(raw: dict) -> ModelConfig:
    """The ``ModelConfig`` of a parsed config.json; ``ModelError`` naming the key otherwise."""
    if not isinstance(raw, dict):
        raise ModelError("config.json: expected a JSON object")
    family = raw.get("model_type")
    if family not in FAMILIES:
        raise ModelError(
            f"config.json: model_type {family!r} is not supported; supported families: {SUPPORTED}"
        )
    _check_switches(raw, family)
    d_model = _int(raw, "hidden_size")
    heads = _int(raw, "num_attention_heads")
    kv_heads = _int(raw, "num_key_value_heads", heads)
    if heads % kv_heads:
        raise ModelError(
            f"config.json: num_key_value_heads {kv_heads} does not divide "
            f"num_attention_heads {heads}"
        )
    head_dim = raw.get("head_dim") or d_model // heads
    theta, scaling = _rope(raw)
    return ModelConfig(
        family=family,
        vocab=_int(raw, "vocab_size"),
        d_model=d_model,
        mlp=_int(raw, "intermediate_size"),
        layers=_int(raw, "num_hidden_layers"),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=int(head_dim),
        max_len=_int(raw, "max_position_embeddings", 4096),
        rope_theta=theta,
        rope_scaling=scaling,
        norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        tied=bool(raw.get("tie_word_embeddings", False)),
        qkv_bias=family == "qwen2" or bool(raw.get("attention_bias", False)),
        mlp_bias=bool(raw.get("mlp_bias", False)),
        qk_norm=family == "qwen3",
        dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "float32"),
        raw=raw,
    )


def check_directory(path: str) -> str:
    """``path`` if it is a model directory; ``ModelError`` otherwise, saying what to do with a
    hub name (nothing is ever downloaded)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        looks_like_name = path.count("/") == 1 and not path.startswith((".", "/", "~"))
        hint = (
            " (a hub name? jaxes never downloads: fetch it first, e.g. "
            f"`huggingface-cli download {path} --local-dir DIR`, and pass DIR)"
            if looks_like_name
            else ""
        )
        raise ModelError(f"model: {path} is not a directory{hint}")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ModelError(
            f"model: {path} has no config.json; expected a Hugging Face model directory "
            f"of a supported family: {SUPPORTED}"
        )
    return path


def read_config(path: str) -> ModelConfig:
    """The ``ModelConfig`` of the model directory ``path`` (its ``config.json``)."""
    path = check_directory(path)
    try:
        with open(os.path.join(path, "config.json")) as f:
            raw = json.load(f)
    except ValueError as err:
        raise ModelError(f"config.json in {path} is not valid JSON: {err}") from None
    return from_dict(raw)
