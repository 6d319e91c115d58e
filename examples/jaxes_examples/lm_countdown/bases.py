"""Bases with latent skill for the ES-against-GRPO study (``benchmarks/es_vs_grpo.py``).

A base is the quick model pre-trained with one seed (``pretrain.pretrain``: half its corpus
careful and correct, half hasty guesses), then supervised on correct answers in the careful
style, a chunk of steps at a time, until its greedy exact-answer rate on ``validation`` (a
split of the fine-tune's training problems, never the held-out ones) enters ``BAND``. What
the study asks of a base is skill that sampling finds and greedy decoding mostly misses: a
greedy pass@1 of 0.15-0.30 and a pass@16 of at least 0.6 on the held-out problems.

Two bases, two pre-training seeds of the same model (``BASES``), each cached under a hash of
its settings beside the quick model (``pretrain.cache_dir``): ``base(name)`` builds it the
first time and returns its directory.

Example:
  >>> sorted(BASES)
  ['seed0', 'seed1']
  >>> in_band(0.2), in_band(0.31)
  (True, False)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import evaluate
from . import problems as countdown
from .model import Setup
from .pretrain import (
    CACHE_VERSION,
    cache_dir,
    encode,
    pretrain,
    settings_hash,
    shared_columns,
    split_loss,
)

# The greedy exact-answer rate a base is supervised into, on the validation problems.
BAND = (0.15, 0.30)


@dataclasses.dataclass(frozen=True)
class Supervision:
    """Supervised steps on correct careful answers: AdamW at ``learning_rate``, ``batch``
    sequences a step, ``chunk`` steps between checks of the validation rate, at most
    ``max_steps``; ``problems`` training problems (the pre-training's seed, none held out)."""

    learning_rate: float = 3e-4
    batch: int = 64
    chunk: int = 10
    max_steps: int = 400
    problems: int = 4096
    validation: int = 256


BASES = {
    "seed0": (Setup(seed=0), Supervision()),
    "seed1": (Setup(seed=1), Supervision()),
}


def in_band(rate: float) -> bool:
    """Whether a greedy exact-answer rate is inside ``BAND``."""
    return BAND[0] <= rate <= BAND[1]


def validation_problems(n: int, numbers=(3, 4)) -> list[dict]:
    """``n`` problems of the fine-tune's own seed (``problems.FINETUNE_SEED``), drawn after the
    ones the study trains on, so that neither set meets the held-out problems."""
    held = countdown.held_out(2000, numbers)
    pool = countdown.train(n + 8192, countdown.FINETUNE_SEED, numbers, exclude=held)
    return pool[8192:]


def _greedy_exact(pre, params, problems_: list[dict]) -> float:
    texts = evaluate.completions(pre, params, problems_)
    return float((evaluate.rewards(problems_, texts) == 1.0).mean())


def supervise(directory: str, supervision: Supervision, setup: Setup, verbose: bool = False):
    """The model of ``directory`` supervised until its greedy exact rate on the validation
    problems is in ``BAND`` (checked before the first step too). Returns ``(params, record)``:
    ``record`` has ``steps``, ``validation_exact`` (after each check) and ``seconds``."""
    from jaxes.llm import load

    pre = load(directory)
    held = countdown.unseen(2000, numbers=setup.numbers)  # the study's 2,000 held out too
    train = countdown.train(supervision.problems, numbers=setup.numbers, exclude=held)
    pairs = countdown.texts(train, 1.0, setup.wrong, setup.seed + 1)
    tokenizer = _tokenizer_of(directory)
    tokens, mask = encode(tokenizer, pairs)
    shared, quiet = shared_columns(tokens, mask)
    loss_fn = partial(split_loss, pre.model, shared=shared, quiet=quiet)
    opt = optax.adamw(supervision.learning_rate, weight_decay=setup.weight_decay)
    tokens, mask = jnp.asarray(tokens), jnp.asarray(mask)

    def step(carry, key):
        params, opt_state = carry
        rows = jax.random.randint(key, (supervision.batch,), 0, tokens.shape[0])
        grads = jax.grad(loss_fn)(params, tokens[rows], mask[rows])
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    @jax.jit
    def chunk(carry, keys):
        return jax.lax.scan(step, carry, keys)[0]

    check = validation_problems(supervision.validation, setup.numbers)
    started = time.perf_counter()
    carry = (pre.params, opt.init(pre.params))
    keys = jax.random.split(jax.random.key(setup.seed + 1), supervision.max_steps)
    rates, steps = [_greedy_exact(pre, carry[0], check)], 0
    while not in_band(rates[-1]) and steps < supervision.max_steps:
        if rates[-1] > BAND[1]:
            raise RuntimeError(f"supervision passed the band: {rates[-1]:.3f} > {BAND[1]}")
        carry = chunk(carry, keys[steps : steps + supervision.chunk])
        steps += supervision.chunk
        rates.append(_greedy_exact(pre, carry[0], check))
        if verbose:
            print(f"  supervised {steps:4d} steps: validation greedy exact {rates[-1]:.3f}")
    if not in_band(rates[-1]):
        raise RuntimeError(f"no supervised step count put the validation rate in {BAND}")
    record = {"steps": steps, "validation_exact": rates, "seconds": time.perf_counter() - started}
    return carry[0], record


def _tokenizer_of(directory: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(f"{directory}/tokenizer.json")


def base_hash(name: str) -> str:
    """16 hex digits of what makes base ``name``: its pre-training's hash and supervision."""
    setup, supervision = BASES[name]
    fields = {
        "pretrain": settings_hash(setup),
        "supervision": dataclasses.asdict(supervision),
        "band": BAND,
        "version": CACHE_VERSION,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def base_dir(name: str):
    """Where base ``name`` is cached (it may not exist yet)."""
    if name not in BASES:
        raise ValueError(f"base: expected one of {sorted(BASES)}, got {name!r}")
    return cache_dir() / f"base-{name}-{base_hash(name)}"


def base(name: str, rebuild: bool = False, verbose: bool = False) -> str:
    """The directory of base ``name``, pre-trained and supervised when it is not cached."""
    from .pretrain import save

    path = base_dir(name)
    if not rebuild and (path / "model.safetensors").is_file():
        return str(path)
    setup, supervision = BASES[name]
    started = time.perf_counter()
    pre_path = cache_dir() / settings_hash(setup)
    if not (pre_path / "model.safetensors").is_file():
        save(pretrain(setup, verbose=verbose), str(pre_path))
    params, record = supervise(str(pre_path), supervision, setup, verbose=verbose)
    out = {
        "params": params,
        "config": json.loads((pre_path / "config.json").read_text()),
        "tokenizer": _tokenizer_of(str(pre_path)),
        "loss": float("nan"),
        "losses": [],
        "seconds": time.perf_counter() - started,
        "setup": setup,
    }
    save(out, str(path))
    extra = json.loads((path / "lm_countdown.json").read_text())
    extra["supervision"] = {**dataclasses.asdict(supervision), **record, "band": BAND}
    (path / "lm_countdown.json").write_text(json.dumps(extra, indent=2))
    return str(path)


def held_out_skill(directory: str, n_greedy: int = 2000, n_sampled: int = 512) -> dict:
    """The base's greedy exact rate (pass@1) on ``n_greedy`` held-out problems and its
    pass@16 at temperature 1 on the first ``n_sampled`` of them."""
    from jaxes.llm import load

    pre = load(directory)
    held = countdown.held_out(n_greedy)
    greedy = evaluate.rewards(held, evaluate.completions(pre, pre.params, held))
    sampled = evaluate.completions(
        pre, pre.params, held[:n_sampled], samples=16, temperature=1.0, key=jax.random.key(0)
    )
    scores = evaluate.rewards(held[:n_sampled], sampled)
    return {
        "heldout_pass1": round(float((greedy == 1.0).mean()), 4),
        "heldout_reward": round(float(greedy.mean()), 4),
        "heldout_pass16": round(float((scores == 1.0).any(axis=1).mean()), 4),
        "greedy_problems": n_greedy,
        "sampled_problems": n_sampled,
        "params": int(sum(np.size(x) for x in jax.tree.leaves(pre.params))),
    }
