"""The Countdown model and its pre-training by backprop, before any fine-tune.

The model is ``jaxes.tasks.transformer.Transformer`` (``Setup`` sizes it for the task's
vocabulary and lengths); ``pretrain`` runs Adam on the arithmetic corpus
(``corpus.corpus``: equations and the answer format, never which expression reaches a
target), masked next-token cross-entropy. ``greedy``, ``arithmetic_accuracy`` and
``accuracy`` measure a model by greedy decoding (``jaxes.tasks.sequence.generate``).
``jaxes_examples.countdown.finetune`` fine-tunes what this module pre-trains.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import optax

from jaxes import factored
from jaxes.factored import int8
from jaxes.tasks.sequence import generate
from jaxes.tasks.transformer import Transformer
from jaxes.training import compilation

# As ``countdown``: its name in finetune (where ``problems`` is a function) and notebook 10.
from . import problems as countdown
from .corpus import all_equations, corpus, equations_of


@dataclasses.dataclass(frozen=True)
class Setup:
    """The model, the pre-training and the problems.

    Example:
      >>> Setup().model().d_model
      32
    """

    d_model: int = 32
    heads: int = 4
    layers: int = 2
    mlp: int = 4
    pretrain_steps: int = 1500
    pretrain_batch: int = 128
    pretrain_lr: float = 3e-3
    corpus_size: int = 20_000
    stretch: int = 1
    seed: int = 0
    numbers: int = 2

    def model(self) -> Transformer:
        n = self.numbers
        max_len = countdown.prompt_len(n) + countdown.answer_len(self.stretch, n)
        return Transformer(
            vocab=countdown.VOCAB,
            d_model=self.d_model,
            heads=self.heads,
            layers=self.layers,
            mlp=self.mlp,
            max_len=max(max_len, countdown.equation_len(n)),
        )


# The bigger model of the three-number game: the largest of those timed whose pre-training
# fits in about 20 minutes on the project's 2-core CPU (0.25 s a step at batch 128, measured
# for d_model 32 / 128 / 192 / 256 with 4 layers; issue 42). Kept in the cache once built.
LARGE = Setup(d_model=256, heads=8, layers=4, pretrain_steps=4500, corpus_size=100_000, numbers=3)


def init_params(model: Transformer, key) -> dict:
    """The model's params, float32."""
    return model.init(key, jnp.zeros((1, 1), jnp.int32))["params"]


def token_loss(model: Transformer, params, tokens, mask) -> jax.Array:
    """Masked next-token cross-entropy: ``mask[:, t]`` weighs the prediction of token ``t``."""
    logits, _ = model.apply({"params": params}, tokens[:, :-1])
    losses = optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), tokens[:, 1:]
    )
    weights = mask[:, 1:]
    return jnp.sum(losses * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def pretrain(setup: Setup, verbose: bool = False) -> dict:
    """Adam on ``corpus``; returns ``params``, ``loss`` (the last 100 steps' mean),
    ``seconds`` (without the compile) and ``compile_seconds``.

    Example:
      >>> out = pretrain(Setup(d_model=8, heads=2, layers=1, pretrain_steps=2,
      ...                      corpus_size=64, pretrain_batch=8))
      >>> sorted(out["params"])[:2], out["loss"] > 0
      (['block_0', 'embed'], True)
    """
    model = setup.model()
    tokens, mask = corpus(setup.seed, setup.corpus_size, setup.stretch, setup.numbers)
    init_key, run_key = jax.random.split(jax.random.key(setup.seed))
    params = init_params(model, init_key)
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, setup.pretrain_lr, min(100, setup.pretrain_steps // 4), setup.pretrain_steps
    )
    opt = optax.adam(schedule)

    def step(carry, key):
        params, opt_state = carry
        rows = jax.random.randint(key, (setup.pretrain_batch,), 0, tokens.shape[0])
        loss, grads = jax.value_and_grad(partial(token_loss, model))(
            params, tokens[rows], mask[rows]
        )
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def run(params, key):
        keys = jax.random.split(key, setup.pretrain_steps)
        (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), keys)
        return params, jnp.mean(losses[-100:])

    started = time.perf_counter()
    compiled = compilation.compile(jax.jit(run).lower(params, run_key))
    compile_seconds = time.perf_counter() - started
    started = time.perf_counter()
    params, loss = jax.block_until_ready(compiled(params, run_key))
    seconds = time.perf_counter() - started
    if verbose:
        print(f"  pre-trained {setup.pretrain_steps} steps in {seconds:.1f} s, loss {loss:.3f}")
    return {
        "params": params,
        "loss": float(loss),
        "seconds": seconds,
        "compile_seconds": compile_seconds,
    }


# ---------------------------------------------------------------- the cache

# Bump when the corpus, the model or the training loop changes what a Setup pre-trains.
CACHE_VERSION = 1


def cache_dir() -> Path:
    """Where pre-trained params are kept: ``$JAXES_PRETRAINED_DIR``, else
    ``~/.cache/jaxes/pretrained`` (beside the compile cache, ``~/.cache/jaxes/xla``)."""
    default = Path.home() / ".cache" / "jaxes" / "pretrained"
    return Path(os.environ.get("JAXES_PRETRAINED_DIR", default))


def cache_path(setup: Setup, directory: Path | None = None) -> Path:
    """The file of ``setup``'s pre-trained params: named by a hash of every field of the
    setup and ``CACHE_VERSION``, so another setup never reads it.

    Example:
      >>> a, b = cache_path(Setup(), Path("c")), cache_path(Setup(seed=1), Path("c"))
      >>> a.parent.name, a.suffix, a != b
      ('c', '.msgpack', True)
    """
    fields = json.dumps({**dataclasses.asdict(setup), "version": CACHE_VERSION}, sort_keys=True)
    digest = hashlib.sha256(fields.encode()).hexdigest()[:16]
    d_model, layers = setup.d_model, setup.layers
    name = f"countdown{setup.numbers}-d{d_model}-l{layers}-{digest}.msgpack"
    return (cache_dir() if directory is None else directory) / name


def pretrained(setup: Setup, rebuild: bool = False, verbose: bool = False) -> dict:
    """``pretrain(setup)``'s params, read from ``cache_path(setup)`` when they are there (and
    ``rebuild`` is false), else pre-trained and written there (through a temporary file, so an
    interrupted write leaves no damaged file). Returns ``{"params", "path", "cached"}``, and
    ``pretrain``'s ``loss`` and ``seconds`` when it ran. An unreadable file is pre-trained
    again and replaced."""
    from flax import serialization

    path = cache_path(setup)
    model = setup.model()
    if path.exists() and not rebuild:
        like = init_params(model, jax.random.key(0))
        try:
            params = serialization.from_bytes(like, path.read_bytes())
            if verbose:
                print(f"  pre-trained params read from {path}")
            return {"params": params, "path": path, "cached": True}
        except (ValueError, KeyError, TypeError) as err:
            print(f"  {path} cannot be read ({type(err).__name__}); pre-training again")
    out = pretrain(setup, verbose=verbose)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial_path = path.with_name(path.name + f".{os.getpid()}.tmp")
    partial_path.write_bytes(serialization.to_bytes(out["params"]))
    os.replace(partial_path, path)
    if verbose:
        print(f"  pre-trained params written to {path}")
    return {**out, "path": path, "cached": False}


# ---------------------------------------------------------------- measuring a model


def greedy(model: Transformer, params, prompts: jax.Array, steps: int, quantize=False):
    """Greedy continuations ``(N, steps)`` of ``prompts`` by the model at ``params`` (their own
    dtype; with ``quantize``, the int8 model, run by ``jaxes.factored``)."""
    dtype = jnp.result_type(*jax.tree.leaves(params))
    if quantize:
        params = int8.quantize(params)

        def apply_fn(tokens, cache, position):
            return factored.apply(model, params, None, tokens, cache, position)
    else:

        def apply_fn(tokens, cache, position):
            return model.apply({"params": params}, tokens, cache, position)

    return generate(apply_fn, model.init_cache(prompts.shape[0], dtype), prompts, steps)


def arithmetic_accuracy(model: Transformer, params) -> jax.Array:
    """The fraction of the corpus's 255 equations ``x op y =`` whose two result digits the
    model writes right (greedy)."""
    prompts, answers = equations_of(all_equations())
    tokens = greedy(model, params, prompts, 2)
    return jnp.mean(jnp.all(tokens == answers, axis=1))


def accuracy(model: Transformer, params, prompts, stretch: int = 1, quantize=False):
    """Exact answers (greedy decoding) on ``prompts``, a fraction."""
    steps = countdown.answer_len(stretch, countdown.numbers_of(prompts))
    tokens = greedy(model, params, prompts, steps, quantize)
    return jnp.mean(countdown.reward(prompts, tokens, stretch))
