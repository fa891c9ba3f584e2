#!/usr/bin/env python
"""bf16 autocast vs fp32 on this CPU: training steps, the 7-task STS evaluation, the README's main job.

    python benchmarks/bench_precision.py --part steps      # SimCSE, off-dropout (ImSimCSE), DiffCSE: fp32 vs bf16
    python benchmarks/bench_precision.py --part eval       # STS12-16, STS-B, SICK-R test: time and every score
    python benchmarks/bench_precision.py --part main_job   # `python run_unsup.py` (embedded defaults): wall time

* steps: one model per method, driven step by step (forward + objectives + backward + AdamW, as
  ``ManualVariant``) once in fp32 and once with the forward under ``torch.autocast("cpu", torch.bfloat16)``
  (what the Trainer does with ``--bf16``), interleaved step by step; losses compute in fp32 in both.
  DiffCSE uses the unigram generator (offline).
* eval: the packaged MiniLM (its own mean pooling) through ``SentenceEncoder`` with ``precision`` fp32 / bf16,
  the data read once before timing, fp32 first and bf16 second, then (``--rounds 2``) the other way round.
* main_job: ``run_unsup.py --precision fp32`` vs ``--precision bf16`` as subprocesses (1 epoch of the demo
  corpus + export), alternating.

Writes ``benchmarks/results/precision_<part>.json``. bf16 is native on this CPU (AVX-512 BF16).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import torch
from bench_train_common import (
    ROOT,
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
)

PRECISIONS = ("fp32", "bf16")


def step_variants(encoder: str, tokenizer, feats) -> list[ManualVariant]:
    from hf_cse.models import DiffCSEModel, ImSimCSEModel, SimCSEModel

    out = []
    for method, cls in (("simcse", SimCSEModel), ("off_dropout", ImSimCSEModel), ("diffcse", DiffCSEModel)):
        for precision in PRECISIONS:
            torch.manual_seed(0)
            model = cls.from_encoder(encoder)
            if method == "diffcse":
                model.attach_generator("unigram", tokenizer, train_token_ids=[f["input_ids"] for f in feats])
            out.append(ManualVariant(f"{method}_{precision}", model, cls.collator(tokenizer, model.config),
                                     precision=precision))
    return out


def part_steps(args, threads: int) -> dict:
    from transformers import AutoTokenizer

    encoder = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    feats = features(tokenizer, load_sentences(args.data, args.batch_size, args.offset), args.length)
    variants = step_variants(encoder, tokenizer, feats)
    run_interleaved(variants, feats, args.warmup, args.steps)
    stats = {v.name: summarize(v.step_times) for v in variants}
    speedup = {m: stats[f"{m}_fp32"]["median_s"] / stats[f"{m}_bf16"]["median_s"]
               for m in ("simcse", "off_dropout", "diffcse")}
    print_table(["variant", "median step s", "min step s", "steps"],
                [[n, s["median_s"], s["min_s"], s["n"]] for n, s in stats.items()])
    print("\nbf16 speed-up (fp32 median / bf16 median): " + ", ".join(f"{m} {x:.2f}x" for m, x in speedup.items()))
    return {"settings": common_settings(args), "results": stats, "speedup_bf16": speedup, "target": ">= 1.8x"}


def part_eval(args, threads: int) -> dict:
    from hf_cse.evaluation import SentenceEncoder, evaluate
    from hf_cse.evaluation.data import STS_TASKS, load_sts

    data_dir = ROOT.parent / "shared" / "data" / "senteval"
    tasks = ",".join(STS_TASKS)
    for task in STS_TASKS:  # read (and cache) the data before timing
        load_sts(task, data_dir)
    times: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    scores: dict[str, dict] = {}
    for r in range(args.rounds):
        for precision in PRECISIONS if r % 2 == 0 else PRECISIONS[::-1]:
            encoder = SentenceEncoder.from_pretrained(minilm_path(), device="cpu", precision=precision,
                                                      show_progress_bar=False)
            start = time.perf_counter()
            results, _ = evaluate(encoder, tasks, data_dir=data_dir)
            times[precision].append(time.perf_counter() - start)
            scores[precision] = {**{k: results.sts[k] for k in STS_TASKS}, "avg": results.sts_avg}
            print(f"round {r + 1} {precision}: {times[precision][-1]:.1f} s, avg {results.sts_avg:.3f}", flush=True)
    diffs = {k: scores["bf16"][k] - scores["fp32"][k] for k in scores["fp32"]}
    ratio = min(times["bf16"]) / min(times["fp32"])
    print_table(["task", "fp32", "bf16", "bf16 - fp32"], [[k, scores["fp32"][k], scores["bf16"][k], d]
                                                          for k, d in diffs.items()])
    print(f"\nbf16 / fp32 time (best of {args.rounds}) = {ratio:.3f}  (target <= 0.6); max |score diff| = "
          f"{max(abs(d) for d in diffs.values()):.4f} (target <= 0.05)")
    return {"settings": {"model": "all-MiniLM-L6-v2 (packaged), its mean pooling", "tasks": tasks,
                         "rounds": args.rounds, "batch_size": 128},
            "seconds": times, "scores": scores, "bf16_minus_fp32": diffs, "time_ratio_bf16_over_fp32": ratio,
            "targets": {"time_ratio": "<= 0.6", "max_abs_score_diff": "<= 0.05"}}


def part_main_job(args, threads: int) -> dict:
    times: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for precision in PRECISIONS if r % 2 == 0 else PRECISIONS[::-1]:
                out = os.path.join(tmp, f"{precision}_{r}")
                start = time.perf_counter()
                subprocess.run([sys.executable, "run_unsup.py", "--precision", precision, "--output_dir", out,
                                "--disable_tqdm", "true"], cwd=ROOT, env=env, check=True, capture_output=True)
                times[precision].append(time.perf_counter() - start)
                print(f"round {r + 1} {precision}: {times[precision][-1]:.1f} s", flush=True)
    ratio = min(times["fp32"]) / min(times["bf16"])
    print(f"\nmain job wall time (best of {args.rounds}): fp32 {min(times['fp32']):.1f} s, bf16 "
          f"{min(times['bf16']):.1f} s, speed-up {ratio:.2f}x")
    return {"settings": {"command": "python run_unsup.py --precision {fp32,bf16} (embedded defaults)",
                         "rounds": args.rounds}, "seconds": times, "speedup_bf16": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, steps=4, warmup=1)
    parser.add_argument("--part", choices=("steps", "eval", "main_job"), required=True)
    parser.add_argument("--rounds", type=int, default=1, help="eval / main_job: repetitions, order alternating")
    args = parser.parse_args()
    threads = setup_threads(args.threads)
    logging.disable(logging.WARNING)
    load = os.getloadavg()[0]
    payload = {"eval": part_eval, "steps": part_steps, "main_job": part_main_job}[args.part](args, threads)
    payload = {"benchmark": f"bench_precision --part {args.part}", **payload, "machine": machine_info(threads),
               "load_average_1min_at_start": load, "argv": sys.argv[1:]}
    save_results(f"precision_{args.part}", json.loads(json.dumps(payload, default=float)), not args.no_save)


if __name__ == "__main__":
    main()
