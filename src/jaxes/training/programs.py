"""The compiled programs of a run: its initial state, a block of generations, the evaluation.

``block_runner`` fuses ``eval_every`` generations (``jaxes.step.generation_step``) with
``lax.scan``; ``eval_runner`` is the noise-free evaluation of the centre. Both ``vmap`` over
several runs (``lanes``) and split each generation over a mesh's devices. ``Programs`` holds
what ``run`` compiles ahead of time (``jaxes.training.compilation``), so that compiling is never
counted as training time.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp

from jaxes.parallel import replicated, sharded_step
from jaxes.step import TrainState, generation_step
from jaxes.strategies import centre
from jaxes.training import compilation
from jaxes.types import Strategy, Task


def init_state(strategy: Strategy, task: Task, seed: int) -> TrainState:
    """A fresh run: policy params from the task, strategy and task states, the run key.

    Example:
      >>> import jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> ts = init_state(es, task, seed=0)
      >>> int(ts.generation), ts.strategy_state.params.tolist()
      (0, [1.0, 1.0])
    """

    def init(seed):
        params_key, strategy_key, task_key, run_key = jax.random.split(_train_root(seed), 4)
        return TrainState(
            strategy_state=strategy.init(strategy_key, task.init_params(params_key)),
            task_state=task.init(task_key),
            key=run_key,
            generation=jnp.zeros((), jnp.int32),
        )

    # One compiled program instead of dozens of op-by-op compiles before the first generation.
    return jax.jit(init)(seed)


def _train_root(seed: int) -> jax.Array:
    return jax.random.fold_in(jax.random.key(seed), 0)


def eval_key(seed: int, generation: int) -> jax.Array:
    """The key of the evaluation after ``generation``: a stream apart from training's, so
    evaluating never changes what training does.

    Example:
      >>> import jax
      >>> bool((jax.random.key_data(eval_key(0, 5)) != jax.random.key_data(eval_key(0, 10))).any())
      True
    """
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), 1), generation)


def _cost_name(metrics: Mapping) -> str:
    """The per-generation metric that ``timesteps`` counts: the task's env steps, else its
    fitness evaluations."""
    for name in ("env_steps", "evaluations"):
        if name in metrics:
            return name
    raise ValueError("timesteps: the task reports neither env_steps nor evaluations to count")


def block_runner(
    strategy: Strategy,
    task: Task,
    length: int,
    mesh=None,
    *,
    lanes: int | None = None,
    stoppable: bool = False,
    evaluate: bool = True,
):
    """Jitted ``(train_state, eval_key) -> (train_state, metrics[length], eval_returns)``.

    The train state is donated: its buffers become the new state's, so a big model is held
    once, and the state passed in must not be used again. With a ``mesh`` the population of
    every generation is split over its devices (``parallel.sharded_step``) and the state must
    be replicated on it (``place``).

    With ``lanes=S`` the block runs ``S`` independent runs at once (``vmap``): states stacked
    along a leading axis, one eval key per run. With ``stoppable=True`` it takes two more
    arguments per run, ``remaining`` (int32: the budget of ``env_steps``, or of
    ``evaluations`` for a task without env steps) and ``active`` (bool), runs a generation only
    while the run is active and the generations before it in this block spent less than
    ``remaining``, and also returns which generations ran (``ran[length]``, a prefix). With
    ``evaluate=False`` there is no evaluation (no eval key, no ``eval_returns``): ``run``
    compiles that and ``eval_runner`` side by side.

    Example (any ``Task`` works; a function task compiles in seconds, a Brax one takes longer):
      >>> import jax, jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> runner = block_runner(es, task, 2)
      >>> ts, metrics, returns = runner(init_state(es, task, seed=0), jax.random.key(1))
      >>> int(ts.generation), metrics["fitness_mean"].shape, returns.shape
      (2, (2,), (1,))
    """
    step = generation_step(strategy, task) if mesh is None else sharded_step(strategy, task, mesh)

    def train(ts: TrainState):
        return jax.lax.scan(lambda c, _: step(c), ts, None, length=length)

    def train_stoppable(ts: TrainState, remaining, active):
        _, like = jax.eval_shape(step, ts)
        cost = _cost_name(like)

        def one(carry, _):
            ts, spent = carry
            runs = active & (spent < remaining)
            skipped = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), like)
            ts, metrics = jax.lax.cond(runs, step, lambda ts: (ts, skipped), ts)
            spent = spent + jnp.where(runs, metrics[cost].astype(jnp.int32), 0)
            return (ts, spent), (metrics, runs)

        start = (ts, jnp.zeros((), jnp.int32))
        (ts, _), (metrics, ran) = jax.lax.scan(one, start, None, length=length)
        return ts, metrics, ran

    def block(ts: TrainState, key=None, *stops):
        outputs = train_stoppable(ts, *stops) if stoppable else train(ts)
        if not evaluate:
            return outputs
        ts, rest = outputs[0], outputs[1:]
        return (ts, rest[0], _evaluation(task, ts, key), *rest[1:])

    if evaluate:
        fn = block
    elif stoppable:
        fn = train_stoppable
    else:
        fn = train
    return _jit(fn, mesh, lanes, donate=True)


def eval_runner(
    strategy: Strategy, task: Task, mesh=None, *, lanes: int | None = None, cost: bool = False
):
    """Jitted ``(train_state, eval_key) -> eval_returns``: the noise-free evaluation of the
    centre (``task.evaluate_policy``), ``vmap``-ed over ``lanes`` runs when given.

    With ``cost=True`` it returns ``(eval_returns, cost)``: ``cost`` is ``{"env_steps",
    "alive_steps"}`` of the evaluation's episodes where the task can tell
    (``evaluate_policy.with_info``, as control tasks have), else ``{}``.

    Example:
      >>> import jax, jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> eval_runner(es, task)(init_state(es, task, seed=0), jax.random.key(1)).tolist()
      [-2.0]
      >>> eval_runner(es, task, cost=True)(init_state(es, task, seed=0), jax.random.key(1))[1]
      {}
    """
    del strategy  # the centre is read from the state

    def evaluation(ts: TrainState, key):
        return _costed_evaluation(task, ts, key) if cost else _evaluation(task, ts, key)

    return _jit(evaluation, mesh, lanes, donate=False)


def _evaluation(task: Task, ts: TrainState, key):
    return task.evaluate_policy(key, centre(ts.strategy_state), ts.task_state)


def _costed_evaluation(task: Task, ts: TrainState, key):
    """``(returns, cost)``: the evaluation and the env steps it simulated and lived, so that a
    run can count every env step it took, not only training's."""
    with_info = getattr(task.evaluate_policy, "with_info", None)
    if with_info is None:
        return _evaluation(task, ts, key), {}
    returns, info = with_info(key, centre(ts.strategy_state), ts.task_state)
    return returns, {"env_steps": info.env_steps, "alive_steps": info.alive_steps}


def _jit(fn, mesh, lanes: int | None, donate: bool):
    if lanes is not None:
        fn = jax.vmap(fn)
    donated = {"donate_argnums": 0} if donate else {}
    if mesh is None:
        return jax.jit(fn, **donated)
    # Replicated outputs: every process reads its own copy, and the next block sees the same
    # shardings (no retrace).
    return jax.jit(fn, out_shardings=replicated(mesh), **donated)


@dataclasses.dataclass
class Programs:
    """A run's training blocks (one per block length) and its evaluation, compiled ahead of
    their first call with ``compilation.compile``.

    A block's arguments are ``(state, eval_key, *stops)`` as ``block_runner(...,
    evaluate=True)`` takes them; the block itself is compiled without its evaluation, and the
    evaluation beside it. XLA compiles without the GIL, so on a machine with two cores the
    evaluation's compile (about 40 % of the first block's on a Brax task,
    ``benchmarks/compile_profile.py``) hides behind the training block's.

    Example:
      >>> import jax, jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> programs = Programs(es, task, mesh=None, lanes=None, stoppable=False)
      >>> args = (init_state(es, task, seed=0), jax.random.key(1))
      >>> ts, metrics = programs.compile(2, args)(args[0])
      >>> returns, cost = programs.evaluate(ts, args[1])
      >>> int(ts.generation), returns.shape, cost
      (2, (1,), {})
    """

    strategy: Strategy
    task: Task
    mesh: object
    lanes: int | None
    stoppable: bool
    blocks: dict = dataclasses.field(default_factory=dict)
    evaluation: concurrent.futures.Future | None = None

    def compile(self, length: int, args):
        """The training block of ``length`` generations, compiled (the first call also
        compiles the evaluation, in a thread beside it)."""
        train = block_runner(
            self.strategy, self.task, length, self.mesh, lanes=self.lanes,
            stoppable=self.stoppable, evaluate=False,
        )  # fmt: skip
        lowered = train.lower(*args[:1], *args[2:])
        if self.evaluation is None:
            # Traced in the thread too: the trace needs the GIL, which the block's compile
            # below releases, so the block's compile (the longer one) starts first.
            def compile_evaluation():
                evaluation = eval_runner(
                    self.strategy, self.task, self.mesh, lanes=self.lanes, cost=True
                )
                return compilation.compile(evaluation.lower(*args[:2]))

            pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxes-compile")
            self.evaluation = pool.submit(compile_evaluation)
            pool.shutdown(wait=False)
        self.blocks[length] = compilation.compile(lowered)
        self.evaluation.result()  # a compile error surfaces here, before the first block
        return self.blocks[length]

    def evaluate(self, state, key):
        """The compiled evaluation of ``state`` (after the first ``compile``): its returns
        and its cost (``eval_runner(..., cost=True)``)."""
        return self.evaluation.result()(state, key)
