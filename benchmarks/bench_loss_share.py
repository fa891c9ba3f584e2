#!/usr/bin/env python
"""Share of the training step spent in the loss itself, for every registered loss (target < 3 %).

    python benchmarks/bench_loss_share.py                       # ~2 min on a shared 2-core machine
    python benchmarks/bench_loss_share.py --steps 10 --reps 100 --threads 2

* loss time = forward + backward of the loss module alone, incl. its input checks and logged metrics
  (``batch_diagnostics``, the paradigm ratio, the ``.item()`` calls), on leaf embeddings of the training
  shape (64 x 384, fp32), median of ``--reps`` repetitions. Measured in isolation because it is small: inside
  a step it would drown in the step-to-step noise of a shared machine.
* step time of loss L = the measured SimCSE/infonce training step (MiniLM forward + loss + backward + AdamW,
  median of ``--steps``) + (loss time of L - loss time of infonce): the step with L differs from the
  infonce step only by the loss module.
* share = loss time / step time. ``dcl`` is listed as a loss (ImSimCSE adds it to the main loss);
  ``off_dropout_infonce``'s step also has a third encoder pass, not counted here (see bench_method_overhead).
"""

from __future__ import annotations

import argparse
import logging
import statistics

from bench_train_common import (
    add_common_args,
    common_settings,
    features,
    load_sentences,
    loss_variants,
    machine_info,
    minilm_path,
    print_table,
    run_interleaved,
    save_results,
    setup_threads,
    summarize,
    time_loss,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, steps=5, warmup=1)
    parser.add_argument("--reps", type=int, default=30, help="repetitions of the loss-only timing")
    args = parser.parse_args()
    threads = setup_threads(args.threads)
    logging.disable(logging.WARNING)
    from transformers import AutoTokenizer

    from hf_cse.data import TwoViewCollator
    from hf_cse.losses import available_losses, build_loss

    encoder = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    feats = features(tokenizer, load_sentences(args.data, args.batch_size, args.offset), args.length)
    (infonce,) = loss_variants(encoder, TwoViewCollator(tokenizer), ["infonce"])
    dim = infonce.model.config.hidden_size
    print(f"infonce step: {args.warmup} warm-up + {args.steps} timed steps, {threads} thread(s)")
    run_interleaved([infonce], feats, args.warmup, args.steps)
    step = summarize(infonce.step_times)
    loss_times = {name: time_loss(build_loss(name), args.batch_size, dim, args.reps) for name in available_losses()}
    base = loss_times["infonce"]["loss_fwd_bwd_s"]
    results = {}
    for name, t in loss_times.items():
        step_s = step["median_s"] + t["loss_fwd_bwd_s"] - base
        results[name] = {**t, "step_s": step_s, "share": t["loss_fwd_bwd_s"] / step_s}
    print()
    print_table(["loss", "loss fwd ms", "loss fwd+bwd ms", "step s", "share of step"],
                [[n, 1000 * r["loss_fwd_s"], 1000 * r["loss_fwd_bwd_s"], r["step_s"], f"{100 * r['share']:.3f}%"]
                 for n, r in results.items()])
    worst = max(results, key=lambda n: results[n]["share"])
    print(f"\ninfonce step median {step['median_s']:.3f} s (in-step loss forward median "
          f"{1000 * statistics.median(infonce.loss_times):.2f} ms)")
    print(f"largest share: {worst} {100 * results[worst]['share']:.3f}%  (target < 3%)")
    save_results("loss_share", {
        "benchmark": "bench_loss_share",
        "settings": common_settings(args, reps=args.reps, embedding_dim=dim,
                                    loss_hyperparameters="each loss's defaults"),
        "machine": machine_info(threads),
        "infonce_step": step,
        "infonce_in_step_loss_forward_median_s": statistics.median(infonce.loss_times),
        "results": results,
        "max_share": {"loss": worst, "share": results[worst]["share"]},
        "target": "< 0.03",
    }, not args.no_save)


if __name__ == "__main__":
    main()
