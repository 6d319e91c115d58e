"""Control tasks: a population of policies playing episodes of an environment family.

One stack serves every family. ``rollout`` plays a (members × episodes) batch: time runs in
``lax.scan`` chunks inside a ``lax.while_loop`` that stops once every episode is over; rewards
after an episode's end are masked out. ``task.control_task`` wraps it as a
``jaxes.types.Task``, with running observation statistics (``running_stats``, frozen during a
generation, merged after it in member order) and, for ``vbn_*`` policies, a fixed reference
batch. ``policies`` holds the networks and their action heads. A family is a small adapter
(``rollout.Family``: reset, step, observation, spaces): ``jaxes.tasks.brax`` and
``jaxes.tasks.gymnax`` each build one.

With low-rank noise a task evaluates every member as the centre's forward pass plus its
rank-``r`` term inside each ``nn.Dense`` and ``nn.Conv`` (``jaxes.factored``), never building
a member's weights.
"""

from jaxes.tasks.control import episodes, policies, rollout, running_stats, spaces, task
from jaxes.tasks.control.policies import POLICIES, Policy
from jaxes.tasks.control.rollout import Family, Rollout, RolloutInfo
from jaxes.tasks.control.spaces import Actions, Observations
from jaxes.tasks.control.task import ControlTask, TaskState, VBNTaskState, control_task

__all__ = [
    "POLICIES",
    "Actions",
    "ControlTask",
    "Family",
    "Observations",
    "Policy",
    "Rollout",
    "RolloutInfo",
    "TaskState",
    "VBNTaskState",
    "control_task",
    "episodes",
    "policies",
    "rollout",
    "running_stats",
    "spaces",
    "task",
]
