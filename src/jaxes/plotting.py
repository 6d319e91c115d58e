"""Plots (matplotlib, the ``plot`` extra): learning curves from ``metrics.jsonl``."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path: str) -> list[dict]:
    """The lines of a ``metrics.jsonl`` file as dicts."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def learning_curve(metrics_path: str, png_path: str, title: str | None = None) -> str:
    """Population mean/max fitness per generation and the noise-free evaluation return.

    Returns the path written.
    """
    lines = read_metrics(metrics_path)
    if not lines:
        raise ValueError(f"metrics_path: {metrics_path} has no generations to plot")
    gens = [x["generation"] for x in lines]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(gens, [x["fitness_mean"] for x in lines], label="population mean", lw=1)
    ax.plot(gens, [x["fitness_max"] for x in lines], label="population max", lw=1, alpha=0.6)
    evals = [(x["generation"], x["eval_return"]) for x in lines if x.get("eval_return") is not None]
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label="centre, noise-free eval", lw=2)
    ax.set_xlabel("generation")
    ax.set_ylabel("episode return")
    ax.set_title(title or "jaxes learning curve")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)
    return png_path
