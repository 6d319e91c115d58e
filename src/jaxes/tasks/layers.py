"""flax layers that read their weights where they are used, for the sequence models.

``Dense`` is ``nn.Dense`` (so ``jaxes.factored.apply`` adds a member's low-rank term to it)
whose weights, with ``stream=True``, are read only once its input exists
(``jaxes.factored.ordering.after``): a decode loop then converts one layer's weights at a
time instead of XLA hoisting every layer's converts ahead of the loop. ``Embed`` is
``nn.Embed`` that rounds the rows it looks up to ``dtype``, not the whole table, and slices a
bfloat16 table as the integers of its bits (XLA:CPU would widen all of it to float32); used
as a streamed tied head (``attend``), it reads the table a block of rows at a time. A
``uint16`` table is a bfloat16 table's bits (``embedding_bits``): a frozen table held so
costs no copy of itself at all, where a bfloat16 one costs the program one integer view.

Example:
  >>> import jax, jax.numpy as jnp
  >>> layer = Dense(3, use_bias=False, stream=True)
  >>> params = layer.init(jax.random.key(0), jnp.ones((2, 4)))["params"]
  >>> sorted(params), layer.apply({"params": params}, jnp.ones((2, 4))).shape
  (['kernel'], (2, 3))
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.linen.dtypes import promote_dtype

from jaxes.factored import ordering


class Dense(nn.Dense):
    """``nn.Dense``, whose weights with ``stream`` are read only once its input exists."""

    stream: bool = False

    @nn.compact
    def __call__(self, inputs):
        # Written out, not super().__call__: flax intercepts both calls, and
        # jaxes.factored.apply would add the layer's term twice.
        shape = (inputs.shape[-1], self.features)
        kernel = self.param("kernel", self.kernel_init, shape, self.param_dtype)
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        if self.stream:
            kernel, bias = ordering.after((kernel, bias), inputs)
        inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        dims = (((inputs.ndim - 1,), (0,)), ((), ()))
        out = jax.lax.dot_general(inputs, kernel, dims, precision=self.precision)
        return out if bias is None else out + bias


class Embed(nn.Embed):
    """``nn.Embed`` that rounds the rows it looks up, not the table: the same values, without
    a copy of the table in ``dtype``; with ``stream`` its ``attend`` (a tied head) reads the
    table only once its query exists."""

    stream: bool = False

    def __call__(self, inputs):
        rows = _take_rows(self.embedding, inputs)
        return rows if self.dtype is None else rows.astype(self.dtype)

    def attend(self, query):
        # Unstreamed, XLA hoists the table's converts out of the decode loops (on the CPU,
        # which widens a bfloat16 dot: three float32 copies of Qwen2.5's 151,936-row table,
        # 1.6 GB at 0.5B). Streamed, the table is read in blocks of rows, a loop over the
        # vocabulary: the widening of a bfloat16 table reads nothing but the table, so a tie
        # alone leaves it hoisted, whereas a block sliced inside the loop is converted there
        # (one block's float32 copy at a time).
        if not self.stream:
            table = _from_bits(self.embedding, self.embedding)
            query, embedding = self.promote_dtype(query, table, dtype=self.dtype)
            return jnp.dot(query, embedding.T)
        return blocked_logits(
            query, self.embedding, self.dtype, HEAD_BLOCK_ROWS, self.promote_dtype
        )


# Rows of a streamed tied head read per step of its loop over the vocabulary: a float32 copy
# of 8,192 rows of Qwen2.5-0.5B's 896 columns is 29 MB (the whole table's is 545 MB).
HEAD_BLOCK_ROWS = 8192


def _as_bits(table):
    """A bfloat16 table as the integers of its bits (other dtypes as they are). XLA:CPU widens
    bfloat16 to float32 for a slice or a gather too, and that widening reads only the table,
    so it is hoisted out of a decode loop whole (a float32 copy of the table, held through the
    loop); sliced as integers, only the rows read are widened, inside the loop. The view is
    itself hoisted and held (one integer copy of the table): ``embedding_bits`` spares it."""
    if table.dtype != jnp.bfloat16:
        return table
    return jax.lax.bitcast_convert_type(table, jnp.uint16)


def _from_bits(rows, table):
    """Rows sliced from ``_as_bits(table)`` back in ``table``'s dtype (bfloat16 for the bits
    of one, a ``uint16`` table)."""
    dtype = jnp.bfloat16 if table.dtype == jnp.uint16 else table.dtype
    return rows if rows.dtype == dtype else jax.lax.bitcast_convert_type(rows, dtype)


def _bits_or_values(tree, bits: bool):
    def convert(path, leaf):
        name = getattr(path[-1], "key", None) if path else None
        dtype = jnp.bfloat16 if bits else jnp.uint16
        if name != "embedding" or leaf.dtype != dtype:
            return leaf
        return jax.lax.bitcast_convert_type(leaf, jnp.uint16 if bits else jnp.bfloat16)

    return jax.tree_util.tree_map_with_path(convert, tree)


def embedding_bits(params):
    """``params`` with every bfloat16 ``embedding`` (an ``Embed``'s table) held as the
    ``uint16`` integers of its bits, which ``Embed`` reads as that table, bit for bit. For a
    table the search leaves alone (a pretrained model's frozen embeddings): made outside the
    jitted step, its bits are an argument, and the step holds no integer view of its own (one
    table, 272 MB at Qwen2.5 0.5B). ``embedding_values`` undoes it.

    Example:
      >>> import jax.numpy as jnp
      >>> tree = {"embed": {"embedding": jnp.array([[1.0, -2.0]], jnp.bfloat16)}}
      >>> bits = embedding_bits(tree)
      >>> bits["embed"]["embedding"].dtype.name, bits["embed"]["embedding"].tolist()
      ('uint16', [[16256, 49152]])
      >>> embedding_values(bits)["embed"]["embedding"].tolist() == [[1.0, -2.0]]
      True
    """
    return _bits_or_values(params, True)


def embedding_values(params):
    """``params`` with every ``uint16`` ``embedding`` back as the bfloat16 table it holds the
    bits of (``embedding_bits``'s inverse)."""
    return _bits_or_values(params, False)


@jax.custom_jvp
def _take_rows(table, ids):
    """``jnp.take(table, ids, axis=0)``, a bfloat16 table's rows gathered as integers."""
    return _from_bits(jnp.take(_as_bits(table), ids, axis=0), table)


@_take_rows.defjvp
def _take_rows_jvp(primals, tangents):
    # Integers carry no tangent: the rows' tangent is the same gather of the table's (none
    # for a table held as bits, which is frozen).
    (table, ids), (d_table, _) = primals, tangents
    out = _take_rows(table, ids)
    return out, _tangent(d_table, lambda d: jnp.take(d, ids, axis=0), out)


def _tangent(d_table, read, out):
    """``read(d_table)``, or zeros like ``out`` when the table is integers (float0)."""
    if d_table.dtype == jax.dtypes.float0:
        return jnp.zeros_like(out)
    return read(d_table)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _slice_rows(table, start, query, rows: int):
    """``rows`` rows of ``table`` from ``start``, read once ``query`` exists; a bfloat16
    table's sliced and tied as integers (its widening would be hoisted otherwise)."""
    bits = jax.lax.dynamic_slice_in_dim(_as_bits(table), start, rows)
    return _from_bits(ordering.after(bits, query), table)


@_slice_rows.defjvp
def _slice_rows_jvp(rows, primals, tangents):
    # The value does not depend on ``query`` (it only orders the read).
    (table, start, query), (d_table, _, _) = primals, tangents
    out = _slice_rows(table, start, query, rows)
    return out, _tangent(d_table, lambda d: jax.lax.dynamic_slice_in_dim(d, start, rows), out)


def blocked_logits(query, table, dtype, rows: int, promote=promote_dtype):
    """``query @ table.T`` with ``table`` read ``rows`` rows at a time in a loop, each block
    only once ``query`` exists, one block converted at a time. Each output column is the same
    row's dot product (a block's matmul kernel may sum it in another order than the whole
    table's: the last bit may differ). The last block ends at the table's end (it overlaps the
    one before when ``rows`` does not divide the vocabulary, and writes the same values)."""
    vocab = table.shape[0]
    rows = min(rows, vocab)
    out_dtype = dtype or jnp.result_type(query, _from_bits(table[:0], table))

    def block(i, out):
        start = jnp.minimum(i * rows, vocab - rows)
        weights = _slice_rows(table, start, query, rows)
        q, weights = promote(query, weights, dtype=dtype)
        return jax.lax.dynamic_update_slice_in_dim(out, jnp.dot(q, weights.T), start, -1)

    out = jnp.zeros((*query.shape[:-1], vocab), out_dtype)
    return jax.lax.fori_loop(0, -(-vocab // rows), block, out)
