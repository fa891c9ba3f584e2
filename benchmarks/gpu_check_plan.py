"""What ``gpu_check.py`` runs: its parts and their time budgets, the runs of each part (:class:`Run`), the
plan's validation, and the random BERT-base encoder and the text it trains on (no network, no data set)."""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PARTS = ("tests", "peak", "throughput", "compile", "attention", "scale", "padding", "graphs")
#: seconds each part's process may take (a hard limit; no run starts past 80 % of it): 570 s in all, so that with the
#: encoder built first the whole check stays within 10 minutes (on an H200, 2026-11-26: 30, 9, 57, 79, 22, 41 and
#: 36 s for the first seven)
BUDGET_S = {"tests": 60, "peak": 20, "throughput": 100, "compile": 120, "attention": 40, "scale": 55, "padding": 55,
            "graphs": 120}
#: the parts made of trainer runs (the others: the cuda tests, the GEMM peak)
RUN_PARTS = ("throughput", "compile", "attention", "scale", "padding", "graphs")
LENGTH = 32
VOCAB_SIZE = 30522  # BERT's / MiniLM's WordPiece vocabulary size
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


@dataclass
class Run:
    """One trainer run of a part."""

    name: str
    framework: Literal["hf_cse", "sentence_transformers"]
    batch_size: int
    warmup: int
    steps: int
    cached_minibatch_size: int | None = None
    torch_compile: bool = False
    # None: as loaded (hf_cse: SDPA, with its fast dropout on a CPU only)
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] | None = None
    precision: str = "bf16"
    length: int = LENGTH
    # torch.compile's mode ("reduce-overhead": CUDA graphs); None: the Trainer's default
    compile_mode: str | None = None
    # None: hf_cse's choice (padding-free on CPU only); True: padding-free on the GPU too; False: padded
    padding_free: bool | None = None
    # "full": every row fills ``length`` (no padding); "natural": one demo-corpus line a sentence (padded batches)
    text: Literal["full", "natural"] = "full"


def build_plan(dry_run: bool) -> dict:
    """What every part runs. The dry run keeps the variants, with batches 8x smaller, no warm-up and 1 step."""
    b = (lambda n: n // 8) if dry_run else (lambda n: n)  # noqa: E731  batch sizes
    w = (lambda n: 0) if dry_run else (lambda n: n)  # noqa: E731  warm-up steps
    s = (lambda n: 1) if dry_run else (lambda n: n)  # noqa: E731  timed steps
    flash = _flash_attn_importable()
    b64 = dict(framework="hf_cse", batch_size=b(64), warmup=w(5), steps=s(40))
    return {
        "dry_run": dry_run,
        "encoder": TINY if dry_run else BERT_BASE,
        "rounds": 1 if dry_run else 2,
        "gemm": {"square": 64 if dry_run else 8192, "reps": 1 if dry_run else 20, "tokens": 2 * b(64) * LENGTH},
        "throughput": [Run("hf_cse b64", **b64),
                       Run("st b64", **{**b64, "framework": "sentence_transformers"}),
                       Run("hf_cse b512 cached64", "hf_cse", b(512), w(2), s(8), cached_minibatch_size=b(64)),
                       Run("st b512 cached64", "sentence_transformers", b(512), w(2), s(8),
                           cached_minibatch_size=b(64))],
        # compiling takes minutes on a CPU: the dry run builds the compiled trainer without a step
        "compile": [Run("hf_cse b64 eager-mode", **b64),
                    Run("hf_cse b64 torch.compile", **{**b64, "warmup": w(4), "steps": 0 if dry_run else 40},
                        torch_compile=True),
                    Run("hf_cse b64 torch.compile reduce-overhead",
                        **{**b64, "warmup": w(4), "steps": 0 if dry_run else 40}, torch_compile=True,
                        compile_mode="reduce-overhead")],
        "attention": [Run(f"hf_cse b64 {name}", **b64, attn_implementation=None if name == "sdpa" else name)
                      for name in ("sdpa", "eager") + (("flash_attention_2",) if flash else ())],
        # the host-bound batch-64 step against larger batches: how much of the GPU a batch fills
        "scale": [Run(f"{fw} b{n}", "hf_cse" if fw == "hf_cse" else "sentence_transformers", b(n), w(3), s(steps))
                  for n, steps in ((256, 20), (1024, 10)) for fw in ("hf_cse", "st")],
        # padded sentences: hf_cse's GPU default (padded) against its padding-free forward forced on the GPU
        "padding": [Run(f"hf_cse b{n} {name}", "hf_cse", b(n), w(3), s(steps), padding_free=on, text="natural")
                    for n, steps in ((64, 40), (1024, 10)) for name, on in (("padded", False), ("padding-free", True))],
        # CUDA graphs (torch.compile's reduce-overhead) on padded sentences (a shape per batch length) and at batch 256
        "graphs": [Run(f"hf_cse b{n} {text} {name}", "hf_cse", b(n), w(6), 0 if dry_run and on else s(steps),
                       torch_compile=on, compile_mode="reduce-overhead" if on else None, text=text)
                   for n, steps, text in ((64, 40, "natural"), (256, 20, "full"))
                   for name, on in (("eager-mode", False), ("reduce-overhead", True))],
        "flash_attn_importable": flash,
        "budget_s": BUDGET_S,
    }


def validate_plan(plan: dict) -> None:
    """Refuse a plan that cannot run: budgets over 10 minutes, a cached mini-batch that does not divide the batch,
    an unknown framework or attention, compile on the sentence-transformers side, a run without steps on a GPU."""
    problems = []
    if sum(plan["budget_s"].values()) > 590:  # the encoder is built before the parts
        problems.append(f"part budgets add up to {sum(plan['budget_s'].values())} s > 590 s")
    for part in RUN_PARTS:
        for run in plan[part]:
            if run.framework not in ("hf_cse", "sentence_transformers"):
                problems.append(f"{run.name}: unknown framework {run.framework}")
            if run.cached_minibatch_size and run.batch_size % run.cached_minibatch_size:
                problems.append(f"{run.name}: cached mini-batch {run.cached_minibatch_size} does not divide "
                                f"{run.batch_size}")
            if run.attn_implementation not in (None, "sdpa", "eager", "flash_attention_2"):
                problems.append(f"{run.name}: unknown attention {run.attn_implementation}")
            if (run.torch_compile or run.attn_implementation or run.padding_free is not None
                    or run.text != "full") and run.framework != "hf_cse":
                problems.append(f"{run.name}: compile / attention / padding variants are hf_cse runs")
            if run.compile_mode and not run.torch_compile:
                problems.append(f"{run.name}: a compile mode without torch_compile")
            if run.steps < 1 and not (plan["dry_run"] and run.torch_compile):
                problems.append(f"{run.name}: no timed step")
    if problems:
        raise SystemExit("gpu_check: invalid plan: " + "; ".join(problems))


def _flash_attn_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None


# ------------------------------------------------------------------ the encoder and the text (no network)

def corpus_lines() -> list[str]:
    from hf_cse.data import DEMO_CORPUS

    return [line.strip() for line in DEMO_CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def benchmark_sentences(n: int, seed: int = 0, text: Literal["full", "natural"] = "full") -> list[str]:
    """``n`` sentences, each four random demo-corpus lines: ``"full"``, whole (long enough to fill 32 tokens);
    ``"natural"``, their first 8-30 words (sentences of their own lengths, so batches are padded: about 30 % of a
    batch's positions at length 32)."""
    lines, rng = corpus_lines(), random.Random(seed)
    joined = (" ".join(rng.sample(lines, 4)) for _ in range(n))
    if text == "full":
        return list(joined)
    return [" ".join(s.split()[:rng.randint(8, 30)]) for s in joined]


def make_encoder(folder: Path, shape: dict, seed: int = 0) -> Path:
    """A random BERT encoder of ``shape`` with a WordPiece tokenizer whose vocabulary is the demo corpus's words,
    then characters, padded with ``[unusedN]`` to 30522 tokens, saved in ``folder``."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = sorted({w for line in corpus_lines() for w in re.findall(r"[a-z0-9]+|[^\sa-z0-9]", line.lower())})
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    tokens = list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars,
                                 *("##" + c for c in string.ascii_lowercase + string.digits), *words]))
    tokens += [f"[unused{i}]" for i in range(VOCAB_SIZE - len(tokens))]
    torch.manual_seed(seed)
    model = BertModel(BertConfig(vocab_size=len(tokens), max_position_embeddings=512, **shape))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True).save_pretrained(folder)
    return folder


def padding_check(encoder: Path, sentences: list[str], length: int) -> dict:
    """Real token counts of the sentences after truncation (the ``"full"`` text's rows all fill ``length``)."""
    from transformers import AutoTokenizer

    lengths = [len(ids) for ids in AutoTokenizer.from_pretrained(encoder)(sentences, truncation=True,
                                                                           max_length=length)["input_ids"]]
    return {"min_tokens": min(lengths), "padding_fraction": 1 - sum(lengths) / (length * len(lengths))}
