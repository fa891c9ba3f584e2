#!/usr/bin/env python
"""Step-time overhead of every method and loss relative to SimCSE's ``infonce`` (packaged MiniLM, batch 64,
length 32, one process).

    python benchmarks/bench_method_overhead.py                  # ~8-10 min on a loaded shared 2-core machine
    python benchmarks/bench_method_overhead.py --steps 10 --threads 2

One step = model forward + objectives (loss + metrics) + auxiliary losses + backward + AdamW step, what
``ContrastiveTrainer`` does per batch; the collator is not timed (it runs in the dataloader). Variants:

* ``infonce`` and, in full steps, ``gs_infonce`` (M = 3 x 64), ``focal_infonce`` and two gradient-paradigm losses
  (``paradigm``, ``m_mhe``) on ONE shared SimCSE model (cls pooler, MLP projector): they differ only by the loss;
* ``+dcl``: infonce + DCL (lambda 0.1), ImSimCSE's second objective;
* ``off_dropout``: the third, no-dropout encoder pass (with gradient) and ``off_dropout_infonce``;
* ``imsimcse``: off-dropout + DCL (the method's defaults);
* ``diffcse`` (when present): DiffCSEModel with the no-download unigram generator, BatchNorm projector, RTD.

Variants run interleaved step by step (round r = one step of each, in rotating order) so load changes on
the shared machine hit them alike; overhead = median step / median ``infonce`` step - 1. Because the
loss-only variants (infonce, gs, focal, paradigm, m_mhe) run the same encoder work (their losses cost < 0.3 %
of a step), the mean of their medians is a steadier estimate of SimCSE's step than infonce's median alone:
``overhead vs SimCSE step`` = median step / that mean - 1 (the column the extra-pass targets are read from).

Every other registered loss differs from infonce only by its loss module, whose cost is far below the
step-to-step noise of a shared machine: its overhead is computed as (loss fwd+bwd time - infonce's) /
infonce step (``derived`` column; the loss-only times are measured as in ``bench_loss_share.py``).
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

STEP_LOSSES = ("infonce", "gs_infonce", "focal_infonce", "paradigm", "m_mhe")


def simcse_step_estimate(medians: dict[str, float]) -> float:
    """Mean of the loss-only variants' median steps: the same encoder work, so one SimCSE step estimate."""
    same_encoder_work = [medians[name] for name in STEP_LOSSES if name in medians]
    return sum(same_encoder_work) / len(same_encoder_work)


def build_variants(encoder, tokenizer, feats, include_diffcse: bool, fast_dropout: bool = True) -> list[ManualVariant]:
    from hf_cse.data import TwoViewCollator
    from hf_cse.losses import available_losses
    from hf_cse.models import METHODS, SimCSEModel

    two_view = TwoViewCollator(tokenizer)
    losses = [n for n in STEP_LOSSES if n in available_losses()]
    variants = loss_variants(encoder, two_view, losses, fast_dropout=fast_dropout)
    torch.manual_seed(0)
    if "dcl" in available_losses():
        model = SimCSEModel.from_encoder(encoder, dcl_weight=0.1, fast_dropout=fast_dropout)
        variants.append(ManualVariant("infonce+dcl", model, two_view))
    if "off_dropout_infonce" in available_losses():
        model = SimCSEModel.from_encoder(encoder, loss="off_dropout_infonce", off_dropout=True,
                                         fast_dropout=fast_dropout)
        variants.append(ManualVariant("off_dropout", model, two_view))
    if "imsimcse" in METHODS:
        model = METHODS["imsimcse"].from_encoder(encoder, fast_dropout=fast_dropout)
        variants.append(ManualVariant("imsimcse", model, two_view))
    if include_diffcse and "diffcse" in METHODS:
        cls = METHODS["diffcse"]
        model = cls.from_encoder(encoder, fast_dropout=fast_dropout)
        model.attach_generator("unigram", tokenizer, train_token_ids=[f["input_ids"] for f in feats])
        variants.append(ManualVariant("diffcse(unigram)", model, cls.collator(tokenizer, model.config)))
    return variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, steps=5, warmup=1)
    parser.add_argument("--skip_diffcse", action="store_true")
    parser.add_argument("--torch_dropout", action="store_true",
                        help="torch's dropout in every model (fast_dropout=False); -> method_overhead_torch_dropout")
    parser.add_argument("--reps", type=int, default=30, help="repetitions of the loss-only timings")
    args = parser.parse_args()
    threads = setup_threads(args.threads)
    logging.disable(logging.WARNING)
    from transformers import AutoTokenizer

    encoder = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    feats = features(tokenizer, load_sentences(args.data, args.batch_size, args.offset), args.length)
    variants = build_variants(encoder, tokenizer, feats, not args.skip_diffcse, not args.torch_dropout)
    print(f"{len(variants)} variants x ({args.warmup} warm-up + {args.steps} timed) steps, {threads} thread(s)")
    run_interleaved(variants, feats, args.warmup, args.steps)
    base = summarize(variants[0].step_times)["median_s"]
    simcse_step = simcse_step_estimate({v.name: summarize(v.step_times)["median_s"] for v in variants})
    results = {}
    for v in variants:
        s = summarize(v.step_times)
        s["overhead_vs_infonce"] = s["median_s"] / base - 1.0
        s["overhead_vs_simcse_step"] = s["median_s"] / simcse_step - 1.0
        s["how"] = "measured steps"
        results[v.name] = s
    from hf_cse.losses import available_losses, build_loss

    dim = variants[0].model.config.hidden_size
    loss_times = {name: time_loss(build_loss(name), args.batch_size, dim, args.reps)["loss_fwd_bwd_s"]
                  for name in available_losses() if name not in ("dcl", "off_dropout_infonce")}
    for name, t in loss_times.items():  # dcl and off_dropout_infonce are measured as methods above
        results.setdefault(name, {"how": "derived"})["derived_overhead_vs_infonce"] = (t - loss_times["infonce"]) / base
        results[name]["loss_fwd_bwd_s"] = t
    print()
    fmt = lambda x: "" if x is None else f"{100 * x:+.2f}%"  # noqa: E731
    print(f"SimCSE step estimate (mean of the loss-only variants' medians): {simcse_step:.3f} s")
    print_table(["variant", "median step s", "overhead vs infonce", "overhead vs SimCSE step", "overhead (derived)"],
                [[n, s.get("median_s", ""), fmt(s.get("overhead_vs_infonce")), fmt(s.get("overhead_vs_simcse_step")),
                  fmt(s.get("derived_overhead_vs_infonce"))] for n, s in results.items()])
    save_results("method_overhead_torch_dropout" if args.torch_dropout else "method_overhead", {
        "benchmark": "bench_method_overhead",
        "settings": common_settings(args, pooler="cls", dropout="torch" if args.torch_dropout else "fast (hf_cse)",
                                    projector="mlp (diffcse: batchnorm)", optimizer="AdamW"),
        "machine": machine_info(threads),
        "simcse_step_estimate_s": simcse_step,
        "results": results,
    }, not args.no_save)


if __name__ == "__main__":
    main()
