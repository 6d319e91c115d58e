"""jaxes_examples.lm_countdown.grpo: the loss and gradient equal google-tunix's on one fixed
batch (tests/fixtures/grpo_tunix, written by benchmarks/grpo_tunix_reference.py in a tunix
environment: tunix's own Qwen2 and ``grpo_loss_fn`` on tests/fixtures/hf/qwen2-tied; tunix is
not imported here), the advantages and the clip on hand-made cases, and a two-update run.

Tolerances: float32 through two implementations of the model (measured: log-probs within
9.5e-7, losses within 4.8e-7 relative, gradient entries within 2.2e-6 of each tensor's
largest, norms within 4.9e-7 relative). Asserted: log-probs to 1e-5 absolute; losses to 1e-5
relative; each gradient tensor to 2e-5 of its largest entry (entries near zero differ by
rounding); per-tensor norms to 1e-5 relative and dot products to 1e-5 of the norms' product.
"""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxes.llm import load
from jaxes.llm.weights import to_tensors
from jaxes_examples.lm_countdown import grpo

FIXTURES = Path(__file__).parent / "fixtures"
REF = FIXTURES / "grpo_tunix"
KL = {"low_var_kl": "k3", "kl": "k1"}
# One compiled program per setting (op by op, the model's many small ops take seconds each
# time); the model and the setup are static.
LOSS_AND_GRAD = jax.jit(
    jax.value_and_grad(grpo.grpo_loss, argnums=1, has_aux=True), static_argnums=(0, 3)
)
LOGPS = jax.jit(grpo.token_logps, static_argnums=0)  # the temperature traced: one program


@pytest.fixture(scope="module")
def tunix():
    record = json.loads((REF / "reference.json").read_text())
    return record, dict(np.load(REF / "reference.npz"))


@pytest.fixture(scope="module")
def model():
    return load(FIXTURES / "hf" / "qwen2-tied")


def _setup(setting: dict, record: dict) -> grpo.GRPOSetup:
    return grpo.GRPOSetup(
        group=record["group"],
        epsilon=record["epsilon"],
        beta=setting["beta"],
        kl=KL[setting["kl"]],
        temperature=setting["T"],
    )


def _batch(arrays: dict, setting: dict, end_id: int) -> grpo.Rollout:
    """The fixture's batch as the project builds one: its own mask and advantages."""
    return grpo.Rollout(
        prompts=jnp.asarray(arrays["prompts"]),
        start=jnp.asarray(arrays["start"]),
        completions=jnp.asarray(arrays["completions"]),
        mask=jnp.asarray(grpo.completion_mask(arrays["completions"], [end_id])),
        advantages=jnp.asarray(grpo.group_advantages(arrays["rewards"]).reshape(-1)),
        old_logps=jnp.asarray(arrays["old_logps"]) if setting["old"] else None,
        ref_logps=jnp.asarray(arrays["ref_logps"]) if setting["ref"] else None,
    )


def test_mask_advantages_and_log_probs_equal_tunix(tunix, model):
    record, arrays = tunix
    mask = grpo.completion_mask(arrays["completions"], [record["end_id"]])
    np.testing.assert_array_equal(mask, arrays["mask"])  # the end token and after: out
    assert mask[3].sum() == 0 and mask[1].all()  # an empty completion, one without an end
    np.testing.assert_allclose(
        grpo.group_advantages(arrays["rewards"]).reshape(-1), arrays["advantages"], rtol=1e-6
    )
    for temperature in (1.0, 0.7):
        logps = LOGPS(
            model.model,
            model.params,
            jnp.asarray(arrays["prompts"]),
            jnp.asarray(arrays["start"]),
            jnp.asarray(arrays["completions"]),
            jnp.float32(temperature),
        )
        diff = np.abs(np.asarray(logps) - arrays[f"logps_T{temperature}"]) * mask
        assert diff.max() < 1e-5, (temperature, diff.max())


@pytest.mark.parametrize("name", ["clipped_kl", "on_policy", "tunix_defaults"])
def test_loss_and_gradient_equal_tunix(tunix, model, name):
    record, arrays = tunix
    expected = record["settings"][name]
    setting = expected["setting"]
    setup = _setup(setting, record)
    batch = _batch(arrays, setting, record["end_id"])
    (loss, aux), grads = LOSS_AND_GRAD(model.model, model.params, batch, setup)
    tx = expected["aux"]
    np.testing.assert_allclose(float(loss), expected["loss"], rtol=1e-5)
    np.testing.assert_allclose(float(aux["pg_loss"]), tx["pg_loss"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(aux["kl"]), tx["kl_loss"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(aux["clip_fraction"]), tx["pg_clipfrac"], atol=1e-6)
    ours = to_tensors(grads, np.float32)
    assert set(ours) == set(expected["grad_norms"])
    full = {k[len("grad/") :]: v for k, v in arrays.items() if k.startswith("grad/")}
    for tensor, g in ours.items():
        norm = np.linalg.norm(g)
        np.testing.assert_allclose(norm, expected["grad_norms"][tensor], rtol=1e-5, err_msg=tensor)
        # A dot product near zero is all cancellation: its tolerance is the norms' product.
        dot = np.vdot(g.astype(np.float64), full[tensor].astype(np.float64))
        want = expected["grad_dots_with_clipped_kl"][tensor]
        assert abs(dot - want) <= 1e-5 * norm * np.linalg.norm(full[tensor]), tensor
        if name == "clipped_kl":
            scale = np.abs(full[tensor]).max()
            assert np.abs(g - full[tensor]).max() <= 2e-5 * scale, tensor


def test_group_advantages_normalise_each_group_with_the_sample_std():
    rewards = np.array([[1.0, 0.0, 0.0, 0.0], [0.1, 0.1, 0.1, 0.1]])
    adv = grpo.group_advantages(rewards)
    # mean 0.25, std (ddof 1) 0.5: (1 - 0.25) / 0.5 and (0 - 0.25) / 0.5; an even group: 0.
    np.testing.assert_allclose(adv[0], [1.5, -0.5, -0.5, -0.5], rtol=1e-5)
    np.testing.assert_array_equal(adv[1], np.zeros(4))


def test_completion_mask_stops_before_the_first_end_token():
    tokens = np.array([[5, 9, 2, 9], [9, 5, 5, 5], [5, 5, 5, 5]])
    mask = grpo.completion_mask(tokens, [9])
    np.testing.assert_array_equal(mask, [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])


class _Table:
    """A stand-in model whose logits are ``params["logits"]`` at every position, so a test
    sets each token's log-prob exactly."""

    def apply(self, variables, tokens, start=None):
        logits = variables["params"]["logits"]
        return jnp.broadcast_to(logits, (*tokens.shape, logits.shape[-1])), None


TABLE = _Table()


@pytest.mark.parametrize(
    ("advantage", "ratio", "loss", "moves"),
    [
        (1.0, 1.5, -1.2, False),  # above 1 + ε with A > 0: clipped, no gradient
        (-1.0, 1.5, 1.5, True),  # above 1 + ε with A < 0: the ratio's own term
        (1.0, 0.5, -0.5, True),  # below 1 - ε with A > 0: the ratio's own term
        (-1.0, 0.5, 0.8, False),  # below 1 - ε with A < 0: clipped, no gradient
        (1.0, 1.1, -1.1, True),  # inside the clip
    ],
)
def test_the_ratio_is_clipped_pessimistically(advantage, ratio, loss, moves):
    params = {"logits": jnp.array([0.3, -1.0, 2.0])}
    prompts, completions = jnp.array([[0, 1]]), jnp.array([[2, 2]])
    start = jnp.zeros((1,), jnp.int32)
    logps = grpo.token_logps(TABLE, params, prompts, start, completions)
    batch = grpo.Rollout(
        prompts,
        start,
        completions,
        mask=jnp.ones((1, 2)),
        advantages=jnp.array([advantage]),
        old_logps=logps - jnp.log(ratio),
    )
    setup = grpo.GRPOSetup(epsilon=0.2)
    (value, aux), grads = LOSS_AND_GRAD(TABLE, params, batch, setup)
    np.testing.assert_allclose(float(value), loss, rtol=1e-5)
    assert float(aux["clip_fraction"]) == (0.0 if moves else 1.0)
    assert bool(jnp.any(grads["logits"] != 0)) == moves


def test_setup_refuses_a_group_of_one_and_an_unknown_kl():
    with pytest.raises(ValueError, match="group"):
        grpo.GRPOSetup(group=1)
    with pytest.raises(ValueError, match="kl"):
        grpo.GRPOSetup(kl="k2")
    with pytest.raises(ValueError, match="updates or seconds"):
        grpo.train(str(FIXTURES / "hf" / "qwen2-tied"), seed=0, problems=[])


def test_train_counts_tokens_and_moves_the_weights(model):
    from jaxes.llm import countdown_problems

    setup = grpo.GRPOSetup(batch=2, group=2, answer_tokens=4, learning_rate=1e-2)
    seen = []
    out = grpo.train(
        str(FIXTURES / "hf" / "qwen2-tied"),
        setup,
        seed=0,
        updates=2,
        problems=countdown_problems(6, seed=0),
        # Longer completions score more: the random model's groups differ, so advantages do.
        reward=lambda problem, text: float(len(text)),
        on_update=lambda record, params: seen.append(record["update"]),
    )
    assert [r["tokens"] for r in out["history"]] == [16, 32] and out["tokens"] == 32
    assert seen == [1, 2] and out["updates"] == 2
    assert all(np.isfinite(r["loss"]) for r in out["history"])
    assert 0 < out["history"][-1]["completion_tokens"] <= 32
    moved = sum(
        float(jnp.sum((a - b) ** 2))
        for a, b in zip(jax.tree.leaves(out["params"]), jax.tree.leaves(model.params), strict=True)
    )
    assert moved > 0
