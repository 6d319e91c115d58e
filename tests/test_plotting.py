"""jaxes.plotting: the centre-of-mass picture and the learning curve write real images."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("matplotlib")

import matplotlib.image  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import jaxes  # noqa: E402
from jaxes import plotting  # noqa: E402


def _pytree_population(p=12, antithetic=False):
    es = jaxes.open_es(population_size=p, sigma=0.3, antithetic=antithetic)
    params = {"w": jnp.zeros((2, 2)), "b": jnp.ones(1)}
    state = es.init(jax.random.key(0), params)
    population, state = es.ask(jax.random.key(1), state)
    fitness = -(jnp.sum((population["w"] - 1.0) ** 2, axis=(1, 2)) + population["b"][:, 0] ** 2)
    return population, state.params, fitness


def test_centre_of_mass_png_has_the_requested_pixel_size(tmp_path):
    population, params, fitness = _pytree_population()
    png = tmp_path / "com.png"
    out = plotting.centre_of_mass(
        population, params, fitness, dims=(1, 4), png_path=str(png), figsize=(5, 4), dpi=80
    )
    assert out == str(png)
    assert png.stat().st_size > 0
    image = matplotlib.image.imread(png)
    assert image.shape[:2] == (4 * 80, 5 * 80)
    assert np.ptp(image[..., :3]) > 0  # something was drawn


def test_centre_of_mass_draws_into_given_axes_with_plain_arrays_and_weights():
    key = jax.random.key(2)
    theta = jnp.array([0.5, -0.5])
    population = theta + 0.2 * jax.random.normal(key, (10, 2))
    weights = jnp.linspace(-1.0, 1.0, 10)
    ax = Figure().subplots()
    assert plotting.centre_of_mass(population, theta, weights, shaping=None, ax=ax) is ax
    assert ax.get_xlabel() == "coordinate 0" and ax.get_ylabel() == "coordinate 1"
    # the picture's M is the mass-weighted mean of the members
    mass = np.asarray(weights) - float(weights.min())
    expected = (mass[:, None] * np.asarray(population)).sum(0) / mass.sum()
    star = [c for c in ax.collections if c.get_offsets().shape == (1, 2)][-1]
    np.testing.assert_allclose(star.get_offsets()[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dims": (0, 0)}, r"dims: expected two distinct"),
        ({"dims": (0, 5)}, r"dims: indices must lie in \[0, 5\)"),
        ({"dims": (-1, 0)}, r"dims: indices must lie"),
        ({"dims": (0, 1, 2)}, r"dims: expected two coordinate indices"),
        ({"dims": 0}, r"dims: expected two coordinate indices"),
        ({"dims": (0.0, 1.0)}, r"dims: expected two coordinate indices"),
    ],
)
def test_centre_of_mass_refuses_bad_dims(kwargs, match):
    population, params, fitness = _pytree_population()
    with pytest.raises(ValueError, match=match):
        plotting.centre_of_mass(population, params, fitness, ax=Figure().subplots(), **kwargs)


def test_centre_of_mass_refuses_non_2d_input():
    ax = Figure().subplots()
    population, params, fitness = _pytree_population()
    with pytest.raises(ValueError, match=r"params: the flattened parameter vector has 1"):
        plotting.centre_of_mass(jnp.ones((8, 1)), jnp.zeros(1), jnp.arange(8.0), ax=ax)
    with pytest.raises(ValueError, match=r"fitness: expected shape \(12,\)"):
        plotting.centre_of_mass(population, params, fitness[:-1], ax=ax)
    with pytest.raises(ValueError, match=r"fitness: expected shape \(12,\)"):
        plotting.centre_of_mass(population, params, fitness[:, None], ax=ax)
    with pytest.raises(ValueError, match=r"population: expected the same pytree structure"):
        plotting.centre_of_mass(population["w"], params, fitness, ax=ax)
    with pytest.raises(ValueError, match=r"population: leaf \['b'\] has shape"):
        plotting.centre_of_mass({**population, "b": population["b"][:, 0]}, params, fitness, ax=ax)
    with pytest.raises(ValueError, match=r"population: expected at least 2 members"):
        plotting.centre_of_mass(jnp.ones((1, 3)), jnp.zeros(3), jnp.ones(1), ax=ax)
    with pytest.raises(ValueError, match=r"fitness: weights \(shaping=None\) must all be finite"):
        bad = fitness.at[0].set(jnp.nan)
        plotting.centre_of_mass(population, params, bad, shaping=None, ax=ax)


def test_learning_curve_still_writes_a_png(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    rows = [
        {"generation": g, "fitness_mean": -10.0 + g, "fitness_max": -8.0 + g}
        | ({"eval_return": -9.0 + g} if g % 2 == 0 else {})
        for g in range(1, 6)
    ]
    metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert plotting.read_metrics(str(metrics)) == rows
    png = tmp_path / "curve.png"
    assert plotting.learning_curve(str(metrics), str(png), title="tiny") == str(png)
    assert matplotlib.image.imread(png).shape[:2] == (400, 700)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="metrics_path"):
        plotting.learning_curve(str(empty), str(tmp_path / "x.png"))
