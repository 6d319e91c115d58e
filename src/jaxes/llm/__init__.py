"""Language models people post-train, read from and written back to Hugging Face directories.

``load`` reads a Qwen2 / Qwen2.5, Qwen3 or Llama 3 model directory (config, safetensors,
tokenizer) into ``CausalLM``, a flax decoder every projection of which takes a member's
low-rank term (``jaxes.factored.apply``); ``text_task`` makes a ``Task`` of problems, prompts
and a reward; ``export`` writes a fine-tuned centre back as a directory transformers loads.
Needs the ``llm`` extra (``pip install 'jaxes[llm]'``: safetensors, tokenizers, jinja2).
"""

from jaxes.llm.decoder import CausalLM, LMCache
from jaxes.llm.families import FAMILIES, ModelConfig, ModelError, from_dict, read_config
from jaxes.llm.pretrained import Pretrained, abstract_params, export, load
from jaxes.llm.rewards import (
    countdown_problems,
    countdown_prompt,
    countdown_reward,
    numeric_reward,
    read_jsonl,
)
from jaxes.llm.text_task import TextReward, TextTask, text_task
from jaxes.llm.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "FAMILIES",
    "CausalLM",
    "LMCache",
    "ModelConfig",
    "ModelError",
    "Pretrained",
    "TextReward",
    "TextTask",
    "Tokenizer",
    "abstract_params",
    "countdown_problems",
    "countdown_prompt",
    "countdown_reward",
    "export",
    "from_dict",
    "load",
    "load_tokenizer",
    "numeric_reward",
    "read_config",
    "read_jsonl",
    "text_task",
]
