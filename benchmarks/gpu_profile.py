"""Where a training step's time goes on the device (gpu_check runs with ``profile=True``; issue 37).

:func:`profile_window` is a ``TrainerCallback`` that runs ``torch.profiler`` over a few steps of a trainer run (the
last warm-up steps, before the timed window starts, so the profiler's own cost is not timed); :func:`kernel_summary`
then says, per step: the device's kernel time by kind (GEMMs, attention, torch.compile's fused Triton kernels,
PyTorch's own elementwise / reduction kernels, the optimizer and clipping, copies), the busiest kernels, how many
kernels a step launches, and how much of the window the device was busy (the union of its kernels' intervals over
the window's wall time: near 1 the step is bound by the device's kernels, well below 1 by the host). Kernels
replayed from a CUDA graph are reported by CUPTI like launched ones. On a CPU (the dry run) the same summary is
made of the profiler's top-level CPU operators, so the code path is exercised without a GPU.
"""

from __future__ import annotations

import time

#: kernel kinds, first match wins (lower-case substrings of the kernel's name)
KINDS = (
    # LayerNorm's kernels before the optimizer's "norm_kernel" (vectorized_layer_norm_kernel: counted as clipping in
    # the uncompiled profiles of sections 19 and 21, 5.1 ms a step of the cached b512 one)
    ("elementwise and reductions (aten)", ("vectorized_layer_norm", "layer_norm_grad", "layernorm", "gammabeta")),
    ("attention", ("flash", "fmha", "attention", "mem_eff", "sdpa")),  # before gemm: "fmha_cutlassF_..."
    ("gemm", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "triton_tem", "sm90_", "sm80_", "addmm", "matmul")),
    ("optimizer and clipping", ("adam", "multi_tensor", "foreach", "norm_kernel")),
    ("fused by torch.compile (triton)", ("triton",)),
    ("copies and fills", ("memcpy", "memset", "copy", "fill")),
    ("elementwise and reductions (aten)", ("elementwise", "vectorized", "reduce", "layer_norm", "dropout", "gelu",
                                           "softmax", "embedding", "index", "scatter", "cat", "unrolled", "sort",
                                           "bernoulli", "fused_dropout")),
)


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in KINDS if any(k in low for k in keys)), "other")


def profile_window(first: int, last: int, device: str, sink: dict):
    """A callback profiling the steps ``first + 1`` .. ``last`` (1-based): started at the beginning of step
    ``first + 1``, stopped (the device synchronised) at the end of step ``last``; the profiler object and the
    window's wall time are put in ``sink`` for :func:`kernel_summary` after training."""
    import torch
    from bench_limit_common import synchronize
    from transformers import TrainerCallback

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)

    def sync():
        synchronize(device)

    class _Window(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == first and "profiler" not in sink:
                sync()
                sink["profiler"] = torch.profiler.profile(activities=activities)
                sink["profiler"].__enter__()
                sink["start"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if "profiler" in sink and "wall_s" not in sink:
                # when the host got here, before any wait: a host that runs ahead of the device marks its steps
                # early and waits at the end; one bound by its own work marks them a step's time apart
                sink.setdefault("host_step_ends", []).append(time.perf_counter() - sink["start"])
            if state.global_step == last and "profiler" in sink and "wall_s" not in sink:
                sync()
                sink["wall_s"] = time.perf_counter() - sink["start"]
                sink["profiler"].__exit__(None, None, None)
                sink["steps"] = last - first

    return _Window()


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def idle_gaps(intervals: list[tuple[float, float]], window_us: float, top: int = 5) -> dict:
    """The device's idle time in the window (its kernels' intervals, µs from the window's start): before the first
    kernel (the pipeline filling after the synchronised start), between kernels (the largest ``top``, with where
    they start), and after the last."""
    if not intervals:
        return {}
    spans = sorted(intervals)
    gaps, end = [], spans[0][1]
    for a, b in spans[1:]:
        if a > end:
            gaps.append((a - end, end))
        end = max(end, b)
    start = spans[0][0]
    return {"before_first_kernel_ms": start / 1e3, "after_last_kernel_ms": max(0.0, window_us - end) / 1e3,
            "between_kernels_ms": sum(g for g, _ in gaps) / 1e3,
            "gaps_over_100us": sum(1 for g, _ in gaps if g > 100),
            "largest": [{"us": g, "at_ms": at / 1e3} for g, at in sorted(gaps, reverse=True)[:top]]}


def kernel_summary(sink: dict, device: str, top: int = 20) -> dict:
    """Per-step device time by kind, the ``top`` kernels, kernels a step and the device's busy fraction."""
    if "wall_s" not in sink:
        return {"status": "not profiled (the run ended before the window closed)"}
    from torch.autograd import DeviceType

    events = sink["profiler"].events()
    origin = min((e.time_range.start for e in events), default=0.0)
    if device == "cuda":
        picked = [e for e in events if e.device_type == DeviceType.CUDA]
        what = "CUDA kernels, copies and fills (CUPTI; graph replays included)"
    else:
        picked = [e for e in events if e.device_type == DeviceType.CPU and e.cpu_parent is None]
        what = "top-level CPU operators (a CPU run: the code path only)"
    steps, wall_us = sink["steps"], sink["wall_s"] * 1e6
    per_kind: dict[str, float] = {}
    per_name: dict[str, list] = {}
    for e in picked:
        us = e.time_range.elapsed_us()
        per_kind[kind_of(e.name)] = per_kind.get(kind_of(e.name), 0.0) + us
        entry = per_name.setdefault(e.name, [0, 0.0])
        entry[0] += 1
        entry[1] += us
    spans = [(e.time_range.start, e.time_range.end) for e in picked]
    busy_us = _union_us(spans)
    # the window's start on the profiler's clock: its first recorded event of any kind (a host operator, right
    # after the profiler started); the time before the first kernel is then the host's latency to it
    host_ends = sink.get("host_step_ends", [])
    total_us = sum(per_kind.values())
    busiest = sorted(per_name.items(), key=lambda kv: -kv[1][1])[:top]
    return {
        "status": "ok" if picked else "no events recorded",
        "what": what,
        "steps": steps,
        "window_ms_per_step": wall_us / steps / 1e3,
        "device_busy_ms_per_step": busy_us / steps / 1e3,
        "device_busy_fraction": busy_us / wall_us if wall_us else None,
        "kernel_ms_per_step": total_us / steps / 1e3,
        "kernels_per_step": len(picked) / steps,
        # host-bound where the host's step ends are about a window's step apart; device-bound where they come early
        "host_ms_per_step": 1e3 * host_ends[-1] / len(host_ends) if host_ends else None,
        "host_step_ends_ms": [round(1e3 * t, 3) for t in host_ends],
        "idle": idle_gaps([(a - origin, b - origin) for a, b in spans], wall_us),
        "by_kind_ms_per_step": {k: v / steps / 1e3 for k, v in sorted(per_kind.items(), key=lambda kv: -kv[1])},
        "busiest": [{"name": name[:160], "kind": kind_of(name), "per_step": n / steps, "ms_per_step": us / steps / 1e3,
                     "mean_us": us / n} for name, (n, us) in busiest],
    }
