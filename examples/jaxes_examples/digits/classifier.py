"""The digits classifier trained by OpenAI-ES: its settings, the three models, the loop.

The task (data, model, fitness, accuracy) is ``jaxes_examples.digits.data``. Three models:
  * ``full-rank``: 64-64-10 (4.8k weights) with ordinary full-rank Gaussian noise (windows of
    the shared noise table);
  * ``low-rank``: 64-256-256-10 (85k weights) with EGGROLL's rank-4 noise
    (``noise="lowrank"``): each weight matrix is perturbed by ``A Bᵀ/√r``, and
    ``jaxes.factored`` runs every member as ``x W + (x A) Bᵀ`` so that no member's matrices
    are ever built;
  * ``big full-rank``: the same 64-256-256-10 net with full-rank noise, to compare with.

``train`` fuses ``eval_every`` generations of ask -> evaluate -> tell into one jitted
``lax.scan`` and then measures the centre's train and test accuracy (the noise-free model).
The program is compiled before the clock starts, so the seconds reported are training time.
``examples/digits.py`` is its command line; notebooks 05 and 07 use it.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxes import factored, subspace, trees
from jaxes.evaluation import evaluate
from jaxes.factored import int8
from jaxes.noise import lowrank
from jaxes.strategies import open_es
from jaxes.types import Strategy

# As ``classification``: ``data`` names the arrays this module passes around.
from . import data as classification

# The weights members are evaluated with: float32; bfloat16 params (each member the rounded
# centre plus its exact low-rank term); an int8 base (the float32 θ quantised per output
# channel each generation, jaxes.factored.int8) plus the low-rank term.
WEIGHTS = ("float32", "bfloat16", "int8")


@dataclasses.dataclass(frozen=True)
class Config:
    """One training run of OpenAI-ES (Adam) on an MLP. ``noise`` is ``open_es``'s noise
    source and ``rank`` its rank (``"lowrank"`` only); ``cosine`` decays the learning rate to
    0 along a cosine over the ``generations``; ``subspace_dim`` k searches θ₀ + Π z, z ∈ R^k
    (``jaxes.subspace``, for notebooks/07_intrinsic_dimension.ipynb) instead of all of θ.

    Example:
      >>> Config("tiny", hidden=(8,), generations=10).layers
      '64-8-10'
    """

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
    weights: str = "float32"

    def __post_init__(self):
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights: expected one of {', '.join(WEIGHTS)}, got {self.weights!r}")
        if self.weights != "float32" and self.noise != "lowrank":
            raise ValueError(
                f"weights: {self.weights!r} members are evaluated factored, which needs "
                f"noise='lowrank', got noise={self.noise!r}"
            )

    @property
    def layers(self) -> str:
        return "-".join(str(n) for n in (64, *self.hidden, classification.CLASSES))


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
    """``CONFIGS``, or their quick-mode versions (``QUICK_GENERATIONS`` generations).

    Example:
      >>> {name: c.generations for name, c in configs(quick=True).items()}
      {'full-rank': 100, 'low-rank': 100, 'big full-rank': 100}
    """
    if not quick:
        return dict(CONFIGS)
    return {
        name: dataclasses.replace(c, generations=QUICK_GENERATIONS) for name, c in CONFIGS.items()
    }


def make_strategy(config: Config) -> Strategy:
    """OpenAI-ES with Adam (cosine-decayed if ``config.cosine``), in a subspace if asked.

    Example:
      >>> make_strategy(CONFIGS["full-rank"]).population_size
      200
    """
    lr = config.learning_rate
    if config.cosine:
        lr = optax.cosine_decay_schedule(lr, config.generations)
    es = open_es(
        config.population,
        sigma=config.sigma,
        optimizer=optax.adam(lr),
        l2_coeff=config.l2,
        noise=lowrank(config.rank) if config.noise == "lowrank" else config.noise,
        # The best member of a noisy minibatch is not worth a copy of θ each generation.
        track_best=False,
    )
    return es if config.subspace_dim is None else subspace.subspace(es, config.subspace_dim)


def _block(config: Config, model, es: Strategy, data):
    """``block(state, key) -> (state, mean loss, (train accuracy, test accuracy))``:
    ``config.eval_every`` generations in one ``lax.scan``, then the centre measured."""

    def generation(state, key):
        ask_key, batch_key = jax.random.split(key)
        x, y = classification.minibatch(
            batch_key, data["x_train"], data["y_train"], config.batch_size
        )
        _, state = es.ask(ask_key, state)
        if config.noise == "lowrank":
            # Members as θ plus factors: x W once for the population, (x A) Bᵀ per member.
            def member_fitness(centre, delta):
                logits = factored.apply(model, centre, delta, x)
                return -classification.cross_entropy(logits, y)

            fit = factored.evaluate(es, state, member_fitness, quantize=config.weights == "int8")
        else:
            fit = evaluate(es, state, lambda p: classification.fitness(model, p, x, y))
        state, info = es.tell(state, fit)
        return state, -info.fitness_mean

    def block(state, key):
        state, losses = jax.lax.scan(generation, state, jax.random.split(key, config.eval_every))
        return state, losses.mean(), measure(model, data, deployed(config, state.params))

    return block


def deployed(config: Config, params):
    """The model the centre ``params`` (float32 master) stands for: in the weights its members
    were evaluated with (bfloat16, or int8 with per-channel scales)."""
    if config.weights == "bfloat16":
        return jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    if config.weights == "int8":
        return int8.quantize(params)
    return params


def measure(model, data, params) -> tuple[jax.Array, jax.Array]:
    """The train and test accuracy of ``params`` (``Int8`` leaves run the int8 forward)."""

    def accuracy(x, y):
        logits = factored.apply(model, params, None, x)
        return jnp.mean(jnp.argmax(logits, axis=1) == y)

    return accuracy(data["x_train"], data["y_train"]), accuracy(data["x_test"], data["y_test"])


def train(config: Config, data: dict[str, jax.Array] | None = None, verbose: bool = False):
    """Trains ``config`` and returns a dict: ``history`` (lists ``generation``, ``seconds``,
    ``train_accuracy``, ``test_accuracy``, ``loss``, one entry per ``eval_every``
    generations, plus the untrained start at generation 0), the final ``test_accuracy``
    and ``train_accuracy``, ``seconds`` (training, without the compile), ``compile_seconds``,
    ``params`` (the centre θ), ``model``, ``config``, ``predictions`` on the test set and
    ``num_params``.

    Example:
      >>> result = train(Config("tiny", hidden=(8,), population=8, generations=5))
      >>> result["history"]["generation"], 0.0 <= result["test_accuracy"] <= 1.0
      ([0, 5], True)
    """
    data = classification.digits() if data is None else data
    if config.generations % config.eval_every:
        raise ValueError("generations must be a multiple of eval_every")
    model = classification.MLP(config.hidden)
    es = make_strategy(config)
    model_key, es_key, run_key = jax.random.split(jax.random.key(config.seed), 3)
    params = model.init(model_key, data["x_train"][:1])["params"]
    if config.weights == "bfloat16":
        params = deployed(config, params)
    state = es.init(es_key, params)

    started = time.perf_counter()
    block_fn = jax.jit(_block(config, model, es, data)).lower(state, run_key).compile()
    compile_seconds = time.perf_counter() - started

    start = jax.jit(lambda p: measure(model, data, deployed(config, p)))(state.params)
    train_acc, test_acc = (float(a) for a in start)
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
    logits = factored.apply(model, deployed(config, state.params), None, data["x_test"])
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
        "num_params": trees.num_params(state.params),
    }


def summary(result) -> str:
    """One line: test accuracy, model, rank, layers, generations, seconds.

    Example:
      >>> c = CONFIGS["low-rank"]
      >>> summary({"config": c, "test_accuracy": 0.97512, "seconds": 64.04})
      'test accuracy 0.975 (low-rank, rank 4, 64-256-256-10, 300 generations, 64.0 s)'
    """
    c = result["config"]
    noise = f", rank {c.rank}" if c.noise == "lowrank" else ""
    noise += f", {c.weights} weights" if c.weights != "float32" else ""
    return (
        f"test accuracy {result['test_accuracy']:.3f} ({c.name}{noise}, {c.layers}, "
        f"{c.generations} generations, {result['seconds']:.1f} s)"
    )
