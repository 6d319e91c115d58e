"""A digit classifier trained by evolution strategies: scikit-learn's 8x8 digits, no gradients.

The data are the 1797 8x8 grey-level images that ship with scikit-learn
(``sklearn.datasets.load_digits``, nothing is downloaded), split 80/20 stratified and
standardised with the training set's statistics. An MLP's weights are the ES search space and
a member's fitness is minus its mean cross-entropy on a minibatch of training images (the same
batch for every member of a generation, so that members are ranked on equal terms).

Three models:
  * ``full-rank``: 64-64-10 (4.8k weights) with ordinary full-rank Gaussian noise (windows of
    the shared noise table);
  * ``low-rank``: 64-256-256-10 (85k weights) with EGGROLL's rank-4 noise
    (``noise="lowrank"``): each weight matrix is perturbed by ``A Bᵀ/√r``, and
    ``jaxes.factored`` runs every member as ``x W + (x A) Bᵀ`` so that no member's matrices
    are ever built;
  * ``big full-rank``: the same 64-256-256-10 net with full-rank noise, to compare with.

Each run fuses ``eval_every`` generations of ask -> evaluate -> tell into one jitted
``lax.scan`` and then measures the centre's train and test accuracy (the noise-free model).
The program is compiled before the clock starts, so the seconds reported are training time.

All use OpenAI-ES with P = 200 (antithetic pairs), Adam with a cosine-decayed learning rate
and minibatches of 256 images. With seed 0 on the project's 2-core CPU (shared with two other
jobs, commit 8150175) the full schedule (300 generations) ends at 0.961 test accuracy
(full-rank, 4 s of training), 0.975 (low-rank, 64 s) and 0.964 (big full-rank, 44 s), 2¼
minutes in all with compiles; ``--quick`` (100 generations) at 0.958 (full-rank) and 0.933
(low-rank).

Run:
  python examples/digits.py [--quick] [--model full-rank|low-rank|big full-rank|all]
  (or JAXES_QUICK=1)

It ends with one line per model, e.g.
``test accuracy 0.961 (full-rank, 64-64-10, 300 generations, 3.8 s)``.
``notebooks/05_digits.ipynb`` imports ``configs``, ``load_data`` and ``train`` from here.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxes
from jaxes import factored, subspace

# Optional speed-up: reuse compiled programs across runs (the test suite and `make` set this).
if os.environ.get("JAXES_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXES_CACHE_DIR"])


@dataclasses.dataclass(frozen=True)
class Config:
    """One training run of OpenAI-ES (Adam) on an MLP. ``noise`` is ``open_es``'s noise
    source and ``rank`` its rank (``"lowrank"`` only); ``cosine`` decays the learning rate to
    0 along a cosine over the ``generations``; ``subspace_dim`` k searches θ₀ + Π z, z ∈ R^k
    (``jaxes.subspace``, for notebooks/07_intrinsic_dimension.ipynb) instead of all of θ."""

    name: str
    hidden: tuple[int, ...]
    noise: str = "table"
    rank: int = 1
    population: int = 200
    sigma: float = 0.05
    learning_rate: float = 0.03
    cosine: bool = True
    l2: float = 0.0
    generations: int = 300
    batch_size: int = 256
    eval_every: int = 5
    seed: int = 0
    subspace_dim: int | None = None

    @property
    def layers(self) -> str:
        return "-".join(str(n) for n in (64, *self.hidden, 10))


CONFIGS = {
    # A little weight decay: without it this net fits the training set exactly (loss 1e-3)
    # and its test accuracy wanders by a few images from seed to seed.
    "full-rank": Config("full-rank", hidden=(64,), l2=0.005),
    # A matrix's output moves by about σ·√fan_in under full-scale noise, so the wider layers
    # want a smaller σ (and then a smaller step) than the 64-unit net.
    "low-rank": Config(
        "low-rank", hidden=(256, 256), noise="lowrank", rank=4, sigma=0.02, learning_rate=0.01
    ),
    # The same bigger net with full-rank noise: what the low-rank one is compared against.
    "big full-rank": Config("big full-rank", hidden=(256, 256), sigma=0.02, learning_rate=0.01),
}

# Quick mode: the same models and settings on a three times shorter schedule (the cosine
# decay is over the run, so a short run still ends with small steps).
QUICK_GENERATIONS = 100


def configs(quick: bool) -> dict[str, Config]:
    """``CONFIGS``, or their quick-mode versions."""
    if not quick:
        return dict(CONFIGS)
    return {
        name: dataclasses.replace(c, generations=QUICK_GENERATIONS) for name, c in CONFIGS.items()
    }


def quick_from_env() -> bool:
    return os.environ.get("JAXES_QUICK", "0") not in ("", "0")


class MLP(nn.Module):
    """ReLU hidden layers, logits out; every layer an ``nn.Dense`` so ``factored.apply``
    can add each member's low-rank term inside it."""

    hidden: tuple[int, ...]
    classes: int = 10

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for size in self.hidden:
            x = nn.relu(nn.Dense(size)(x))
        return nn.Dense(self.classes)(x)


def load_data(seed: int = 0) -> dict[str, jax.Array]:
    """The digits split 80/20 (stratified), features standardised with train statistics."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=seed
    )
    mean, std = x_train.mean(0), x_train.std(0)
    # Corner pixels are blank in every training image: their std is 0.
    std = np.where(std > 0, std, 1.0)
    return {
        "x_train": jnp.asarray((x_train - mean) / std, jnp.float32),
        "y_train": jnp.asarray(y_train, jnp.int32),
        "x_test": jnp.asarray((x_test - mean) / std, jnp.float32),
        "y_test": jnp.asarray(y_test, jnp.int32),
    }


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_p, labels[:, None], axis=1))


def accuracy(model: MLP, params, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean(jnp.argmax(model.apply({"params": params}, x), axis=1) == y)


def make_strategy(config: Config) -> jaxes.Strategy:
    lr = config.learning_rate
    if config.cosine:
        lr = optax.cosine_decay_schedule(lr, config.generations)
    es = jaxes.open_es(
        config.population,
        sigma=config.sigma,
        optimizer=optax.adam(lr),
        l2_coeff=config.l2,
        noise=config.noise,
        noise_rank=config.rank,
        # The best member of a noisy minibatch is not worth a copy of θ each generation.
        track_best=False,
    )
    return es if config.subspace_dim is None else subspace.subspace(es, config.subspace_dim)


def train(config: Config, data: dict[str, jax.Array] | None = None, verbose: bool = False):
    """Trains ``config`` and returns a dict: ``history`` (lists ``generation``, ``seconds``,
    ``train_accuracy``, ``test_accuracy``, ``loss``, one entry per ``eval_every``
    generations, plus the untrained start at generation 0), the final ``test_accuracy``
    and ``train_accuracy``, ``seconds`` (training, without the compile), ``compile_seconds``,
    ``params`` (the centre θ), ``model``, ``config`` and ``predictions`` on the test set."""
    data = load_data() if data is None else data
    if config.generations % config.eval_every:
        raise ValueError("generations must be a multiple of eval_every")
    model = MLP(config.hidden)
    es = make_strategy(config)
    x_train, y_train = data["x_train"], data["y_train"]
    n_train = x_train.shape[0]

    def batch(key):
        # One minibatch per generation, shared by every member.
        idx = jax.random.choice(key, n_train, (config.batch_size,), replace=False)
        return x_train[idx], y_train[idx]

    def generation(state, key):
        ask_key, batch_key = jax.random.split(key)
        x, y = batch(batch_key)
        _, state = es.ask(ask_key, state)
        if config.noise == "lowrank":
            # Members as θ plus factors: x W once for the population, (x A) Bᵀ per member.
            def fitness(centre, delta):
                return -cross_entropy(factored.apply(model, centre, delta, x), y)

            fit = factored.evaluate(es, state, fitness)
        else:
            fit = jaxes.evaluate(
                es, state, lambda p: -cross_entropy(model.apply({"params": p}, x), y)
            )
        state, info = es.tell(state, fit)
        return state, -info.fitness_mean

    def block(state, key):
        state, losses = jax.lax.scan(generation, state, jax.random.split(key, config.eval_every))
        return state, losses.mean(), measure(state.params)

    def measure(params):
        return (
            accuracy(model, params, data["x_train"], data["y_train"]),
            accuracy(model, params, data["x_test"], data["y_test"]),
        )

    model_key, es_key, run_key = jax.random.split(jax.random.key(config.seed), 3)
    params = model.init(model_key, x_train[:1])["params"]
    state = es.init(es_key, params)

    started = time.perf_counter()
    block_fn = jax.jit(block).lower(state, run_key).compile()
    compile_seconds = time.perf_counter() - started

    train_acc, test_acc = (float(a) for a in jax.jit(measure)(state.params))
    history = {
        "generation": [0],
        "seconds": [0.0],
        "loss": [float("nan")],
        "train_accuracy": [train_acc],
        "test_accuracy": [test_acc],
    }
    started = time.perf_counter()
    for g in range(config.eval_every, config.generations + 1, config.eval_every):
        run_key, key = jax.random.split(run_key)
        state, loss, (train_acc, test_acc) = block_fn(state, key)
        loss, train_acc, test_acc = float(loss), float(train_acc), float(test_acc)
        seconds = time.perf_counter() - started
        for name, value in zip(history, (g, seconds, loss, train_acc, test_acc), strict=True):
            history[name].append(value)
        if verbose and (g % 50 == 0 or g == config.generations):
            print(
                f"  gen {g:4d}  population loss {loss:.3f}  train accuracy {train_acc:.3f}  "
                f"test accuracy {test_acc:.3f}  ({seconds:.1f} s)",
                flush=True,
            )
    logits = model.apply({"params": state.params}, data["x_test"])
    return {
        "config": config,
        "model": model,
        "params": state.params,
        "history": history,
        "train_accuracy": history["train_accuracy"][-1],
        "test_accuracy": history["test_accuracy"][-1],
        "seconds": history["seconds"][-1],
        "compile_seconds": compile_seconds,
        "predictions": np.asarray(jnp.argmax(logits, axis=1)),
        "num_params": jaxes.trees.num_params(state.params),
    }


def summary(result) -> str:
    c = result["config"]
    noise = f", rank {c.rank}" if c.noise == "lowrank" else ""
    return (
        f"test accuracy {result['test_accuracy']:.3f} ({c.name}{noise}, {c.layers}, "
        f"{c.generations} generations, {result['seconds']:.1f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few times fewer generations")
    parser.add_argument("--model", choices=[*CONFIGS, "all"], default="all")
    args = parser.parse_args()
    chosen = configs(args.quick or quick_from_env())
    names = list(CONFIGS) if args.model == "all" else [args.model]
    data = load_data()
    print(
        f"digits: {data['x_train'].shape[0]} train / {data['x_test'].shape[0]} test images, "
        f"{data['x_train'].shape[1]} features"
    )
    results = {}
    for name in names:
        c = chosen[name]
        noise = f"lowrank r={c.rank}" if c.noise == "lowrank" else c.noise
        print(
            f"{name}: {c.layers} MLP, P={c.population}, σ={c.sigma}, Adam {c.learning_rate} "
            f"(cosine decay: {c.cosine}), batch {c.batch_size}, noise {noise}",
            flush=True,
        )
        results[name] = train(c, data, verbose=True)
        print(
            f"  {results[name]['num_params']} weights, compiled in "
            f"{results[name]['compile_seconds']:.1f} s",
            flush=True,
        )
    for name in names:
        print(summary(results[name]))


if __name__ == "__main__":
    main()
