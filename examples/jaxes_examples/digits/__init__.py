"""The digits classifier: scikit-learn's 8×8 digits, an MLP, trained by OpenAI-ES.

``data``: the data split, the MLP, its fitness and accuracy; ``classifier``: the settings, the
three models (full-rank, low-rank and big full-rank noise) and the training loop.
``examples/digits.py`` is the command line; notebooks 05 and 07 use it.
"""
