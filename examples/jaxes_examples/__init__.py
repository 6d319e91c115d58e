"""jaxes-examples: the experiments built on jaxes, kept out of the library.

A second, small distribution beside ``jaxes`` (``examples/pyproject.toml``): the task code and
training loops that the example scripts (``examples/*.py``) and the notebooks share, but that
no user of the library needs. Its own dependencies (scikit-learn for the digits data) stay out
of ``jaxes``'s. Each experiment is a package:

* ``jaxes_examples.digits``: scikit-learn's 8×8 digits classified by an MLP trained by
  OpenAI-ES (``data``: the data, the model, its fitness; ``classifier``: the settings and the
  training loop). ``examples/digits.py``; notebooks 05 and 07.
* ``jaxes_examples.countdown``: a small transformer pre-trained by backprop on arithmetic, then
  fine-tuned on a miniature Countdown's 0/1 reward by ES variants and by GRPO (``problems``:
  the task; ``pretrain``: the model and its pre-training; ``finetune``: the methods and the
  comparison). ``examples/sequence_finetune.py``; notebook 10.

Install: in a checkout, ``pip install -e examples`` (beside ``pip install -e .``); elsewhere
(a hosted notebook), both from the repository::

  pip install "jaxes @ git+<URL of your jaxes repository>" \\
    "jaxes-examples @ git+<URL of your jaxes repository>#subdirectory=examples"

``python examples/digits.py`` from a checkout needs no install of this package: the script's
folder is first on ``sys.path``.
"""
