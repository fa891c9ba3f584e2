#!/usr/bin/env python
"""Step time of DiffCSE relative to SimCSE on the same batch (packaged MiniLM, batch 64, length 32).

    OMP_NUM_THREADS=1 python benchmarks/bench_diffcse_step.py [--steps 5] [--batch_size 64] [--length 32]

One training step = model forward + losses + backward + AdamW step (what ``ContrastiveTrainer`` does per
batch on one process); the collator's time is measured separately. Variants, all timed in the same run and
interleaved step by step (so a load change on a shared machine hits them alike):

* ``simcse``: SimCSEModel, MLP projector, InfoNCE.
* ``diffcse_unigram``: DiffCSEModel with the no-download unigram generator (what runs offline).
* ``diffcse_mlm``: DiffCSEModel with a randomly initialised DistilBertForMaskedLM of distilbert-base-uncased's
  size (the paper's generator; random weights cost the same compute as the real ones, no download needed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer, DistilBertConfig, DistilBertForMaskedLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench_train_common import ManualVariant  # noqa: E402

from hf_cse.data import DEMO_CORPUS, TwoViewCollator  # noqa: E402
from hf_cse.encoders import default_encoder  # noqa: E402
from hf_cse.models import DiffCSEModel, SimCSEModel  # noqa: E402


def _features(tokenizer, batch_size: int, length: int):
    sentences = [s for s in DEMO_CORPUS.read_text(encoding="utf-8").splitlines() if s.strip()][:batch_size]
    enc = tokenizer(sentences, truncation=True, max_length=length, padding="max_length")
    return [{k: enc[k][i] for k in enc} for i in range(len(sentences))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--skip_mlm", action="store_true", help="skip the DistilBERT-sized generator variant")
    args = parser.parse_args()

    torch.manual_seed(0)
    encoder = default_encoder()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    features = _features(tokenizer, args.batch_size, args.length)
    temp = {"temperature": 0.05}
    simcse = SimCSEModel.from_encoder(encoder, loss_kwargs=temp)
    variants = [ManualVariant("simcse", simcse, TwoViewCollator(tokenizer))]
    unigram = DiffCSEModel.from_encoder(encoder, loss_kwargs=temp)
    unigram.attach_generator("unigram", tokenizer, train_token_ids=[f["input_ids"] for f in features])
    variants.append(ManualVariant("diffcse_unigram", unigram, DiffCSEModel.collator(tokenizer, unigram.config)))
    if not args.skip_mlm:
        mlm = DiffCSEModel.from_encoder(encoder, loss_kwargs=temp)
        gen = DistilBertForMaskedLM(DistilBertConfig(vocab_size=len(tokenizer)))  # distilbert-base-uncased shape
        mlm.attach_generator(gen, tokenizer)
        variants.append(ManualVariant("diffcse_mlm", mlm, DiffCSEModel.collator(tokenizer, mlm.config)))

    for i in range(args.warmup + args.steps):
        for v in variants:  # interleaved: the same machine load for every variant
            v.step(features, record=i >= args.warmup)

    base = statistics.median(variants[0].step_times)
    print(f"batch {args.batch_size} x 2 views x length {args.length}, torch threads {torch.get_num_threads()}, "
          f"{args.steps} timed steps after {args.warmup} warm-up (median / mean seconds)")
    print(f"{'variant':<17}{'step median':>12}{'step mean':>11}{'vs simcse':>11}{'collate':>10}")
    for v in variants:
        med, mean = statistics.median(v.step_times), statistics.mean(v.step_times)
        print(f"{v.name:<17}{med:>12.3f}{mean:>11.3f}{med / base:>10.2f}x{statistics.median(v.collate_times):>10.4f}")


if __name__ == "__main__":
    main()
