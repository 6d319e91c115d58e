"""jaxes_examples.lm_countdown: the tokenizer round-trips Countdown text, a micro pre-training
is written as a model directory that jaxes.llm.load reads back bit for bit, the split loss is
the plain one, and training and held-out problems are disjoint."""

import json
import os

import jax
import numpy as np
import pytest

from jaxes.llm import countdown_prompt, countdown_reward, load
from jaxes_examples.lm_countdown import evaluate, pretrain, problems, tokenizer
from jaxes_examples.lm_countdown.model import Setup

MICRO = Setup(d_model=32, layers=1, heads=4, kv_heads=2, mlp=64, steps=3, batch=4, problems=48)


@pytest.fixture(scope="module")
def micro():
    return pretrain.pretrain(MICRO)


def test_the_tokenizer_round_trips_countdown_text_and_writes_digits_one_at_a_time():
    tok = tokenizer.train_tokenizer()
    vocab = tok.get_vocab_size()
    assert 400 < vocab <= 512
    assert [tok.token_to_id(s) for s in tokenizer.SPECIALS] == [vocab - 3, vocab - 2, vocab - 1]
    assert tok.to_str() == tokenizer.train_tokenizer().to_str()  # deterministic
    for problem in problems.held_out(20):
        answer = problems.completion(problems.solutions(problem)[0]) + problems.END
        for text in (countdown_prompt(problem), answer, problems.completion("1 + 2", False)):
            assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text
        assert countdown_reward(problem, answer) == 1.0
    assert tok.encode("1234").tokens == ["1", "2", "3", "4"]
    assert tok.encode(problems.END).ids == [vocab - 3]
    assert len(tok.encode(countdown_prompt(problems.held_out(1)[0])).ids) < 150


def test_training_and_held_out_problems_are_disjoint_and_every_problem_has_a_solution():
    unseen = problems.unseen()  # the held-out problems and those `jaxes finetune` draws
    held = problems.held_out(1000)
    assert held == unseen[:1000] and held[0] != problems.train(1)[0]
    train = problems.train(5000, exclude=unseen)
    problems.check_disjoint(train, unseen)
    assert len(train) == 5000
    # Without the exclusion the seeds share a few problems: the check catches them.
    with pytest.raises(ValueError, match="both training and held-out"):
        problems.check_disjoint(problems.train(5000), unseen)
    for problem in train[:200]:
        assert all(
            countdown_reward(problem, problems.completion(s)) == 1.0
            for s in problems.solutions(problem)
        )
        rng = np.random.default_rng(0)
        for wrong in ("sum", "random"):
            guess = problems.wrong_answer(problem, rng, wrong)
            assert countdown_reward(problem, problems.completion(guess, False)) in (0.1, 1.0)


def test_the_corpus_mixes_careful_solutions_and_hasty_guesses():
    pairs = problems.texts(problems.held_out(400), 0.5, "random", seed=0)
    careful = [c for _, c in pairs if c.startswith(problems.CAREFUL)]
    assert 150 < len(careful) < 250
    assert all(c.startswith(problems.HASTY) for _, c in pairs if c not in careful)
    for problem, (_, text) in zip(problems.held_out(400), pairs, strict=True):
        assert countdown_reward(problem, text) == (1.0 if text in careful else 0.1)


def test_the_split_loss_is_the_plain_loss(micro):
    tok = micro["tokenizer"]
    _, (tokens, mask) = pretrain.corpus(MICRO, tok)
    shared, quiet = pretrain.shared_columns(tokens, mask)
    assert 30 < shared < quiet
    plain = pretrain.token_loss(micro["model"], micro["params"], tokens[:8], mask[:8])
    split = pretrain.split_loss(
        micro["model"], micro["params"], tokens[:8], mask[:8], shared, quiet
    )
    np.testing.assert_allclose(plain, split, rtol=1e-5)


def test_the_directory_loads_back_bit_for_bit_and_the_cache_reuses_it(micro, tmp_path, monkeypatch):
    path = pretrain.save(micro, tmp_path / "model")
    files = set(os.listdir(path))
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
        "lm_countdown.json",
    } <= files
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["num_key_value_heads"] == 2
    assert config["vocab_size"] == 512  # the tokenizer's 474 tokens, padded as Qwen pads
    pre = load(path)
    assert evaluate.equal_params(pre.params, micro["params"])
    end, _, im_end = (pre.tokenizer.backend.token_to_id(s) for s in tokenizer.SPECIALS)
    assert pre.tokenizer.eos_ids == (end, im_end) and pre.tokenizer.pad_id == end
    prompt = pre.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert prompt.endswith("<|im_start|>assistant\n")
    # Greedy answers of the loaded model decode (a micro model writes nothing useful yet).
    texts = evaluate.completions(pre, pre.params, problems.held_out(2), steps=4)
    assert len(texts) == 2 and all(isinstance(t[0], str) for t in texts)
    # The cache: built once, then read; a folder the example did not write is never replaced.
    monkeypatch.setenv("JAXES_LM_COUNTDOWN_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(pretrain, "QUICK", MICRO)
    first = pretrain.pretrained()
    stamp = os.path.getmtime(os.path.join(first, "model.safetensors"))
    assert pretrain.pretrained() == first
    assert os.path.getmtime(os.path.join(first, "model.safetensors")) == stamp
    made = json.loads(
        (tmp_path / "cache" / os.path.basename(first) / "lm_countdown.json").read_text()
    )
    assert made["setup"]["steps"] == 3
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="neither empty nor a model"):
        pretrain.save(micro, tmp_path / "other")
    with pytest.raises(FileExistsError, match="neither empty nor a model"):
        pretrain.build(tmp_path / "other")  # refused before any pre-training
    assert os.listdir(tmp_path / "other") == ["notes.txt"]
    assert jax.tree.structure(pre.params) == jax.tree.structure(micro["params"])
