#!/usr/bin/env python
"""Ways to close the gap between the SimCSE step and the GEMM peak, measured side by side (step by step
interleaved, ``run_interleaved``) in one run:

    python benchmarks/bench_step_options.py                  # ~6-10 min on a loaded 2-core machine (1 thread)
    python benchmarks/bench_step_options.py --variants default,fused,groups2 --steps 6

Step: packaged all-MiniLM-L6-v2, ``SimCSEModel`` (cls pooler, MLP head, infonce), batch 64, length 32, in the
precision ``--precision auto`` resolves to on this CPU (bf16 autocast where it computes bf16 natively, else fp32),
``ManualVariant``. Variants (``--variants``):

* ``default``: hf_cse's defaults (fast CPU dropout, padding-free forward; ``torch.optim.AdamW`` with its own
  defaults, which on a CPU is the per-parameter loop; the Trainer's default ``--optim`` is ``adamw_torch_fused``);
* ``padded``: ``padding_free=False``, the whole padded batch through every layer (hf_cse's default before the
  padding-free forward, :mod:`hf_cse.models.padding_free`);
* ``foreach`` / ``fused``: AdamW with ``foreach=True`` / ``fused=True`` (``--optim adamw_torch_fused``);
* ``groups2`` / ``groups4``: the encoder forward in 2 / 4 chunks of rows of similar length, each padded to its own
  longest (:class:`LengthGroups`): the batch is the same random sample, so every row's negatives are too; only
  padding is saved (contrastive batches are never sorted by length across the data); padded otherwise, as this was
  the alternative to the padding-free forward;
* ``torch_dropout``: ``fast_dropout=False`` (torch's ``bernoulli_`` dropout), the reference for the next two;
* ``compile`` / ``compile_fused``: ``torch.compile`` (inductor) of the model, AdamW loop / fused; under compile the
  fast dropout hands over to torch's dropout, which inductor compiles with its own RNG. The warm-up round
  compiles (its time is reported apart).

``--check``: each variant against ``default`` from the same weights with dropout off (:func:`check_results`): the
relative difference of the first gradient and of the weights' change after 3 steps, i.e. whether the variant
changes results beyond rounding.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

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
)

VARIANTS = ("default", "padded", "foreach", "fused", "groups2", "groups4", "torch_dropout", "compile", "compile_fused")


class LengthGroups(torch.nn.Module):
    """The model's forward on ``groups`` chunks of the batch's rows sorted by length, each chunk trimmed to its
    longest row (right padding), the embeddings returned in the batch's order. The batch itself is unchanged."""

    def __init__(self, model: torch.nn.Module, groups: int):
        super().__init__()
        self.model, self.groups = model, groups
        self.config = model.config

    def forward(self, **batch):
        lengths = batch["attention_mask"][:, 0].sum(-1)  # (B,): both views have the sentence's length
        order = torch.argsort(lengths, stable=True)
        outs = []
        for rows in order.chunk(self.groups):
            longest = int(lengths[rows].max())
            outs.append(self.model(**{k: v[rows][..., :longest] for k, v in batch.items()}))
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order))
        embeddings = {k: torch.cat([o.embeddings[k] for o in outs])[inverse] for k in outs[0].embeddings}
        aux = {k: sum(o.aux_losses[k] for o in outs) / len(outs) for k in outs[0].aux_losses}
        return SimpleNamespace(embeddings=embeddings, aux_losses=aux, metrics={})


def build_variant(name: str, path: str, tokenizer, precision: str, lr: float = 1e-6, **model_kwargs) -> ManualVariant:
    from hf_cse.models import SimCSEModel

    torch.manual_seed(0)
    fast = name not in ("torch_dropout",)
    padding_free = not (name == "padded" or name.startswith("groups"))
    model = SimCSEModel.from_encoder(path, loss="infonce", fast_dropout=fast, padding_free=padding_free,
                                     **model_kwargs)
    params = [p for p in model.parameters() if p.requires_grad]
    optim = {"foreach": {"foreach": True}, "fused": {"fused": True}, "compile_fused": {"fused": True}}.get(name, {})
    optimizer = torch.optim.AdamW(params, lr=lr, **optim)
    collator = SimCSEModel.collator(tokenizer, model.config)
    wrapped = model
    if name.startswith("groups"):
        wrapped = LengthGroups(model, int(name.removeprefix("groups")))
    elif name.startswith("compile"):
        wrapped = torch.compile(model)
    return ManualVariant(name, wrapped, collator, optimizer=optimizer, precision=precision)


def check_results(names, path, tokenizer, feats, precision: str, steps: int = 3) -> dict[str, dict[str, float]]:
    """Each variant against ``default`` from the same weights, dropout off (so the length groups and compile see
    the same arithmetic), the same seed per step, lr 1e-3: the relative L2 difference of the first step's gradient
    and of the weights' change after ``steps`` steps (Adam turns rounding-level gradients into full steps, so the
    second reads larger than the first)."""
    grads, updates = {}, {}
    for name in ["default", *[n for n in names if n != "default"]]:
        variant = build_variant(name, path, tokenizer, precision, lr=1e-3, dropout=0.0)
        params = [p for group in variant.optimizer.param_groups for p in group["params"]]
        start = torch.cat([p.detach().flatten() for p in params])
        step = variant.optimizer.step

        def capture(*args, step=step, params=params, name=name, **kwargs):
            grads.setdefault(name, torch.cat([p.grad.flatten().float() for p in params]))
            return step(*args, **kwargs)

        variant.optimizer.step = capture
        for i in range(steps):
            torch.manual_seed(i)
            variant.step(feats, record=False)
        updates[name] = torch.cat([p.detach().flatten() for p in params]) - start
    rel = lambda d, n: float((d[n] - d["default"]).norm() / d["default"].norm())  # noqa: E731
    return {n: {"grad_rel_diff": rel(grads, n), "update_rel_diff": rel(updates, n)} for n in grads if n != "default"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, steps=4, warmup=1)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {','.join(VARIANTS)}")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                        help="auto: bf16 where this CPU computes it natively, else fp32 (hf_cse's own default)")
    parser.add_argument("--check", action="store_true", help="also compare each variant's weights after 3 steps")
    parser.add_argument("--model_name_or_path", default=None, help="default: the packaged all-MiniLM-L6-v2")
    args = parser.parse_args()
    names = [n for n in args.variants.split(",") if n]
    if unknown := sorted(set(names) - set(VARIANTS)):
        parser.error(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}.")
    threads = setup_threads(args.threads)
    from transformers import AutoTokenizer

    from hf_cse.precision import resolve

    args.precision = resolve(args.precision, "cpu")[0]
    path = args.model_name_or_path or minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    feats = features(tokenizer, load_sentences(args.data, args.batch_size, args.offset), args.length)
    variants = [build_variant(n, path, tokenizer, args.precision) for n in names]
    warm = {}
    for v in variants:  # the first step of each apart: compile time, and lazy allocations for the others
        start = time.perf_counter()
        v.step(feats, record=False)
        warm[v.name] = time.perf_counter() - start
        print(f"first step {v.name}: {warm[v.name]:.1f} s", flush=True)
    run_interleaved(variants, feats, args.warmup, args.steps)
    base = statistics.median(variants[0].step_times)
    stats = {v.name: {"median_s": statistics.median(v.step_times), "min_s": min(v.step_times),
                      "step_times": v.step_times, "first_step_s": warm[v.name],
                      "speedup_vs_first": base / statistics.median(v.step_times)} for v in variants}
    checks = check_results(names, path, tokenizer, feats, args.precision) if args.check else {}
    print()
    print_table(["variant", "median step s", "min step s", f"speed-up vs {names[0]}", "first step s",
                 "grad rel. diff", "update rel. diff"],
                [[n, s["median_s"], s["min_s"], s["speedup_vs_first"], s["first_step_s"],
                  checks.get(n, {}).get("grad_rel_diff", ""), checks.get(n, {}).get("update_rel_diff", "")]
                 for n, s in stats.items()])
    save_results(f"step_options_{args.precision}", {
        "benchmark": "bench_step_options",
        "settings": common_settings(args, variants=names, precision=args.precision),
        "machine": machine_info(threads), "results": stats, "check_vs_default": checks,
    }, not args.no_save)


if __name__ == "__main__":
    main()
