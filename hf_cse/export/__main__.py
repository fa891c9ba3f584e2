"""``python -m hf_cse.export``: the ``hf-cse-export`` command (:mod:`hf_cse.cli.export`), kept for commands written
before ``python -m hf_cse export``."""

import sys

from ..cli.export import main

sys.exit(main())
