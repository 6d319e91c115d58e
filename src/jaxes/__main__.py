"""``python -m jaxes`` is the ``jaxes`` command."""

import sys

from jaxes.cli import main

sys.exit(main())
