"""The digits task, classification as a fitness source: scikit-learn's 8×8 digits, an MLP,
its cross-entropy.

The data are the 1797 8×8 grey-level images that ship with scikit-learn
(``sklearn.datasets.load_digits``: nothing is downloaded; scikit-learn is a dependency of
jaxes-examples), split 80/20 stratified and standardised with the training set's statistics.
A member's fitness is minus its mean cross-entropy on a minibatch (``fitness``), the same
minibatch for every member of a generation so that they are ranked on equal terms;
``accuracy`` measures a model on a whole split. ``jaxes_examples.digits.classifier`` trains it
by ES.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

CLASSES = 10


def digits(seed: int = 0) -> dict[str, jax.Array]:
    """The digits split 80/20 (stratified by ``seed``), features standardised with the
    training split's statistics.

    Returns:
      ``x_train`` (1437, 64) and ``x_test`` (360, 64) float32, ``y_train`` and ``y_test``
      int32 labels in 0..9.

    Example:
      >>> data = digits()
      >>> data["x_train"].shape, data["x_test"].shape, int(data["y_test"].max())
      ((1437, 64), (360, 64), 9)
    """
    # Imported here: the module's model and fitness need no scikit-learn.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=seed
    )
    mean, std = x_train.mean(0), x_train.std(0)
    # Corner pixels are blank in every training image: their std is 0.
    std = np.where(std > 0, std, 1.0)
    return {
        "x_train": jnp.asarray((x_train - mean) / std, jnp.float32),
        "y_train": jnp.asarray(y_train, jnp.int32),
        "x_test": jnp.asarray((x_test - mean) / std, jnp.float32),
        "y_test": jnp.asarray(y_test, jnp.int32),
    }


class MLP(nn.Module):
    """ReLU hidden layers, logits out; every layer an ``nn.Dense`` so ``factored.apply``
    can add each member's low-rank term inside it.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> model = MLP(hidden=(16,))
      >>> params = model.init(jax.random.key(0), jnp.zeros((1, 64)))["params"]
      >>> model.apply({"params": params}, jnp.zeros((5, 64))).shape
      (5, 10)
    """

    hidden: tuple[int, ...]
    classes: int = CLASSES

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for size in self.hidden:
            x = nn.relu(nn.Dense(size)(x))
        return nn.Dense(self.classes)(x)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean cross-entropy of integer ``labels`` under ``logits`` (``(N, classes)``).

    Example:
      >>> import jax.numpy as jnp
      >>> round(float(cross_entropy(jnp.zeros((2, 4)), jnp.array([0, 3]))), 4)  # log 4
      1.3863
    """
    log_p = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_p, labels[:, None], axis=1))


def fitness(model: nn.Module, params, x: jax.Array, y: jax.Array) -> jax.Array:
    """A member's fitness on a batch: minus its mean cross-entropy (maximised).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> model = MLP(hidden=())
      >>> params = jax.tree.map(jnp.zeros_like, model.init(jax.random.key(0), jnp.zeros((1, 64))))
      >>> round(float(fitness(model, params["params"], jnp.ones((3, 64)), jnp.array([1, 2, 3]))), 4)
      -2.3026
    """
    return -cross_entropy(model.apply({"params": params}, x), y)


def accuracy(model: nn.Module, params, x: jax.Array, y: jax.Array) -> jax.Array:
    """The fraction of ``x`` whose most likely class is its label ``y``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> model = MLP(hidden=())
      >>> params = model.init(jax.random.key(0), jnp.zeros((1, 64)))["params"]
      >>> float(accuracy(model, params, jnp.zeros((4, 64)), jnp.zeros(4, jnp.int32)))  # bias 0
      1.0
    """
    return jnp.mean(jnp.argmax(model.apply({"params": params}, x), axis=1) == y)


def minibatch(key: jax.Array, x: jax.Array, y: jax.Array, size: int):
    """``size`` rows of ``(x, y)`` drawn without replacement: one generation's batch, shared
    by every member.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> xb, yb = minibatch(jax.random.key(0), jnp.arange(20.0)[:, None], jnp.arange(20), 4)
      >>> xb.shape, bool(jnp.all(xb[:, 0] == yb))
      ((4, 1), True)
    """
    idx = jax.random.choice(key, x.shape[0], (size,), replace=False)
    return x[idx], y[idx]
