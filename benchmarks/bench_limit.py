#!/usr/bin/env python
"""The SimCSE step against the machine's limit: model FLOPs, measured GEMM peak, and where the rest of the step goes.

    python benchmarks/bench_limit.py                       # ~4-6 min on a loaded 2-core machine (1 thread)
    python benchmarks/bench_limit.py --threads 2 --rounds 5

Step: packaged all-MiniLM-L6-v2, ``SimCSEModel`` (cls pooler, MLP head, infonce), batch 64, length 32, AdamW,
fast dropout, driven by ``ManualVariant`` (forward of 2 x 64 rows, loss, backward, optimizer); hf_cse's default
padding-free forward (:mod:`hf_cse.models.padding_free`) and, beside it, the padded batch (``padding_free=False``).

1. Model FLOPs of the step (``bench_limit_common.step_flops``): over the padded batch and over its real tokens.
   The step's fraction of the limit counts the real tokens' FLOPs (the work the batch needs): what the padded step
   spends on padding is lost, not work.
2. Measured GEMM TFLOP/s per precision: a ``--square``^3 product and the encoder's own shapes at 4,096 tokens.
3. Each step (per precision: padding-free, padded), interleaved round by round with the GEMMs of its precision, so
   a load change hits the step and its reference alike: each round's fraction = step TFLOP/s / that round's GEMM.
   ``--precisions`` (default: fp32, and bf16 where this CPU computes it natively; bf16 emulated on an AVX2-only CPU
   runs hundreds of times slower than fp32 and says nothing of a limit).
4. One ``torch.profiler`` trace of the default step per precision, operator self-time by class: GEMMs, attention
   (softmax, masking, SDPA), normalisation / activation, dropout (hf_cse's fast dropout or torch's, forward and
   backward), padding-free packing (gathers and scatters of the real tokens, forward and backward), embedding
   (look-up and gradient), other tensor ops (adds, casts, copies, the loss), optimizer (AdamW and zero_grad), data /
   collation, and Python / framework overhead (time in the step not inside any operator). The profiler's own cost
   inflates the small operators: read shares, and the step times of part 3.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

import torch
from bench_limit_common import encoder_gemm_shapes, gemm_tflops, step_flops
from bench_train_common import (
    ManualVariant,
    add_common_args,
    common_settings,
    features,
    load_sentences,
    machine_info,
    minilm_path,
    print_table,
    save_results,
    setup_threads,
)

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul",
            "aten::_addmm_activation", "mkldnn::_linear_pointwise", "aten::mkldnn_linear"}
ATTENTION_OPS = ("softmax", "scaled_dot_product", "masked_fill", "_efficient_attention", "_flash_attention")
NORM_ACT_OPS = ("layer_norm", "gelu", "tanh")
LAYOUTS = ("padding-free", "padded")  # hf_cse's default first
CLASSES = ("GEMMs", "attention (non-GEMM)", "norm/activation", "dropout", "padding-free packing",
           "embedding (look-up + grad)",
           "other tensor ops", "optimizer", "data/collation", "Python/framework overhead")


PACKING_BACKWARDS = ("IndexSelectBackward", "IndexCopyBackward")


def _scope_of(event) -> tuple[str | None, bool, bool, bool]:
    """(phase, inside dropout, inside packing, inside the embedding's backward) from the event's ancestors."""
    phase, dropout, packing, embedding = None, False, False, False
    node = event
    while node is not None:
        name = node.name
        if name.startswith("phase::"):
            phase = phase or name.removeprefix("phase::")
        elif name == "hf_cse::dropout" or "MaskedScaleBackward" in name or "DropoutBackward" in name:
            dropout = True
        elif name == "hf_cse::packing" or any(k in name for k in PACKING_BACKWARDS):
            packing = True
        elif "EmbeddingBackward" in name:
            embedding = True
        node = node.cpu_parent
    return phase, dropout, packing, embedding


def classify(event) -> str:
    """The operator class of one profiler event's self time (scopes' and autograd wrappers' self time = overhead)."""
    name = event.name
    phase, dropout, packing, embedding = _scope_of(event)
    if phase == "collate":
        return "data/collation"
    if phase == "optimizer":
        return "optimizer"
    if name.startswith(("phase::", "hf_cse::", "autograd::engine")) or "Backward" in name:
        return "Python/framework overhead"
    if dropout or "dropout" in name or "bernoulli" in name:
        return "dropout"
    if packing:
        return "padding-free packing"
    if embedding or name in ("aten::embedding", "aten::embedding_dense_backward", "aten::index_select"):
        return "embedding (look-up + grad)"
    if name in GEMM_OPS:
        return "GEMMs"
    if any(k in name for k in ATTENTION_OPS):
        return "attention (non-GEMM)"
    if any(k in name for k in NORM_ACT_OPS):
        return "norm/activation"
    return "other tensor ops"


def profile_step(variant: ManualVariant, feats) -> dict:
    """Self CPU time per operator class over one profiled step (with collation), and the step's wall time."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from hf_cse.models import fast_dropout as fd
    from hf_cse.models.padding_free import PackedRows

    def labelled(function, scope):  # a function's forward ops under one scope (their backward has its own name)
        def run(*args, **kwargs):
            with record_function(scope):
                return function(*args, **kwargs)
        return run

    real = {"dropout": fd.fast_dropout, "pack": PackedRows.pack, "unpack": PackedRows.unpack}
    fd.fast_dropout = labelled(real["dropout"], "hf_cse::dropout")
    PackedRows.pack = labelled(real["pack"], "hf_cse::packing")
    PackedRows.unpack = labelled(real["unpack"], "hf_cse::packing")
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function("phase::step"):
                variant.step(feats, record=False)
    finally:
        fd.fast_dropout, PackedRows.pack, PackedRows.unpack = real["dropout"], real["pack"], real["unpack"]
    seconds = defaultdict(float)
    ops = defaultdict(float)
    wall = None
    for event in prof.events():
        if event.name == "phase::step":
            wall = event.cpu_time_total / 1e6
            continue
        cls = classify(event)
        seconds[cls] += event.self_cpu_time_total / 1e6
        ops[(cls, event.name)] += event.self_cpu_time_total / 1e6
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:25]
    return {"wall_s": wall, "by_class_s": {c: seconds.get(c, 0.0) for c in CLASSES},
            "top_ops": [{"class": c, "op": n, "self_s": s} for (c, n), s in top]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, steps=3, warmup=1)
    parser.add_argument("--square", type=int, default=2048, help="side of the square GEMM")
    parser.add_argument("--gemm_reps", type=int, default=3, help="timed products per GEMM measurement")
    parser.add_argument("--model_name_or_path", default=None, help="default: the packaged all-MiniLM-L6-v2")
    parser.add_argument("--no_profile", action="store_true", help="skip the torch.profiler breakdown")
    parser.add_argument("--precisions", default=None,
                        help="comma-separated fp32, bf16; default: fp32, and bf16 where this CPU computes it natively")
    args = parser.parse_args()
    threads = setup_threads(args.threads)
    from transformers import AutoConfig, AutoTokenizer

    from hf_cse.models import SimCSEModel
    from hf_cse.precision import cpu_has_native_bf16

    args.precisions = args.precisions or ("fp32,bf16" if cpu_has_native_bf16() else "fp32")

    path = args.model_name_or_path or minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    config = AutoConfig.from_pretrained(path)
    feats = features(tokenizer, load_sentences(args.data, args.batch_size, args.offset), args.length)
    variants = {}
    for precision in args.precisions.split(","):
        for layout in LAYOUTS:
            torch.manual_seed(0)
            model = SimCSEModel.from_encoder(path, loss="infonce", padding_free=layout == "padding-free")
            variants[precision, layout] = ManualVariant(f"{precision} {layout}", model,
                                                        SimCSEModel.collator(tokenizer, model.config),
                                                        precision=precision)
    batch = next(iter(variants.values())).collator(feats)
    rows, padded = batch["input_ids"].shape[0] * batch["input_ids"].shape[1], batch["input_ids"].shape[-1]
    real = batch["attention_mask"].reshape(rows, padded).sum(-1).tolist()
    flops = step_flops(config, rows, padded, real)
    tokens = rows * padded
    shapes = {"square": (args.square,) * 3, **encoder_gemm_shapes(config, tokens)}
    precisions = list(dict.fromkeys(p for p, _ in variants))
    gemm = {p: {s: [] for s in shapes} for p in precisions}
    for r in range(args.warmup + args.steps):  # one round: per precision, its GEMMs then its steps
        for precision in precisions:
            for name, shape in shapes.items():
                tflops = gemm_tflops(*shape, precision, "cpu", args.gemm_reps, warmup=1)["tflops"]
                if r >= args.warmup:
                    gemm[precision][name].append(tflops)
            for layout in LAYOUTS:
                variants[precision, layout].step(feats, record=r >= args.warmup)
        print(f"round {r + 1}/{args.warmup + args.steps}: " + ", ".join(
            f"{v.name} step {v.step_times[-1]:.2f} s" for v in variants.values() if v.step_times), flush=True)
    results = {}
    for (precision, layout), variant in variants.items():
        own = [max(gemm[precision][s][i] for s in shapes if s != "square") for i in range(args.steps)]
        useful = [flops["real"] / t / 1e12 for t in variant.step_times]
        results[f"{precision} {layout}"] = {
            "precision": precision, "layout": layout,
            "step_s": variant.step_times, "median_step_s": statistics.median(variant.step_times),
            "step_model_tflops": useful,  # real tokens' FLOPs per second
            "gemm_tflops": gemm[precision],
            "fraction_of_square": statistics.median(s / g for s, g in zip(useful, gemm[precision]["square"])),
            "fraction_of_own_shapes": statistics.median(s / g for s, g in zip(useful, own)),
            "padded_flops_fraction_of_square": statistics.median(
                flops["padded"] / t / 1e12 / g for t, g in zip(variant.step_times, gemm[precision]["square"])),
        }
    print()
    print_table(["step", "median step s", "real-token TFLOP/s", "square GEMM TFLOP/s", "own-shape GEMM TFLOP/s",
                 "of square", "of own shapes", "padded FLOPs: of square"],
                [[name, r["median_step_s"], statistics.median(r["step_model_tflops"]),
                  statistics.median(r["gemm_tflops"]["square"]),
                  statistics.median(max(r["gemm_tflops"][s][i] for s in shapes if s != "square")
                                    for i in range(args.steps)),
                  r["fraction_of_square"], r["fraction_of_own_shapes"], r["padded_flops_fraction_of_square"]]
                 for name, r in results.items()])
    print(f"\nstep model FLOPs: {flops['padded'] / 1e9:.1f} G padded, {flops['real'] / 1e9:.1f} G real tokens "
          f"({flops['padding_fraction']:.1%} of the tokens are padding)")
    profiles = {}
    if not args.no_profile:
        for precision in precisions:
            profiles[precision] = prof = profile_step(variants[precision, LAYOUTS[0]], feats)
            total = sum(prof["by_class_s"].values())
            print(f"\nprofile, {precision} (step wall {prof['wall_s']:.2f} s under the profiler):")
            print_table(["class", "self s", "share"],
                        [[c, s, f"{s / total:.1%}"] for c, s in prof["by_class_s"].items()])
    save_results("limit", {
        "benchmark": "bench_limit",
        "settings": common_settings(args, square=args.square, gemm_reps=args.gemm_reps, rounds=args.steps,
                                    precisions=precisions,
                                    model=path if args.model_name_or_path else "all-MiniLM-L6-v2 (packaged)"),
        "machine": machine_info(threads),
        "flops": flops, "gemm_shapes": shapes, "results": results, "profile": profiles,
    }, not args.no_save)


if __name__ == "__main__":
    main()
