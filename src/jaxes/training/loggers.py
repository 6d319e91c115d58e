"""A run's logs to experiment trackers (``jaxes.training.trackers``): which ones, fed when, and
what happens when one fails.

``check_loggers`` reads ``loggers=`` (``"tensorboard,mlflow"`` or a list of names) before
anything is written, so an unknown name or a missing extra is one error line. ``open_feed``
opens a run's trackers; its ``Feed`` hands them the run's metrics lines only once a checkpoint
holds them (``commit``), so that a run killed and resumed logs every generation once: the lines
after the last checkpoint are trained again and logged then. Each tracker's last logged
generation is kept in the run directory's ``loggers.json``, with what it needs to continue the
same tracked run, and a resumed run sends only what a tracker has not had (a resume is
bit-identical, so the lines are the same).

A tracker that fails (a full disk, a closed writer, a lost server) is reported once on the
run's stream and dropped; the run goes on and checkpoints. Losing a log never loses a run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TextIO

from jaxes import extras
from jaxes.training import rundir, trackers

LOGGERS = "loggers.json"


def check_loggers(loggers: str | Sequence[str] | None) -> tuple[str, ...]:
    """The tracker names ``loggers`` asks for, each checked and importable.

    Example:
      >>> check_loggers("csv"), check_loggers(None)
      (('csv',), ())
      >>> check_loggers("csv,visdom")
      Traceback (most recent call last):
        ...
      ValueError: loggers: unknown 'visdom'; choose from csv, mlflow, tensorboard, wandb
    """
    if loggers is None:
        return ()
    names = loggers.split(",") if isinstance(loggers, str) else list(loggers)
    names = [n.strip() if isinstance(n, str) else n for n in names]
    known = ", ".join(sorted(trackers.TRACKERS))
    for name in names:
        if name not in trackers.TRACKERS:
            raise ValueError(f"loggers: unknown {name!r}; choose from {known}")
        if name in trackers.EXTRAS:
            module, feature = trackers.EXTRAS[name]
            for needed in (module, *trackers.NEEDS.get(name, ())):
                extras.require(needed, name, feature)
    return tuple(dict.fromkeys(names))


class Guarded:
    """One tracker, its failures caught: the first is reported on ``stream`` and the tracker
    is dropped from then on."""

    def __init__(self, name: str, tracker, stream: TextIO):
        self.name, self.tracker, self.stream = name, tracker, stream

    @classmethod
    def open(cls, name: str, target: trackers.Target, stream: TextIO) -> Guarded:
        guarded = cls(name, None, stream)
        guarded.tracker = guarded.call(lambda: trackers.TRACKERS[name](target))
        return guarded

    @property
    def failed(self) -> bool:
        return self.tracker is None

    def call(self, action):
        """``action()``'s value, or ``None`` after reporting its failure and dropping the
        tracker."""
        try:
            return action()
        except Exception as err:  # noqa: BLE001 - a log's failure must never stop the run
            self.tracker = None
            self.stream.write(
                f"jaxes: the {self.name} log failed ({type(err).__name__}: {err}); the run goes "
                "on without it\n"
            )
            self.stream.flush()
            return None

    def send(self, method: str, *args) -> None:
        if not self.failed:
            self.call(lambda: getattr(self.tracker, method)(*args))


class Feed:
    """One run's trackers: lines wait in ``pending`` until ``commit``, after a checkpoint."""

    def __init__(self, run_dir: str, guarded: list[Guarded], record: dict):
        self.path = os.path.join(run_dir, LOGGERS)
        self.guarded, self.record, self.pending = guarded, record, []

    def add(self, lines: list[dict]) -> None:
        self.pending += lines

    def commit(self) -> None:
        """Sends every tracker the pending lines it has not had, and records how far each
        got in ``loggers.json``."""
        lines, self.pending = self.pending, []
        for g in self.guarded:
            logged = self.record["logged_through"].get(g.name, 0)
            new = [x for x in lines if x["generation"] > logged]
            if new and not g.failed:
                g.send("lines", new)
                if not g.failed:
                    self.record["logged_through"][g.name] = new[-1]["generation"]
        if self.guarded:
            rundir.write_json(self.path, self.record)

    def finish(self, png: str | None) -> None:
        """The learning curve, where one was drawn, to every tracker."""
        if png is not None:
            for g in self.guarded:
                g.send("figure", png)

    def close(self) -> None:
        """Closes every tracker (once; also when the run stopped by an error)."""
        guarded, self.guarded = self.guarded, []
        for g in guarded:
            g.send("close")


def recorded(run_dir: str) -> tuple[str, ...]:
    """The trackers a run logged to, from its ``loggers.json`` (``()`` when it has none)."""
    try:
        return tuple(rundir.read_json(os.path.join(run_dir, LOGGERS))["ids"])
    except (OSError, ValueError, KeyError, TypeError):
        return ()


def open_feed(
    names: tuple[str, ...],
    lane,
    root: str,
    group: str | None,
    settings: dict,
    stream: TextIO,
) -> Feed:
    """The trackers of the run in ``lane`` (a ``jaxes.training.lanes.Lane``), opened and
    given its settings and the lines it kept from before a resume that they have not had."""
    path = os.path.join(lane.out, LOGGERS)
    record = {"logged_through": {}, "ids": {}}
    if names and os.path.isfile(path):
        try:
            saved = rundir.read_json(path)
            record = {"logged_through": dict(saved["logged_through"]), "ids": dict(saved["ids"])}
        except (OSError, ValueError, KeyError, TypeError):
            stream.write(f"jaxes: {path} cannot be read; the trackers start their runs again\n")
    name = f"seed-{lane.seed}" if group is not None else os.path.basename(os.path.abspath(root))
    guarded = []
    for tracker in names:
        ids = record["ids"].get(tracker, {})
        target = trackers.Target(lane.out, root, name, group, ids)
        g = Guarded.open(tracker, target, stream)
        if not g.failed:
            record["ids"][tracker] = g.tracker.ids
            g.send("hparams", settings)
        guarded.append(g)
    feed = Feed(lane.out, guarded, record)
    feed.add(list(lane.kept))
    feed.commit()
    return feed
