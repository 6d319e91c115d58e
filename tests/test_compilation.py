"""The runner compiles its programs with ``jaxes.training.compilation``'s XLA options on the CPU."""

import io
import shutil

import jax
import jax.numpy as jnp
import pytest

import jaxes
from jaxes import training
from jaxes.tasks.functions import function_task
from jaxes.training import compilation


def test_the_cpu_options_turn_xlas_fusion_emitters_off():
    assert jax.default_backend() == "cpu"
    assert compilation.compiler_options() == {"xla_cpu_use_fusion_emitters": False}


def fused(x):
    return jnp.sum(jnp.tanh(x) * jnp.exp(-x * x) + jnp.sin(x) ** 2, axis=1)


def test_the_options_change_what_xla_builds_and_empty_ones_do_not(monkeypatch):
    # A fusion-heavy program: the fusion emitters off is another compiled program. The
    # suite's XLA_FLAGS turn them off for every program (conftest), so "on" is asked here.
    lowered = jax.jit(fused).lower(jnp.zeros((64, 256)))
    emitters_on = lowered.compile({"xla_cpu_use_fusion_emitters": True}).as_text()
    assert compilation.compile(lowered).as_text() != emitters_on
    monkeypatch.setattr(compilation, "CPU_OPTIONS", {})
    assert compilation.compile(lowered).as_text() == lowered.compile().as_text()


def test_jaxes_eval_compiles_its_evaluation_with_them(monkeypatch, capsys, tiny_run, tmp_path):
    from jaxes.app import cli

    compiled = []
    real = compilation.compile

    def spy(lowered):
        compiled.append(lowered.as_text().split(maxsplit=2)[1])  # "module @jit_<name> ..."
        return real(lowered)

    monkeypatch.setattr(compilation, "compile", spy)
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    # test_cli's eval settings: the same program, so a warm compile cache serves both.
    assert cli.main(["eval", str(run_dir), "--episodes", "3"]) == 0, capsys.readouterr().err
    assert compiled == ["@jit_evaluate_policy"], compiled


def test_empty_options_give_xlas_defaults(monkeypatch):
    monkeypatch.setattr(compilation, "CPU_OPTIONS", {})
    assert compilation.compiler_options() is None
    program = compilation.compile(jax.jit(jnp.sin).lower(jnp.zeros(2)))
    assert program(jnp.zeros(2)).tolist() == [0.0, 0.0]


def test_options_reach_xla_and_only_where_jaxes_compiles(monkeypatch):
    # XLA rejects an option it does not know when it compiles: proof the options reach it.
    monkeypatch.setattr(compilation, "CPU_OPTIONS", {"jaxes_test_no_such_option": True})
    with pytest.raises(Exception, match="jaxes_test_no_such_option"):
        compilation.compile(jax.jit(jnp.sin).lower(jnp.zeros(2)))
    assert jax.jit(jnp.cos)(jnp.zeros(2)).tolist() == [1.0, 1.0]  # users' own jit: untouched
    es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
    # XLA's defaults: init_state also runs inside users' jits and eval_shape.
    assert int(training.init_state(es, task, 0).generation) == 0
    assert jax.eval_shape(lambda: training.init_state(es, task, 0)).generation.shape == ()


def test_the_runner_compiles_its_block_and_evaluation_with_them(monkeypatch, tmp_path):
    compiled = []
    real = compilation.compile

    def spy(lowered):
        compiled.append(lowered.as_text().split(maxsplit=2)[1])  # "module @jit_<name> ..."
        return real(lowered)

    monkeypatch.setattr(compilation, "compile", spy)
    es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
    training.run(es, task, str(tmp_path / "run"), generations=2, eval_every=2, stream=io.StringIO())
    assert sorted(compiled) == ["@jit_evaluation", "@jit_train"], compiled
