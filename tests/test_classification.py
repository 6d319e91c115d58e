"""The digits classification task (jaxes_examples.digits.data): the splits, the fitness."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxes_examples.digits import data as classification


def test_the_splits_are_stratified_and_standardised_with_train_statistics():
    data = classification.digits()
    x_train, x_test = np.asarray(data["x_train"]), np.asarray(data["x_test"])
    assert x_train.dtype == np.float32 and data["y_train"].dtype == jnp.int32
    lit = x_train.std(0) > 0  # corner pixels are blank in every training image
    np.testing.assert_allclose(x_train.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(x_train.std(0)[lit], 1.0, rtol=1e-4)
    assert not np.allclose(x_test.mean(0), 0.0, atol=1e-3)  # test data: train's statistics
    for split in ("y_train", "y_test"):  # stratified: every class in the same proportion
        counts = np.bincount(np.asarray(data[split]), minlength=10)
        assert counts.max() - counts.min() <= 0.1 * counts.mean() + 1, counts
    again = classification.digits()
    assert all(np.array_equal(data[k], again[k]) for k in data)


def test_fitness_is_minus_the_cross_entropy_and_ranks_a_better_model_higher():
    model = classification.MLP(hidden=())
    x, y = jnp.eye(64)[:10], jnp.arange(10)
    params = jax.tree.map(jnp.zeros_like, model.init(jax.random.key(0), x)["params"])
    right = {"Dense_0": {"kernel": 5.0 * jnp.eye(64, 10), "bias": jnp.zeros(10)}}
    assert float(classification.fitness(model, params, x, y)) == pytest.approx(-np.log(10))
    assert classification.fitness(model, right, x, y) > classification.fitness(model, params, x, y)
    assert float(classification.accuracy(model, right, x, y)) == 1.0
