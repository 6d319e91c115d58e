"""A model directory's tokenizer: ``tokenizer.json`` through the ``tokenizers`` library, the
special tokens of ``tokenizer_config.json``, and its chat template rendered as transformers
renders it (jinja2, sandboxed, ``trim_blocks`` and ``lstrip_blocks``, loop controls, a
``tojson`` that keeps non-ASCII text, ``raise_exception`` and ``strftime_now``).

Prompts of different lengths are left-padded (``pad``): every row's last prompt token is then
in the same slot, so one decode step serves the batch, and the model is told each row's
padding (``jaxes.llm.decoder.LMCache.start``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from typing import Any

import numpy as np

from jaxes.extras import require
from jaxes.llm.families import ModelError

TEMPLATE_FILE = "chat_template.jinja"


def _content(token) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or ``{"content": ...}``."""
    if isinstance(token, dict):
        return token.get("content")
    return token


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as err:
        raise ModelError(f"{os.path.basename(path)} is not valid JSON: {err}") from None


def _chat_template(directory: str, config: dict) -> str | None:
    """The default chat template: ``chat_template.jinja`` (transformers >= 4.43 writes it
    there), else tokenizer_config.json's ``chat_template`` (a string, or named templates)."""
    path = os.path.join(directory, TEMPLATE_FILE)
    if os.path.isfile(path):
        with open(path) as f:
            return f.read()
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        return named.get("default")
    return template


def _eos_ids(directory: str, eos_token_id) -> tuple[int, ...]:
    """Tokens that end an answer: generation_config.json's ``eos_token_id`` (one or a list),
    else config.json's, else the tokenizer's own eos."""
    for name in ("generation_config.json", "config.json"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            value = _read_json(path).get("eos_token_id")
            if value is not None:
                return tuple(value) if isinstance(value, list) else (int(value),)
    return () if eos_token_id is None else (eos_token_id,)


@dataclasses.dataclass(frozen=True, eq=False)
class Tokenizer:
    """Text to ids and back, and chat messages to a prompt, as the checkpoint defines them.

    Attributes:
      backend: the ``tokenizers.Tokenizer`` read from ``tokenizer.json``.
      special: the named special tokens (``bos_token``, ``eos_token``, ``pad_token``, ...).
      chat_template: the jinja template of ``apply_chat_template`` (``None``: none).
      eos_ids: the ids that end an answer.
      pad_id: the id prompts are padded with.
    """

    backend: Any
    special: dict
    chat_template: str | None
    eos_ids: tuple[int, ...]
    pad_id: int

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids of ``text`` (with the tokenizer's own BOS where it adds one)."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """The text of ``ids``."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt string of a conversation (``[{"role": ..., "content": ...}, ...]``)."""
        if self.chat_template is None:
            raise ModelError("tokenizer: this model has no chat template")
        return (
            _environment()
            .from_string(self.chat_template)
            .render(messages=messages, add_generation_prompt=add_generation_prompt, **self.special)
        )

    def pad(
        self, rows: list[list[int]], length: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Left-pads ``rows`` of ids to ``length`` (``None``: the longest): ``(tokens (N, L)
        int32, start (N,) int32)``, ``start`` being each row's first real slot."""
        longest = max(len(r) for r in rows)
        length = longest if length is None else length
        if longest > length:
            raise ValueError(f"length: a prompt has {longest} tokens, more than {length}")
        tokens = np.full((len(rows), length), self.pad_id, np.int32)
        start = np.zeros(len(rows), np.int32)
        for i, row in enumerate(rows):
            start[i] = length - len(row)
            tokens[i, start[i] :] = row
        return tokens, start


def _environment():
    jinja2 = require("jinja2", "llm", "chat templates")
    from jinja2 import ext, sandbox

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env = sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def load_tokenizer(directory: str) -> Tokenizer:
    """The tokenizer of the model directory ``directory``; ``ModelError`` if it has none."""
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.isfile(path):
        raise ModelError(
            f"tokenizer: {directory} has no tokenizer.json (jaxes reads fast tokenizers only)"
        )
    tokenizers = require("tokenizers", "llm", "tokenizers")
    try:
        backend = tokenizers.Tokenizer.from_file(path)
    except Exception as err:  # the Rust library's exception type is not a stable import
        raise ModelError(f"tokenizer: {path} cannot be read: {err}") from None
    config_path = os.path.join(directory, "tokenizer_config.json")
    config = _read_json(config_path) if os.path.isfile(config_path) else {}
    names = ("bos_token", "eos_token", "pad_token", "unk_token")
    special = {name: _content(config.get(name)) for name in names}
    eos = special["eos_token"]
    eos_id = None if eos is None else backend.token_to_id(eos)
    pad = special["pad_token"] or eos
    pad_id = backend.token_to_id(pad) if pad is not None else None
    return Tokenizer(
        backend=backend,
        special=special,
        chat_template=_chat_template(directory, config),
        eos_ids=_eos_ids(directory, eos_id),
        pad_id=0 if pad_id is None else pad_id,
    )
