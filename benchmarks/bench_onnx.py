#!/usr/bin/env python
"""Encode speed of the packaged MiniLM exported three ways, side by side on this CPU: the PyTorch export
(``SentenceTransformer(folder)``), its ONNX model and the ONNX model's dynamic int8 quantisation
(``hf-cse-export --backend onnx --quantize int8``, run here by :class:`hf_cse.export.onnx.OnnxEncoder` on ONNX
Runtime); and, with ``--senteval_data_dir``, what each scores on STS-B test (hf_cse's STS scorer, the one
``run_eval.py`` uses), so the int8 model's cost in quality is measured.

    python benchmarks/bench_onnx.py --senteval_data_dir ../shared/data/senteval     # ~2-4 min, 1 thread
    python benchmarks/bench_onnx.py --sentences 1024 --rounds 5 --threads 2

The three encoders take the same sentences (a fixed slice of the shared Wikipedia text) in rounds, in rotating
order, so that a load change on the shared machine hits them alike; speed = sentences / median round time.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

from bench_train_common import WIKI, load_sentences, machine_info, minilm_path, print_table, save_results, setup_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per encoder (after one untimed)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data", type=Path, default=WIKI)
    parser.add_argument("--senteval_data_dir", type=Path, help="also score STS-B test with each encoder")
    parser.add_argument("--no_save", action="store_true")
    args = parser.parse_args()
    threads = setup_threads(args.threads)
    logging.disable(logging.WARNING)
    from sentence_transformers import SentenceTransformer

    from hf_cse.export import to_sentence_transformer
    from hf_cse.export.onnx import INT8_FILE, ONNX_FILE, OnnxEncoder
    from hf_cse.models import SimCSEModel

    sentences = load_sentences(args.data, args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        folder = to_sentence_transformer(SimCSEModel.from_encoder(minilm_path()), Path(tmp) / "st",
                                         tokenizer=minilm_path(), backend="onnx", quantize="int8")
        torch_model = SentenceTransformer(str(folder), device="cpu")
        encoders = {
            "pytorch (SentenceTransformer)": lambda s: torch_model.encode(s, batch_size=args.batch_size,
                                                                          show_progress_bar=False),
            f"onnx fp32 ({ONNX_FILE})": OnnxEncoder(folder, ONNX_FILE, threads=threads).encode,
            f"onnx int8 ({INT8_FILE})": OnnxEncoder(folder, INT8_FILE, threads=threads).encode,
        }
        times: dict[str, list[float]] = {name: [] for name in encoders}
        names = list(encoders)
        for r in range(args.rounds + 1):
            for name in names[r % 3:] + names[:r % 3]:
                start = time.perf_counter()
                encoders[name](sentences)
                if r:
                    times[name].append(time.perf_counter() - start)
            print(f"round {r + 1}/{args.rounds + 1} done", flush=True)
        sts = {}
        if args.senteval_data_dir:
            from hf_cse.evaluation import evaluate_sts

            class _Encode:  # evaluate_sts takes any object with encode(sentences)
                def __init__(self, fn):
                    self.encode = fn

            for name, fn in encoders.items():
                sts[name] = evaluate_sts(_Encode(fn), ["STSBenchmark"], str(args.senteval_data_dir))["STSBenchmark"]
    base = statistics.median(times[names[0]])
    results, rows = {}, []
    for name in names:
        median = statistics.median(times[name])
        results[name] = {"median_s": median, "times_s": times[name], "sentences_per_s": len(sentences) / median,
                         "speedup_vs_pytorch": base / median, "stsb_test_spearman": sts.get(name)}
        rows.append([name, median, len(sentences) / median, base / median,
                     "-" if name not in sts else f"{sts[name]:.2f}"])
    print_table(["encoder", "median round (s)", "sentences/s", "x pytorch", "STS-B test"], rows)
    settings = {"sentences": len(sentences), "batch_size": args.batch_size, "rounds": args.rounds,
                "model": "all-MiniLM-L6-v2 (packaged), its own mean pooling + Normalize"}
    save_results("onnx", {"settings": settings, "machine": machine_info(threads), "results": results},
                 not args.no_save)


if __name__ == "__main__":
    main()
