"""gymnax environments as fitness sources: MinAtar, classic control, bsuite and more, all
JAX-native, so a population's episodes run inside ``vmap``/``lax.scan`` like Brax's.

Members are ``vmap``-ed, and so are several episodes per member; time runs in ``lax.scan``
chunks inside a ``lax.while_loop`` that stops once every episode is over, as Brax's does
(gymnax resets a finished episode by itself; every step after an episode's first ``done`` is
masked out). Observations are normalised with mergeable running statistics (vector
observations by default; not MinAtar's grids), frozen during a generation. The episodes,
statistics and policies are ``jaxes.tasks.control``'s; this package holds what is gymnax's
own.

Every environment of ``gymnax.registered_envs`` (gymnax 1.0.1) builds a task and traces a
generation, except one, refused with a ``ValueError`` naming it:

- ``MNISTBandit-bsuite``: gymnax downloads MNIST (from storage.googleapis.com into
  /tmp/mnist) when the environment is built; offline that fails, and the task says so in one
  line (``"MNISTBandit-bsuite: gymnax could not build it (URLError: ...)"``). With the files
  there it is played like the others (not tested here: no network).

Modules: ``task`` (``gymnax_task`` and the gymnax ``family``), ``envs`` (loading
environments and reading their spaces).
"""

from jaxes.tasks.gymnax import envs, task
from jaxes.tasks.gymnax.envs import env_names, load_env
from jaxes.tasks.gymnax.task import family, gymnax_task

__all__ = ["env_names", "envs", "family", "gymnax_task", "load_env", "task"]
