"""google-tunix's GRPO loss and gradient on one fixed batch: tests/test_grpo.py's reference.

google-tunix's GRPO on the repository's tiny Qwen2 checkpoint: the loss and gradient its own
loss function gives on one fixed batch, written as a fixture that tests/test_grpo.py checks
``jaxes_examples.lm_countdown.grpo`` against (without importing tunix), and a record of whether
tunix's GRPO learner runs here at all.

The model is tests/fixtures/hf/qwen2-tied read by tunix's own Qwen2 class and safetensors
loader (``tunix.models.qwen2.params.create_model_from_safe_tensors``): tunix's forward pass,
per-token log-probs (``tunix.rl.common.compute_per_token_logps``), advantages
(``compute_advantages``) and loss (``tunix.rl.grpo``'s ``grpo_loss_fn``), nothing of jaxes. The
batch: 2 problems x 4 completions, left-padded prompts of 6-10 random tokens, completions of 8
with the end token at varied places (one at the first token: an empty completion, which the
loss leaves out; one with none), the padding after each cut as tunix's learner makes it, fixed
rewards (one group all equal), old and reference log-probs = tunix's own plus seeded noise, so
that the clip acts on some tokens. Three settings:

* ``clipped_kl``: μ > 1 (old log-probs given), β = 0.04, k3 KL (``low_var_kl``), T = 1;
  the whole gradient is kept, per tensor under its checkpoint name.
* ``on_policy``: μ = 1 (old = current, stopped), β = 0;
* ``tunix_defaults``: GRPOConfig's own β = 0.04 and ``kl_loss_mode="kl"`` (k1), T = 0.7;
  for these two, the gradient's per-tensor norms and dot products with ``clipped_kl``'s.

With ``--learner DIR`` it also runs tunix's GRPOLearner (vanilla rollout engine, tunix's own
sampler) for a few steps on the model directory DIR (e.g. the lm_countdown quick model,
``jaxes_examples.lm_countdown.pretrained()``) on Countdown with ``countdown_reward``, and
records whether it ran, its seconds per step and its rewards, or the error.

Run only in a virtual environment of its own (tunix pulls ~106 packages), from the repository
root:
  python3 -m venv /work/tunix-venv && /work/tunix-venv/bin/pip install google-tunix==0.1.7
  /work/tunix-venv/bin/python benchmarks/grpo_tunix_reference.py [--learner DIR]
Writes tests/fixtures/grpo_tunix/reference.npz and reference.json (or --out).
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import platform
import re
import sys
import time
import traceback
from pathlib import Path

# The driver imports the standard library only, so it loads in tunix's own venv too.
import _driver as driver
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "fixtures" / "hf" / "qwen2-tied"
OUT = ROOT / "tests" / "fixtures" / "grpo_tunix"
SEED, PROBLEMS, GROUP, PROMPT, ANSWER = 7, 2, 4, 10, 8
PROMPT_LENGTHS = (10, 8, 10, 6, 9, 10, 7, 10)
# Where each completion's end token is (ANSWER: none); 0 makes an empty completion.
ENDS = (3, 8, 5, 0, 8, 2, 6, 4)
REWARDS = ((1.0, 0.1, 0.0, 0.1), (0.1, 0.1, 0.1, 0.1))  # the second group: zero advantages
NOISE = 0.3  # std of the old and reference log-probs' offsets from the current ones
SETTINGS = {
    "clipped_kl": {"old": True, "ref": True, "beta": 0.04, "kl": "low_var_kl", "T": 1.0},
    "on_policy": {"old": False, "ref": False, "beta": 0.0, "kl": "low_var_kl", "T": 1.0},
    "tunix_defaults": {"old": True, "ref": True, "beta": 0.04, "kl": "kl", "T": 0.7},
}
EPSILON = 0.2


def tunix_config(directory: Path):
    """tunix's Qwen2 ``ModelConfig`` of a Hugging Face ``config.json``."""
    from tunix.models.qwen2 import model as qwen2

    c = json.loads((directory / "config.json").read_text())
    theta = c.get("rope_theta") or c["rope_parameters"]["rope_theta"]
    return qwen2.ModelConfig(
        num_layers=c["num_hidden_layers"],
        vocab_size=c["vocab_size"],
        embed_dim=c["hidden_size"],
        hidden_dim=c["intermediate_size"],
        num_heads=c["num_attention_heads"],
        head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
        num_kv_heads=c["num_key_value_heads"],
        rope_theta=int(theta),
        norm_eps=c["rms_norm_eps"],
        use_tied_embedding=c["tie_word_embeddings"],
    )


def load_model(directory: Path):
    """tunix's Qwen2 with the directory's weights, on a 1 x 1 mesh of automatic axes (a mesh
    of explicit axes fails in the embedding's gather on one CPU device)."""
    import jax
    from tunix.models.qwen2 import params as qwen2_params

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    config = tunix_config(directory)
    return qwen2_params.create_model_from_safe_tensors(str(directory), config, mesh), mesh


def to_checkpoint_names(state, config, shapes: dict[str, tuple]) -> dict[str, np.ndarray]:
    """tunix's tree (params or their gradient) under the checkpoint's names and shapes: the
    loader's own mapping (``_get_key_and_transform_mapping``: a transpose, then a reshape)
    undone tensor by tensor."""
    from flax import nnx
    from tunix.models.qwen2 import params as qwen2_params

    flat = {
        ".".join(str(k) for k in path): np.asarray(v.get_value() if hasattr(v, "get_value") else v)
        for path, v in nnx.to_flat_state(state)
    }
    rules = qwen2_params._get_key_and_transform_mapping(config)
    out = {}
    for name, shape in shapes.items():
        for pattern, (target, transform) in rules.items():
            if re.fullmatch(pattern, name):
                value = flat[re.sub(pattern, target, name)]
                if transform is not None:
                    perm = transform[0]
                    value = value.reshape([shape[p] for p in perm]).transpose(np.argsort(perm))
                out[name] = value.reshape(shape).astype(np.float32)
                break
    missing = set(shapes) - set(out)
    if missing:
        raise ValueError(f"no tunix tensor for {sorted(missing)}")
    return out


def fixed_batch(pad: int, end: int, vocab_real: int) -> dict[str, np.ndarray]:
    """The batch, seeded: prompts left-padded, completions cut at ``ENDS`` (the end token there,
    the padding after it: what tunix's learner builds from its sampler's output), rewards."""
    rng = np.random.default_rng(SEED)
    n = PROBLEMS * GROUP
    prompts = np.full((n, PROMPT), pad, np.int32)
    for row, length in enumerate(PROMPT_LENGTHS):
        prompts[row, PROMPT - length :] = rng.integers(0, vocab_real, length)
    completions = rng.integers(0, vocab_real, (n, ANSWER)).astype(np.int32)
    learner_completions = completions.copy()
    for row, at in enumerate(ENDS):
        if at < ANSWER:
            completions[row, at] = end
            learner_completions[row, at:] = pad
    return {
        "prompts": prompts,
        "start": (prompts == pad).sum(axis=1).astype(np.int32),
        "completions": completions,
        "learner_completions": learner_completions,
        "mask": (learner_completions != pad).astype(np.float32),
        "rewards": np.array(REWARDS, np.float32),
    }


def loss_and_grad(model, batch: dict, setting: dict, pad: int, end: int):
    """tunix's ``grpo_loss_fn`` on ``batch`` in ``setting``: ``(loss, aux, grads state)``."""
    import jax.numpy as jnp
    from flax import nnx
    from tunix.rl.grpo import grpo_learner

    config = grpo_learner.GRPOConfig(
        num_generations=GROUP, beta=setting["beta"], epsilon=EPSILON, kl_loss_mode=setting["kl"]
    )
    config.temperature = setting["T"]  # the learner copies it from its rollout config
    example = grpo_learner.TrainExample(
        prompt_ids=jnp.asarray(batch["prompts"]),
        prompt_mask=jnp.asarray(batch["prompts"] != pad),
        completion_ids=jnp.asarray(batch["learner_completions"]),
        completion_mask=jnp.asarray(batch["mask"]),
        advantages=jnp.asarray(batch["advantages"]),
        ref_per_token_logps=jnp.asarray(batch["ref_logps"]) if setting["ref"] else None,
        old_per_token_logps=jnp.asarray(batch["old_logps"]) if setting["old"] else None,
    )
    from tunix.rl import algo_core

    def loss_fn(m):
        return algo_core.grpo_loss_fn(m, example, config, pad_id=pad, eos_id=end)

    (loss, aux), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    return float(loss), {k: float(v) for k, v in aux.items()}, grads


def reference(out: Path) -> dict:
    """Computes the fixture and writes it into ``out``; returns the JSON's dict."""
    import jax.numpy as jnp
    from flax import nnx
    from safetensors.numpy import load_file
    from tunix.rl import algo_core, common

    hf_config = json.loads((MODEL / "config.json").read_text())
    pad, end = int(hf_config["pad_token_id"]), int(hf_config["eos_token_id"])
    model, _ = load_model(MODEL)
    config = tunix_config(MODEL)
    weights = load_file(str(next(MODEL.glob("*.safetensors"))))
    shapes = {k: v.shape for k, v in weights.items()}
    mapped = to_checkpoint_names(nnx.state(model, nnx.Param), config, shapes)
    mapping_error = max(float(np.abs(mapped[k] - weights[k]).max()) for k in weights)
    if mapping_error != 0.0:
        raise AssertionError(f"the name mapping does not give back the weights: {mapping_error}")

    batch = fixed_batch(pad, end, vocab_real=min(pad, end))
    batch["advantages"] = algo_core.compute_advantages(batch["rewards"].reshape(-1), GROUP)
    rng = np.random.default_rng(SEED + 1)
    graphdef, state = nnx.split(model)
    for temperature in sorted({s["T"] for s in SETTINGS.values()}):
        logps = common.compute_per_token_logps(
            graphdef,
            state,
            prompt_tokens=jnp.asarray(batch["prompts"]),
            completion_tokens=jnp.asarray(batch["learner_completions"]),
            pad_id=pad,
            eos_id=end,
            temperature=temperature,
        )
        batch[f"logps_T{temperature}"] = np.asarray(logps, np.float32)
    current = batch["logps_T1.0"]
    batch["old_logps"] = (current + rng.normal(0, NOISE, current.shape)).astype(np.float32)
    batch["ref_logps"] = (current + rng.normal(0, NOISE, current.shape)).astype(np.float32)

    results, grads = {}, {}
    for name, setting in SETTINGS.items():
        loss, aux, g = loss_and_grad(model, batch, setting, pad, end)
        grads[name] = to_checkpoint_names(g, config, shapes)
        results[name] = {"setting": setting, "loss": loss, "aux": aux}
    full = grads["clipped_kl"]
    for name, g in grads.items():
        results[name]["grad_norms"] = {k: float(np.linalg.norm(v)) for k, v in g.items()}
        results[name]["grad_dots_with_clipped_kl"] = {
            k: float(np.vdot(v.astype(np.float64), full[k].astype(np.float64)))
            for k, v in g.items()
        }
    out.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.asarray(v) for k, v in batch.items()}
    arrays.update({f"grad/{k}": v for k, v in full.items()})
    np.savez_compressed(out / "reference.npz", **arrays)
    return {
        "model": str(MODEL.relative_to(ROOT)),
        "pad_id": pad,
        "end_id": end,
        "epsilon": EPSILON,
        "group": GROUP,
        "seed": SEED,
        "noise": NOISE,
        "ends": list(ENDS),
        "name_mapping_max_error": mapping_error,
        "settings": results,
    }


def run_learner(directory: Path, steps: int = 6, batch: int = 2, group: int = 4) -> dict:
    """tunix's GRPOLearner for ``steps`` steps on ``directory``'s model: ``{"ran": True,
    "seconds", "seconds_per_step" (after the first), "rewards", "moved"}`` or ``{"ran": False,
    "error"}``."""
    shown = str(directory).replace(str(Path.home()), "~")
    record = {"model": shown, "steps": steps, "batch": batch, "group": group}
    try:
        import jax
        import optax
        import transformers
        from flax import nnx
        from tunix.rl import rl_cluster as rlc
        from tunix.rl.grpo import grpo_learner
        from tunix.rl.rollout import base_rollout

        sys.path.insert(0, str(ROOT / "src"))
        from jaxes.llm.rewards import countdown_problems, countdown_prompt, countdown_reward

        actor, mesh = load_model(directory)
        before = jax.tree.map(np.asarray, nnx.state(actor, nnx.Param))
        reference_model, _ = load_model(directory)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
        rollout = base_rollout.RolloutConfig(
            max_tokens_to_generate=32,
            max_prompt_length=256,
            kv_cache_size=512,
            temperature=1.0,
            eos_tokens=[tokenizer.eos_token_id],
        )
        training = rlc.RLTrainingConfig(
            actor_optimizer=optax.adam(1e-4), eval_every_n_steps=10_000, max_steps=steps
        )
        roles = (rlc.Role.ACTOR, rlc.Role.REFERENCE, rlc.Role.ROLLOUT)
        cluster = rlc.RLCluster(
            actor=actor,
            reference=reference_model,
            tokenizer=tokenizer,
            cluster_config=rlc.ClusterConfig(
                role_to_mesh=dict.fromkeys(roles, mesh),
                rollout_engine="vanilla",
                training_config=training,
                rollout_config=rollout,
            ),
        )
        rewards, stamps = [], []

        def reward(prompts, completions, numbers, target, **_):
            stamps.append(time.perf_counter())
            out = [
                countdown_reward({"numbers": list(n), "target": int(t)}, c)
                for c, n, t in zip(completions, numbers, target, strict=True)
            ]
            rewards.append(float(np.mean(out)))
            return out

        # Three-number problems: the learner stacks each field of a batch into an array.
        problems = countdown_problems(batch * (steps + 2), seed=0, numbers=(3,))

        def data():
            for at in range(0, len(problems), batch):
                chunk = problems[at : at + batch]
                yield {
                    "prompts": np.array([countdown_prompt(p) for p in chunk]),
                    "numbers": np.array([p["numbers"] for p in chunk]),
                    "target": np.array([p["target"] for p in chunk]),
                }

        config = grpo_learner.GRPOConfig(num_generations=group, beta=0.04, epsilon=EPSILON)
        learner = grpo_learner.GRPOLearner(
            rl_cluster=cluster, algo_config=config, reward_fns=reward
        )
        started = time.perf_counter()
        learner.train(data())
        seconds = time.perf_counter() - started
        after = jax.tree.map(np.asarray, nnx.state(cluster.actor_trainer.model, nnx.Param))
        moved = sum(
            float(np.sum((a - b) ** 2))
            for a, b in zip(jax.tree.leaves(after), jax.tree.leaves(before), strict=True)
        )
        gaps = np.diff(stamps)
        record.update(
            ran=True,
            seconds=round(seconds, 2),
            seconds_per_step=round(float(gaps[1:].mean()), 3) if gaps.size > 1 else None,
            rewards=rewards,
            moved=float(np.sqrt(moved)),
        )
    except Exception as err:  # the record is the point: what stopped it, verbatim
        record.update(ran=False, error=f"{type(err).__name__}: {err}", trace=traceback.format_exc())
    return record


def versions() -> dict:
    names = ("google-tunix", "jax", "jaxlib", "flax", "optax", "numpy", "transformers")
    return {"python": platform.python_version(), **{n: metadata.version(n) for n in names}}


def parse_args(argv: list[str]):
    # Its output is a test fixture (a folder), not a results JSON: --out is its own.
    parser = driver.parser(__doc__, out=False, child=False)
    parser.add_argument("--out", type=Path, default=OUT, help="the fixture's folder")
    parser.add_argument("--learner", type=Path, default=None, help="a model directory")
    return parser.parse_args(argv)


def run(args, argv: list[str]) -> None:
    record = {"versions": versions(), **reference(args.out)}
    if args.learner is not None:
        record["learner"] = run_learner(args.learner)
    (args.out / "reference.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: v["loss"] for k, v in record["settings"].items()}, indent=2))
    if "learner" in record:
        print({k: v for k, v in record["learner"].items() if k != "trace"})


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
