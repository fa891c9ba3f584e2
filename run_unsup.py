#!/usr/bin/env python
"""Train a sentence encoder with an unsupervised contrastive method (the same command as ``hf-cse-train`` and
``python -m hf_cse train``; the code is :mod:`hf_cse.cli.train`).

    accelerate launch run_unsup.py --loss gs_infonce                       # embedded defaults
    accelerate launch run_unsup.py --preset simcse_bert --model_name_or_path bert-base-uncased \
        --train_file wiki1m_for_simcse.txt --senteval_data_dir SentEval/data/downstream --output_dir out/simcse

With no flags it trains the packaged all-MiniLM-L6-v2 on the small demo corpus shipped in the package.
"""

import sys

from hf_cse.cli.entry_points import train as main  # --help and early refusals before torch loads

if __name__ == "__main__":
    sys.exit(main(prog="run_unsup.py"))
