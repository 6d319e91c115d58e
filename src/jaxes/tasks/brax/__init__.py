"""Brax physics as a fitness source: population in, episode returns out.

Members are ``vmap``-ed, and so are several episodes per member; time runs in ``lax.scan``
chunks inside a ``lax.while_loop`` that stops as soon as every episode in the batch is over,
so a population that falls over early costs only the steps it lived (``info.env_steps``).
Rewards after ``done`` are masked out. A member whose physics turns non-finite gets a NaN
return, which every fitness shaping ranks worst.

Observations are normalised with running statistics kept in the task state. They are frozen
during a generation (every member sees the same normalisation) and then merged with the
moments of every observation an alive episode saw. ``evaluate`` returns those moments per
member (``P × (2·obs + 1)`` floats) and ``update`` sums them in member order, so a population
evaluated in chunks or split over devices gives every device the same statistics.

The episodes, statistics and policies are ``jaxes.tasks.control``'s; this package holds what
is Brax's own. Modules: ``task`` (``brax_task`` and the Brax ``family``), ``envs`` (loading
and inspecting environments), ``render`` and ``offline_page`` (the HTML replay).
"""

from jaxes.tasks.brax import envs, task
from jaxes.tasks.brax.envs import (
    BACKENDS,
    action_range,
    env_names,
    load_env,
    observation_size,
    supported_backends,
)
from jaxes.tasks.brax.task import POLICIES, brax_task, family

__all__ = [
    "BACKENDS",
    "POLICIES",
    "action_range",
    "brax_task",
    "env_names",
    "envs",
    "family",
    "load_env",
    "observation_size",
    "supported_backends",
    "task",
]
