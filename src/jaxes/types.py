"""Shared types: the `Strategy` tuple of pure functions and the aliases it speaks in."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

PRNGKey = jax.Array
Params = Any  # any pytree of floating arrays
Population = Any  # the same pytree, every leaf with a leading axis of size P
Fitness = jax.Array  # shape (P,), floating; always maximised
State = Any
Info = Any


class StrategyTraits(NamedTuple):
    """What a strategy is, for checks that hold only for some strategies (``jaxes.testing``).

    Attributes:
      name: the factory's name, e.g. ``"open_es"``.
      antithetic: members come in pairs ``θ ± σε``.
      rank_based: the update depends on fitness only through its ranks (so any strictly
        increasing map of fitness leaves it unchanged); ``None`` when the shaping is a
        user's callable.
    """

    name: str
    antithetic: bool
    rank_based: bool | None


class Strategy(NamedTuple):
    """An evolution strategy as a tuple of pure functions (optax/blackjax style).

    Static settings (population size, noise source, shaping, optimizer) live in the closure of
    the factory that built it; everything that changes lives in the explicit ``state``.

    Attributes:
      init: ``init(key, params) -> state``.
      ask: ``ask(key, state) -> (population, state)``; the population is ``params`` with a
        leading axis of size ``population_size``. The returned state remembers ``key`` so that
        ``tell`` can rebuild every perturbation without being given the population.
      tell: ``tell(state, fitness) -> (state, info)``; ``fitness`` has shape ``(P,)`` and is
        *maximised*.
      member: ``member(state, i) -> params_i``, member ``i`` of the population the last ``ask``
        drew, built alone (the same code path as ``ask``): use it to evaluate big models in
        chunks or one device's share of the population.
      estimate: ``estimate(state, fitness) -> (direction, stats)``: the mean's ascent direction
        (a pytree like ``params``) *before* the step size, L2 term and optimizer, and nothing
        changed. For every strategy ``tell`` moves the mean by the optimizer's step along
        ``direction`` (minus ``l2_coeff · θ`` in open_es); with plain SGD (ars; snes's
        ``η_μ`` and sep_cma_es's ``c_m``, both called ``learning_rate``; or
        ``optimizer=optax.sgd(learning_rate)``) that step is ``learning_rate * direction``.
        Fitness is maximised.
      population_size: the static population size ``P``.
      best_params: ``best_params(state) -> params``, the best member seen so far, rebuilt
        from its recipe (``None`` for a strategy that does not track it).
      eval_chunk: ``eval_chunk(state, members, factored=False) -> int``, how many of
        ``members`` members to evaluate at once under the strategy's memory budget (a static
        int; ``None``: all); ``factored``: as displacements from a shared centre, which for
        low-rank noise hold their factors only.
      members: ``members(state, first, count) -> population``, ``count`` consecutive members
        from an even ``first`` (it may be traced), bit-identical to ``member`` but building
        an antithetic pair from one read of its noise (``None``: ``vmap`` over ``member``).
      perturbation: ``perturbation(state, i) -> delta_i``, member ``i``'s displacement
        ``member - θ`` (float32), with factored leaves (``jaxes.factored.lowrank.LowRank``) kept
        factored for a source that has them; ``jaxes.factored`` evaluates members from it
        without building them (``None``: not offered).
      traits: a ``StrategyTraits`` (``None`` for a strategy built by hand).
    """

    init: Callable[[PRNGKey, Params], State]
    ask: Callable[[PRNGKey, State], tuple[Population, State]]
    tell: Callable[[State, Fitness], tuple[State, Info]]
    member: Callable[[State, Any], Params]
    estimate: Callable[[State, Fitness], tuple[Params, Any]]
    population_size: int
    best_params: Callable[[State], Params] | None = None
    eval_chunk: Callable[[State, int], int] | None = None
    members: Callable[[State, Any, int], Population] | None = None
    perturbation: Callable[[State, Any], Params] | None = None
    traits: StrategyTraits | None = None


@dataclasses.dataclass(frozen=True)
class Task:
    """A fitness source as pure functions, in the same style as ``Strategy``.

    A frozen dataclass rather than a tuple so that a family of tasks can extend it
    (``jaxes.tasks.control.ControlTask`` adds its ``env`` and ``policy``) and still be a ``Task``.

    Evaluation is split in two so that any batch of members can be evaluated apart, in chunks
    on one device or spread over devices, and give the same result: ``evaluate`` sees some
    members and the task state as it was at the start of the generation; ``update`` then sees
    what every member of the population reported, in member order.

    Attributes:
      init: ``init(key) -> task_state`` (e.g. observation statistics; ``None`` if stateless).
      evaluate: ``evaluate(key, members, task_state) -> (fitness, member_stats, info)`` for a
        batch of ``B`` members (leading axis ``B``): fitness ``(B,)``, maximised;
        ``member_stats`` a pytree whose leaves have leading axis ``B`` (or ``None``); ``info``
        a pytree of counts, summed over batches and devices.
      evaluate_policy: ``evaluate_policy(key, params, task_state) -> returns``: the noise-free
        score of one parameter set (the centre), over the task's evaluation episodes. A
        control task's also has ``evaluate_policy.with_info(...) -> (returns, RolloutInfo)``,
        from which training counts the evaluations' env steps (``eval_env_steps``).
      init_params: ``init_params(key) -> params``, a starting point for the search.
      update: ``update(task_state, member_stats) -> task_state`` with every member's stats
        (leading axis ``P``); ``None``: the task state never changes.
      act: ``act(params, obs, task_state) -> action``, the policy step that ``evaluate``,
        ``evaluate_policy`` and a replay all use (observation normalisation included);
        ``None`` for a task that is not a control problem.
      evaluate_factored: ``evaluate_factored(key, centre, deltas, task_state) -> (fitness,
        member_stats, info)``, as ``evaluate`` but with the members given as the shared centre
        (θ in the params' dtypes, ``jaxes.centre``) and their displacements (leading axis
        ``B``; leaves arrays or ``LowRank`` factors, as ``strategy.perturbation`` makes them),
        so that a model can run them factored (``jaxes.factored.apply``); used instead of
        ``evaluate`` whenever the strategy's displacements have a factored leaf (low-rank
        noise). ``None``: members are always built. A wrapper that replaces ``evaluate``
        (``dataclasses.replace``) replaces this too, or sets it to ``None``.
      chunk_size: members evaluated at once (it must divide each device's share); ``None``:
        as many as the strategy's memory budget holds.
      member_state: ``member_state(task_state, first, count) -> task_state``, the task state
        ``evaluate`` (and ``evaluate_factored``) sees for members ``first .. first + count - 1``
        (``first`` traced), for a task whose state keeps a part per member (leading axis
        ``P``, as ``jaxes.tasks.unrolled`` keeps each particle's inner state): that part
        sliced, so the population can be evaluated in chunks and split over devices; ``None``:
        every batch sees the whole task state.

    Tasks are not split across devices by themselves: ``jaxes.step.generation_step`` gives
    each device its members and gathers what ``evaluate`` returns, so a task never needs an
    axis name.
    """

    init: Callable[[PRNGKey], Any]
    evaluate: Callable[[PRNGKey, Population, Any], tuple[Fitness, Any, Any]]
    evaluate_policy: Callable[[PRNGKey, Params, Any], jax.Array]
    init_params: Callable[[PRNGKey], Params]
    update: Callable[[Any, Any], Any] | None = None
    act: Callable[[Params, jax.Array, Any], jax.Array] | None = None
    evaluate_factored: Callable[[PRNGKey, Params, Any, Any], tuple[Fitness, Any, Any]] | None = None
    chunk_size: int | None = None
    member_state: Callable[[Any, jax.Array, int], Any] | None = None
