"""benchmarks/_buffers.py reads where a program's temporary bytes go from XLA's dumped buffer
assignment: the format it parses is checked against a real dump of this JAX, not only a
written example, so a change in XLA's dump format fails here rather than in a benchmark."""

import doctest
import json
import subprocess
import sys
import textwrap
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _buffers  # noqa: E402


def test_doctest():
    assert doctest.testmod(_buffers).failed == 0


def test_largest_temps_of_a_real_dump(tmp_path):
    # XLA reads XLA_FLAGS when the backend starts: a fresh process.
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(BENCHMARKS)!r})
        import _buffers
        _buffers.enable({str(tmp_path)!r})
        import jax, jax.numpy as jnp

        def spread(x):
            return jnp.sum(jnp.sin(x) @ jnp.cos(x))  # the product: 1 MiB of temp

        jax.jit(spread).lower(jnp.ones((512, 512))).compile()
        print(json.dumps(_buffers.largest_temps({str(tmp_path)!r}, "spread", 2)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    largest = json.loads(out.stdout.splitlines()[-1])
    assert largest[0]["bytes"] >= 512 * 512 * 4
    assert largest[0]["shape"].startswith("f32[512,512]")
    assert "jit(spread)" in largest[0]["op_name"]
