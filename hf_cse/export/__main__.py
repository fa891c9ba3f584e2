"""``python -m hf_cse.export``: the ``hf-cse-export`` command."""

import sys

from . import main

sys.exit(main())
