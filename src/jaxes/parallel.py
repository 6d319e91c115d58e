"""The population split across devices and hosts; only fitness crosses the wire.

Every device holds the same (replicated) state. In a generation each device builds only its
own ``P / n`` members from the shared keys (``strategy.member``), evaluates them, and the
``P`` fitness values are gathered (``gather_members``: ``P`` floats). Every device then runs the
same ``tell``, rebuilding all ``P`` perturbations from the key in the state, so the states stay
identical without ever sending a parameter-sized array. A task's per-member statistics
(observation moments) are gathered the same way, and its rollout counters summed (``psum``).

The same per-device function runs under ``shard_map`` (the engine: ``sharded_step``) and under
``jax.pmap`` as users write it (``local_step`` with the same ``axis_name``); a loop of one's own
under ``jax.shard_map`` gathers its fitness with ``gather_members``, which keeps JAX's check of
varying manual axes (``check_vma``, on by default) satisfied. Across hosts,
``initialize_distributed`` starts JAX's multi-process runtime and ``mesh`` spans every process's
devices.

On a CPU, XLA gives a process one device however many cores it has, and its intra-op threads
barely help the small, many-step programs ES runs; one CPU device per core, with the
population split over them, is about twice as fast on two cores (docs/benchmarks.md).
``use_cpu_cores`` asks for that before JAX starts; ``jaxes train`` calls it, and a Python user
calls it first thing.

A loop of one's own over CPU devices must wait for a step now and then (read a metric, or
``jax.block_until_ready``), as ``examples/pmap_loop.py`` does every 25 steps. XLA's CPU client
launches each device's share of a multi-device program on one thread pool (the larger of the
cores and the devices), and runs the shares there too; a launch holds its thread while its
device has 32 programs queued, so a loop that dispatches 32 steps ahead of its devices leaves
the next collective fewer threads than devices, and it deadlocks (XLA aborts it at the
collective timeout). ``PJRT_NPROC`` set to twice the devices avoids it too, but it also sizes
XLA's intra-op pool, and the extra threads slow every generation (docs/distributed.md), so
jaxes leaves XLA's pool alone: ``jaxes train`` and ``jaxes.training.run`` wait on every fused
block's metrics and never queue that far.
"""

from __future__ import annotations

import numbers
import os
import re
import socket
import time
from collections.abc import Mapping
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxes import compat
from jaxes.collectives import gather_members as gather_members  # public here too
from jaxes.step import generation_step
from jaxes.types import Strategy, Task

AXIS = "population"
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# Devices wait for each other at every gather; XLA's CPU runtime aborts after 40 s of waiting
# by default, which a loaded machine can reach (a device thread descheduled during another
# program's compile), so a split jaxes asks for waits up to 10 minutes instead.
COLLECTIVE_TIMEOUT_FLAG = "--xla_cpu_collective_call_terminate_timeout_seconds"


class CpuDevices(NamedTuple):
    """The CPU devices a process gets, and why.

    Attributes:
      count: CPU devices JAX has or will have (``None``: the backend is not the CPU's).
      reason: ``"one per core"``, ``"asked"`` (a count given), ``"XLA_FLAGS"`` (the user's
        own device count), ``"JAX_PLATFORMS=..."`` or ``"JAX had started"`` (too late to
        choose: the count it started with).
    """

    count: int | None
    reason: str


def cpu_cores() -> int:
    """The cores this process may run on: its CPU affinity, so ``taskset`` and cgroup pinning
    count (one core per process when pinned), else ``os.cpu_count()``.

    Example:
      >>> cpu_cores() >= 1
      True
    """
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def plan_cpu_devices(
    environ: Mapping[str, str], cores: int, count: int | None = None
) -> tuple[str | None, CpuDevices]:
    """What ``use_cpu_cores`` would do, as a pure function: the new ``XLA_FLAGS`` (``None``:
    leave it as it is) and the choice. A device count in ``XLA_FLAGS`` and a
    ``JAX_PLATFORMS`` without ``cpu`` are the user's choice and are never overwritten.

    Example:
      >>> plan_cpu_devices({}, cores=4)[1]
      CpuDevices(count=4, reason='one per core')
      >>> plan_cpu_devices({"XLA_FLAGS": "--xla_force_host_platform_device_count=3"}, 4)
      (None, CpuDevices(count=3, reason='XLA_FLAGS'))
      >>> plan_cpu_devices({"JAX_PLATFORMS": "cuda"}, 4)
      (None, CpuDevices(count=None, reason='JAX_PLATFORMS=cuda'))
      >>> plan_cpu_devices({}, cores=4, count=1)
      (None, CpuDevices(count=1, reason='asked'))
    """
    flags = environ.get("XLA_FLAGS", "")
    given = re.search(re.escape(DEVICE_COUNT_FLAG) + r"=(\d+)", flags)
    if given:
        return None, CpuDevices(int(given.group(1)), "XLA_FLAGS")
    platforms = environ.get("JAX_PLATFORMS", "")
    if platforms and "cpu" not in [p.strip() for p in platforms.split(",")]:
        return None, CpuDevices(None, f"JAX_PLATFORMS={platforms}")
    n = cores if count is None else count
    choice = CpuDevices(n, "one per core" if count is None else "asked")
    if n <= 1:
        return None, choice
    extra = [f"{DEVICE_COUNT_FLAG}={n}"]
    if COLLECTIVE_TIMEOUT_FLAG not in flags:
        extra.append(f"{COLLECTIVE_TIMEOUT_FLAG}=600")
    return " ".join([flags, *extra]).strip(), choice


_CHOSEN: list[CpuDevices] = []  # what use_cpu_cores chose in this process, for the start line


def use_cpu_cores(count: int | None = None) -> CpuDevices:
    """One CPU device per core (or ``count`` of them) for this process, split over by
    ``jaxes.training.run`` and ``jaxes train``; call it before anything else touches JAX.

    It sets ``XLA_FLAGS``' host device count, which JAX reads when its CPU backend starts; a
    device count already in ``XLA_FLAGS`` and a ``JAX_PLATFORMS`` without ``cpu`` are left
    alone, and once JAX has started it changes nothing and says so. ``count=1`` keeps XLA's
    single CPU device (``jaxes train --devices 1``).

    Args:
      count: CPU devices to ask for (>= 1); ``None``: ``cpu_cores()``.

    Returns:
      a ``CpuDevices``: the count and why.

    Example (run before JAX starts; the doctests have started it, so nothing changes):
      >>> use_cpu_cores().reason in ("JAX had started", "XLA_FLAGS")
      True
    """
    if count is not None and (not isinstance(count, numbers.Integral) or count < 1):
        raise ValueError(f"count: expected an int >= 1 (CPU devices), got {count!r}")
    if compat.backends_started():
        started = CpuDevices(_cpu_device_count(), "JAX had started")
        _CHOSEN[:] = [started]
        return started
    flags, choice = plan_cpu_devices(os.environ, cpu_cores(), count)
    if flags is not None:
        os.environ["XLA_FLAGS"] = flags
    _CHOSEN[:] = [choice]
    return choice


def _cpu_device_count() -> int | None:
    return len(jax.devices()) if jax.default_backend() == "cpu" else None


def describe_devices(mesh: Mesh) -> str:
    """The start line's words for the devices a run splits over, with the CPU choice.

    Example:
      >>> describe_devices(make_mesh(1))  # doctest: +ELLIPSIS
      '1 device(s)...'
    """
    n = mesh.devices.size
    text = f"{n} device(s)"
    if jax.default_backend() != "cpu" or jax.process_count() > 1:
        return text
    chosen = _CHOSEN[0] if _CHOSEN else None
    if chosen is None or chosen.reason == "JAX had started":
        if n == 1 and cpu_cores() > 1:
            return (
                f"{text} (one CPU device: call jaxes.parallel.use_cpu_cores() before JAX "
                f"starts to split over {cpu_cores()} cores)"
            )
        return text
    text = text if n == chosen.count else f"{n} of {chosen.count} device(s)"
    why = {
        "one per core": "one per core; --devices 1 for one",
        "asked": "as asked",
        "XLA_FLAGS": "XLA_FLAGS' device count",
    }.get(chosen.reason, chosen.reason)
    return f"{text} (CPU: {why})"


def default_split(population_size: int, devices: int) -> int:
    """The most of ``devices`` that split ``population_size`` evenly (a run given no
    ``devices`` uses every device it can).

    Example:
      >>> default_split(32, 2), default_split(30, 4), default_split(7, 4)
      (2, 3, 1)
    """
    return max(k for k in range(1, devices + 1) if population_size % k == 0)


def check_split(population_size: int, num_devices: int) -> int:
    """Members per device; a ``ValueError`` naming both numbers and the nearest valid sizes.

    Example:
      >>> check_split(32, 4)
      8
      >>> check_split(30, 4)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      ValueError: population_size: 30 members cannot be split evenly over 4 devices; ... 28 or 32
    """
    if population_size % num_devices == 0:
        return population_size // num_devices
    # With antithetic pairs a valid size must also stay even.
    step = num_devices if num_devices % 2 == 0 else 2 * num_devices
    lower = max(step, population_size // step * step)
    upper = lower + step if lower < population_size else lower
    options = sorted({lower, upper})
    raise ValueError(
        f"population_size: {population_size} members cannot be split evenly over "
        f"{num_devices} devices; nearest valid population sizes: "
        + " or ".join(str(o) for o in options)
    )


def local_step(strategy: Strategy, task: Task, num_shards: int, axis_name: str = AXIS):
    """One device's generation step, for ``shard_map`` or ``jax.pmap`` over ``axis_name``.

    The state must be replicated; every device returns the same new state. Equals
    ``step.generation_step`` on one device up to the summation order of task statistics.

    With 4 devices and ``jax.pmap``, as users write it:
    ``pstep = jax.pmap(local_step(strategy, task, 4), axis_name="population")``.

    Example (``jax.vmap`` stands in for 2 devices; ``eval_shape`` traces without compiling):
      >>> import jax, jax.numpy as jnp, jaxes
      >>> from jaxes.step import TrainState
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> ts = TrainState(es.init(jax.random.key(0), task.init_params(None)), task.init(None),
      ...                 jax.random.key(1), jnp.zeros((), jnp.int32))
      >>> copies = jax.tree.map(lambda x: jnp.stack([x, x]), ts)  # replicated over 2 "devices"
      >>> step = jax.vmap(local_step(es, task, num_shards=2), axis_name="population")
      >>> out, metrics = jax.eval_shape(step, copies)  # or run it: jax.jit(step)(copies)
      >>> out.strategy_state.params.shape, metrics["fitness_mean"].shape
      ((2, 2), (2,))
    """
    check_split(strategy.population_size, num_shards)
    return generation_step(strategy, task, axis_name, num_shards)


def make_mesh(num_devices: int | None = None) -> Mesh:
    """A 1-D mesh over the first ``num_devices`` devices of every process (default: all).

    Example:
      >>> mesh = make_mesh(1)
      >>> mesh.axis_names, mesh.devices.size
      (('population',), 1)
      >>> make_mesh().devices.size == len(jax.devices())
      True
    """
    devices = jax.devices()
    if num_devices is not None:
        if not isinstance(num_devices, numbers.Integral) or not 1 <= num_devices <= len(devices):
            raise ValueError(
                f"devices: expected an int from 1 to {len(devices)} (devices visible), "
                f"got {num_devices!r}"
            )
        devices = devices[:num_devices]
    return Mesh(np.asarray(devices), (AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    """The sharding of a state every device holds whole.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> x = jax.device_put(jnp.zeros(3), replicated(make_mesh()))
      >>> x.sharding.is_fully_replicated, len(x.sharding.device_set) == len(jax.devices())
      (True, True)
    """
    return NamedSharding(mesh, PartitionSpec())


def sharded_step(strategy: Strategy, task: Task, mesh: Mesh):
    """``local_step`` under ``shard_map`` over ``mesh``: replicated state in and out.

    Runs with ``check_vma=False``: some Brax backends' own code (generalized, MJX) fails JAX's
    check of varying manual axes; jaxes' own code and the spring and positional backends pass
    it (``docs/distributed.md``).

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> from jaxes.step import TrainState
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> mesh = make_mesh(1)  # any device count that divides the population size
      >>> ts = TrainState(es.init(jax.random.key(0), task.init_params(None)), task.init(None),
      ...                 jax.random.key(1), jnp.zeros((), jnp.int32))
      >>> ts, metrics = jax.jit(sharded_step(es, task, mesh))(jax.device_put(ts, replicated(mesh)))
      >>> int(ts.generation), int(metrics["evaluations"])
      (1, 4)
    """
    step = local_step(strategy, task, mesh.devices.size, mesh.axis_names[0])
    # generation_step and the Brax rollout pass JAX's check of varying manual axes (gathers
    # and loop carries are typed by jaxes.collectives), but a task's physics must pass it too:
    # Brax's generalized backend (jaxopt's loop) and MJX's solver do not, so it stays off here.
    return jax.shard_map(
        step, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(), check_vma=False
    )


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    timeout_s: int = 60,
) -> bool:
    """Starts JAX's multi-process runtime; a no-op (returns False) for a single process.

    Arguments left as ``None`` are read from ``JAXES_COORDINATOR_ADDRESS``,
    ``JAXES_NUM_PROCESSES`` and ``JAXES_PROCESS_ID``. Must run before any other JAX call.
    On CPU the processes talk through gloo.

    Example:
      >>> initialize_distributed(num_processes=1)  # one process: nothing to start
      False

    With several processes, each one calls (or sets the ``JAXES_*`` variables instead)
    ``initialize_distributed("10.0.0.1:1234", num_processes=2, process_id=i)``.
    """
    env = os.environ
    coordinator_address = coordinator_address or env.get("JAXES_COORDINATOR_ADDRESS")
    num_processes = num_processes if num_processes is not None else _env_int("JAXES_NUM_PROCESSES")
    process_id = process_id if process_id is not None else _env_int("JAXES_PROCESS_ID")
    if num_processes == 1 or (coordinator_address is None and num_processes is None):
        return False
    if coordinator_address is None or num_processes is None or process_id is None:
        raise ValueError(
            "distributed: give all of coordinator address, number of processes and process id "
            f"(got {coordinator_address!r}, {num_processes!r}, {process_id!r})"
        )
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(
            f"process_id: expected 0 <= process_id < num_processes ({num_processes}), "
            f"got {process_id}"
        )
    if process_id != 0:
        # JAX's client aborts the process when the coordinator never answers; find out first.
        _wait_for_coordinator(coordinator_address, timeout_s)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=timeout_s,
        )
    except Exception as err:  # the runtime raises several types for an absent peer
        raise ConnectionError(
            f"coordinator: could not start {num_processes} processes through "
            f"{coordinator_address} within {timeout_s} s (are all processes started with the "
            f"same address and process count?): {str(err).splitlines()[0]}"
        ) from err
    if jax.process_count() != num_processes:
        raise ValueError(
            f"num_processes: this process was started with {num_processes}, but the "
            f"coordinator at {coordinator_address} runs {jax.process_count()}; start every "
            "process with the same count"
        )
    return True


def _wait_for_coordinator(address: str, timeout_s: float) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"coordinator_address: expected HOST:PORT, got {address!r}")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError as err:
            if time.monotonic() > deadline:
                raise ConnectionError(
                    f"coordinator: could not reach {address} within {timeout_s} s "
                    f"({err.strerror or err}); is process 0 running with that address?"
                ) from None
            time.sleep(0.2)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}: expected an int, got {value!r}") from None
