#!/usr/bin/env python
"""Peak training memory at batch 64 / 128 / 256 / 512, plain vs gradient-cache mode (packaged MiniLM, length 32).

    python benchmarks/bench_memory.py                            # ~6-10 min on a loaded shared 2-core machine
    python benchmarks/bench_memory.py --batches 64 128 --minibatch 32

How it is measured (CPU, no profiler): every configuration runs in a FRESH subprocess, which

1. loads the model, builds ``ContrastiveTrainer`` (AdamW) and runs one tiny step (batch 4), so the parameters,
   their gradients and AdamW's two moment buffers all exist before the measurement;
2. resets the kernel's peak-RSS counter (``echo 5 > /proc/self/clear_refs`` resets VmHWM) and reads the current
   RSS (``VmRSS``) as the baseline;
3. runs ``trainer.training_step`` (forward + loss + backward into the existing .grad buffers) on the batch,
   plain or with ``cached_minibatch_size = --minibatch``; the AdamW step after it is not measured (its
   temporaries, ~ the parameter size, do not depend on the batch);
4. reports peak = ``VmHWM`` (the peak resident set since the reset) and delta = peak - baseline: the working
   memory the batch itself needs (activations, autograd graph, embeddings, the loss's B x B matrices).

RSS counts what glibc's allocator keeps mapped. By default glibc raises its mmap threshold dynamically (up to
32 MiB) once large blocks are freed, after which freed activations stay in the heap and RSS overstates live
memory by up to ~40 % (measured at batch 128: plain 2017 vs 1592 MiB, cached 1287 vs 801 MiB). The children
therefore run with ``MALLOC_MMAP_THRESHOLD_=131072`` (a fixed threshold: blocks >= 128 KiB are mmapped and
returned on free), the same for every configuration; ``--glibc_default`` measures without it. Where
/proc/self/clear_refs cannot be written the script falls back to ``ru_maxrss`` - the RSS after step 1.
Sentences are padded to exactly ``--length`` tokens (worst case, every batch the same shape).
Target: cached at 512 < 1.3 x plain at 64 (compared on delta, the stricter measure).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench_train_common import add_common_args, machine_info, print_table, save_results


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def child(args) -> None:
    """One configuration; prints a JSON line with the measurements (MiB)."""
    import torch
    from bench_train_common import load_sentences, minilm_path, setup_threads
    from transformers import AutoTokenizer, TrainingArguments

    from hf_cse.data import TwoViewCollator
    from hf_cse.models import SimCSEModel
    from hf_cse.trainer import ContrastiveTrainer

    setup_threads(args.threads)
    logging.disable(logging.WARNING)
    encoder = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(encoder, loss="infonce")
    collate = TwoViewCollator(tokenizer)
    enc = tokenizer(load_sentences(args.data, args.batch, args.offset), truncation=True, max_length=args.length,
                    padding="max_length")
    batch = collate([{k: enc[k][i] for k in enc} for i in range(args.batch)])
    targs = TrainingArguments(output_dir="/tmp/hf_cse_bench_memory", use_cpu=True, report_to="none",
                              per_device_train_batch_size=args.batch, save_strategy="no", disable_tqdm=True)
    trainer = ContrastiveTrainer(model=model, args=targs, cached_minibatch_size=args.cached or None)
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1
    model.train()

    def step(inputs):
        trainer.training_step(model, inputs)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=False)  # keep .grad buffers allocated (as between real steps)

    step({k: v[:4] for k, v in batch.items()})  # grads + AdamW state exist from here on
    import gc

    peaks, times = [], []
    for _ in range(args.steps):
        gc.collect()
        reset = _reset_peak()
        base_rss = _status_kb("VmRSS")
        base_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        trainer.training_step(model, batch)  # forward + loss + backward: what the batch size changes
        times.append(time.perf_counter() - start)
        peaks.append(_status_kb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        trainer.optimizer.step()  # not measured: AdamW's temporaries do not depend on the batch
        trainer.optimizer.zero_grad(set_to_none=False)
    peak, seconds = max(peaks), sum(times) / len(times)
    print(json.dumps({"batch": args.batch, "cached": args.cached, "baseline_mib": base_rss / 1024,
                      "peak_mib": peak / 1024, "delta_mib": (peak - base_rss) / 1024, "peak_reset": reset,
                      "maxrss_before_mib": base_maxrss / 1024, "step_s": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, steps=1, warmup=0)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--minibatch", type=int, default=64, help="cached_minibatch_size of the cached runs")
    parser.add_argument("--glibc_default", action="store_true", help="keep glibc's dynamic mmap threshold")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--cached", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    rows, results = [], []
    for cached in (0, args.minibatch):
        for b in args.batches:
            cmd = [sys.executable, __file__, "--child", "--batch", str(b), "--cached", str(cached),
                   "--steps", str(args.steps), "--length", str(args.length), "--threads", str(args.threads),
                   "--data", str(args.data), "--offset", str(args.offset)]
            env = dict(os.environ) if args.glibc_default else {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            results.append(res)
            mode = f"cached m={cached}" if cached else "plain"
            print(f"{mode:>14} batch {b:4d}: delta {res['delta_mib']:8.1f} MiB  peak {res['peak_mib']:8.1f} MiB  "
                  f"step {res['step_s']:.1f} s", flush=True)
            rows.append([mode, b, res["baseline_mib"], res["peak_mib"], res["delta_mib"], res["step_s"]])
    print()
    print_table(["mode", "batch", "baseline MiB", "peak MiB", "delta MiB", "step s"], rows)
    ref = next((r for r in results if r["batch"] == 64 and not r["cached"]), None)
    big = next((r for r in results if r["batch"] == max(args.batches) and r["cached"]), None)
    summary = {}
    if ref and big:
        summary = {"cached_max_over_plain_64_delta": big["delta_mib"] / ref["delta_mib"],
                   "cached_max_over_plain_64_peak": big["peak_mib"] / ref["peak_mib"],
                   "cached_batch": big["batch"]}
        print(f"\ncached {big['batch']} / plain 64: delta x{summary['cached_max_over_plain_64_delta']:.2f}, "
              f"peak RSS x{summary['cached_max_over_plain_64_peak']:.2f}  (target < 1.3)")
    save_results("memory", {
        "benchmark": "bench_memory",
        "settings": {"length": args.length, "padding": "max_length", "minibatch": args.minibatch,
                     "steps": args.steps, "optimizer": "AdamW", "method": "fresh subprocess per config; peak = "
                     "VmHWM after clear_refs reset; delta = peak - VmRSS after a warm-up step (grads + AdamW state "
                     "allocated)",
                     "malloc": "glibc default" if args.glibc_default else "MALLOC_MMAP_THRESHOLD_=131072",
                     "model": "all-MiniLM-L6-v2 (packaged), SimCSE cls + MLP, infonce"},
        "machine": machine_info(args.threads),
        "results": results,
        "summary": summary,
        "target": "cached 512 < 1.3 x plain 64",
    }, not args.no_save)


if __name__ == "__main__":
    main()
