"""A worked fine-tune: a small transformer pre-trained by backprop, then fine-tuned on a
non-differentiable reward by ES or by a policy gradient, at equal wall clock.

The task is ``jaxes_examples.countdown.problems`` (two one-digit numbers and a target; write
``x op y`` reaching it; reward 1 for an exact answer, else 0), the model
``jaxes.tasks.transformer.Transformer``, pre-trained by ``jaxes_examples.countdown.pretrain``
(Adam on the arithmetic corpus, ``problems.corpus``: equations and the answer format, never
which expression reaches a target), the member evaluation ``jaxes.tasks.sequence``'s
``sequence_task`` (greedy decoding with a KV cache in ``lax.scan``; low-rank members run
factored, ``x W + (x A) Bᵀ`` in every ``nn.Dense``).

* ``finetune`` with an ES method: OpenAI-ES (``jaxes.open_es``) fused ``eval_every``
  generations at a time into one jitted ``lax.scan`` of ``jaxes.step.generation_step`` over the
  sequence task; the fitness of a member is its mean exact reward on a batch of training
  problems, the same batch for every member of a generation. Variants (``METHODS``): full-rank
  Gaussian noise, low rank r = 1 and r = 4, bfloat16 params, an int8 base (the centre quantised
  each generation, weight-only int8 with per-channel scales, ``jaxes.factored.int8``), antithetic
  pairs or independent members.
* ``finetune`` with ``GRPO``: REINFORCE with a group-mean baseline (GRPO-style): ``group``
  samples (at temperature 1) per prompt, advantage = reward − the group's mean reward, no KL;
  the gradient of ``Σ advantage · log p(answer)`` by ``jax.grad``, Adam.
* ``compare``: every method for the same training seconds (compiles and held-out evaluations
  excluded from the clock), the held-out accuracy (greedy, exact answers) after each block.
* ``length_experiment``: the same problems with the answer stretched k-fold, pre-trained and
  fine-tuned for each k.

``examples/sequence_finetune.py`` is its command line; ``notebooks/10_sequence_es.ipynb`` uses
it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxes.factored import int8
from jaxes.noise import lowrank
from jaxes.step import TrainState, generation_step
from jaxes.strategies import open_es
from jaxes.tasks.sequence import generate, prompt_batch, sequence_task
from jaxes.tasks.transformer import Transformer
from jaxes.training import compilation

# As ``countdown``: ``problems`` is this module's function for the train and held-out prompts.
from . import problems as countdown
from .pretrain import Setup, accuracy, init_params, pretrain


@dataclasses.dataclass(frozen=True)
class Method:
    """One fine-tuning method.

    ``kind`` is ``"es"`` or ``"grpo"``. ES: ``noise`` (``open_es``'s: ``"gaussian"`` for full
    rank, ``"lowrank"``) with ``rank``, ``population``, ``sigma``, ``antithetic``, ``dtype``
    of the params (``"float32"``/``"bfloat16"``), ``quantize`` (an int8 base), ``shaping``
    (``open_es``'s ``fitness_shaping``) and ``optimizer`` (``"adam"``, or ``"sgd"``: plain
    steps of ``learning_rate`` times the estimate, as Qiu et al. 2025 take). GRPO: ``group``
    samples per prompt, Adam. Both: ``learning_rate``, ``batch`` training prompts per update,
    ``eval_every`` updates per timed block.
    """

    name: str
    kind: str = "es"
    noise: str = "lowrank"
    rank: int = 4
    population: int = 32
    sigma: float = 0.02
    antithetic: bool = True
    dtype: str = "float32"
    quantize: bool = False
    shaping: str = "centered_rank"
    optimizer: str = "adam"
    learning_rate: float = 0.003
    batch: int = 64
    group: int = 8
    eval_every: int = 5


# ES's settings, from a few 20-30 s runs of r = 4 (seed 0): σ = 0.05 or 0.1 break the members
# (their mean reward falls to 0.17 and 0.01 from the centre's 0.35); Adam at 0.01 walks the
# centre away from the pre-trained model (held-out 0.38 -> 0.18); σ = 0.02 with Adam 0.002-0.003
# raises the training reward slowly (0.34 -> 0.36-0.40 in 30-170 updates). GRPO: Adam 1e-3.
METHODS = {
    m.name: m
    for m in (
        Method("ES full-rank", noise="gaussian"),
        Method("ES low-rank r=1", rank=1),
        Method("ES low-rank r=4", rank=4),
        Method("ES r=4 independent", rank=4, antithetic=False),
        Method("ES r=4 bf16", rank=4, dtype="bfloat16"),
        Method("ES r=4 int8 base", rank=4, quantize=True),
        Method("GRPO", kind="grpo", learning_rate=1e-3, batch=16, group=8, eval_every=10),
    )
}


def _cast(params, dtype: str):
    return jax.tree.map(lambda x: x.astype(jnp.dtype(dtype)), params)


def reward_fn(stretch: int) -> Callable:
    return partial(countdown.reward, stretch=stretch)


def make_strategy(method: Method):
    """``open_es`` with the method's optimizer (Adam unless ``"sgd"``) for an ES method.

    Example:
      >>> make_strategy(METHODS["ES low-rank r=1"]).population_size
      32
    """
    if method.optimizer not in ("adam", "sgd"):
        raise ValueError(f"Method.optimizer: 'adam' or 'sgd', not {method.optimizer!r}")
    sgd = optax.sgd(method.learning_rate) if method.optimizer == "sgd" else None
    return open_es(
        method.population,
        sigma=method.sigma,
        optimizer=sgd,
        learning_rate=method.learning_rate,
        fitness_shaping=method.shaping,
        antithetic=method.antithetic,
        noise=lowrank(method.rank) if method.noise == "lowrank" else method.noise,
        track_best=False,
    )


def _es_program(method: Method, model: Transformer, train_prompts, stretch: int):
    """``(init, block, centre, master)``: the ES state from pre-trained params,
    ``eval_every`` generations in one ``lax.scan``, the centre θ in its evaluated form, and θ
    as it is learnt (the float32 master copy, which moves even where a bfloat16 centre rounds
    a small step away)."""
    es = make_strategy(method)
    task = sequence_task(
        model,
        partial(init_params, model),
        train_prompts,
        reward_fn(stretch),
        countdown.answer_len(stretch, countdown.numbers_of(train_prompts)),
        batch_size=method.batch,
    )
    if method.quantize:
        inner = task.evaluate_factored

        def evaluate_factored(key, centre, deltas, task_state):
            return inner(key, int8.quantize(centre), deltas, task_state)

        task = dataclasses.replace(task, evaluate_factored=evaluate_factored)
    step = generation_step(es, task)

    def init(params, key):
        es_key, run_key = jax.random.split(key)
        state = es.init(es_key, _cast(params, method.dtype))
        return TrainState(state, None, run_key, jnp.zeros((), jnp.int32))

    def block(ts):
        ts, metrics = jax.lax.scan(lambda t, _: step(t), ts, None, length=method.eval_every)
        return ts, jnp.mean(metrics["fitness_mean"])

    def centre(ts):
        return _cast(ts.strategy_state.params, method.dtype)

    return init, block, centre, lambda ts: ts.strategy_state.params


def _grpo_program(method: Method, model: Transformer, train_prompts, stretch: int):
    """GRPO's ``(init, block, centre, master)`` like ``_es_program``'s."""
    steps = countdown.answer_len(stretch, countdown.numbers_of(train_prompts))
    opt = optax.adam(method.learning_rate)
    rewards = reward_fn(stretch)
    tp = train_prompts.shape[1]

    def update(carry, key):
        params, opt_state = carry
        batch_key, sample_key = jax.random.split(key)
        prompts = prompt_batch(batch_key, train_prompts, method.batch)
        prompts = jnp.repeat(prompts, method.group, axis=0)

        def apply_fn(tokens, cache, position):
            return model.apply({"params": params}, tokens, cache, position)

        cache = model.init_cache(prompts.shape[0], jnp.float32)
        tokens = generate(apply_fn, cache, prompts, steps, key=sample_key, temperature=1.0)
        r = rewards(prompts, tokens).reshape(method.batch, method.group)
        advantage = (r - r.mean(axis=1, keepdims=True)).reshape(-1)
        sequence = jnp.concatenate([prompts, tokens], axis=1)

        def loss(p):
            logits, _ = model.apply({"params": p}, sequence[:, :-1])
            logp = jax.nn.log_softmax(logits[:, tp - 1 :].astype(jnp.float32))
            chosen = jnp.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]
            return -jnp.mean(advantage * jnp.sum(chosen, axis=1))

        grads = jax.grad(loss)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), jnp.mean(r)

    def init(params, key):
        return (params, opt.init(params)), key

    def block(carry):
        state, key = carry
        key, run_key = jax.random.split(key)
        keys = jax.random.split(run_key, method.eval_every)
        state, mean_rewards = jax.lax.scan(update, state, keys)
        return (state, key), jnp.mean(mean_rewards)

    def centre(carry):
        return carry[0][0]

    return init, block, centre, centre


def finetune(
    method: Method,
    model: Transformer,
    params,
    train_prompts,
    test_prompts,
    *,
    seconds: float | None = None,
    updates: int | None = None,
    stretch: int = 1,
    seed: int = 0,
    curve: bool = True,
    verbose: bool = False,
) -> dict:
    """Fine-tunes ``params`` by ``method`` for ``seconds`` of training (blocks of
    ``method.eval_every`` updates until the clock passes it) or for ``updates`` updates, with
    the held-out accuracy measured after each block, outside the clock (with ``curve`` false:
    at the start and the end only, the blocks between recorded as NaN).

    Returns a dict: ``history`` (lists ``updates``, ``seconds``, ``accuracy``,
    ``train_reward``: the mean reward of the block's population or samples, starting with the
    pre-trained model at 0), the final ``accuracy``, ``updates``, ``seconds``,
    ``compile_seconds``, ``params`` (the centre, evaluated form), ``method`` and ``moved``:
    ``‖θ - θ₀‖/‖θ₀‖`` of the learnt params (0 for a method that never updates).
    """
    if (seconds is None) == (updates is None):
        raise ValueError("finetune: give seconds or updates, not both")
    program = _grpo_program if method.kind == "grpo" else _es_program
    init, block, centre, master = program(method, model, train_prompts, stretch)
    state = init(params, jax.random.key(seed))
    first = master(state)

    started = time.perf_counter()
    block_fn = compilation.compile(jax.jit(block).lower(state))
    measure = compilation.compile(
        jax.jit(lambda s: accuracy(model, centre(s), test_prompts, stretch, method.quantize)).lower(
            state
        )
    )
    start_accuracy = float(measure(state))
    compile_seconds = time.perf_counter() - started

    history = {"updates": [0], "seconds": [0.0], "accuracy": [start_accuracy]}
    history["train_reward"] = [float("nan")]
    elapsed, done = 0.0, 0
    while (elapsed < seconds) if updates is None else (done < updates):
        t = time.perf_counter()
        state, train_reward = jax.block_until_ready(block_fn(state))
        elapsed += time.perf_counter() - t
        done += method.eval_every
        acc = float(measure(state)) if curve else float("nan")
        for name, value in zip(history, (done, elapsed, acc, float(train_reward)), strict=True):
            history[name].append(value)
        if verbose and (len(history["updates"]) % 5 == 0):
            print(
                f"    {method.name}: {done} updates, {elapsed:.1f} s, "
                f"train reward {float(train_reward):.3f}, held-out accuracy {acc:.3f}",
                flush=True,
            )
    if not curve:
        history["accuracy"][-1] = float(measure(state))
    return {
        "method": method,
        "history": history,
        "accuracy": history["accuracy"][-1],
        "updates": done,
        "seconds": elapsed,
        "compile_seconds": compile_seconds,
        "params": centre(state),
        "moved": relative_change(first, master(state)),
    }


def relative_change(before, after) -> float:
    """``‖after - before‖/‖before‖`` over every leaf, in float32.

    Example:
      >>> import jax.numpy as jnp
      >>> relative_change({"w": jnp.ones(4)}, {"w": jnp.array([1.0, 1.0, 1.0, 3.0])})
      1.0
    """

    def squares(x):
        return jnp.sum(jnp.square(x.astype(jnp.float32)))

    moved = jax.tree.map(lambda a, b: squares(b.astype(jnp.float32) - a), before, after)
    norm = jax.tree.map(squares, before)
    return float(sum(jax.tree.leaves(moved)) / sum(jax.tree.leaves(norm))) ** 0.5


def problems(seed: int = 0, numbers: int = 2) -> tuple[jax.Array, jax.Array]:
    """The train and held-out prompts (``countdown.split``): with two numbers, the split drawn
    with ``seed``; with three, the fixed split of ``countdown.TEST_PROBLEMS`` held-out problems
    (seed 0), the one pre-training avoids, whatever ``seed`` the runs use."""
    if numbers == 2:
        train, test = countdown.split(seed)
    else:
        train, test = countdown.split(0, numbers=numbers, test_size=countdown.TEST_PROBLEMS)
    return countdown.prompts_of(train), countdown.prompts_of(test)


def compare(
    methods: dict[str, Method],
    model: Transformer,
    params,
    seconds: float,
    *,
    stretch: int = 1,
    seed: int = 0,
    numbers: int = 2,
    verbose: bool = False,
) -> dict[str, dict]:
    """Every method fine-tuned from ``params`` for ``seconds`` of training each, on the game
    with ``numbers`` numbers (``problems``)."""
    train_prompts, test_prompts = problems(seed, numbers)
    results = {}
    for name, method in methods.items():
        if verbose:
            print(f"  {name} ...", flush=True)
        results[name] = finetune(
            method,
            model,
            params,
            train_prompts,
            test_prompts,
            seconds=seconds,
            stretch=stretch,
            seed=seed,
            verbose=verbose,
        )
    return results


def table(results: dict[str, dict]) -> str:
    """The comparison as text: one row per method, the pre-trained start, the final held-out
    accuracy, the updates done, the training seconds and how far the params moved
    (``‖θ - θ₀‖/‖θ₀‖``).

    Example:
      >>> r = {"GRPO": {"history": {"accuracy": [0.3]}, "accuracy": 0.5, "updates": 40,
      ...               "seconds": 1.25, "moved": 0.0123}}
      >>> print(table(r))
      method                    start  held-out accuracy  updates  seconds     moved
      GRPO                      0.300              0.500       40      1.2   1.2e-02
    """
    head = f"{'method':<24}{'start':>7}{'held-out accuracy':>19}{'updates':>9}{'seconds':>9}"
    lines = [head + f"{'moved':>10}"]
    for name, r in results.items():
        lines.append(
            f"{name:<24}{r['history']['accuracy'][0]:>7.3f}{r['accuracy']:>19.3f}"
            f"{r['updates']:>9d}{r['seconds']:>9.1f}{r['moved']:>10.1e}"
        )
    return "\n".join(lines)


def curve_area(history: dict) -> float:
    """The mean held-out accuracy over the run's evaluations (start included): the area
    under the accuracy-per-update curve divided by its length.

    Example:
      >>> curve_area({"accuracy": [0.25, 0.5, 0.75]})
      0.5
    """
    return float(np.mean(history["accuracy"]))


def length_experiment(
    stretches=(1, 2, 4),
    updates: int = 200,
    pretrain_steps: int = 1500,
    method: str = "ES low-rank r=4",
    seed: int = 0,
    pretrained: dict | None = None,
) -> dict[int, dict]:
    """The answer-length experiment: for each ``k`` in ``stretches`` the model is pre-trained
    on the corpus with every answer token written ``k`` times (``pretrain_steps`` steps),
    then ``method`` fine-tunes it for ``updates`` updates on the same problems with the answer
    stretched alike. ``pretrained`` maps a ``k`` to params already pre-trained for it (the
    notebook passes its ``k = 1`` model). Returns ``finetune``'s result for each ``k``."""
    train_prompts, test_prompts = problems(seed)
    pretrained = pretrained or {}
    out = {}
    for k in stretches:
        setup = Setup(pretrain_steps=pretrain_steps, stretch=k, seed=seed)
        params = pretrained[k] if k in pretrained else pretrain(setup)["params"]
        out[k] = finetune(
            METHODS[method],
            setup.model(),
            params,
            train_prompts,
            test_prompts,
            updates=updates,
            stretch=k,
            seed=seed,
        )
    return out


def length_table(results: dict[int, dict]) -> str:
    """One row per ``k``: answer tokens, held-out accuracy at the start and the end, the mean
    over the curve (``curve_area``), the mean training reward of the last quarter of the
    updates, and the training seconds.

    Example:
      >>> h = {"accuracy": [0.25, 0.5], "train_reward": [float("nan"), 0.4]}
      >>> print(length_table({2: {"history": h, "accuracy": 0.5, "seconds": 3.0}}))
       k  tokens   start   final    mean  reward  seconds
       2       8   0.250   0.500   0.375   0.400      3.0
    """
    lines = [f"{'k':>2}{'tokens':>8}{'start':>8}{'final':>8}{'mean':>8}{'reward':>8}{'seconds':>9}"]
    for k, r in results.items():
        h = r["history"]
        rewards = h["train_reward"][1:]
        late = float(np.mean(rewards[-max(1, len(rewards) // 4) :]))
        lines.append(
            f"{k:>2}{countdown.answer_len(k):>8}{h['accuracy'][0]:>8.3f}{r['accuracy']:>8.3f}"
            f"{curve_area(h):>8.3f}{late:>8.3f}{r['seconds']:>9.1f}"
        )
    return "\n".join(lines)
