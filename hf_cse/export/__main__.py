"""``python -m hf_cse.export``: the ``hf-cse-export`` command (:mod:`hf_cse.cli.export`), as the README shows it."""

import sys

from ..cli.export import main

sys.exit(main())
