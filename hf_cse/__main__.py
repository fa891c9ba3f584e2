"""``python -m hf_cse train|eval|export ...``: the package's commands (the same as ``hf-cse-train``,
``hf-cse-eval`` and ``hf-cse-export``). Under several processes::

    accelerate launch --config_file "$(python -m hf_cse config multi_gpu)" -m hf_cse train --loss gs_infonce

``python -m hf_cse config NAME`` prints the path of an accelerate config shipped with the package
(``python -m hf_cse config`` lists them).
"""

from __future__ import annotations

import sys

from .cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
