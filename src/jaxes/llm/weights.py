"""Checkpoint tensors in and out: ``*.safetensors`` (one file, or shards with their index)
read into ``CausalLM``'s parameter tree, and the tree written back under the same names.

A leaf's checkpoint name follows from its path by rule: ``layers_3/mlp/up_proj/kernel`` is
``model.layers.3.mlp.up_proj.weight`` (a kernel transposed: flax stores ``(in, out)``,
PyTorch's ``nn.Linear`` ``(out, in)``), ``embed_tokens/embedding`` is
``model.embed_tokens.weight`` and an untied head's ``lm_head/kernel`` is ``lm_head.weight``.
The tree expected is the model's own (``jax.eval_shape`` of its init), so a tensor that is
missing or whose shape disagrees with ``config.json`` is named before anything is built.

Example:
  >>> hf_name(("layers_0", "self_attn", "q_proj", "kernel"))
  'model.layers.0.self_attn.q_proj.weight'
  >>> hf_name(("lm_head", "kernel"))
  'lm_head.weight'
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.extras import require
from jaxes.llm.families import ModelError

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def hf_name(path: tuple[str, ...]) -> str:
    """The checkpoint name of the parameter at ``path`` in ``CausalLM``'s tree."""
    parts = [p.replace("layers_", "layers.") if p.startswith("layers_") else p for p in path]
    if parts[-1] in ("kernel", "embedding"):
        parts[-1] = "weight"
    name = ".".join(parts)
    return name if name.startswith("lm_head.") else f"model.{name}"


def _paths(tree) -> list[tuple[tuple[str, ...], jax.ShapeDtypeStruct]]:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [(tuple(k.key for k in path), leaf) for path, leaf in flat]


def _safetensors():
    return require("safetensors", "llm", "checkpoints")


def shard_files(directory: str) -> dict[str, str]:
    """Tensor name -> the file that holds it, from the shards' index or the one file."""
    index = os.path.join(directory, INDEX)
    if os.path.isfile(index):
        try:
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
        except (ValueError, KeyError, TypeError) as err:
            raise ModelError(f"{INDEX} in {directory} is damaged: {err!r}") from None
        return {name: os.path.join(directory, file) for name, file in weight_map.items()}
    single = os.path.join(directory, SINGLE)
    if not os.path.isfile(single):
        raise ModelError(f"model: {directory} has neither {SINGLE} nor {INDEX}")
    try:
        with _safetensors().safe_open(single, framework="np") as f:
            return dict.fromkeys(f.keys(), single)
    except Exception as err:  # safetensors' Rust error type is not a stable import
        raise ModelError(f"checkpoint: {SINGLE} is damaged: {err}") from None


def _read(files: dict[str, str], names: list[str]) -> dict[str, np.ndarray]:
    """The tensors ``names``, each file opened once; a missing file or tensor is named."""
    by_file: dict[str, list[str]] = {}
    for name in names:
        if name not in files:
            raise ModelError(f"checkpoint: tensor {name} is missing")
        by_file.setdefault(files[name], []).append(name)
    out = {}
    for file, wanted in by_file.items():
        if not os.path.isfile(file):
            raise ModelError(f"checkpoint: shard {os.path.basename(file)} is missing")
        try:
            with _safetensors().safe_open(file, framework="np") as f:
                for name in wanted:
                    out[name] = f.get_tensor(name)
        except Exception as err:  # safetensors' Rust error type is not a stable import
            raise ModelError(f"checkpoint: {os.path.basename(file)} is damaged: {err}") from None
    return out


def load_params(directory: str, expected, dtype=None):
    """The parameter tree shaped like ``expected`` (a tree of ``ShapeDtypeStruct``, e.g.
    ``jax.eval_shape`` of the model's init), read from ``directory``'s safetensors, in
    ``dtype`` (``None``: the checkpoint's own)."""
    leaves = _paths(expected)
    files = shard_files(directory)
    tensors = _read(files, [hf_name(path) for path, _ in leaves])
    values = []
    for path, leaf in leaves:
        name = hf_name(path)
        tensor = tensors[name]
        want = leaf.shape[::-1] if path[-1] == "kernel" else leaf.shape
        if tuple(tensor.shape) != tuple(want):
            raise ModelError(
                f"checkpoint: tensor {name} has shape {tuple(tensor.shape)}, "
                f"config.json implies {tuple(want)}"
            )
        tensor = tensor.T if path[-1] == "kernel" else tensor
        values.append(jnp.asarray(tensor, dtype))
    return jax.tree.unflatten(jax.tree.structure(expected), values)


def to_tensors(params, dtype) -> dict[str, np.ndarray]:
    """The checkpoint's tensors (host arrays in ``dtype``) of a parameter tree."""
    out = {}
    for path, leaf in _paths(params):
        x = jnp.asarray(leaf).astype(dtype)
        out[hf_name(path)] = np.asarray(x.T if path[-1] == "kernel" else x)
    return out


def save_params(params, directory: str, dtype, max_shard_bytes: int = 4 * 2**30) -> list[str]:
    """Writes ``params`` into ``directory`` as transformers writes a checkpoint: one
    ``model.safetensors``, or shards of at most ``max_shard_bytes`` with their index. Returns
    the files written."""
    tensors = to_tensors(params, dtype)
    shards, size = [[]], 0
    for name, x in tensors.items():
        if shards[-1] and size + x.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += x.nbytes
    save = require("safetensors.numpy", "llm", "checkpoints").save_file
    if len(shards) == 1:
        save(tensors, os.path.join(directory, SINGLE), metadata={"format": "pt"})
        return [SINGLE]
    names, weight_map = [], {}
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        shard_tensors = {n: tensors[n] for n in shard}
        save(shard_tensors, os.path.join(directory, file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, file))
        names.append(file)
    total = sum(x.nbytes for x in tensors.values())
    with open(os.path.join(directory, INDEX), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return [*names, INDEX]
