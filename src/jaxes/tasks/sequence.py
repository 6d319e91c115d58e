"""Sequence tasks: a member's fitness is a reward on the sequences it generates.

A model (``jaxes.tasks.transformer.Transformer``, or any ``flax.linen`` module with its call
signature and an ``init_cache``) continues a batch of prompts token by token: one call
prefills the prompts into an explicit KV cache, then ``lax.scan`` decodes one token a step
(``generate``). The reward is any function of the prompts and the generated tokens, and it
need not be differentiable: that is what evolution strategies are for.

Members are evaluated two ways, with the same result:
  * ``evaluate``: materialised members (a batch of full params), ``vmap``-ed;
  * ``evaluate_factored``: the shared centre θ and each member's displacement, applied inside
    every ``nn.Dense`` by ``jaxes.factored.apply`` (``x W + (x A) Bᵀ`` for low-rank noise), so
    no member's weight matrices are ever built, and the prompts' ``x W`` in the prefill is
    computed once for the whole population.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxes.tasks.transformer import Transformer
  >>> model = Transformer(vocab=6, d_model=8, heads=2, layers=1, max_len=6)
  >>> def init_params(key):
  ...     return model.init(key, jnp.zeros((1, 1), jnp.int32))["params"]
  >>> def count_fives(prompts, generated):
  ...     return jnp.mean(generated == 5, axis=1)
  >>> prompts = jnp.array([[1, 2], [3, 4], [0, 1]])
  >>> task = sequence_task(model, init_params, prompts, count_fives, steps=3, batch_size=2)
  >>> params = jax.jit(task.init_params)(jax.random.key(0))
  >>> members = jax.tree.map(lambda x: jnp.stack([x, -x]), params)
  >>> fitness, _, info = jax.jit(task.evaluate)(jax.random.key(1), members, task.init(None))
  >>> fitness.shape, int(info.evaluations), int(info.generated_tokens)
  ((2,), 2, 12)
  >>> jax.jit(task.evaluate_policy)(jax.random.key(2), params, None).shape  # one per prompt
  (3,)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes import factored, trees
from jaxes.checks import check_int, check_positive
from jaxes.types import Task

ApplyFn = Callable[[jax.Array, Any, Any], tuple[jax.Array, Any]]
RewardFn = Callable[[jax.Array, jax.Array], jax.Array]


class SequenceInfo(NamedTuple):
    """Counts of one evaluation, summed over chunks and devices.

    Attributes:
      evaluations: members evaluated.
      generated_tokens: tokens decoded, over every member and prompt.
    """

    evaluations: jax.Array
    generated_tokens: jax.Array


def _pick(key, logits: jax.Array, temperature: float, top_p: float = 1.0) -> jax.Array:
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / temperature
    if top_p < 1.0:
        # Nucleus sampling: the smallest set of most likely tokens whose probability reaches
        # top_p (the most likely token always stays), the rest never drawn.
        ordered = jnp.sort(logits, axis=-1)[..., ::-1]
        probs = jax.nn.softmax(ordered, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs
        kept = jnp.where(before < top_p, ordered, jnp.inf).min(axis=-1, keepdims=True)
        logits = jnp.where(logits >= kept, logits, -jnp.inf)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def generate(
    apply_fn: ApplyFn,
    cache,
    prompts: jax.Array,
    steps: int,
    *,
    key: jax.Array | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    with_logits: bool = False,
):
    """Continue ``prompts`` by ``steps`` tokens: a prefill of every prompt token but the last,
    then ``steps`` one-token decode steps in a ``lax.scan``, the first fed the last prompt token.

    Args:
      apply_fn: ``apply_fn(tokens, cache, position) -> (logits, cache)``, the model with its
        params bound; ``tokens`` ``(N, T)`` are written at positions ``position ..``.
      cache: an empty cache for ``N`` sequences (``model.init_cache(N, dtype)``) holding at
        least ``Tp + steps - 1`` positions (the last token is never fed back).
      prompts: ``(N, Tp)`` int token ids, every prompt the same length.
      steps: tokens to generate (static, ``>= 1``).
      key: the sampling key (needed when ``temperature > 0``).
      temperature: ``0``: greedy (argmax); else sample from ``softmax(logits / temperature)``.
      top_p: sample only from the most likely tokens whose probability reaches ``top_p``
        (nucleus sampling; ``1``: all of them).
      with_logits: also return the float32 logits each token was chosen from.

    Returns:
      the generated tokens ``(N, steps)`` int32, and with ``with_logits`` the logits
      ``(N, steps, vocab)`` too.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxes.tasks.transformer import Transformer
      >>> model = Transformer(vocab=7, d_model=8, heads=2, layers=1, max_len=8)
      >>> params = model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
      >>> def apply_fn(tokens, cache, position):
      ...     return model.apply({"params": params}, tokens, cache, position)
      >>> prompts = jnp.array([[1, 2, 3], [4, 5, 6]])
      >>> tokens = jax.jit(lambda p: generate(apply_fn, model.init_cache(2), p, steps=4))(prompts)
      >>> tokens.shape, tokens.dtype
      ((2, 4), dtype('int32'))
    """
    steps = check_int("steps", steps, 1)
    temperature = check_positive("temperature", temperature, allow_zero=True)
    top_p = _check_top_p(top_p)
    if temperature > 0 and key is None:
        raise ValueError("key: sampling (temperature > 0) needs a key")
    prompts = jnp.asarray(prompts)
    if prompts.ndim != 2 or not jnp.issubdtype(prompts.dtype, jnp.integer):
        raise ValueError(
            f"prompts: expected (N, Tp) int token ids, got shape {prompts.shape} "
            f"and dtype {prompts.dtype}"
        )
    keys = jax.random.split(key, steps) if temperature > 0 else jnp.zeros((steps,))
    prompts = prompts.astype(jnp.int32)
    length = prompts.shape[1]
    # The prefill takes every prompt token but the last and keeps only the cache: the head's
    # logits at prompt positions are never read, and computing them costs prompts x length x
    # vocab float32 (at Qwen2.5's 151,936-token vocabulary, more than the model's weights at
    # P = 256; benchmarks/llm_plan.py). The last prompt token is the scan's first step.
    if length > 1:
        _, cache = apply_fn(prompts[:, :-1], cache, 0)

    def decode(carry, step_key):
        token, cache, position = carry
        logits, cache = apply_fn(token[:, None], cache, position)
        logits = logits[:, -1].astype(jnp.float32)
        next_token = _pick(step_key, logits, temperature, top_p)
        return (next_token, cache, position + 1), (next_token, logits)

    start = (prompts[:, -1], cache, jnp.int32(length - 1))
    _, (tokens, logits) = jax.lax.scan(decode, start, keys)
    if not with_logits:
        return tokens.T
    return tokens.T, jnp.moveaxis(logits, 0, 1)


def _check_top_p(top_p) -> float:
    top_p = check_positive("top_p", top_p)
    if top_p > 1.0:
        raise ValueError(f"top_p: expected a probability in (0, 1], got {top_p}")
    return top_p


def prompt_batch(key: jax.Array, prompts, batch_size: int | None):
    """``batch_size`` distinct prompts of the pool drawn with ``key`` (all of them, in order,
    for ``None`` or the pool's size). ``prompts`` may be a tuple of arrays with one row per
    prompt (the tokens and each one's padding): the same rows of each are drawn.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> pool = jnp.arange(10).reshape(5, 2)
      >>> prompt_batch(jax.random.key(0), pool, 3).shape
      (3, 2)
    """
    size = jax.tree.leaves(prompts)[0].shape[0]
    if batch_size is None or batch_size == size:
        return prompts
    rows = jax.random.choice(key, size, (batch_size,), replace=False)
    return jax.tree.map(lambda x: x[rows], prompts)


def _cache_dtype(model: nn.Module, params):
    # The cache holds activations: the model's compute dtype where it declares one, else the
    # params' floating dtype (an int8 kernel's scale decides).
    if getattr(model, "dtype", None) is not None:
        return jnp.dtype(model.dtype)
    leaves = jax.tree.leaves(params)
    return jnp.result_type(*[x for x in leaves if jnp.issubdtype(x.dtype, jnp.floating)])


def _check_prompts(name: str, prompts) -> jax.Array:
    prompts = jnp.asarray(prompts)
    if prompts.ndim != 2 or prompts.shape[0] < 1 or prompts.shape[1] < 1:
        raise ValueError(f"{name}: expected a non-empty (N, Tp) array, got shape {prompts.shape}")
    if not jnp.issubdtype(prompts.dtype, jnp.integer):
        raise ValueError(f"{name}: expected int token ids, got dtype {prompts.dtype}")
    return prompts.astype(jnp.int32)


def _check_starts(name: str, starts, prompts: jax.Array) -> jax.Array:
    starts = jnp.asarray(starts)
    if starts.shape != prompts.shape[:1] or not jnp.issubdtype(starts.dtype, jnp.integer):
        raise ValueError(
            f"{name}: expected ({prompts.shape[0]},) int slots, one per prompt, got shape "
            f"{starts.shape} and dtype {starts.dtype}"
        )
    return starts.astype(jnp.int32)


def _rewards(reward_fn: RewardFn, prompts: jax.Array, tokens: jax.Array) -> jax.Array:
    rewards = jnp.asarray(reward_fn(prompts, tokens))
    expected = (prompts.shape[0],)
    if rewards.shape != expected:
        raise ValueError(
            f"reward_fn: expected shape {expected} (one reward per sequence), got {rewards.shape}"
        )
    return rewards.astype(jnp.float32)


class _Settings(NamedTuple):
    prompts: jax.Array
    eval_prompts: jax.Array
    steps: int
    temperature: float
    top_p: float
    pool: Any  # the prompts, or (prompts, starts) for left-padded ones
    eval_starts: Any
    batch_size: int | None
    per_member: int  # sequences each member generates per evaluation


def _checked(model, prompts, steps, temperature, top_p, batch_size, eval_prompts, starts, *,
             eval_starts=None) -> _Settings:  # fmt: skip
    """``sequence_task``'s settings, checked (each error names its argument)."""
    prompts = _check_prompts("prompts", prompts)
    eval_prompts = prompts if eval_prompts is None else _check_prompts("eval_prompts", eval_prompts)
    steps = check_int("steps", steps, 1)
    temperature = check_positive("temperature", temperature, allow_zero=True)
    top_p = _check_top_p(top_p)
    pool = prompts if starts is None else (prompts, _check_starts("starts", starts, prompts))
    if eval_starts is not None:
        eval_starts = _check_starts("eval_starts", eval_starts, eval_prompts)
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, 1, prompts.shape[0])
    longest = max(prompts.shape[1], eval_prompts.shape[1]) + steps - 1
    max_len = getattr(model, "max_len", None)
    if max_len is not None and longest > max_len:
        raise ValueError(
            f"steps: prompts of length {longest - steps + 1} and {steps} steps need "
            f"max_len >= {longest}, the model has {max_len}"
        )
    n = prompts.shape[0] if batch_size is None else batch_size
    return _Settings(prompts, eval_prompts, steps, temperature, top_p, pool, eval_starts,
                     batch_size, n)  # fmt: skip


def sequence_task(
    model: nn.Module,
    init_params: Callable[[jax.Array], Any],
    prompts,
    reward_fn: RewardFn,
    steps: int,
    *,
    temperature: float = 0.0,
    top_p: float = 1.0,
    batch_size: int | None = None,
    eval_prompts=None,
    chunk_size: int | None = None,
    starts=None,
    eval_starts=None,
    frozen=None,
) -> Task:
    """A ``Task`` whose fitness is the mean reward of the sequences a member generates.

    Every generation the evaluation key draws ``batch_size`` prompts of the pool, the same
    batch for every member (and, when sampling, the same sampling key), so members are
    ranked on equal terms; each member continues them by ``steps`` tokens (``generate``) and
    scores ``mean(reward_fn(prompts, generated))``.

    Args:
      model: a ``Transformer`` (or a module with its ``__call__(tokens, cache, position)``,
        ``init_cache(batch, dtype)`` and ``max_len``).
      init_params: ``init_params(key) -> params``, the model's ``"params"`` collection.
      prompts: the pool, ``(N, Tp)`` int token ids.
      reward_fn: ``reward_fn(prompts (n, Tp), generated (n, steps)) -> (n,)`` floats, any
        function of tokens (maximised).
      steps: tokens generated per prompt.
      temperature: ``0`` decodes greedily; else members sample at this temperature.
      top_p: members sample from the most likely tokens whose probability reaches it.
      batch_size: prompts per generation (``None``: the whole pool).
      eval_prompts: the prompts ``evaluate_policy`` decodes greedily with the centre, one
        reward each (``None``: the pool).
      chunk_size: members evaluated at once (``None``: the strategy's memory-budget choice).
      starts, eval_starts: ``(N,)`` each prompt's first real token, for left-padded prompts
        of different lengths (``None``: none padded); the model's
        ``init_cache(batch, dtype, start=...)`` takes them (``jaxes.llm.CausalLM`` does).
      frozen: params the search leaves alone (nested dicts, e.g. a pretrained model's
        embeddings), merged into every member's: the searched params are the rest.
    """
    # Longer than 60 lines because the Task's four methods are closures over the model, the
    # prompts and the checked settings (``_checked``); apart, each would take them all.
    prompts, eval_prompts, steps, temperature, top_p, pool, eval_starts, batch_size, n = (
        _checked(model, prompts, steps, temperature, top_p, batch_size, eval_prompts, starts,
                 eval_starts=eval_starts)
    )  # fmt: skip
    chunk_size = None if chunk_size is None else check_int("chunk_size", chunk_size, 1)

    def new_cache(rows: int, dtype, start):
        if start is None:
            return model.init_cache(rows, dtype)
        return model.init_cache(rows, dtype, start=start)

    def fitness(apply_fn, dtype, batch, sample_key):
        batch, start = batch if starts is not None else (batch, None)
        cache = new_cache(batch.shape[0], dtype, start)
        tokens = generate(
            apply_fn, cache, batch, steps, key=sample_key, temperature=temperature, top_p=top_p
        )
        return jnp.mean(_rewards(reward_fn, batch, tokens))

    def info(members: int) -> SequenceInfo:
        return SequenceInfo(jnp.int32(members), jnp.int32(members * n * steps))

    def init(key):
        del key

    def scored(key, members, apply_of, dtype_of):
        """Each member's fitness on this generation's batch (the same for all of them):
        ``apply_of(member)`` runs its model, ``dtype_of(member)`` is its cache's dtype."""
        batch_key, sample_key = jax.random.split(key)
        batch = prompt_batch(batch_key, pool, batch_size)
        out = jax.vmap(lambda m: fitness(apply_of(m), dtype_of(m), batch, sample_key))(members)
        return out, None, info(out.shape[0])

    def evaluate(key, members, task_state):
        del task_state

        def apply_of(params):
            params = trees.merged(params, frozen)
            return lambda tokens, cache, at: model.apply({"params": params}, tokens, cache, at)

        def dtype_of(params):
            return _cache_dtype(model, trees.merged(params, frozen))

        return scored(key, members, apply_of, dtype_of)

    def evaluate_factored(key, centre, deltas, task_state):
        del task_state
        dtype = _cache_dtype(model, centre)
        centre = trees.merged(centre, frozen)
        unfrozen = jax.tree.map(lambda x: None, frozen)

        def apply_of(delta):
            delta = trees.merged(delta, unfrozen)
            return lambda tokens, cache, at: factored.apply(model, centre, delta, tokens, cache, at)

        return scored(key, deltas, apply_of, lambda delta: dtype)

    def evaluate_policy(key, params, task_state):
        del key, task_state
        params = trees.merged(params, frozen)

        def apply_fn(tokens, cache, position):
            return model.apply({"params": params}, tokens, cache, position)

        cache = new_cache(eval_prompts.shape[0], _cache_dtype(model, params), eval_starts)
        tokens = generate(apply_fn, cache, eval_prompts, steps)
        return _rewards(reward_fn, eval_prompts, tokens)

    return Task(
        init,
        evaluate,
        evaluate_policy,
        init_params,
        evaluate_factored=evaluate_factored,
        chunk_size=chunk_size,
    )
