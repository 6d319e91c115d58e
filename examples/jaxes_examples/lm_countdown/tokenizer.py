"""The model's tokenizer: byte-level BPE trained here, on Countdown text, built as Qwen2's
``tokenizer.json`` is (NFC, Qwen2's split pattern, which writes every digit as its own token,
then byte-level), with Qwen's special tokens and a ChatML chat template.

Digits one at a time keep arithmetic the same for every number (a model reads ``47`` as
``4``, ``7`` whatever merges the corpus would favour); the merges then go to the prompt's
words and the answer's tags, so the long TinyZero prompt is about 140 tokens, one a word or
a digit. Training is deterministic: the corpus is a fixed seed's problems, and the same
corpus gives the same ``tokenizer.json``.

Example:
  >>> tok = train_tokenizer()
  >>> tok.decode(tok.encode(" ... </think> <answer>(12 + 3) * 4</answer>").ids)
  ' ... </think> <answer>(12 + 3) * 4</answer>'
  >>> tok.encode("47").tokens
  ['4', '7']
"""

from __future__ import annotations

import json
import os

from jaxes.extras import require
from jaxes.llm import countdown_problems, countdown_prompt

from .problems import END, completion, solutions

# Qwen2's pre-tokenizer split: single digits, words with one leading non-letter, punctuation
# runs, whitespace.
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# <|endoftext|> ends a completion and pads (as in Qwen2.5's base models); the ChatML pair
# frames chat turns.
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Byte-level BPE's largest size before the special tokens. The corpus runs out of pairs
# seen twice first, when every word of the prompt is one token: 256 bytes and 215 merges,
# then the three specials, 474 tokens (the config's embedding table is padded to 512 rows).
BPE_VOCAB = 1024
# ChatML as Qwen2's: a default system message when the conversation has none.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
CORPUS_SEED = 7


def _tokenizers():
    """The ``tokenizers`` library, through ``jaxes.extras.require``: it comes with jaxes's
    ``llm`` extra (examples/pyproject.toml asks for ``jaxes[llm]``), and a missing one is a
    one-line error naming the extra."""
    return require("tokenizers", "llm", "the lm_countdown tokenizer")


def corpus(n: int = 400) -> list[str]:
    """What the merges are learnt from: ``n`` Countdown prompts (three and four numbers, a
    seed of their own) with a solution in both styles, and a chat turn."""
    lines = []
    for problem in countdown_problems(n, CORPUS_SEED):
        equation = solutions(problem)[0]
        lines.append(countdown_prompt(problem) + completion(equation, careful=True))
        lines.append(completion(equation, careful=False))
    lines.append("system\nYou are a helpful assistant.\nuser\nassistant\n")
    return lines


def train_tokenizer():
    """A ``tokenizers.Tokenizer`` trained on ``corpus()``: byte-level BPE, the special tokens
    after the merges (ids 471, 472, 473)."""
    tk = _tokenizers()
    decoders, models, normalizers = tk.decoders, tk.models, tk.normalizers
    pre_tokenizers, processors, trainers = tk.pre_tokenizers, tk.processors, tk.trainers
    tok = tk.Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(tk.Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_special_tokens([tk.AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.post_processor = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    return tok


def save_tokenizer(tok, directory: str) -> list[str]:
    """Writes ``tok`` into ``directory`` as transformers saves a Qwen2 tokenizer:
    ``tokenizer.json``, ``tokenizer_config.json`` (eos and pad ``<|endoftext|>``) and
    ``chat_template.jinja``. Returns the files written."""
    tok.save(os.path.join(directory, "tokenizer.json"))
    config = {
        "tokenizer_class": "Qwen2TokenizerFast",
        "bos_token": None,
        "eos_token": END,
        "pad_token": END,
        "unk_token": None,
        "additional_special_tokens": list(SPECIALS[1:]),
        "model_max_length": 256,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(directory, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    return ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
