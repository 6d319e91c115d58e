"""Pre-training by backprop: the corpus as token arrays, next-token cross-entropy on the
completions, AdamW, and the cache of pre-trained model directories.

``pretrain(setup)`` trains the Qwen2 model of ``setup`` (``jaxes.llm.CausalLM``) on
``problems.texts`` (the TinyZero prompt ``countdown_prompt`` and a completion), the loss on
the completion's tokens only: the prompt is the same text every time but for its numbers,
and what the model is to learn is what to write after it. ``pretrained(quick=True)`` returns
the directory of ``QUICK`` (or ``FULL``), pre-training and writing it the first time.

Example (a micro pre-training):
  >>> import tempfile
  >>> out = pretrain(Setup(d_model=32, mlp=64, steps=2, batch=4, problems=16))
  >>> path = save(out, tempfile.mkdtemp() + "/model")
  >>> sorted(os.listdir(path))[:3]
  ['chat_template.jinja', 'config.json', 'generation_config.json']
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
import numpy as np
import optax

from jaxes.llm import CausalLM, from_dict

from . import problems as countdown
from .model import Setup, check_out, config_json, init_params, write_directory
from .tokenizer import BPE_VOCAB, CORPUS_SEED, train_tokenizer

# The quick model (600 steps: 2.5 to 6 minutes on a 2-core CPU, as busy as it is) and a
# four times longer one; ``pretrained`` caches each under a hash of its settings.
QUICK = Setup()
FULL = dataclasses.replace(QUICK, steps=2400, problems=153_600)
# Bump when the corpus, the tokenizer or the loop changes what a Setup pre-trains.
CACHE_VERSION = 1
# Steps fused into one compiled call (a progress line after each).
CHUNK = 100


def encode(tokenizer, pairs: list[tuple[str, str]], length: int | None = None):
    """``(tokens (N, L) int32, mask (N, L) float32)``: each prompt's ids then its
    completion's, right-padded with ``<|endoftext|>``; ``mask`` is 1 on the completion's
    tokens. Prompt and completion are encoded apart, as the model sees them: the prompt
    alone, then what it writes."""
    pad = tokenizer.token_to_id(countdown.END)
    prompts = tokenizer.encode_batch([p for p, _ in pairs])
    completions = tokenizer.encode_batch([c for _, c in pairs])
    rows = [(p.ids, c.ids) for p, c in zip(prompts, completions, strict=True)]
    longest = max(len(p) + len(c) for p, c in rows)
    length = longest if length is None else length
    if longest > length:
        raise ValueError(f"length: a sequence has {longest} tokens, more than {length}")
    tokens = np.full((len(rows), length), pad, np.int32)
    mask = np.zeros((len(rows), length), np.float32)
    for i, (p, c) in enumerate(rows):
        tokens[i, : len(p) + len(c)] = p + c
        mask[i, len(p) : len(p) + len(c)] = 1.0
    return tokens, mask


def token_loss(model: CausalLM, params, tokens, mask) -> jax.Array:
    """Mean next-token cross-entropy over the tokens ``mask`` marks (each predicted from the
    ones before it)."""
    logits, _ = model.apply({"params": params}, tokens[:, :-1])
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
    weights = mask[:, 1:]
    return jnp.sum(losses * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def split_loss(model: CausalLM, params, tokens, mask, shared: int, quiet: int) -> jax.Array:
    """``token_loss``, computed in three calls of the model through its KV cache: the first
    ``shared`` tokens (the same in every row: the prompt's opening sentence) once, for one
    row, their keys and values then broadcast to the batch; the tokens up to ``quiet`` (no
    row's completion begins before it), whose logits are never used (XLA drops the output
    head there); the rest, with the loss. The same loss as ``token_loss`` (to float error),
    a third less work."""
    batch, length = tokens.shape
    model = model.clone(cache_len=length - 1)
    apply = partial(model.apply, {"params": params})
    _, cache = apply(tokens[:1, :shared], model.init_cache(1), 0)
    wide = (cache.k.shape[0], batch, *cache.k.shape[2:])
    cache = cache._replace(
        k=jnp.broadcast_to(cache.k, wide),
        v=jnp.broadcast_to(cache.v, wide),
        start=jnp.zeros((batch,), jnp.int32),
    )
    _, cache = apply(tokens[:, shared:quiet], cache, shared)
    logits, _ = apply(tokens[:, quiet:-1], cache, quiet)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, quiet + 1 :])
    weights = mask[:, quiet + 1 :]
    return jnp.sum(losses * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def shared_columns(tokens: np.ndarray, mask: np.ndarray) -> tuple[int, int]:
    """``(shared, quiet)`` for ``split_loss``: how many leading columns every row has the
    same, and the first column any row's completion is at less one (its first token is
    predicted from the one before)."""
    same = np.all(tokens == tokens[:1], axis=0)
    shared = int(np.argmin(same)) if not same.all() else tokens.shape[1]
    first = int(np.argmax(mask.any(axis=0)))
    return max(min(shared, first - 1), 1), max(first - 1, 1)


def corpus(setup: Setup, tokenizer):
    """The training problems (none of ``problems.unseen()``: the held-out problems and those
    ``jaxes finetune`` draws) and their token arrays (``encode``)."""
    held = countdown.unseen(numbers=setup.numbers)
    train = countdown.train(setup.problems, numbers=setup.numbers, exclude=held)
    countdown.check_disjoint(train, held)
    pairs = countdown.texts(train, setup.correct_fraction, setup.wrong, setup.seed)
    return train, encode(tokenizer, pairs)


def pretrain(setup: Setup, verbose: bool = False) -> dict:
    """Pre-trains ``setup``'s model. Returns ``params``, ``model``, ``config`` (config.json's
    dict), ``tokenizer``, ``loss`` (the last chunk's mean), ``losses`` (each chunk's mean),
    ``seconds`` (training, compiles included) and ``total_seconds`` (the corpus too)."""
    started = time.perf_counter()
    tokenizer = train_tokenizer()
    vocab = tokenizer.get_vocab_size()
    config = config_json(setup, vocab, tokenizer.token_to_id(countdown.END))
    model = CausalLM(from_dict(config))
    _, (tokens, mask) = corpus(setup, tokenizer)
    init_key, run_key = jax.random.split(jax.random.key(setup.seed))
    params = init_params(model, init_key)
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, setup.learning_rate, min(setup.warmup, setup.steps // 4), setup.steps
    )
    opt = optax.adamw(schedule, weight_decay=setup.weight_decay)
    shared, quiet = shared_columns(tokens, mask)
    loss_fn = partial(split_loss, model, shared=shared, quiet=quiet)
    tokens, mask = jnp.asarray(tokens), jnp.asarray(mask)

    def step(carry, key):
        params, opt_state = carry
        rows = jax.random.randint(key, (setup.batch,), 0, tokens.shape[0])
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens[rows], mask[rows])
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    @partial(jax.jit, static_argnums=2, donate_argnums=(0,))
    def chunk(carry, keys, n):
        carry, losses = jax.lax.scan(step, carry, keys[:n])
        return carry, jnp.mean(losses)

    carry = (params, opt.init(params))
    keys = jax.random.split(run_key, setup.steps)
    train_started = time.perf_counter()
    losses = []
    for at in range(0, setup.steps, CHUNK):
        n = min(CHUNK, setup.steps - at)
        carry, loss = chunk(carry, keys[at : at + CHUNK], n)
        losses.append(float(loss))
        if verbose:
            elapsed = time.perf_counter() - train_started
            print(f"  step {at + n:5d}/{setup.steps}  loss {losses[-1]:.4f}  {elapsed:6.1f} s")
    seconds = time.perf_counter() - train_started
    return {
        "params": jax.block_until_ready(carry[0]),
        "model": model,
        "config": config,
        "tokenizer": tokenizer,
        "loss": losses[-1],
        "losses": losses,
        "seconds": seconds,
        "total_seconds": time.perf_counter() - started,
        "setup": setup,
    }


def save(out: dict, directory: str) -> str:
    """Writes ``pretrain``'s result as a Hugging Face model directory (``model
    .write_directory``), with how it was made in ``lm_countdown.json``. Returns its path."""
    extra = {
        "setup": dataclasses.asdict(out["setup"]),
        "cache_version": CACHE_VERSION,
        "loss": out["loss"],
        "losses": out["losses"],
        "seconds": round(out["seconds"], 1),
    }
    return write_directory(out["params"], out["config"], out["tokenizer"], directory, extra)


def settings_hash(setup: Setup) -> str:
    """16 hex digits of every setting that changes the directory: ``setup``'s fields, the
    tokenizer's size and corpus seed, the problems' seeds and ``CACHE_VERSION``."""
    fields = {
        **dataclasses.asdict(setup),
        "bpe_vocab": BPE_VOCAB,
        "tokenizer_seed": CORPUS_SEED,
        "seeds": [countdown.TRAIN_SEED, countdown.HELD_OUT_SEED, *countdown.COMMAND_SEEDS],
        "unseen": countdown.COMMAND_PROBLEMS,
        "version": CACHE_VERSION,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """Where pre-trained directories are kept: ``$JAXES_LM_COUNTDOWN_DIR``, else
    ``~/.cache/jaxes/lm_countdown``."""
    default = Path.home() / ".cache" / "jaxes" / "lm_countdown"
    return Path(os.environ.get("JAXES_LM_COUNTDOWN_DIR", default))


def build(directory: str, quick: bool = True, verbose: bool = False) -> str:
    """Pre-trains ``QUICK`` (``quick``) or ``FULL`` and writes the model directory
    ``directory`` (an empty or new folder, or one this example wrote: checked first). Returns
    its path."""
    check_out(directory)
    out = pretrain(QUICK if quick else FULL, verbose=verbose)
    if verbose:
        print(f"  pre-trained in {out['seconds']:.1f} s, loss {out['loss']:.4f}")
    return save(out, directory)


def pretrained(quick: bool = True, rebuild: bool = False, verbose: bool = False) -> str:
    """The model directory of ``QUICK`` (``quick``) or ``FULL``: ``cache_dir()/<settings
    hash>``, pre-trained and written there when it is not (or ``rebuild``). A directory
    without its weights (an interrupted write leaves none: ``write_directory`` renames a
    finished one into place) is built again.

    Pre-training is not bit-reproducible from one process to the next on a CPU (the losses
    agree to 3 decimals after 100 steps, then drift apart), so the cache, not the settings,
    is what makes two runs use the same weights."""
    path = cache_dir() / settings_hash(QUICK if quick else FULL)
    if not rebuild and (path / "model.safetensors").is_file():
        return str(path)
    out = pretrain(QUICK if quick else FULL, verbose=verbose)
    if verbose:
        print(f"  pre-trained in {out['seconds']:.1f} s, loss {out['loss']:.4f}")
    if not rebuild and (path / "model.safetensors").is_file():
        return str(path)  # another process built it meanwhile: theirs is kept
    return save(out, path)
