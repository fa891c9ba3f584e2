#!/usr/bin/env python
"""Peak memory and step time of a large random encoder: full fp32 fine-tuning vs bf16 weights vs LoRA vs
LoRA + activation checkpointing + bf16 weights (SimCSE, infonce, AdamW, batch 64, length 32).

    python benchmarks/bench_large_memory.py                 # BERT-large shape (24 x 1024); ~13 GiB for full fp32
    python benchmarks/bench_large_memory.py --layers 8      # the same width, 8 layers (what README.md reports)

The encoder is random (built from a ``BertConfig``, no download) through hf_cse's own loading path:
``SimCSEModel(SimCSEConfig(encoder_config=..., encoder_dtype=..., lora_r=...))`` builds it directly in the weight
dtype and wraps it with peft's LoRA (``hf_cse.models.loading`` / ``hf_cse.models.lora``). Every configuration runs
in a FRESH subprocess, which reads its RSS after the imports (baseline), resets the kernel's peak counter
(``bench_memory._reset_peak``), builds the model and ``ContrastiveTrainer``'s AdamW, runs ``--steps`` full steps
(forward + loss + backward + AdamW step) and reports peak = VmHWM and total = peak - baseline: weights, gradients,
optimizer states and the batch's activations together, which is what decides whether a model fits. Children run
with ``MALLOC_MMAP_THRESHOLD_=131072`` as in ``bench_memory.py``. Sentences are padded to exactly ``--length``.
Target: LoRA + checkpointing + bf16 weights at most 1/4 of full fp32 fine-tuning's total.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time

from bench_memory import _reset_peak, _status_kb
from bench_train_common import add_common_args, machine_info, print_table, save_results

CONFIGS = {  # name -> (encoder_dtype, lora_r, activation checkpointing)
    "full fp32": ("fp32", 0, False),
    "bf16 weights": ("bf16", 0, False),
    "LoRA r=16": ("fp32", 16, False),
    "LoRA r=16 + ckpt + bf16": ("bf16", 16, True),
}


def child(args) -> None:
    """One configuration; prints a JSON line with the measurements (MiB, seconds)."""
    import torch
    from bench_train_common import load_sentences, minilm_path, setup_threads
    from transformers import AutoTokenizer, BertConfig, TrainingArguments

    from hf_cse.data import TwoViewCollator
    from hf_cse.models import SimCSEConfig, SimCSEModel
    from hf_cse.trainer import ContrastiveTrainer

    setup_threads(args.threads)
    logging.disable(logging.WARNING)
    dtype, lora_r, checkpointing = CONFIGS[args.config]
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())  # BERT's uncased vocabulary
    enc = tokenizer(load_sentences(args.data, args.batch_size, args.offset), truncation=True, max_length=args.length,
                    padding="max_length")
    batch = TwoViewCollator(tokenizer)([{k: enc[k][i] for k in enc} for i in range(args.batch_size)])
    base_rss = _status_kb("VmRSS")
    reset = _reset_peak()
    torch.manual_seed(0)
    encoder_config = BertConfig(vocab_size=len(tokenizer), hidden_size=args.hidden, num_hidden_layers=args.layers,
                                num_attention_heads=args.hidden // 64, intermediate_size=4 * args.hidden)
    model = SimCSEModel(SimCSEConfig(encoder_config=encoder_config, encoder_dtype=dtype, lora_r=lora_r))
    if checkpointing:
        model.enable_activation_checkpointing()
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    targs = TrainingArguments(output_dir="/tmp/hf_cse_bench_large_memory", use_cpu=True, report_to="none",
                              per_device_train_batch_size=args.batch_size, save_strategy="no", disable_tqdm=True)
    trainer = ContrastiveTrainer(model=model, args=targs)
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1
    model.train()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        trainer.training_step(model, batch)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=False)
        times.append(time.perf_counter() - start)
    peak = _status_kb("VmHWM")
    print(json.dumps({"config": args.config, "params": params, "trainable": trainable, "peak_reset": reset,
                      "baseline_mib": base_rss / 1024, "peak_mib": peak / 1024, "total_mib": (peak - base_rss) / 1024,
                      "step_s": times, "steps": args.steps}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, steps=1, warmup=0)
    parser.add_argument("--layers", type=int, default=24, help="encoder layers (BERT-large: 24)")
    parser.add_argument("--hidden", type=int, default=1024, help="hidden size (BERT-large: 1024; heads = hidden/64)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", default="full fp32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    results, rows = [], []
    for name in args.configs:
        cmd = [sys.executable, __file__, "--child", "--config", name, "--steps", str(args.steps), "--length",
               str(args.length), "--threads", str(args.threads), "--data", str(args.data), "--offset",
               str(args.offset), "--layers", str(args.layers), "--hidden", str(args.hidden), "--batch_size",
               str(args.batch_size)]
        load = os.getloadavg()[0]
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        res = {**json.loads(proc.stdout.strip().splitlines()[-1]), "load_before": load}
        results.append(res)
        step = sum(res["step_s"]) / len(res["step_s"])
        print(f"{name:>24}: total {res['total_mib']:8.0f} MiB  step {step:6.1f} s  trainable "
              f"{res['trainable'] / 1e6:.1f}M of {res['params'] / 1e6:.1f}M  (load {load:.1f})", flush=True)
        rows.append([name, f"{res['trainable'] / 1e6:.1f}M / {res['params'] / 1e6:.1f}M", res["total_mib"], step])
    full = next((r for r in results if r["config"] == "full fp32"), None)
    summary = {}
    if full:
        for row, res in zip(rows, results):
            row.append(res["total_mib"] / full["total_mib"])
        summary = {r["config"]: r["total_mib"] / full["total_mib"] for r in results}
    print()
    print_table(["config", "trainable / all", "total MiB", "step s"] + (["x full fp32"] if full else []), rows)
    save_results("large_memory", {
        "benchmark": "bench_large_memory",
        "settings": {"layers": args.layers, "hidden": args.hidden, "batch": args.batch_size, "length": args.length,
                     "steps": args.steps, "optimizer": "AdamW", "lora_targets": "query key value dense",
                     "memory": "total = VmHWM - VmRSS after imports, fresh subprocess per config "
                               "(weights + grads + AdamW states + activations)",
                     "malloc": "MALLOC_MMAP_THRESHOLD_=131072"},
        "machine": machine_info(args.threads),
        "results": results,
        "summary_total_over_full_fp32": summary,
        "target": "LoRA + ckpt + bf16 <= 0.25 x full fp32",
    }, not args.no_save)


if __name__ == "__main__":
    main()
