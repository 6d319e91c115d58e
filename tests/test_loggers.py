"""Experiment trackers (``loggers=``, ``jaxes train --log``): each tracker's files read back with
its own reader (every series at its steps, the settings, the learning curve), resumed runs
logged once per generation, grouped seeds, a missing extra in one line, a failing tracker that
never stops the run, and the progress line in a notebook."""

import errno
import glob
import hashlib
import io
import json
import os
import struct
import sys

import nbformat
import pytest
from nbclient import NotebookClient

import jaxes
from jaxes.extras import MissingExtra
from jaxes.tasks.functions import function_task
from jaxes.training import loggers, run, run_seeds, rundir, trackers

ALL = "csv,tensorboard,wandb,mlflow"
ES, TASK = jaxes.open_es(8, sigma=0.1), function_task("sphere", 3)
LOOP = {"eval_every": 2, "checkpoint_every": 4, "plot": True}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    # MLflow's readers below open jaxes's default store, SQLite, without MLflow 3's opt-in to
    # its file store in maintenance mode (MLFLOW_ALLOW_FILE_STORE).
    for name in ("WANDB_MODE", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME",
                 "MLFLOW_ALLOW_FILE_STORE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


def metrics(run_dir) -> list[dict]:
    lines = open_text(os.path.join(run_dir, "metrics.jsonl")).splitlines()
    return [json.loads(x) for x in lines]


def open_text(path) -> str:
    with open(path) as f:
        return f.read()


def evals(run_dir) -> dict[int, float]:
    return {x["generation"]: x["eval_return"] for x in metrics(run_dir) if "eval_return" in x}


def evals_by_env_steps(run_dir) -> list[tuple[int, float]]:
    """``(total_env_steps, eval_return)`` of each evaluated generation, from metrics.jsonl."""
    return [
        (x["total_env_steps"], x["eval_return"]) for x in metrics(run_dir) if "eval_return" in x
    ]


def settings(run_dir) -> dict:
    """The run's ``config.json``: what every tracker is given as hyper-parameters."""
    return json.loads(open_text(os.path.join(run_dir, "config.json")))


def curve(run_dir) -> bytes:
    """The learning curve the run drew (the PNG every tracker is given)."""
    with open(os.path.join(run_dir, rundir.LEARNING_CURVE), "rb") as f:
        return f.read()


class Stop(Exception):
    pass


def stop_at(generation):
    def progress_fn(g, _line):
        if g == generation:
            raise Stop

    return progress_fn


@pytest.fixture(scope="module")
def crashed_and_resumed(tmp_path_factory):
    """A run killed at generation 6 (its last checkpoint: 4), then resumed to 10, logging to
    every tracker."""
    out = str(tmp_path_factory.mktemp("logs") / "run")
    stream = io.StringIO()
    with pytest.raises(Stop):
        run(ES, TASK, out, generations=10, loggers=ALL, stream=stream,
            progress_fn=stop_at(6), **LOOP)  # fmt: skip
    run(ES, TASK, out, generations=10, loggers=ALL, stream=stream, resume=True, **LOOP)
    assert "log failed" not in stream.getvalue()
    return out


# ------------------------------------------------------------------ each tracker's own reader


def csv_rows(run_dir) -> list[dict]:
    import csv

    with open(os.path.join(run_dir, trackers.CSV_FILE), newline="") as f:
        return list(csv.DictReader(f))


def tensorboard_scalars(run_dir, tag) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in tensorboard_run(run_dir).Scalars(tag)]


def tensorboard_run(run_dir):
    """The run's TensorBoard events, every one kept (images and tensors included)."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    keep_all = {ea.IMAGES: 0, ea.TENSORS: 0, ea.SCALARS: 0}
    acc = ea.EventAccumulator(os.path.join(run_dir, trackers.TENSORBOARD_DIR), keep_all)
    acc.Reload()
    return acc


def tensorboard_hparams(acc) -> dict:
    """The hyper-parameters of the hparams plugin's session, as Python values."""
    from tensorboard.plugins.hparams import metadata

    info = metadata.parse_session_start_info_plugin_data(
        acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.SESSION_START_INFO_TAG]
    )
    return {k: getattr(v, v.WhichOneof("kind")) for k, v in info.hparams.items()}


def png_pixels(data: bytes):
    from matplotlib.image import imread

    return imread(io.BytesIO(data), format="png")


def wandb_history(wandb_dir) -> dict[str, list[dict]]:
    """The history rows of every offline run in ``wandb_dir``, by run id, read from the
    ``.wandb`` transaction logs (LevelDB log records of ``wandb_internal_pb2.Record``)."""
    rows: dict[str, list[dict]] = {}
    for run_id, record in wandb_records(wandb_dir):
        if record.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                     for i in record.history.item}  # fmt: skip
            rows.setdefault(run_id, []).append(items)
        if record.WhichOneof("record_type") == "run":
            rows.setdefault(run_id, []).append({"_group": record.run.run_group,
                                                "_name": record.run.display_name})  # fmt: skip
    return rows


def wandb_config(wandb_dir) -> dict[str, dict]:
    """The config of every offline run in ``wandb_dir``, by run id: its ``config`` records'
    updates in order (W&B's own bookkeeping, ``_wandb``, left out)."""
    config: dict[str, dict] = {}
    for run_id, record in wandb_records(wandb_dir):
        if record.WhichOneof("record_type") == "config":
            for item in record.config.update:
                if item.key != "_wandb":
                    config.setdefault(run_id, {})[item.key] = json.loads(item.value_json)
    return config


def wandb_records(wandb_dir):
    """``(run id, wandb_internal_pb2.Record)`` of every offline run's ``.wandb`` log."""
    from wandb.proto import wandb_internal_pb2

    for path in sorted(glob.glob(os.path.join(wandb_dir, "offline-run-*", "run-*.wandb"))):
        run_id = os.path.basename(path)[4:-6]
        with open(path, "rb") as f:
            data = f.read()
        for raw in _log_records(data):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            yield run_id, record


def _log_records(data: bytes, block: int = 32768):
    pos, pending = 7, b""  # after the ":W&B" header
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            yield chunk
        elif kind in (2, 3):
            pending = (pending if kind == 3 else b"") + chunk
        elif kind == 4:
            yield pending + chunk


def mlflow_store(root) -> str:
    """The store jaxes logs ``root``'s runs to by default: the SQLite database in it."""
    return "sqlite:///" + os.path.join(os.path.abspath(root), "mlflow.db")


def mlflow_runs(root, store=None):
    import mlflow

    mlflow.set_tracking_uri(store or mlflow_store(root))
    return mlflow.search_runs(experiment_names=["jaxes"], output_format="list")


def mlflow_history(run_id, name, root, store=None) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store or mlflow_store(root))
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, name))


# ------------------------------------------------------------------ every generation, once


def test_csv_holds_every_generation_once_across_the_resume(crashed_and_resumed):
    rows = csv_rows(crashed_and_resumed)
    assert [int(r["generation"]) for r in rows] == list(range(1, 11))
    got = {int(r["generation"]): float(r["eval_return"]) for r in rows if r["eval_return"]}
    assert got == pytest.approx(evals(crashed_and_resumed), rel=1e-12)


def test_tensorboard_events_equal_metrics_jsonl(crashed_and_resumed):
    out = crashed_and_resumed
    returns = tensorboard_scalars(out, "eval_return")
    assert [s for s, _ in returns] == [2, 4, 6, 8, 10]  # no gap, no duplicate
    assert dict(returns) == pytest.approx(evals(out), rel=1e-6)
    steps = [s for s, _ in tensorboard_scalars(out, "fitness_mean")]
    assert steps == list(range(1, 11))
    by_steps = tensorboard_scalars(out, trackers.BY_ENV_STEPS)
    expected = evals_by_env_steps(out)
    assert [s for s, _ in by_steps] == [s for s, _ in expected]
    assert [r for _, r in by_steps] == pytest.approx([r for _, r in expected], rel=1e-6)


def test_tensorboard_holds_the_settings_and_the_learning_curve(crashed_and_resumed):
    """The hparams plugin's session and the ``config`` text are config.json; the image is
    learning_curve.png's pixels (RGB: the tracker drops the alpha channel)."""
    out = crashed_and_resumed
    acc = tensorboard_run(out)
    config = settings(out)
    # tensorboardX keeps numbers, strings and booleans; anything else (null) as its str().
    assert tensorboard_hparams(acc) == {
        k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in config.items()
    }
    texts = [e.tensor_proto.string_val[0].decode() for e in acc.Tensors("config/text_summary")]
    assert texts and all(json.loads(t) == config for t in texts)  # once per opening
    (image,) = acc.Images("learning_curve")  # drawn once, when the resumed run ended
    logged, drawn = png_pixels(image.encoded_image_string), png_pixels(curve(out))[..., :3]
    assert (image.height, image.width) == drawn.shape[:2] and logged.shape == drawn.shape
    # 8-bit both; the tracker's float round trip may move a channel by one level.
    assert abs(logged - drawn).max() <= 1.5 / 255


def test_wandb_offline_run_is_one_run_continued(crashed_and_resumed):
    out = crashed_and_resumed
    history = wandb_history(os.path.join(out, trackers.WANDB_DIR))
    assert len(history) == 1  # the resume continued the same run id
    (rows,) = history.values()
    steps = [r["_step"] for r in rows if "_step" in r]
    assert steps == list(range(1, 11))
    got = {r["_step"]: r["eval_return"] for r in rows if "eval_return" in r}
    assert got == pytest.approx(evals(out), rel=1e-6)
    assert any("learning_curve/path" in r for r in rows)


def test_wandb_offline_run_holds_the_settings_and_the_learning_curve(crashed_and_resumed):
    """The run's config is config.json; its image file is learning_curve.png, byte for byte."""
    out = crashed_and_resumed
    wandb_dir = os.path.join(out, trackers.WANDB_DIR)
    ((run_id, config),) = wandb_config(wandb_dir).items()
    assert config == settings(out)
    (rows,) = wandb_history(wandb_dir).values()
    (logged,) = [r for r in rows if "learning_curve/path" in r]
    assert logged["_step"] == 10 and logged["learning_curve/_type"] == "image-file"
    assert logged["learning_curve/sha256"] == hashlib.sha256(curve(out)).hexdigest()
    # In the files of the resumed run's folder (each opening of the run id has its own).
    run_files = os.path.join(wandb_dir, f"offline-run-*-{run_id}", "files")
    (image,) = glob.glob(os.path.join(run_files, logged["learning_curve/path"]))
    with open(image, "rb") as f:
        assert f.read() == curve(out)


def test_mlflow_default_store_is_a_sqlite_database_in_the_output_directory(crashed_and_resumed):
    """Issue 63: MLflow 3 keeps the file store jaxes defaulted to (OUT/mlruns) in maintenance
    mode; the default is now OUT/mlflow.db, the learning curve in OUT/mlartifacts."""
    out = crashed_and_resumed
    record = json.loads(open_text(os.path.join(out, loggers.LOGGERS)))
    assert record["ids"]["mlflow"]["tracking_uri"] == mlflow_store(out)
    assert trackers.mlflow_default_uri(out) == mlflow_store(out)
    assert os.path.isfile(os.path.join(out, "mlflow.db"))
    assert not os.path.exists(os.path.join(out, trackers.MLFLOW_DIR))
    (found,) = mlflow_runs(out)
    assert found.info.artifact_uri.startswith("file://" + os.path.join(out, "mlartifacts"))
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ


def test_a_run_begun_in_a_file_store_resumes_logging_there(monkeypatch, tmp_path):
    """A run logged before the default was SQLite (its loggers.json records OUT/mlruns) goes
    on in that store on resume, and MLflow's client reads it with MLFLOW_ALLOW_FILE_STORE."""
    out = str(tmp_path / "run")
    old = "file://" + os.path.join(out, trackers.MLFLOW_DIR)  # the default jaxes recorded
    monkeypatch.setenv("MLFLOW_TRACKING_URI", old)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    stream = io.StringIO()
    run(ES, TASK, out, generations=4, loggers="mlflow", stream=stream, **LOOP)
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    run(ES, TASK, out, generations=8, loggers="mlflow", stream=stream, resume=True, **LOOP)
    assert "log failed" not in stream.getvalue()
    assert not os.path.exists(os.path.join(out, "mlflow.db"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # what reading a file store needs
    (found,) = mlflow_runs(out, old)
    returns = mlflow_history(found.info.run_id, "eval_return", out, old)
    assert [s for s, _ in returns] == [2, 4, 6, 8] and found.info.status == "FINISHED"


def test_mlflow_run_equals_metrics_jsonl(crashed_and_resumed):
    out = crashed_and_resumed
    (found,) = mlflow_runs(out)
    assert found.info.status == "FINISHED" and found.data.params["generations"] == "10"
    returns = mlflow_history(found.info.run_id, "eval_return", out)
    assert [s for s, _ in returns] == [2, 4, 6, 8, 10]
    assert dict(returns) == pytest.approx(evals(out), rel=1e-6)
    steps = [s for s, _ in mlflow_history(found.info.run_id, "fitness_mean", out)]
    assert steps == list(range(1, 11))
    # The evaluation return by environment steps: at total_env_steps, not at the generation.
    by_steps = mlflow_history(found.info.run_id, trackers.BY_ENV_STEPS, out)
    expected = evals_by_env_steps(out)
    assert [s for s, _ in by_steps] == [s for s, _ in expected]
    assert [r for _, r in by_steps] == pytest.approx([r for _, r in expected], rel=1e-6)


def test_mlflow_run_holds_the_settings_and_the_learning_curve(crashed_and_resumed):
    """The run's params are config.json (MLflow keeps strings); its one artifact is
    learning_curve.png, byte for byte."""
    from mlflow.tracking import MlflowClient

    out = crashed_and_resumed
    (found,) = mlflow_runs(out)
    assert found.data.params == {k: str(v) for k, v in settings(out).items()}
    client = MlflowClient(mlflow_store(out))
    (artifact,) = client.list_artifacts(found.info.run_id)
    assert artifact.path == rundir.LEARNING_CURVE
    local = client.download_artifacts(found.info.run_id, artifact.path, str(out) + "-artifact")
    with open(local, "rb") as f:
        assert f.read() == curve(out)


def test_loggers_json_records_each_tracker_through_the_last_generation(crashed_and_resumed):
    record = json.loads(open_text(os.path.join(crashed_and_resumed, loggers.LOGGERS)))
    assert record["logged_through"] == {n: 10 for n in ALL.split(",")}
    assert loggers.recorded(crashed_and_resumed) == tuple(ALL.split(","))


# ------------------------------------------------------------------ seeds, grouped


def test_seeds_log_one_run_each_grouped(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "seeds")
    run_seeds(ES, TASK, out, seeds=[0, 1], generations=4, loggers="tensorboard,wandb,mlflow",
              stream=io.StringIO(), **LOOP)  # fmt: skip
    assert os.listdir(tmp_path) == ["seeds"]  # nothing in the working directory (./mlruns)
    assert os.path.isfile(os.path.join(out, "mlflow.db"))  # one store for the seeds' runs
    found = mlflow_runs(out)
    assert sorted(r.info.run_name for r in found) == ["seed-0", "seed-1"]
    assert {r.data.tags["jaxes.group"] for r in found} == {"seeds"}
    history = wandb_history(os.path.join(out, trackers.WANDB_DIR))
    named = sorted((r["_name"], r["_group"]) for rows in history.values() for r in rows
                   if "_name" in r)  # fmt: skip
    assert named == [("seed-0", "seeds"), ("seed-1", "seeds")]
    for seed in (0, 1):
        run_dir = os.path.join(out, f"seed-{seed}")
        assert dict(tensorboard_scalars(run_dir, "eval_return")) == pytest.approx(evals(run_dir))


# ------------------------------------------------------------------ errors and failures


@pytest.mark.parametrize("name,extra", [("wandb", "wandb"), ("tensorboard", "tensorboard")])
def test_a_missing_extra_is_one_line_naming_it(monkeypatch, name, extra):
    module = trackers.EXTRAS[name][0]
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(MissingExtra) as err:
        loggers.check_loggers(f"csv,{name}")
    assert "\n" not in str(err.value) and f"pip install 'jaxes[{extra}]'" in str(err.value)


def test_mlflow_without_its_sqlite_store_modules_is_the_missing_extra(monkeypatch):
    """mlflow-skinny leaves out what MLflow's SQLite store needs: an install that has MLflow
    but not alembic (jaxes[mlflow] from before the default was SQLite) is told the extra."""
    monkeypatch.setitem(sys.modules, "alembic", None)
    with pytest.raises(MissingExtra) as err:
        loggers.check_loggers("mlflow")
    assert str(err.value) == (
        "logs to MLflow need the 'mlflow' extra: pip install 'jaxes[mlflow]' "
        "(no module named 'alembic')"
    )


def test_unknown_tracker_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="loggers: unknown 'visdom'"):
        run(ES, TASK, str(tmp_path / "r"), generations=2, loggers=["csv", "visdom"])
    assert not (tmp_path / "r").exists()


def test_a_tracker_failing_mid_run_is_reported_once_and_the_run_goes_on(monkeypatch, tmp_path):
    calls = []
    original = trackers.CsvTracker.lines

    def full_disk(self, lines):
        calls.append(lines[0]["generation"])
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        original(self, lines)

    monkeypatch.setattr(trackers.CsvTracker, "lines", full_disk)
    out, stream = tmp_path / "r", io.StringIO()
    summary = run(ES, TASK, str(out), generations=12, loggers="csv,tensorboard", stream=stream,
                  **LOOP)  # fmt: skip
    assert summary["generations"] == 12 and summary["stopped"] == "generations"
    assert stream.getvalue().count("the csv log failed (OSError") == 1
    assert len(calls) == 2  # dropped after its failure
    assert [int(r["generation"]) for r in csv_rows(out)] == [1, 2, 3, 4]
    assert len(tensorboard_scalars(out, "fitness_mean")) == 12  # the others go on
    assert max(int(s) for s in os.listdir(out / "checkpoints")) == 12


def test_a_tracker_failing_to_open_never_stops_the_run(monkeypatch, tmp_path):
    def refuse(self, target):
        raise ConnectionError("no server")

    monkeypatch.setattr(trackers.MlflowTracker, "__init__", refuse)
    stream = io.StringIO()
    summary = run(ES, TASK, str(tmp_path / "r"), generations=4, loggers="mlflow", stream=stream,
                  **LOOP)  # fmt: skip
    assert summary["generations"] == 4
    assert "the mlflow log failed (ConnectionError: no server)" in stream.getvalue()


# ------------------------------------------------------------------ the command line


def test_cli_log_and_a_resume_that_continues_it(capsys, monkeypatch, tmp_path):
    from jaxes.app.cli import main

    out = str(tmp_path / "cli")
    flags = ["--env", "fast", "--population", "8", "--eval-every", "1", "--checkpoint-every", "1"]
    assert main(["train", *flags, "--generations", "2", "--out", out, "--log", "csv,mlflow"]) == 0
    assert main(["train", "--resume", "--out", out, "--generations", "3"]) == 0
    assert [int(r["generation"]) for r in csv_rows(out)] == [1, 2, 3]
    (found,) = mlflow_runs(out)
    assert [s for s, _ in mlflow_history(found.info.run_id, "eval_return", out)] == [1, 2, 3]
    capsys.readouterr()
    assert main(["train", *flags, "--out", str(tmp_path / "x"), "--log", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "loggers: unknown 'nope'" in err
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if the extra were not installed
    assert main(["train", *flags, "--out", str(tmp_path / "y"), "--log", "wandb"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'jaxes[wandb]'" in err
    assert not (tmp_path / "y").exists()  # refused before anything was written


# ------------------------------------------------------------------ notebooks


def test_progress_is_one_updating_line_in_a_notebook(tmp_path):
    code = (
        "import io, tempfile, jaxes\n"
        "from jaxes.tasks.functions import function_task\n"
        "from jaxes.training import run\n"
        "es, task = jaxes.open_es(8, sigma=0.1), function_task('sphere', 3)\n"
        "summary = run(es, task, tempfile.mkdtemp(), generations=6, eval_every=2, plot=False)\n"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    outputs = notebook.cells[0].outputs
    shown = [o for o in outputs if o.output_type == "display_data"]
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert len(shown) == 1 and shown[0].data["text/plain"].startswith("gen     6/6")
    assert "gen " not in printed  # not one printed line per block
