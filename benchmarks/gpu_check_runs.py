"""A part's training runs for ``gpu_check.py`` (in its child process): each :class:`~gpu_check_plan.Run` built as a
trainer (hf_cse's or sentence-transformers', ``bench_train_throughput.py``) with its variants of hf_cse's own rules
set for the run only, trained, timed (the window after the warm-up, CUDA synchronised at both ends), profiled
where asked, and recorded with its FLOPs."""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path

from bench_limit_common import step_flops
from bench_train_common import StepTimer, step_paths, summarize
from gpu_check_plan import LENGTH, Run, benchmark_sentences, padding_check
from gpu_profile import kernel_summary, profile_window


@contextmanager
def patched(module, name: str, value, when: bool):
    """With ``when``, ``module.name`` is ``value`` inside the block, and put back after (whatever happens inside)."""
    before = getattr(module, name)
    if when:
        setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def run_switches(run: Run) -> ExitStack:
    """The run's variants of hf_cse's own rules, set for the run only:
    - ``padding_free``: hf_cse's padding-free forward on the GPU too (the CPU's only, by design: this measures what it
      would give there);
    - not ``matmul_attention``: hf_cse's attention keeps SDPA under torch.compile on CUDA for short sentences too (the
      rule of hf_cse/models/fast_dropout.py off: no key length takes the matmul + softmax attention);
    - not ``optimizer_graph``: the graph step's clipping and optimizer step run eagerly (what they did before
      hf_cse/optimizer_graph.py): the trainer is told its optimizer cannot be captured."""
    from hf_cse import trainer_steps
    from hf_cse.models import fast_dropout, padding_free

    stack = ExitStack()
    stack.enter_context(patched(padding_free, "DEVICE_TYPES", (*padding_free.DEVICE_TYPES, "cuda"),
                                bool(run.padding_free)))
    stack.enter_context(patched(fast_dropout, "COMPILED_MATMUL_ATTENTION_MAX_KEYS", 0, not run.matmul_attention))
    stack.enter_context(patched(trainer_steps, "why_not_captured", lambda optimizer: "turned off by gpu_check",
                                not run.optimizer_graph))
    return stack


def _replay_ms(graph, reps: int = 20) -> float:
    """GPU time of one replay of a captured step (forward, loss, backward), timed with CUDA events: the step's time
    less this is the optimizer and what the host adds."""
    import torch

    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def profile_steps(run: Run) -> tuple[int, int]:
    """The steps a profiled run profiles (after ``first``, to ``last``): the last three warm-up steps (the first two
    of a shape warm up and capture), else the first timed step (the dry run: no warm-up)."""
    return (max(2, run.warmup - 3), run.warmup) if run.warmup >= 3 else (0, 1)


def _run_one(run: Run, encoder: Path, device: str, sentences: list[str], tmp: str) -> dict:
    import torch
    from bench_train_throughput import hf_cse_trainer, sentence_transformers_trainer
    from transformers import AutoConfig

    # a trainer of 0 steps is refused (it would train nothing): the dry run's compiled one is built for 1, not run
    args = argparse.Namespace(batch_size=run.batch_size, length=run.length, warmup=run.warmup,
                              steps=run.steps or 1, precision=run.precision)
    timer = StepTimer(run.warmup)
    use_cpu = device == "cpu"
    # the profiler before the timer: it stops (and syncs) before the timed window's first mark
    profiled: dict = {}
    callbacks = [profile_window(*profile_steps(run), device, profiled), timer] if run.profile else [timer]
    if run.framework == "hf_cse":
        trainer = hf_cse_trainer(sentences, args, tmp, callbacks, str(encoder), use_cpu, run.cached_minibatch_size,
                                 run.torch_compile, run.attn_implementation, run.padding_free is not False,
                                 run.compile_mode, run.cuda_graphs, run.dataloader_num_workers)
        attention = trainer.model.encoder.config._attn_implementation
    else:
        trainer = sentence_transformers_trainer(sentences, args, tmp, callbacks, str(encoder), use_cpu,
                                                run.cached_minibatch_size)
        attention = trainer.model[0].auto_model.config._attn_implementation
    out = {**asdict(run), "attention_in_use": attention}
    if run.torch_compile:  # a fresh trace: the compiled code of an earlier run of the part would be reused as it is,
        # blind to global switches such as cuDNN's attention (section 21's first "SDPA without cuDNN" runs were so)
        torch._dynamo.reset()
    if run.steps == 0:  # the dry run builds the compiled trainer without compiling (minutes on a CPU)
        out["status"] = "constructed (not run)"
        return out
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.train()
    out["wall_s"] = time.perf_counter() - start
    if run.framework == "hf_cse":  # which step ran: the CUDA-graph one, or eager (and why)
        out.update(step_paths(trainer))
        graphs = trainer.graph_step
        if graphs and graphs.graphs and device == "cuda" and not run.cached_minibatch_size:
            out["graph_step"]["replay_ms"] = _replay_ms(next(iter(graphs.graphs.values())).graph)
    step_s = timer.window_s / timer.window_steps
    out.update(status="ok", step_s=step_s, sentences_per_s=run.batch_size / step_s, window_steps=timer.window_steps,
               warmup_s=sum(timer.times[:run.warmup]), unsynced_intervals=summarize(timer.times[run.warmup:]))
    if run.text == "full":  # every row fills run.length; padded batches' FLOPs vary from batch to batch
        flops = step_flops(AutoConfig.from_pretrained(encoder), 2 * run.batch_size, run.length,
                           recomputed_forward=bool(run.cached_minibatch_size))
        out.update(model_flops=flops["padded"], hardware_flops=flops["hardware_padded"],
                   achieved_model_tflops=flops["padded"] / step_s / 1e12)
    if device == "cuda":
        out["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if run.profile:
        out["profile"] = kernel_summary(profiled, device)
    del trainer
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def part_runs(name: str, plan: dict, encoder: Path, device: str, budget: float, record) -> None:
    """The part's runs, ``plan['rounds']`` rounds for throughput (every other round reversed), once otherwise; a
    run that fails is recorded with its error, a run that would start past 80 % of the budget is skipped."""
    runs = plan[name]
    rounds = plan["rounds"] if name == "throughput" else 1
    needed = max(r.batch_size * (r.warmup + (r.steps or 1)) for r in runs)  # a trainer is built for 1 step at least
    texts = {run.text: benchmark_sentences(max(needed, 64), text=run.text) for run in runs}
    record("padding", {text: padding_check(encoder, sentences[:512], LENGTH) for text, sentences in texts.items()})
    start, results = time.perf_counter(), []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for run in runs if r % 2 == 0 else runs[::-1]:
                if time.perf_counter() - start > 0.8 * budget:
                    results.append({**asdict(run), "round": r + 1, "status": "skipped: part budget nearly spent"})
                    continue
                try:
                    with run_switches(run):
                        res = _run_one(run, encoder, device, texts[run.text], tmp)
                except Exception as exc:  # recorded, and the next run goes on (e.g. a kernel this GPU lacks)
                    res = {**asdict(run), "status": f"error: {type(exc).__name__}: {exc}"[:2000]}
                results.append({**res, "round": r + 1})
                print(f"[{name}] round {r + 1} {run.name}: {res['status']}"
                      + (f", step {res['step_s'] * 1e3:.1f} ms" if "step_s" in res else ""), flush=True)
                record("runs", results)
