#!/usr/bin/env python
"""Evaluate sentence embeddings the way the SimCSE-family papers do (the same command as ``hf-cse-eval`` and
``python -m hf_cse eval``; the code is :mod:`hf_cse.cli.evaluate`).

    python run_eval.py --senteval_data_dir ../shared/data/senteval --tasks sts,transfer
    python run_eval.py --model_name_or_path out/simcse,bert-base-uncased --tasks sts,geometry,retrieval
"""

import sys

from hf_cse.cli.entry_points import evaluate as main  # --help and early refusals before torch loads

if __name__ == "__main__":
    sys.exit(main(prog="run_eval.py"))
