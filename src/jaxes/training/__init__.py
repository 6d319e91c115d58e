"""Training any ``Strategy`` on any ``Task``: the run loop with its run directory.

Modules, one job each:

* ``settings``: the run's settings, checked (``check_loop``, ``check_stops``, ``check_seeds``,
  ``run_settings``);
* ``programs``: the compiled programs (``init_state``, ``block_runner``, ``eval_runner``,
  ``eval_key``); ``placement``: where the state lives (``place``, ``to_host``);
* ``lanes``: the runs that train together; ``loop``: the blocks of generations on the device;
  ``record``: their metrics lines and stop decisions; ``report``: progress, summaries, plots;
* ``runs``: ``run`` and ``run_seeds``;
* ``rundir``: the run directory (layout, lock, admission, its files); ``checkpoint``: whole
  states saved and restored; ``compilation``: the XLA options runs compile with;
  ``progress``: the progress line.

Example:
  >>> import io, tempfile, jaxes
  >>> from jaxes.tasks.functions import function_task
  >>> es, task = jaxes.open_es(8, sigma=0.1), function_task("sphere", 3)
  >>> summary = run(es, task, tempfile.mkdtemp(), generations=2, eval_every=2,
  ...               stream=io.StringIO(), plot=False)
  >>> summary["generations"], summary["stopped"]
  (2, 'generations')
"""

from __future__ import annotations

from jaxes.training.placement import place, to_host
from jaxes.training.programs import block_runner, eval_key, eval_runner, init_state
from jaxes.training.runs import run, run_seeds
from jaxes.training.settings import (
    MAX_SEED,
    MAY_CHANGE,
    check_loop,
    check_seeds,
    check_stops,
    run_settings,
)

__all__ = [
    "MAX_SEED",
    "MAY_CHANGE",
    "block_runner",
    "check_loop",
    "check_seeds",
    "check_stops",
    "eval_key",
    "eval_runner",
    "init_state",
    "place",
    "run",
    "run_seeds",
    "run_settings",
    "to_host",
]
