"""gymnax environments as fitness sources: MinAtar, classic control, bsuite and more, all
JAX-native, so a population's episodes run inside ``vmap``/``lax.scan`` like Brax's.

Members are ``vmap``-ed, and so are several episodes per member; time runs in ``lax.scan``
chunks inside a ``lax.while_loop`` that stops once every episode is over, as Brax's does
(gymnax resets a finished episode by itself; every step after an episode's first ``done`` is
masked out). Observations are normalised with the Brax task's mergeable running
statistics (vector observations by default; not MinAtar's grids), frozen during a generation.

Every environment of ``gymnax.registered_envs`` (gymnax 1.0.1) builds a task and traces a
generation, except one, refused with a ``ValueError`` naming it:

- ``MNISTBandit-bsuite``: gymnax downloads MNIST (from storage.googleapis.com into
  /tmp/mnist) when the environment is built; offline that fails, and the task says so in one
  line (``"MNISTBandit-bsuite: gymnax could not build it (URLError: ...)"``). With the files
  there it is played like the others (not tested here: no network).

Modules: ``task`` (``gymnax_task``), ``rollout`` (the episodes, pure functions), ``envs``
(loading environments and reading their spaces), ``policies`` (dense and MinAtar conv
networks, with or without virtual batch normalisation).
"""

from jaxes.tasks.gymnax import envs, policies, rollout, task
from jaxes.tasks.gymnax.envs import Actions, Observations, env_names, load_env
from jaxes.tasks.gymnax.policies import POLICIES
from jaxes.tasks.gymnax.rollout import Rollout, RolloutInfo
from jaxes.tasks.gymnax.task import GymnaxTask, gymnax_task

__all__ = [
    "POLICIES",
    "Actions",
    "GymnaxTask",
    "Observations",
    "Rollout",
    "RolloutInfo",
    "env_names",
    "envs",
    "gymnax_task",
    "load_env",
    "policies",
    "rollout",
    "task",
]
