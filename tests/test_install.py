"""What an installed jaxes must do with whichever supported versions and extras it has (issue 37).

`make test` runs this with the rest of the suite on the locked set. `make test-compat` runs it
alone against the built wheel in two fresh venvs: the declared floor versions
(requirements/floor.txt) and a bare install with gymnax but no Brax. So it needs only jaxes,
its core dependencies, gymnax and pytest, and it compiles little: one small program per
strategy, one run, one split.
"""

import importlib
import importlib.metadata
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import compat, extras, parallel, training
from jaxes.step import generation_step
from jaxes.strategies import STRATEGIES
from jaxes.tasks.functions import function_task

ROOT = Path(__file__).resolve().parents[1]
SPHERE = function_task("sphere", 8)
BRAX_MODULES = ("brax", "mujoco")


def command(*args: str, block: tuple[str, ...] = (), env_extra=None, timeout=300):
    """``jaxes ARGS`` as the console script runs it (``jaxes.app.cli.entry``), in a fresh
    process; modules in ``block`` are made unimportable first, as if their extra were absent."""
    code = (
        "import sys\n"
        f"for name in {block!r}: sys.modules[name] = None\n"
        f"sys.argv = ['jaxes', *{list(args)!r}]\n"
        "from jaxes.app.cli import entry\n"
        "entry()\n"
    )
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env
    )


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_the_command_and_the_package_name_one_version():
    proc = subprocess.run(
        [sys.executable, "-m", "jaxes", "--version"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"jaxes {jaxes.__version__}"
    assert jaxes.__version__ == importlib.metadata.version("jaxes")


def test_the_installed_versions_meet_the_declared_floors():
    declared = importlib.metadata.requires("jaxes")
    core = [r for r in declared if "extra ==" not in r]
    assert core and all(">=" in r for r in core), core  # ranges, never pins
    for requirement in core:
        name, floor = (x.strip() for x in requirement.split(";")[0].split(">="))
        installed = importlib.metadata.version(name)
        assert compat.version_tuple(installed) >= compat.version_tuple(floor), (name, installed)


def pins(path: Path) -> dict[str, str]:
    """``name==version`` lines of a requirements file, by normalised name."""
    lines = path.read_text().splitlines()
    found = (x.split("==") for x in lines if "==" in x and not x.startswith("#"))
    return {normalised(name): version.strip() for name, version in found}


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def declared(groups: tuple[str, ...], pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """``name>=floor`` of a pyproject.toml's dependencies (``"core"``) and named extras; a
    dependency with no floor (jaxes-examples's ``jaxes``) is left out."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    found = {}
    for group in groups:
        for requirement in project["dependencies"] if group == "core" else optional[group]:
            if ">=" in requirement:
                name, floor = requirement.split(">=")
                found[normalised(name)] = floor.strip()
    return found


def test_the_floor_file_pins_every_declared_floor_and_the_lock_is_in_range():
    floor = pins(ROOT / "requirements" / "floor.txt")
    for name, version in declared(("core", "gymnax", "plot")).items():
        assert floor.get(name) == version, (name, floor.get(name), version)
    locked = pins(ROOT / "requirements" / "locked.txt")
    # make test also installs the examples' distribution (examples/pyproject.toml) on the lock.
    examples = declared(("core",), ROOT / "examples" / "pyproject.toml")
    assert "scikit-learn" in examples
    groups = ("core", "brax", "gymnax", "plot", "dev", "tensorboard", "wandb", "mlflow")
    every = {**declared(groups), **examples}
    for name, version in every.items():
        assert compat.version_tuple(locked[name]) >= compat.version_tuple(version), name


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_improves_a_function_task(name):
    strategy = STRATEGIES[name](16, 0.3)
    step = generation_step(strategy, SPHERE)
    state = training.init_state(strategy, SPHERE, seed=0)
    start = float(SPHERE.evaluate_policy(None, jaxes.centre(state.strategy_state), None)[0])
    state, metrics = jax.jit(lambda s: jax.lax.scan(lambda c, _: step(c), s, None, 40))(state)
    final = float(SPHERE.evaluate_policy(None, jaxes.centre(state.strategy_state), None)[0])
    assert np.all(np.isfinite(metrics["fitness_mean"]))
    assert final > 0.5 * start, (start, final)  # fitness is -|x - 1|^2-like: maximised


@pytest.mark.parametrize("noise", ["table", "gaussian", "lowrank"])
def test_members_are_rebuilt_bit_identically_and_evaluate_matches_them(noise):
    params = {"w": jnp.ones((6, 4)), "b": jnp.zeros(4)}
    strategy = jaxes.open_es(8, 0.1, noise=jaxes.noise.lowrank(2) if noise == "lowrank" else noise)
    state = strategy.init(jax.random.key(0), params)
    population, state = strategy.ask(jax.random.key(1), state)
    for i in (0, 5):
        member = strategy.member(state, i)
        for leaf, row in zip(jax.tree.leaves(member), jax.tree.leaves(population), strict=True):
            np.testing.assert_array_equal(np.asarray(leaf), np.asarray(row[i]))

    def fitness(p):
        return -jnp.sum(p["w"] ** 2) - jnp.sum(p["b"])

    np.testing.assert_allclose(
        jaxes.evaluate(strategy, state, fitness), jax.vmap(fitness)(population), rtol=1e-6
    )


def test_a_run_checkpoints_and_resumes_where_it_stopped(tmp_path):
    strategy = jaxes.open_es(16, 0.1)
    quiet = {"stream": io.StringIO(), "plot": False, "eval_every": 2, "checkpoint_every": 2}
    training.run(strategy, SPHERE, str(tmp_path / "a"), generations=4, **quiet)
    resumed = training.run(
        strategy, SPHERE, str(tmp_path / "a"), generations=6, resume=True, **quiet
    )
    straight = training.run(strategy, SPHERE, str(tmp_path / "b"), generations=6, **quiet)
    lines = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["generation"] for x in lines] == [1, 2, 3, 4, 5, 6]
    assert resumed["final_eval_return"] == straight["final_eval_return"]


def test_the_split_over_devices_equals_one_device_and_types_carries_as_varying():
    assert jax.device_count() == 4  # tests/conftest.py
    strategy = jaxes.open_es(16, 0.1)
    mesh = parallel.make_mesh(4)
    state = training.init_state(strategy, SPHERE, seed=0)
    one = jax.jit(generation_step(strategy, SPHERE))(state)[0]
    split = jax.jit(parallel.sharded_step(strategy, SPHERE, mesh))(training.place(state, mesh))[0]
    np.testing.assert_allclose(
        np.asarray(split.strategy_state.params), np.asarray(one.strategy_state.params), atol=1e-6
    )
    spec = jax.sharding.PartitionSpec()

    @jax.jit
    def carried(x):
        def body(x):
            axes = compat.varying_axes(jaxes.collectives.varying(x))
            return jnp.asarray([len(axes), len(compat.varying_axes(x))], jnp.int32)

        return jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec)(x)

    assert carried(jnp.zeros(2)).tolist() == [1, 0]  # varying over the mesh's one axis


def test_a_gymnax_run_through_the_command(tmp_path):
    out = tmp_path / "cartpole"
    flags = ["--env", "CartPole-v1", "--population", "8", "--episode-length", "20"]
    flags += ["--generations", "4", "--eval-every", "2", "--checkpoint-every", "2"]
    cache = {"JAXES_CACHE_DIR": str(tmp_path / "xla")}
    proc = command("train", *flags, "--out", str(out), env_extra=cache)
    assert proc.returncode == 0, proc.stderr
    # Again from the compile cache: jaxlib before 0.10 logs a line per cached program loaded,
    # which the command keeps off its output.
    again = command("train", *flags, "--out", str(tmp_path / "again"), env_extra=cache)
    assert (again.returncode, again.stderr) == (0, "")
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["generation"] for x in lines] == [1, 2, 3, 4]
    files = proc.stdout.strip().splitlines()[-1]
    if importlib.util.find_spec("matplotlib") is None:  # the bare venv: no plot extra
        assert files.endswith(
            "no learning curve without the 'plot' extra: pip install 'jaxes[plot]'"
        )
        assert not (out / "learning_curve.png").exists()
    else:
        assert files.endswith(", learning_curve.png)") and (out / "learning_curve.png").is_file()


def test_brax_without_its_extra_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "pendulum"
    proc = command("train", "--out", str(out), block=BRAX_MODULES)  # the default env is Brax
    assert proc.returncode == 2
    assert one_line(proc.stderr) == (
        "jaxes: error: Brax environments need the 'brax' extra: pip install 'jaxes[brax]' "
        "(no module named 'brax')"
    )
    assert not out.exists()
    listed = command("envs", block=BRAX_MODULES)
    assert listed.returncode == 0 and "CartPole-v1" in listed.stdout.split()
    assert "jaxes[brax]" in one_line(listed.stderr)


def test_gymnax_without_its_extra_is_one_line():
    proc = command("train", "--env", "CartPole-v1", block=("gymnax",))
    assert proc.returncode == 2
    assert "pip install 'jaxes[gymnax]'" in one_line(proc.stderr)


@pytest.mark.parametrize(
    "module, blocked, extra",
    [("jaxes.plotting", "matplotlib", "plot"), ("jaxes.tasks.gymnax", "gymnax", "gymnax")],
)
def test_a_module_whose_extra_is_missing_names_it(monkeypatch, module, blocked, extra):
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)
    with pytest.raises(extras.MissingExtra, match=re.escape(f"pip install 'jaxes[{extra}]'")):
        importlib.import_module(module)


def test_a_jax_below_the_floor_is_one_line(tmp_path):
    floor = compat.jax_floor()
    assert floor is not None and compat.version_tuple(jax.__version__) >= (0, 8, 2)
    # jaxes reads JAX's version from its package metadata (without importing JAX): a jax 0.8.0
    # distribution found first on sys.path is what an old install looks like to it.
    dist = tmp_path / "jax-0.8.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jax\nVersion: 0.8.0\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    expected = (
        f"jaxes supports jax >= {floor}, and this environment has jax 0.8.0: pip install -U "
        f"'jax>={floor}' (for a GPU or TPU, follow JAX's own install instructions)"
    )
    for argv in ([sys.executable, "-m", "jaxes", "--version"], [jaxes_script(), "--version"]):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
        assert (proc.returncode, one_line(proc.stderr)) == (2, f"jaxes: error: {expected}")
    imported = subprocess.run(
        [sys.executable, "-c", "import jaxes"], capture_output=True, text=True, env=env
    )
    assert imported.stderr.strip().splitlines()[-1] == f"jaxes.compat.UnsupportedJax: {expected}"


def imported_modules(argv: list[str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``argv`` run with Python's import-time log (``PYTHONPROFILEIMPORTTIME``), and the
    modules it imported: every one, also in a process that ends with ``os._exit``."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    lines = [x for x in proc.stderr.splitlines() if x.startswith("import time:")]
    return proc, {x.rsplit("|", 1)[-1].strip() for x in lines}


def test_the_version_is_printed_without_importing_jax():
    """Issue 63: `jaxes --version` imported JAX (2.5-4 s to print a version). Measured with
    `time jaxes --version` on the 2-core CPU: docs/training.md."""
    for argv in ([sys.executable, "-m", "jaxes", "--version"], [jaxes_script(), "--version"]):
        proc, imported = imported_modules(argv)
        assert (proc.returncode, proc.stdout) == (0, f"jaxes {jaxes.__version__}\n"), proc.stderr
        assert "jaxes.app.cli" in imported  # the log is read
        assert not {m for m in imported if m.split(".")[0] in ("jax", "jaxlib")}, argv


def test_import_jaxes_is_lazy_and_every_public_name_is_its_modules():
    proc, imported = imported_modules(
        [sys.executable, "-c", "import jaxes; print(jaxes.__version__)"]
    )
    assert proc.returncode == 0 and "jaxes" in imported and "jax" not in imported
    # A public name imports its module (and JAX) when first read, and is that module's object.
    assert sorted(jaxes._HOMES) == sorted(jaxes.__all__)
    for name in jaxes.__all__:
        home = importlib.import_module(jaxes._HOMES[name])
        assert getattr(jaxes, name) is getattr(home, name), name
    for name in jaxes._SUBMODULES:
        assert getattr(jaxes, name) is importlib.import_module(f"jaxes.{name}"), name
    assert {*jaxes.__all__, *jaxes._SUBMODULES, "__version__"} <= set(dir(jaxes))
    namespace = {}
    exec("from jaxes import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(jaxes.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        jaxes.nope  # noqa: B018


def jaxes_script() -> str:
    """The ``jaxes`` console script installed beside this Python."""
    script = Path(sys.executable).with_name("jaxes")
    assert script.is_file(), f"no console script at {script}"
    return str(script)
