"""GRPO (Shao et al. 2024, DeepSeekMath) on a ``jaxes.llm.CausalLM``: the policy-gradient arm
that the Countdown study sets against ES, written to compute what google-tunix's GRPO learner
computes, checked against it on one fixed batch (``tests/test_grpo.py``).

One update: ``batch`` training problems, ``group`` completions of each sampled at
``temperature`` from the current policy (KV-cached, ``jaxes.tasks.sequence.generate``), each
cut at its first end token and scored by ``countdown_reward`` (0.1 format, 1.0 answer);
group-relative advantages ``(r - mean) / (std + 1e-6)`` (std with ddof 1, as tunix); then
``inner_steps`` Adam steps on the clipped-ratio loss

    per token:  max(-A ratio, -A clip(ratio, 1 - ε, 1 + ε)) + β KL(π, π_ref)
    loss:       mean over completions of (mean over each completion's tokens)

tunix's default aggregation (``loss_agg_mode="sequence-mean-token-mean"``). With
``inner_steps`` 1 the old log-probs are the current ones, stopped (ratio 1), as tunix takes
them; with more, they are the sampling policy's, computed once per batch. The KL term is off by
default (β = 0: no reference forward pass, as ES has none; tunix's default is β = 0.04 with
its ``kl_loss_mode="kl"``, ``kl="k1"`` here); ``kl="k3"`` is DeepSeekMath's estimator
``exp(ref - logp) - (ref - logp) - 1`` (tunix's ``low_var_kl``). The reference is the
starting weights.

Shapes are fixed for a run (prompts left-padded to the longest of ``problems``, completions to
``answer_tokens``), so the sampler and the update compile once, before the clock starts.

Example (two updates of the tiny fixture model; seconds on a CPU):
  >>> from jaxes.llm import countdown_problems
  >>> out = train("tests/fixtures/hf/qwen2-tied", GRPOSetup(batch=2, group=2, answer_tokens=4),
  ...             seed=0, updates=2, problems=countdown_problems(8, seed=0))  # doctest: +SKIP
  >>> [r["tokens"] for r in out["history"]]  # doctest: +SKIP
  [16, 32]
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxes.llm import countdown_prompt, countdown_reward, load
from jaxes.tasks.sequence import generate

from .evaluate import ANSWER_TOKENS

# tunix's bounds: the advantage's std is offset by this, and a log-ratio is clipped to ±20
# before ``exp`` (a far-off-policy token would overflow float32).
STD_EPS, LOG_RATIO_BOUND = 1e-6, 20.0


@dataclasses.dataclass(frozen=True)
class GRPOSetup:
    """One GRPO run's settings.

    Attributes:
      batch: training problems per update (B).
      group: completions sampled per problem (G, at least 2: the std has ddof 1).
      learning_rate: Adam's step.
      epsilon: the ratio's clip (ε).
      beta: the KL penalty's weight (β; 0 skips the reference model).
      kl: the KL estimator, ``"k3"`` (DeepSeekMath, tunix's ``low_var_kl``) or ``"k1"``
        (``logp - ref``, tunix's ``kl``).
      temperature: the sampling temperature; log-probs are of ``softmax(logits / T)``.
      answer_tokens: tokens sampled per completion (the budget counts all of them).
      inner_steps: Adam steps per sampled batch (μ).
      max_grad_norm: clip the gradient's global norm to this first (``None``: no clip).

    The learning rate is the one of 1e-4, 3e-4, 1e-3 and 3e-3 that raised the quick model's
    batch reward over 24 updates of 8 x 8 (one seed, 2,000 training problems: 0.187 -> 0.253
    from the first 8 updates to the last 8); the three larger ones collapsed it (the last 8
    updates' exact share 0.02, 0.0 and 0.0). A starting point for tuning, not a tuned value.
    """

    batch: int = 8
    group: int = 8
    learning_rate: float = 1e-4
    epsilon: float = 0.2
    beta: float = 0.0
    kl: str = "k3"
    temperature: float = 1.0
    answer_tokens: int = ANSWER_TOKENS
    inner_steps: int = 1
    max_grad_norm: float | None = None

    def __post_init__(self):
        if self.group < 2:
            raise ValueError(f"group: GRPO's std needs at least 2 completions, got {self.group}")
        if self.kl not in ("k1", "k3"):
            raise ValueError(f"kl: expected 'k1' or 'k3', got {self.kl!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature: GRPO samples: expected > 0, got {self.temperature}")

    def optimizer(self) -> optax.GradientTransformation:
        adam = optax.adam(self.learning_rate)
        if self.max_grad_norm is None:
            return adam
        return optax.chain(optax.clip_by_global_norm(self.max_grad_norm), adam)


class Rollout(NamedTuple):
    """One batch of sampled completions, what the loss reads (``N = batch * group`` rows).

    Attributes:
      prompts: ``(N, Lp)`` int32, left-padded.
      start: ``(N,)`` int32, each row's left padding (its first real slot).
      completions: ``(N, A)`` int32.
      mask: ``(N, A)`` float32, 1 before the first end token (``completion_mask``).
      advantages: ``(N,)`` float32.
      old_logps: ``(N, A)`` the sampling policy's log-probs, or ``None`` (the current ones).
      ref_logps: ``(N, A)`` the reference's log-probs, or ``None`` (no KL term).
    """

    prompts: jax.Array
    start: jax.Array
    completions: jax.Array
    mask: jax.Array
    advantages: jax.Array
    old_logps: jax.Array | None = None
    ref_logps: jax.Array | None = None


def group_advantages(rewards) -> np.ndarray:
    """``(r - group mean) / (group std + STD_EPS)`` of ``rewards`` ``(B, G)``, std with ddof 1
    (tunix's ``compute_advantages``); a group of equal rewards gets zeros."""
    r = np.asarray(rewards, np.float32)
    return (r - r.mean(axis=1, keepdims=True)) / (r.std(axis=1, ddof=1, keepdims=True) + STD_EPS)


def completion_mask(tokens, end_ids) -> np.ndarray:
    """``(N, A)`` float32: 1 on each row's tokens before its first end token (every token
    where it has none). The end token itself is left out, as in tunix's learner: its sampler
    returns a completion up to the end token, exclusive, and the learner masks the padding
    after it."""
    tokens = np.asarray(tokens)
    ends = np.isin(tokens, np.asarray(end_ids))
    first = np.where(ends.any(axis=1), ends.argmax(axis=1), tokens.shape[1])
    return (np.arange(tokens.shape[1])[None] < first[:, None]).astype(np.float32)


def token_logps(model, params, prompts, start, completions, temperature: float = 1.0):
    """``(N, A)`` float32: log π(token | what precedes it) of each completion token, π the
    softmax of the logits over ``temperature``, in one causal pass over prompt + completion."""
    sequence = jnp.concatenate([prompts, completions], axis=1)
    logits, _ = model.apply({"params": params}, sequence[:, :-1], start=start)
    logits = logits[:, prompts.shape[1] - 1 :].astype(jnp.float32) / temperature
    chosen = jnp.take_along_axis(logits, completions[..., None], axis=-1)[..., 0]
    return chosen - jax.nn.logsumexp(logits, axis=-1)


def sequence_mean(per_token, mask) -> jax.Array:
    """Each completion's mean over its masked tokens, then the mean over the completions that
    have any (tunix's ``sequence-mean-token-mean``)."""
    counts = mask.sum(axis=-1)
    per_sequence = (per_token * mask).sum(axis=-1) / jnp.maximum(counts, 1.0)
    return per_sequence.sum() / jnp.maximum((counts > 0).sum(), 1)


def kl_estimate(logps, ref_logps, kind: str) -> jax.Array:
    """Per-token KL(π, π_ref) estimate from the sampled tokens' log-probs: ``"k1"``
    ``logp - ref``, ``"k3"`` ``exp(ref - logp) - (ref - logp) - 1`` (non-negative)."""
    if kind == "k1":
        return logps - ref_logps
    diff = ref_logps - logps
    return jnp.exp(diff) - diff - 1.0


def grpo_loss(model, params, batch: Rollout, setup: GRPOSetup):
    """GRPO's loss on ``batch`` and ``aux`` (``pg_loss``, ``kl``: the aggregated KL estimate,
    ``clip_fraction``: the share of tokens whose clipped term is the larger)."""
    logps = token_logps(
        model, params, batch.prompts, batch.start, batch.completions, setup.temperature
    )
    old = jax.lax.stop_gradient(logps) if batch.old_logps is None else batch.old_logps
    ratio = jnp.exp(jnp.clip(logps - old, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    adv = batch.advantages[:, None].astype(jnp.float32)
    plain = -adv * ratio
    clipped = -adv * jnp.clip(ratio, 1.0 - setup.epsilon, 1.0 + setup.epsilon)
    pg_loss = sequence_mean(jnp.maximum(plain, clipped), batch.mask)
    clip_fraction = (jnp.greater(clipped, plain) * batch.mask).sum() / batch.mask.sum()
    kl = jnp.float32(0.0)
    if batch.ref_logps is not None:
        kl = sequence_mean(kl_estimate(logps, batch.ref_logps, setup.kl), batch.mask)
    loss = pg_loss + setup.beta * kl if setup.beta else pg_loss
    return loss, {"pg_loss": pg_loss, "kl": kl, "clip_fraction": clip_fraction}


@partial(jax.jit, static_argnums=(0, 4, 5))
def _sample(model, params, prompts, start, steps: int, temperature: float, key):
    def apply_fn(tokens, cache, position):
        return model.apply({"params": params}, tokens, cache, position)

    cache = model.init_cache(prompts.shape[0], start=start)
    return generate(apply_fn, cache, prompts, steps, key=key, temperature=temperature)


def _step_fn(model, setup: GRPOSetup, opt):
    """The jitted Adam step on one ``Rollout``: ``(params, opt_state, batch) -> (params,
    opt_state, loss, aux)``."""

    def step(params, opt_state, batch):
        (loss, aux), grads = jax.value_and_grad(grpo_loss, argnums=1, has_aux=True)(
            model, params, batch, setup
        )
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, aux

    # No donation: ``on_update`` may keep the params it is handed.
    return jax.jit(step)


class _Run(NamedTuple):
    """What every update of a run reads: the model (its cache sized to prompt + answer), the
    tokenizer, the training problems and their prompts left-padded to the longest, the
    reference weights and the jitted log-prob pass."""

    model: object
    tokenizer: object
    problems: list
    prompt_ids: np.ndarray  # (problems, Lp)
    prompt_start: np.ndarray  # (problems,)
    ref_params: dict
    logps: Callable
    reward: Callable[[dict, str], float]


def _prepare(pre, problems: list[dict], setup: GRPOSetup, reward) -> _Run:
    tok = pre.tokenizer
    ids, start = tok.pad([tok.encode(countdown_prompt(p)) for p in problems])
    model = pre.model.clone(cache_len=ids.shape[1] + setup.answer_tokens)
    logps = jax.jit(partial(token_logps, model, temperature=setup.temperature))
    return _Run(model, tok, problems, ids, start, pre.params, logps, reward)


def _batches(n: int, batch: int, rng: np.random.Generator):
    """Problem indices ``batch`` at a time, each pass over the ``n`` problems shuffled anew."""
    order = np.empty(0, np.int64)
    while True:
        while order.size < batch:
            order = np.concatenate([order, rng.permutation(n)])
        yield order[:batch]
        order = order[batch:]


def _rollout(run: _Run, params, chosen, setup: GRPOSetup, key) -> tuple[Rollout, np.ndarray]:
    """Samples ``chosen``'s completions, scores them, and returns ``(Rollout, rewards (B, G))``."""
    g = setup.group
    ids = jnp.asarray(np.repeat(run.prompt_ids[chosen], g, 0))
    start = jnp.asarray(np.repeat(run.prompt_start[chosen], g, 0))
    sampled = _sample(run.model, params, ids, start, setup.answer_tokens, setup.temperature, key)
    tokens = np.asarray(sampled)
    end_ids = run.tokenizer.eos_ids
    rewards = np.empty(tokens.shape[0])
    for row, toks in enumerate(tokens):
        # The text stops before the end token, as evaluate.completions decodes it.
        ends = np.flatnonzero(np.isin(toks, end_ids))
        text = run.tokenizer.decode(toks[: ends[0]] if ends.size else toks)
        rewards[row] = run.reward(run.problems[chosen[row // g]], text)
    rewards = rewards.reshape(-1, g)
    adv = jnp.asarray(group_advantages(rewards).reshape(-1))
    mask = jnp.asarray(completion_mask(tokens, end_ids))
    old = run.logps(params, ids, start, sampled) if setup.inner_steps > 1 else None
    ref = run.logps(run.ref_params, ids, start, sampled) if setup.beta else None
    return Rollout(ids, start, sampled, mask, adv, old, ref), rewards


def _scores(rewards: np.ndarray) -> dict:
    """The batch's mean reward, share in the answer format and share exact."""
    return {
        "reward": float(rewards.mean()),
        "format": float((rewards > 0).mean()),
        "exact": float((rewards == 1.0).mean()),
    }


def train(
    directory: str,
    setup: GRPOSetup = GRPOSetup(),
    *,
    seed: int,
    problems: list[dict],
    updates: int | None = None,
    seconds: float | None = None,
    on_update: Callable[[dict, dict], bool | None] | None = None,
    reward: Callable[[dict, str], float] = countdown_reward,
) -> dict:
    """GRPO on the model in ``directory`` (``jaxes.llm.load``) over the training ``problems``,
    for ``updates`` updates or until ``seconds`` of training have passed (the update that
    crosses the clock finishes), whichever comes first; at least one must be given.

    ``reward(problem, text)`` scores a completion (its text before the end token);
    ``on_update(record, params)`` runs after each update, off the clock (a held-out
    evaluation, say; the params are the update's own, safe to keep); it returns ``True`` to
    stop. A record: ``update`` (1-based), ``reward``,
    ``format`` and ``exact`` (over the batch's completions), ``loss``, ``clip_fraction``,
    ``kl``, ``tokens`` (sampled so far: ``batch * group * answer_tokens`` per update),
    ``completion_tokens`` (so far, the masked ones: before each end token) and ``seconds``
    (training so far, compiles and ``on_update`` excluded).

    Returns ``params`` (the final weights), ``history`` (the records), ``updates``,
    ``tokens``, ``seconds``, ``compile_seconds`` and ``setup`` (a dict)."""
    if updates is None and seconds is None:
        raise ValueError("train: give updates or seconds (or both)")
    run = _prepare(load(directory), problems, setup, reward)
    opt = setup.optimizer()
    params = run.ref_params
    opt_state = opt.init(params)
    step = _step_fn(run.model, setup, opt)
    key = jax.random.key(seed)
    batches = _batches(len(problems), setup.batch, np.random.default_rng(seed))

    def one_update(params, opt_state, key):
        batch, rewards = _rollout(run, params, next(batches), setup, key)
        for _ in range(setup.inner_steps):
            params, opt_state, loss, aux = step(params, opt_state, batch)
        return params, opt_state, rewards, batch, loss, aux

    # A first update compiles every program; its result is dropped, so the clock and the run
    # start from the loaded weights with a fresh Adam state.
    compile_started = time.perf_counter()
    jax.block_until_ready(one_update(params, opt_state, jax.random.key(seed + 1))[:2])
    compile_seconds = time.perf_counter() - compile_started
    batches = _batches(len(problems), setup.batch, np.random.default_rng(seed))
    history, clock, tokens, completion_tokens = [], 0.0, 0, 0
    per_update = setup.batch * setup.group * setup.answer_tokens
    while (updates is None or len(history) < updates) and (seconds is None or clock < seconds):
        started = time.perf_counter()
        key, sub = jax.random.split(key)
        params, opt_state, rewards, batch, loss, aux = one_update(params, opt_state, sub)
        loss = float(loss)  # waits for the step
        clock += time.perf_counter() - started
        tokens += per_update
        completion_tokens += int(np.asarray(batch.mask).sum())
        record = {
            "update": len(history) + 1,
            **_scores(rewards),
            "loss": loss,
            "clip_fraction": float(aux["clip_fraction"]),
            "kl": float(aux["kl"]),
            "tokens": tokens,
            "completion_tokens": completion_tokens,
            "seconds": clock,
        }
        history.append(record)
        if on_update is not None and on_update(record, params):
            break
    return {
        "params": params,
        "history": history,
        "updates": len(history),
        "tokens": tokens,
        "seconds": clock,
        "compile_seconds": compile_seconds,
        "setup": dataclasses.asdict(setup),
    }
