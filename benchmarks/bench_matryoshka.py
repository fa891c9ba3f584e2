#!/usr/bin/env python
"""Cost of Matryoshka training (``--matryoshka_dims 384,256,128,64``) against the plain loss: one SimCSE step
(packaged MiniLM, avg pooling, no projection head) with and without the prefixes, and the loss alone.

    python benchmarks/bench_matryoshka.py                       # ~1-2 min on the shared 2-core machine
    python benchmarks/bench_matryoshka.py --batch_size 64 --steps 8 --threads 2

The two variants share one model and optimizer and run interleaved step by step (hf_cse's
``bench_train_common.ManualVariant``: forward + objectives + backward + AdamW). A forward hook counts the
encoder's forward calls per step: Matryoshka training slices ONE embedding, so both variants run one encoder
forward per step; only the loss runs once per dimension (its time is measured alone too, on leaf embeddings).
"""

from __future__ import annotations

import argparse
import logging

import torch
from bench_train_common import (
    ManualVariant,
    add_common_args,
    common_settings,
    features,
    load_sentences,
    machine_info,
    minilm_path,
    print_table,
    run_interleaved,
    save_results,
    setup_threads,
    summarize,
    time_loss,
)

DIMS = [384, 256, 128, 64]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, steps=5, warmup=1)
    parser.add_argument("--reps", type=int, default=30, help="repetitions of the loss-only timings")
    args = parser.parse_args()
    threads = setup_threads(args.threads)
    logging.disable(logging.WARNING)
    from transformers import AutoTokenizer

    from hf_cse.data import TwoViewCollator
    from hf_cse.losses import build_loss
    from hf_cse.matryoshka import MatryoshkaLoss
    from hf_cse.models import SimCSEModel
    from hf_cse.objectives import Objective

    encoder = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    feats = features(tokenizer, load_sentences(args.data, args.batch_size, args.offset), args.length)
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(encoder, pooler_type="avg", projector="none")
    collate = TwoViewCollator(tokenizer)
    plain = ManualVariant("infonce", model, collate)
    wrapped = [Objective("contrastive", 1.0, MatryoshkaLoss(build_loss("infonce"), DIMS))]
    matryoshka = ManualVariant(f"infonce, matryoshka {','.join(map(str, DIMS))}", model, collate,
                               objectives=wrapped, optimizer=plain.optimizer)
    forwards = {"n": 0}
    model.encoder.register_forward_hook(lambda *_: forwards.__setitem__("n", forwards["n"] + 1))
    per_step = {}
    for variant in (plain, matryoshka):  # one untimed step each, counting the encoder's forwards
        forwards["n"] = 0
        variant.step(feats, record=False)
        per_step[variant.name] = forwards["n"]
    print(f"2 variants x ({args.warmup} warm-up + {args.steps} timed) steps, {threads} thread(s)")
    run_interleaved([plain, matryoshka], feats, args.warmup, args.steps)
    dim = model.config.hidden_size
    loss_only = {plain.name: time_loss(build_loss("infonce"), args.batch_size, dim, args.reps),
                 matryoshka.name: time_loss(MatryoshkaLoss(build_loss("infonce"), DIMS), args.batch_size, dim,
                                            args.reps)}
    base = summarize(plain.step_times)["median_s"]
    results, rows = {}, []
    for v in (plain, matryoshka):
        s = summarize(v.step_times)
        s.update(step_vs_plain=s["median_s"] / base, encoder_forwards_per_step=per_step[v.name], **loss_only[v.name])
        results[v.name] = s
        rows.append([v.name, s["median_s"], s["step_vs_plain"], per_step[v.name], s["loss_fwd_bwd_s"] * 1e3])
    print_table(["variant", "median step (s)", "x plain step", "encoder forwards / step", "loss fwd+bwd (ms)"],
                rows)
    save_results("matryoshka", {"settings": common_settings(args, dims=DIMS, pooler="avg", projector="none"),
                                "machine": machine_info(threads), "results": results}, not args.no_save)


if __name__ == "__main__":
    main()
