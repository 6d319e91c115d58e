"""A tiny Qwen2 model with latent skill on text Countdown, for ES fine-tuning on a CPU.

``jaxes.llm`` fine-tunes real checkpoints; this package makes one small enough to fine-tune
in a minute or two on a CPU: a Qwen2-architecture decoder (2 layers, d_model 128,
grouped-query attention, tied embeddings; 0.46M parameters) with a byte-level BPE tokenizer
of 474 tokens, pre-trained by backprop on the TinyZero Countdown prompt
(``countdown_prompt``) and saved as a Hugging Face model directory that ``jaxes.llm.load``
reads (the files transformers writes for Qwen2; not loaded in transformers here).

The corpus writes a correct equation after a careful thought (``" Let me check."``) for half
of its problems and a plausible wrong one after a hasty one (``" ..."``) for the rest, so the
pre-trained model knows how to solve many problems but greedily takes the hasty style on
most: format learned, exact answers rare, pass@16 high. A short ES run (``jaxes finetune --model
DIR --task countdown``, or ``finetune.finetune``) draws the careful style out and the held-out
reward rises.

Modules, one job each: ``problems`` (the problems, their split and the corpus's text),
``tokenizer`` (the BPE tokenizer and chat template), ``model`` (the Qwen2 config and the
directory), ``pretrain`` (backprop and the cache: ``pretrained()``), ``evaluate`` (greedy
reward, exact answers, pass@k) and ``finetune`` (the ES run); for the ES-against-GRPO study
(``benchmarks/es_vs_grpo.py``), ``bases`` (pre-trained, then supervised on correct answers
into a band of greedy accuracy), ``grpo`` (GRPO as google-tunix computes it) and ``study``
(its problem sets, the fixed-answer floor and an arm's run). ``python -m
jaxes_examples.lm_countdown DIR`` builds a model into ``DIR``.
"""

from .pretrain import FULL, QUICK, build, pretrained

__all__ = ["FULL", "QUICK", "build", "pretrained"]
