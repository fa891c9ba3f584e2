"""What ``gpu_check.py`` runs: its parts and their time budgets, the runs of each part (:class:`Run`), the
plan's validation, and the random BERT-base encoder and the text it trains on (no network, no data set)."""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PARTS = ("tests", "peak", "throughput", "scale", "compile", "recipe", "engines", "attention", "padding", "graphs",
         "compile512", "loader")
#: what a plain ``gpu_check.sh`` runs: the parts measured in earlier sessions only when named with --parts
#: (attention, padding, graphs: sections 6 and 12 of benchmarks/README.md; scale and engines: sections 15 and 18)
DEFAULT_PARTS = ("tests", "peak", "throughput", "compile", "recipe")
#: seconds each part's process may take (a hard limit; no run starts past 80 % of it). The default parts add up to
#: at most 590 s, so that with the encoder built first the whole check stays within 10 minutes. On an H100 on
#: 2026-11-27 (benchmarks/README.md section 18) tests, peak, throughput and engines took 80, 10, 105 and 128 s (ZeRO-3
#: skipped), a torch.compile run 37 s (32 s of it compiling and capturing); the recipe's process needed ~75 s
#: uncompiled
BUDGET_S = {"tests": 95, "peak": 15, "throughput": 75, "scale": 45, "compile": 270, "recipe": 130, "engines": 150,
            "attention": 40, "padding": 55, "graphs": 120, "compile512": 110, "loader": 60}
#: the parts made of trainer runs (the others: the cuda tests, the GEMM peak, and the scripted recipe / engines)
RUN_PARTS = ("throughput", "scale", "compile", "attention", "padding", "graphs", "compile512", "loader")
#: the parts run by their own script (benchmarks/gpu_<part>.py --out DIR --encoder PATH [--dry-run] [--budget-s N])
SCRIPT_PARTS = ("recipe", "engines")
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
    # hf_cse's CUDA-graph step (hf_cse/cuda_graphs.py): "auto" (its default: on where it applies), "off" (eager)
    cuda_graphs: Literal["auto", "on", "off"] = "auto"
    # False: the graph step's clipping and optimizer step run eagerly (hf_cse/optimizer_graph.py not used)
    optimizer_graph: bool = True
    # torch.profiler over the last warm-up steps: the device's time by kernel kind (benchmarks/gpu_profile.py)
    profile: bool = False
    # False: hf_cse's attention keeps SDPA under torch.compile on CUDA, where by default sentences of at most 32 tokens
    # take the matmul + softmax attention (hf_cse/models/fast_dropout.py; x1.045 / x1.099 at b64 / b1024: section 21)
    matmul_attention: bool = True
    # processes fetching and collating the batches (TrainingArguments.dataloader_num_workers; 0: the training loop's)
    dataloader_num_workers: int = 0


def build_plan(dry_run: bool) -> dict:
    """What every part runs. The dry run keeps the variants, with batches 8x smaller, no warm-up and 1 step."""
    b = (lambda n: n // 8) if dry_run else (lambda n: n)  # noqa: E731  batch sizes
    w = (lambda n: 0) if dry_run else (lambda n: n)  # noqa: E731  warm-up steps
    s = (lambda n: 1) if dry_run else (lambda n: n)  # noqa: E731  timed steps
    flash = _flash_attn_importable()
    b64 = dict(framework="hf_cse", batch_size=b(64), warmup=w(5), steps=s(40))
    eager = dict(cuda_graphs="off")
    return {
        "dry_run": dry_run,
        "encoder": TINY if dry_run else BERT_BASE,
        "rounds": 1,
        "gemm": {"square": 64 if dry_run else 8192, "reps": 1 if dry_run else 20, "tokens": 2 * b(64) * LENGTH},
        # hf_cse's default step (CUDA graphs where they apply) and its eager step beside sentence-transformers; the
        # cached mode at 512 against the plain step at 512 (the graph step with an eager optimizer, x1.00 at b64 on
        # an H100 in section 18, only on request: Run(..., optimizer_graph=False))
        "throughput": [Run("hf_cse b64", **b64, profile=True),
                       Run("hf_cse b64 eager", **b64, **eager, profile=True),
                       Run("st b64", **{**b64, "framework": "sentence_transformers"}),
                       Run("hf_cse b512", "hf_cse", b(512), w(5), s(15)),
                       Run("hf_cse b512 cached64", "hf_cse", b(512), w(5), s(15), cached_minibatch_size=b(64),
                           profile=True),
                       Run("st b512 cached64", "sentence_transformers", b(512), w(2), s(8),
                           cached_minibatch_size=b(64))],
        # how much of the GPU a larger batch fills, with and without the graph step (sentence-transformers at these
        # batches: sections 12 and 15 of benchmarks/README.md)
        "scale": [Run(name, "hf_cse", b(n), w(5), s(steps), **extra)
                  for n, steps in ((256, 20), (1024, 15))
                  for name, extra in ((f"hf_cse b{n}", {}), (f"hf_cse b{n} eager", eager))],
        # compiling takes minutes on a CPU: the dry run builds the compiled trainer without a step. torch.compile's
        # fused kernels (its default mode) inside hf_cse's graph step (its own CUDA graphs, reduce-overhead: section
        # 12) at 1024 and 64, profiled, each with hf_cse's attention (its matmul + softmax rule for short sentences),
        # the same with that rule off (SDPA's fused kernel: cuDNN's on an H100) and transformers' eager attention (the
        # variant section 21 measured). The compiled step at 512 plain and cached (0.554: section 19) only when asked:
        # --parts compile512
        "compile": [Run(f"hf_cse b{n} torch.compile + graph step{name}", "hf_cse", b(n), w(warm),
                        0 if dry_run else steps, torch_compile=True, profile=True, **extra)
                    for name, extra in (("", {}), (", SDPA (the matmul rule off)", {"matmul_attention": False}),
                                        (", eager attention", {"attn_implementation": "eager"}))
                    for n, warm, steps in ((1024, 5, 15), (64, 6, 40))],
        # the cached target with both sides compiled
        "compile512": [Run(f"hf_cse b512{' cached64' if mb else ''} torch.compile + graph step", "hf_cse", b(512),
                           w(5), 0 if dry_run else 15, cached_minibatch_size=mb and b(mb), torch_compile=True)
                       for mb in (None, 64)],
        # the compiled b64 step with the batches fetched and collated by two loader processes: does the host's own
        # work keep the device waiting (85 % busy in section 19)? Its peer is the compile part's b64 run
        "loader": [Run("hf_cse b64 torch.compile + graph step, 2 loader workers", "hf_cse", b(64), w(6),
                       0 if dry_run else 40, torch_compile=True, profile=True, dataloader_num_workers=2)],
        "attention": [Run(f"hf_cse b64 {name}", **b64, attn_implementation=None if name == "sdpa" else name)
                      for name in ("sdpa", "eager") + (("flash_attention_2",) if flash else ())],
        # padded sentences: hf_cse padded (its GPU default) against its padding-free forward forced on the GPU
        "padding": [Run(f"hf_cse b{n} {name}", "hf_cse", b(n), w(3), s(steps), padding_free=on, text="natural",
                        **eager)
                    for n, steps in ((64, 40), (1024, 10)) for name, on in (("padded", False), ("padding-free", True))],
        # torch.compile's reduce-overhead against eager mode on padded sentences and at batch 256 (section 12)
        "graphs": [Run(f"hf_cse b{n} {text} {name}", "hf_cse", b(n), w(6), 0 if dry_run and on else s(steps),
                       torch_compile=on, compile_mode="reduce-overhead" if on else None, text=text, **eager)
                   for n, steps, text in ((64, 40, "natural"), (256, 20, "full"))
                   for name, on in (("eager-mode", False), ("reduce-overhead", True))],
        # the scripted parts: SimCSE's one-epoch recipe shortened to `steps` (the full 15,625 projected from it) with
        # the options its fast run takes (gpu_recipe.FAST: torch.compile, the best model saved, dev batches of 512),
        # and the distributed engines
        "recipe": {"steps": 4 if dry_run else 1000, "eval_steps": 2 if dry_run else 125, "fast": True},
        "engines": {},
        "flash_attn_importable": flash,
        "budget_s": BUDGET_S,
    }


def validate_plan(plan: dict) -> None:
    """Refuse a plan that cannot run: budgets over 10 minutes, a cached mini-batch that does not divide the batch,
    an unknown framework or attention, compile on the sentence-transformers side, a run without steps on a GPU."""
    problems = []
    default = sum(plan["budget_s"][p] for p in DEFAULT_PARTS)
    if default > 590:  # the encoder is built before the parts
        problems.append(f"the default parts' budgets add up to {default} s > 590 s")
    for part in RUN_PARTS:
        for run in plan[part]:
            if run.framework not in ("hf_cse", "sentence_transformers"):
                problems.append(f"{run.name}: unknown framework {run.framework}")
            if run.cached_minibatch_size and run.batch_size % run.cached_minibatch_size:
                problems.append(f"{run.name}: cached mini-batch {run.cached_minibatch_size} does not divide "
                                f"{run.batch_size}")
            if run.attn_implementation not in (None, "sdpa", "eager", "flash_attention_2"):
                problems.append(f"{run.name}: unknown attention {run.attn_implementation}")
            if ((run.torch_compile or run.attn_implementation or run.padding_free is not None
                    or run.text != "full" or run.cuda_graphs != "auto" or not run.optimizer_graph
                    or not run.matmul_attention or run.dataloader_num_workers)
                    and run.framework != "hf_cse"):
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
