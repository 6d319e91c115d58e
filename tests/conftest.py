"""Test set-up: 4 CPU devices and a persistent compile cache, before JAX is imported."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
).strip()

import jax  # noqa: E402

jax.config.update(
    "jax_compilation_cache_dir",
    os.environ.get("JAXES_CACHE_DIR", os.path.expanduser("~/.cache/jaxes/xla")),
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
