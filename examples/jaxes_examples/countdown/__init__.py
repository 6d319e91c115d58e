"""A miniature Countdown: a small transformer pre-trained by backprop, then fine-tuned on a 0/1
reward by ES and by a policy gradient, at equal wall clock.

``problems``: the task (vocabulary, problems and split, prompts, reward); ``corpus``: the
pre-training corpus;
``pretrain``: the model, its pre-training and greedy measures; ``finetune``: the ES variants,
GRPO, the comparison and the answer-length experiment. ``examples/sequence_finetune.py`` is the
command line; notebook 10 uses it.
"""
