"""Test set-up: 4 CPU devices and a persistent compile cache, before JAX is imported."""

import os

# Four virtual devices share the machine's cores; under load (a 2-core machine running other
# work) one device's thread can reach an all-reduce long after the others, and XLA's CPU
# runtime aborts the process after 40 s of waiting by default. The tests and the examples
# they start (which inherit XLA_FLAGS) wait up to 10 minutes instead.
# Every test program, not only the runner's, compiles with the runner's CPU option (XLA's
# fusion emitters off, jaxes.training.compilation): compiles are most of the suite's time
# (measured cold: the two Brax tests of test_vbn took 75 s with it, 102 s without), and tests
# that compare a runner's result with a program they jit themselves compare one build.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=4"
    + " --xla_cpu_collective_call_terminate_timeout_seconds=600"
    + " --xla_cpu_use_fusion_emitters=false"
).strip()

import jax  # noqa: E402

jax.config.update(
    "jax_compilation_cache_dir",
    os.environ.get("JAXES_CACHE_DIR", os.path.expanduser("~/.cache/jaxes/xla")),
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

# The fixtures' build scripts import transformers and torch, which `make test` never installs:
# they run in their own environment (tests/fixtures/hf/make_fixtures.py), never collected here.
collect_ignore_glob = ["fixtures/*"]

import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

TINY_FLAGS = [
    "--episode-length",
    "100",
    "--population",
    "8",
    "--generations",
    "20",
    "--eval-every",
    "5",
    "--checkpoint-every",
    "5",
    "--eval-episodes",
    "2",
    "--policy",
    "linear",
]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """One small `jaxes train` run, made once through the real command, shared read-only."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    proc = subprocess.run(
        [sys.executable, "-m", "jaxes", "train", *TINY_FLAGS, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return out
