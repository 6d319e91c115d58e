"""The experiment trackers a run logs to: CSV, TensorBoard, Weights & Biases and MLflow.

Each tracker takes what the run already writes: its ``metrics.jsonl`` lines (every number in
them, keyed by ``generation``; the evaluation return also by ``total_env_steps``), its
settings (``config.json``) as hyper-parameters, and its learning-curve figure. Each is opened
for one run (``Target``): a run of ``run_seeds`` is one tracked run per seed, named
``seed-S`` and grouped under the directory's name, and a resumed run continues the tracked run
it started (the same TensorBoard directory, the W&B run id, the MLflow run id, kept in the run
directory's ``loggers.json`` by ``jaxes.training.loggers``).

Offline first: W&B runs offline unless ``WANDB_MODE`` says otherwise (``wandb sync`` uploads
them later), and MLflow writes a SQLite database in the output directory, ``OUT/mlflow.db``
(artifacts in ``OUT/mlartifacts``), unless ``MLFLOW_TRACKING_URI`` names another store. A run
logged before jaxes defaulted to SQLite has a file store, ``OUT/mlruns``, which MLflow 3 keeps
"in maintenance mode": a resume goes on logging there (the store is recorded with the run id),
and MLflow's own tools read it with ``MLFLOW_ALLOW_FILE_STORE=true`` or after
``mlflow migrate-filestore``. The libraries are extras, imported only here, when asked for
(``jaxes.extras``).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import logging
import math
import os
import time
import uuid
import warnings

from jaxes import extras

CSV_FILE = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
MLFLOW_DB = "mlflow.db"  # the default MLflow store, a SQLite database in OUT
MLFLOW_ARTIFACTS = "mlartifacts"  # its runs' artifacts (the learning curve), in OUT
MLFLOW_DIR = "mlruns"  # the file store jaxes defaulted to before (MLflow 3: maintenance mode)
BY_ENV_STEPS = "eval_return_by_env_steps"
# extra -> (the module the tracker needs, what the error says needs it)
EXTRAS = {
    "tensorboard": ("tensorboardX", "logs to TensorBoard"),
    "wandb": ("wandb", "logs to Weights & Biases"),
    "mlflow": ("mlflow", "logs to MLflow"),
}
# What a tracker needs beside its library: MLflow's SQLite store (jaxes's default) needs
# SQLAlchemy and alembic, which mlflow-skinny leaves out (the mlflow extra declares them).
NEEDS = {"mlflow": ("sqlalchemy", "alembic")}


@dataclasses.dataclass(frozen=True)
class Target:
    """Where one run's logs go: ``run_dir`` (its own files), ``root`` (the directory a
    ``run_seeds`` call shares: its W&B and MLflow stores), its ``name`` and ``group``
    (``None`` for a run alone), and ``ids``, what the tracker recorded of this run before."""

    run_dir: str
    root: str
    name: str
    group: str | None
    ids: dict


def scalars(line: dict) -> dict:
    """A metrics line's numbers, without ``generation`` (the step) and without nulls.

    Example:
      >>> scalars({"generation": 3, "fitness_mean": 1.5, "eval_return": None, "flag": True})
      {'fitness_mean': 1.5}
    """
    return {
        k: float(v)
        for k, v in line.items()
        if k != "generation"
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
    }


def flat(config: dict, prefix: str = "") -> dict:
    """Nested settings as one level of ``a.b`` names; lists as JSON text.

    Example:
      >>> flat({"env": {"name": "hopper"}, "hidden": [32, 32], "seed": 0})
      {'env.name': 'hopper', 'hidden': '[32, 32]', 'seed': 0}
    """
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, name + "."))
        elif isinstance(value, list | tuple):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


class CsvTracker:
    """``metrics.csv`` beside ``metrics.jsonl``: one row per generation, the columns fixed by
    the first block written (a later new name is left out of the file)."""

    name = "csv"

    def __init__(self, target: Target):
        self.path = os.path.join(target.run_dir, CSV_FILE)
        self.columns = None
        if os.path.isfile(self.path):
            with open(self.path, newline="") as f:
                self.columns = next(csv.reader(f), None)
        self.ids: dict = {}

    def hparams(self, config: dict) -> None:
        """Nothing: ``config.json`` lies beside the file."""

    def lines(self, lines: list[dict]) -> None:
        with open(self.path, "a", newline="") as f:
            if self.columns is None:
                names = sorted({k for x in lines for k in x} - {"generation", "total_env_steps"})
                self.columns = ["generation", "total_env_steps", *names]
                csv.writer(f).writerow(self.columns)
            writer = csv.writer(f)
            for line in lines:
                writer.writerow(["" if line.get(c) is None else line[c] for c in self.columns])

    def figure(self, png: str) -> None:
        """Nothing: the PNG lies beside the file."""

    def close(self) -> None:
        pass


class TensorBoardTracker:
    """Event files in ``RUN_DIR/tensorboard`` (``tensorboard --logdir OUT``), written by
    tensorboardX: every number at step ``generation``, ``eval_return`` also at step
    ``total_env_steps`` (as ``eval_return_by_env_steps``), the settings as hyper-parameters
    and as text, the learning curve as an image."""

    name = "tensorboard"

    def __init__(self, target: Target):
        tbx = extras.require("tensorboardX", "tensorboard", EXTRAS["tensorboard"][1])
        self.writer = tbx.SummaryWriter(logdir=os.path.join(target.run_dir, TENSORBOARD_DIR))
        self.ids: dict = {}

    def hparams(self, config: dict) -> None:
        from tensorboardX.summary import hparams

        values = {k: v if isinstance(v, int | float | str | bool) else str(v)
                  for k, v in flat(config).items()}  # fmt: skip
        for summary in hparams(values, {"eval_return": math.nan}):
            self.writer.file_writer.add_summary(summary)
        self.writer.add_text(
            "config", "    " + json.dumps(config, indent=2).replace("\n", "\n    ")
        )
        self.writer.flush()

    def lines(self, lines: list[dict]) -> None:
        for line in lines:
            step = line["generation"]
            for key, value in scalars(line).items():
                self.writer.add_scalar(key, value, step)
            if line.get("eval_return") is not None and "total_env_steps" in line:
                self.writer.add_scalar(BY_ENV_STEPS, line["eval_return"], line["total_env_steps"])
        self.writer.flush()

    def figure(self, png: str) -> None:
        from matplotlib.image import imread

        self.writer.add_image("learning_curve", imread(png)[..., :3], dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A Weights & Biases run in ``OUT/wandb``, offline unless ``WANDB_MODE`` is set (project
    ``WANDB_PROJECT``, default ``"jaxes"``): each line logged at step ``generation`` with its
    ``total_env_steps``, the settings as the run's config, the learning curve as an image."""

    name = "wandb"

    def __init__(self, target: Target):
        wandb = extras.require("wandb", "wandb", EXTRAS["wandb"][1])
        self.wandb = wandb
        run_id = target.ids.get("id") or uuid.uuid4().hex[:12]
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "jaxes"),
            dir=target.root,  # W&B writes its own wandb/ folder there
            id=run_id,
            name=target.name,
            group=target.group,
            mode=os.environ.get("WANDB_MODE", "offline"),
            resume="allow",
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off"),
        )
        self.ids = {"id": run_id}
        self.step = 0

    def hparams(self, config: dict) -> None:
        self.run.config.update(flat(config), allow_val_change=True)

    def lines(self, lines: list[dict]) -> None:
        for line in lines:
            self.step = line["generation"]
            self.run.log(scalars(line), step=self.step)

    def figure(self, png: str) -> None:
        self.run.log({"learning_curve": self.wandb.Image(png)}, step=self.step)

    def close(self) -> None:
        self.run.finish()


def mlflow_default_uri(root: str) -> str:
    """The MLflow store a run logs to when ``MLFLOW_TRACKING_URI`` names none: the SQLite
    database ``ROOT/mlflow.db`` (MLflow 3's recommended local store; it needs no server).

    Example:
      >>> mlflow_default_uri("/runs/hopper")
      'sqlite:////runs/hopper/mlflow.db'
    """
    return "sqlite:///" + os.path.abspath(os.path.join(root, MLFLOW_DB))


def is_file_store(uri: str) -> bool:
    """Whether an MLflow tracking URI is a file store (a ``file:`` URI or a plain path).

    Example:
      >>> is_file_store("file:///runs/hopper/mlruns"), is_file_store("runs/hopper/mlruns")
      (True, True)
      >>> is_file_store("sqlite:////runs/hopper/mlflow.db"), is_file_store("http://host:5000")
      (False, False)
    """
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    return scheme in ("", "file")


@contextlib.contextmanager
def _quiet_store():
    """MLflow's INFO lines while it creates a SQLite database's tables ("Creating initial
    MLflow database tables...") and SQLAlchemy's deprecation warnings about MLflow's models
    kept off the run's output."""
    loggers = [logging.getLogger(name) for name in ("mlflow.store.db.utils", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class MlflowTracker:
    """An MLflow run in experiment ``MLFLOW_EXPERIMENT_NAME`` (default ``"jaxes"``) of the
    store ``MLFLOW_TRACKING_URI``, by default the SQLite database ``OUT/mlflow.db`` with its
    artifacts in ``OUT/mlartifacts`` (``mlflow ui --backend-store-uri sqlite:///OUT/mlflow.db``):
    numbers at step ``generation``, ``eval_return`` also at step ``total_env_steps``, settings
    as params (a resumed run adds only new ones: MLflow keeps a param's first value), the
    figure as an artifact. A resumed run logs to the store it began in, recorded with its run
    id (``loggers.json``), also a file store ``OUT/mlruns`` of a run begun before jaxes
    defaulted to SQLite."""

    name = "mlflow"
    BATCH = 1000  # MLflow takes at most 1000 metrics per call

    def __init__(self, target: Target):
        for module in (EXTRAS["mlflow"][0], *NEEDS["mlflow"]):
            extras.require(module, "mlflow", EXTRAS["mlflow"][1])
        from mlflow.tracking import MlflowClient

        # The store the run began in, else the user's, else jaxes's own (SQLite in OUT).
        uri = target.ids.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
        artifacts = None
        if not uri:
            uri = mlflow_default_uri(target.root)
            artifacts = "file://" + os.path.abspath(os.path.join(target.root, MLFLOW_ARTIFACTS))
        elif target.ids.get("run_id") and is_file_store(uri):
            # MLflow 3 opens a file store only when asked: a run begun in one goes on there.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        with _quiet_store():
            self.client = MlflowClient(tracking_uri=uri)
        self.run_id = target.ids.get("run_id") or self._create(target, artifacts)
        self.client.update_run(self.run_id, "RUNNING")
        self.ids = {"run_id": self.run_id, "tracking_uri": uri}

    def _create(self, target: Target, artifacts: str | None) -> str:
        """A new run in the experiment; a new experiment keeps its artifacts in ``artifacts``
        (jaxes's own store: ``OUT/mlartifacts``, not MLflow's ``./mlruns`` in the working
        directory) or where the store says (``None``)."""
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "jaxes")
        experiment = self.client.get_experiment_by_name(name)
        eid = (
            experiment.experiment_id
            if experiment
            else self.client.create_experiment(name, artifact_location=artifacts)
        )
        tags = {"jaxes.run_dir": os.path.abspath(target.run_dir)}
        if target.group is not None:
            tags["jaxes.group"] = target.group
        return self.client.create_run(eid, run_name=target.name, tags=tags).info.run_id

    def hparams(self, config: dict) -> None:
        from mlflow.entities import Param

        have = self.client.get_run(self.run_id).data.params
        params = [Param(k, str(v)) for k, v in flat(config).items() if k not in have]
        for i in range(0, len(params), 100):
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def lines(self, lines: list[dict]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = []
        for line in lines:
            step = line["generation"]
            metrics += [Metric(k, v, now, step) for k, v in scalars(line).items()]
            if line.get("eval_return") is not None and "total_env_steps" in line:
                metrics.append(
                    Metric(BY_ENV_STEPS, line["eval_return"], now, line["total_env_steps"])
                )
        for i in range(0, len(metrics), self.BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + self.BATCH])

    def figure(self, png: str) -> None:
        self.client.log_artifact(self.run_id, png)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


TRACKERS = {t.name: t for t in (CsvTracker, TensorBoardTracker, WandbTracker, MlflowTracker)}
