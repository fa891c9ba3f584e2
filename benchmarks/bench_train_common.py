"""Shared pieces of the training benchmarks: the text slice, the packaged encoder, step timing, results files.

Text: a fixed slice of ``../shared/data/unsup/wiki_sentences.txt`` (read in place, never copied), so every
benchmark and every run sees the same sentences. Encoder: the packaged all-MiniLM-L6-v2 (works offline).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

WIKI = ROOT.parent / "shared" / "data" / "unsup" / "wiki_sentences.txt"
RESULTS = Path(__file__).resolve().parent / "results"


def add_common_args(parser, steps: int = 8, warmup: int = 2) -> None:
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--length", type=int, default=32, help="max_seq_length (truncation)")
    parser.add_argument("--steps", type=int, default=steps, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed steps per variant first")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: shared machine)")
    parser.add_argument("--data", type=Path, default=WIKI, help="one sentence per line")
    parser.add_argument("--offset", type=int, default=0, help="first line of the slice")
    parser.add_argument("--no_save", action="store_true", help="do not write benchmarks/results/*.json")


def common_settings(args, **extra) -> dict:
    """The ``settings`` block of a results file: the flags of :func:`add_common_args`, then ``extra``."""
    return {"batch_size": args.batch_size, "length": args.length, "steps": args.steps, "warmup": args.warmup,
            "data": f"{args.data.name} lines {args.offset}..", "model": "all-MiniLM-L6-v2 (packaged)", **extra}


def setup_threads(threads: int | None) -> int:
    """Default 1 thread: on a shared, loaded 2-core machine two OpenMP threads per process contend (measured
    2-3x slower per step here); pass --threads 2 (or more) on a quiet machine."""
    torch.set_num_threads(threads or 1)
    return torch.get_num_threads()


def load_sentences(path: Path, n: int, offset: int = 0) -> list[str]:
    """Lines ``offset .. offset+n`` of the corpus (non-blank), read in place."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} not found: the benchmarks read the shared corpus in place; pass --data FILE.")
    out: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i < offset or not line.strip():
                continue
            out.append(line.strip())
            if len(out) == n:
                break
    if len(out) < n:
        raise ValueError(f"{path} has only {len(out)} usable lines after line {offset}; need {n}.")
    return out


def minilm_path() -> str:
    from hf_cse.encoders import default_encoder

    return default_encoder()


def summarize(times: list[float]) -> dict[str, float]:
    return {
        "median_s": statistics.median(times),
        "mean_s": statistics.fmean(times),
        "min_s": min(times),
        "stdev_s": statistics.stdev(times) if len(times) > 1 else 0.0,
        "n": len(times),
    }


def step_paths(trainer) -> dict:
    """Which step an hf_cse ``ContrastiveTrainer`` ran: the CUDA-graph one (captures, replays; or eager, and why)
    and its optimizer's (a graph of its own, or eager)."""
    decision, graphs, optimizer = trainer.graph_decision, trainer.graph_step, trainer.graphed_optimizer
    return {"graph_step": {"on": decision.on, "reason": decision.reason,
                           **({"captures": graphs.captures, "replays": graphs.replays, "failed": graphs.failed}
                              if graphs else {})},
            "optimizer_step": {"graph_replays": optimizer.replays, "failed": optimizer.failed} if optimizer
            else "eager"}


def machine_info(threads: int) -> dict:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": threads,
        "processor": platform.processor() or platform.machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def save_results(name: str, payload: dict, enabled: bool = True) -> Path | None:
    if not enabled:
        return None
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwrote {path.relative_to(ROOT)}")
    return path


def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [[str(h) for h in headers]] + [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for k, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
        if k == 0:
            print("  ".join("-" * w for w in widths))


class StepTimer:
    """A ``transformers.TrainerCallback`` timing every optimizer step end to end: the interval between
    consecutive step ends, so fetching and collating the batch (tokenizing, for sentence-transformers)
    counts, as it does for a user.

    On a GPU the steps run asynchronously, so a single interval is not one step's time: ``window_s`` is the time
    from the end of step ``warmup`` to the end of the last step with the device synchronised at both ends
    (``window_steps`` steps); on a CPU it is the sum of the same intervals."""

    def __new__(cls, warmup: int = 0):
        from bench_limit_common import synchronize
        from transformers import TrainerCallback

        class _Timer(TrainerCallback):
            def __init__(self):
                self.times: list[float] = []
                self.window_s: float | None = None
                self.window_steps = 0
                self._last = self._start = None

            def _now(self, args) -> float:
                synchronize(args.device)
                return time.perf_counter()

            def on_train_begin(self, args, state, control, **kwargs):
                self._last = self._now(args)
                if warmup == 0:
                    self._start = self._last

            def on_step_end(self, args, state, control, **kwargs):
                step = state.global_step
                now = self._now(args) if step in (warmup, state.max_steps) else time.perf_counter()
                self.times.append(now - self._last)
                self._last = now
                if step == warmup:
                    self._start = now
                if step == state.max_steps and self._start is not None:
                    self.window_s, self.window_steps = now - self._start, step - warmup

        return _Timer()


class ManualVariant:
    """One training configuration driven step by step (forward + objectives + aux + backward + AdamW), so that
    variants can be interleaved step by step and a load change on the shared machine hits them alike.

    ``loss_times`` records the forward time of the objectives (the loss functions incl. their metrics),
    ``collate_times`` the collator's (not part of the step time: it runs in the dataloader).
    """

    def __init__(self, name: str, model, collator, lr: float = 1e-6, objectives=None, optimizer=None,
                 precision: str = "fp32"):
        from hf_cse.objectives import build_objectives

        self.name, self.model, self.collator = name, model.train(), collator
        self.precision = precision  # bf16: the model's forward under CPU autocast, as accelerate wraps it
        self.objectives = objectives if objectives is not None else build_objectives(model.config)
        self.optimizer = optimizer or torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        self.step_times: list[float] = []
        self.loss_times: list[float] = []
        self.collate_times: list[float] = []

    def step(self, features, record: bool) -> None:
        """One step; its phases are ``torch.profiler`` scopes ``phase::collate`` .. ``phase::optimizer`` (free
        when no profiler runs), which ``bench_limit.py`` attributes the operators' time with."""
        from torch.profiler import record_function

        from hf_cse.objectives import compute_objectives
        from hf_cse.precision import autocast

        collate_start = time.perf_counter()
        with record_function("phase::collate"):
            batch = self.collator(features)  # not in the step time: the collator runs in the dataloader
        start = time.perf_counter()
        with record_function("phase::forward"), autocast(self.precision, "cpu"):
            out = self.model(**batch)
        loss_start = time.perf_counter()
        with record_function("phase::loss"):
            loss, _ = compute_objectives(self.objectives, out.embeddings)
            for term in out.aux_losses.values():
                loss = loss + term
        loss_end = time.perf_counter()
        with record_function("phase::backward"):
            loss.backward()
        with record_function("phase::optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        end = time.perf_counter()
        if record:
            self.step_times.append(end - start)
            self.loss_times.append(loss_end - loss_start)
            self.collate_times.append(start - collate_start)


def loss_variants(encoder: str, collator, loss_names: list[str], **model_kwargs) -> list[ManualVariant]:
    """One SimCSE model (cls pooler, MLP projector) shared by one variant per loss: the variants differ only by
    their objectives, so step-time differences are the loss's own cost."""
    from hf_cse.losses import build_loss
    from hf_cse.models import SimCSEModel
    from hf_cse.objectives import Objective

    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(encoder, loss="infonce", **model_kwargs)
    shared = ManualVariant("infonce", model, collator)
    out = []
    for name in loss_names:
        objectives = [Objective("contrastive", 1.0, build_loss(name))]
        out.append(ManualVariant(name, model, collator, objectives=objectives, optimizer=shared.optimizer))
    return out


def time_loss(loss_fn, n: int, dim: int, reps: int) -> dict[str, float]:
    """Forward + backward of a loss module alone on leaf embeddings ``(n, dim)`` (incl. its input checks and
    logged metrics), median of ``reps`` repetitions after 2 untimed ones."""
    torch.manual_seed(0)
    z1, z2, z3 = (torch.randn(n, dim, requires_grad=True) for _ in range(3))
    extra = {k: z3 for k in loss_fn.extra_inputs}
    fwd, total = [], []
    for _ in range(reps + 2):
        start = time.perf_counter()
        out = loss_fn(z1, z2, **extra)
        mid = time.perf_counter()
        out.loss.backward()
        end = time.perf_counter()
        fwd.append(mid - start)
        total.append(end - start)
    return {"loss_fwd_s": statistics.median(fwd[2:]), "loss_fwd_bwd_s": statistics.median(total[2:])}


def run_interleaved(variants, feats, warmup: int, steps: int) -> None:
    """Round r = one step of every variant, in an order rotated by r (load changes hit all variants alike)."""
    for r in range(warmup + steps):
        shift = r % len(variants)
        for v in variants[shift:] + variants[:shift]:
            v.step(feats, record=r >= warmup)
        print(f"round {r + 1}/{warmup + steps} done", flush=True)


def features(tokenizer, sentences: list[str], length: int) -> list[dict]:
    enc = tokenizer(sentences, truncation=True, max_length=length)
    return [{k: enc[k][i] for k in enc} for i in range(len(sentences))]
