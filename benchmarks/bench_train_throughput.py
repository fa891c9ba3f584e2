#!/usr/bin/env python
"""Training throughput: hf_cse ``ContrastiveTrainer`` (SimCSE / InfoNCE) vs sentence-transformers'
``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss`` on (sentence, sentence) pairs.

    python benchmarks/bench_train_throughput.py                 # ~6-8 min on a loaded shared 2-core machine
    python benchmarks/bench_train_throughput.py --steps 30 --rounds 3
    python benchmarks/bench_train_throughput.py --precision bf16   # both trainers under bf16 autocast
    python benchmarks/bench_train_throughput.py --with_padded      # also hf_cse with --padding_free false

Same model (the packaged all-MiniLM-L6-v2), batch 64, length 32 (ST ``max_seq_length=32``), learning rate
3e-5, AdamW, dropout active (0.1, the model's) and the same temperature (MNRL scale 20 = 1 / 0.05) in both.
Both sides see two dropout views of each sentence per step, so sentences/s are comparable.

* hf_cse: ``SimCSEModel`` with pooler ``avg`` (mean pooling, what the ST model uses; the papers' ``cls``
  costs the same) and the default MLP projector (SimCSE's train-time head, 384x384: negligible).
  Tokenized once up front (``tokenize_dataset``); the collator pads each batch, and the padding-free forward (its
  default, :mod:`hf_cse.models.padding_free`) runs the linear layers on the real tokens only.
* sentence-transformers: its own data path (tokenizes in the collator every step) and two encoder calls
  per step (anchors, positives).

Step time = interval between consecutive optimizer-step ends (includes fetching/collating the batch). The
frameworks alternate in ``--rounds`` rounds (a fresh trainer each) so a load change on the shared machine
hits both; the ratio uses the median step time over all rounds.
"""

from __future__ import annotations

import argparse
import functools
import logging
import tempfile

import torch
from bench_train_common import (
    StepTimer,
    add_common_args,
    common_settings,
    load_sentences,
    machine_info,
    minilm_path,
    print_table,
    save_results,
    setup_threads,
    summarize,
)

_TOKENIZED: dict[tuple, object] = {}


def hf_cse_trainer(sentences, args, out_dir, callbacks=(), model_path: str | None = None, use_cpu: bool = True,
                   cached_minibatch_size: int | None = None, torch_compile: bool = False,
                   attn_implementation: str | None = None, padding_free: bool = True,
                   compile_mode: str | None = None, cuda_graphs: str = "auto", dataloader_num_workers: int = 0):
    """The hf_cse side: ``ContrastiveTrainer`` on ``SimCSEModel`` (pooler avg, MLP head, infonce at 0.05) over
    ``args.warmup + args.steps`` steps of ``args.batch_size`` sentences. ``model_path``: default the packaged
    MiniLM; ``attn_implementation``: the encoder's (default: as loaded, i.e. SDPA with hf_cse's fast CPU dropout);
    ``padding_free``: hf_cse's default padding-free forward, or the padded batch; ``compile_mode``: torch.compile's
    mode when ``torch_compile``; ``cuda_graphs``: the trainer's CUDA-graph step (auto / on / off; a GPU only);
    ``dataloader_num_workers``: processes fetching and collating the batches."""
    import datasets
    from transformers import AutoTokenizer, TrainingArguments

    from hf_cse.data import tokenize_dataset
    from hf_cse.models import SimCSEModel
    from hf_cse.trainer import ContrastiveTrainer

    path = model_path or minilm_path()
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(path, pooler_type="avg", loss="infonce", loss_kwargs={"temperature": 0.05},
                                     padding_free=padding_free)
    if attn_implementation:
        model.encoder.set_attn_implementation(attn_implementation)
    tokenizer = AutoTokenizer.from_pretrained(path)
    # tokenized once per text, encoder and length: a part of gpu_check builds several trainers on the same text (5 s
    # each for 20,480 sentences on an H100's host)
    key = (str(path), args.length, len(sentences), sentences[0], sentences[-1])
    if key not in _TOKENIZED:
        _TOKENIZED[key] = tokenize_dataset(datasets.Dataset.from_dict({"text": sentences}), tokenizer, args.length)
    data = _TOKENIZED[key]
    targs = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=args.batch_size, learning_rate=3e-5,
                              max_steps=args.warmup + args.steps, logging_steps=10_000, save_strategy="no",
                              report_to="none", disable_tqdm=True, use_cpu=use_cpu, seed=0, dataloader_drop_last=True,
                              remove_unused_columns=False, bf16=args.precision == "bf16", torch_compile=torch_compile,
                              torch_compile_mode=compile_mode, dataloader_num_workers=dataloader_num_workers)
    return ContrastiveTrainer(model=model, args=targs, train_dataset=data, processing_class=tokenizer,
                              data_collator=SimCSEModel.collator(tokenizer, model.config), callbacks=list(callbacks),
                              cached_minibatch_size=cached_minibatch_size, cuda_graphs=cuda_graphs)


def sentence_transformers_trainer(sentences, args, out_dir, callbacks=(), model_path: str | None = None,
                                  use_cpu: bool = True, cached_minibatch_size: int | None = None):
    """The sentence-transformers side: ``SentenceTransformerTrainer`` + ``MultipleNegativesRankingLoss`` at scale 20
    (its cached variant with ``mini_batch_size=cached_minibatch_size`` when given) on (sentence, sentence) pairs."""
    import datasets
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import (
        CachedMultipleNegativesRankingLoss,
        MultipleNegativesRankingLoss,
    )
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments

    torch.manual_seed(0)
    model = SentenceTransformer(model_path or minilm_path(), device="cpu" if use_cpu else "cuda")
    model.max_seq_length = args.length
    data = datasets.Dataset.from_dict({"anchor": sentences, "positive": sentences})
    targs = SentenceTransformerTrainingArguments(output_dir=out_dir, per_device_train_batch_size=args.batch_size,
                                                 learning_rate=3e-5, max_steps=args.warmup + args.steps,
                                                 logging_steps=10_000, save_strategy="no", report_to="none",
                                                 disable_tqdm=True, use_cpu=use_cpu, seed=0,
                                                 dataloader_drop_last=True, bf16=args.precision == "bf16")
    loss = (CachedMultipleNegativesRankingLoss(model, scale=20.0, mini_batch_size=cached_minibatch_size)
            if cached_minibatch_size else MultipleNegativesRankingLoss(model, scale=20.0))
    return SentenceTransformerTrainer(model=model, args=targs, train_dataset=data, loss=loss,
                                      callbacks=list(callbacks))


def run_hf_cse(sentences, args, out_dir, **trainer_kwargs) -> list[float]:
    timer = StepTimer()
    hf_cse_trainer(sentences, args, out_dir, [timer], **trainer_kwargs).train()
    return timer.times[args.warmup:]


def run_sentence_transformers(sentences, args, out_dir) -> list[float]:
    timer = StepTimer()
    sentence_transformers_trainer(sentences, args, out_dir, [timer]).train()
    return timer.times[args.warmup:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, steps=6, warmup=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="both trainers in this precision (bf16: --bf16 autocast); results_<precision>.json")
    parser.add_argument("--with_padded", action="store_true",
                        help="also hf_cse with --padding_free false (its default before the padding-free forward)")
    args = parser.parse_args()
    threads = setup_threads(args.threads)
    logging.disable(logging.WARNING)
    sentences = load_sentences(args.data, args.batch_size * (args.warmup + args.steps), args.offset)
    order = [("hf_cse", run_hf_cse), ("sentence_transformers", run_sentence_transformers)]
    if args.with_padded:
        order.insert(1, ("hf_cse_padded", functools.partial(run_hf_cse, padding_free=False)))
    times = {name: [] for name, _ in order}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, fn in order if r % 2 == 0 else order[::-1]:
                t = fn(sentences, args, tmp)
                times[name] += t
                print(f"round {r + 1} {name}: median step {summarize(t)['median_s']:.3f} s")
    stats = {name: summarize(t) for name, t in times.items()}
    for s in stats.values():
        s["sentences_per_s"] = args.batch_size / s["median_s"]
    ratio = stats["hf_cse"]["sentences_per_s"] / stats["sentence_transformers"]["sentences_per_s"]
    print()
    print_table(["framework", "median step s", "min step s", "sentences/s", "steps"],
                [[n, s["median_s"], s["min_s"], s["sentences_per_s"], s["n"]] for n, s in stats.items()])
    print(f"\nthroughput ratio hf_cse / sentence-transformers = {ratio:.3f}  (target >= 1.1)")
    if args.with_padded:
        padded = stats["hf_cse_padded"]["sentences_per_s"] / stats["sentence_transformers"]["sentences_per_s"]
        print(f"hf_cse padded / sentence-transformers = {padded:.3f}")
    save_results("train_throughput" + ("" if args.precision == "fp32" else f"_{args.precision}"), {
        "benchmark": "bench_train_throughput",
        "settings": common_settings(args, rounds=args.rounds, precision=args.precision,
                                    learning_rate=3e-5, dropout=0.1, hf_cse_pooler="avg",
                                    hf_cse_projector="mlp", temperature=0.05),
        "machine": machine_info(threads),
        "results": stats,
        "ratio_hf_cse_over_st": ratio,
        "target": ">= 1.1",
    }, not args.no_save)


if __name__ == "__main__":
    main()
