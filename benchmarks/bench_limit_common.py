"""The machine's limit, for the benchmarks that compare a step against it: model FLOPs of an encoder step and the
measured GEMM peak (large square and the encoder's own shapes), timed with a device synchronisation.

Model FLOPs (the "MFU" convention of PaLM, Chowdhery et al. 2022, appendix B): a matrix product of ``(m, k)`` by
``(k, n)`` is ``2mkn`` FLOPs; per token and layer the encoder's products are the Q, K, V and output projections
(``4h^2`` weights) and the feed-forward pair (``2hf``), plus attention's two products with every key
(``2 * 2 * s * h``); backward is twice the forward. Embedding look-ups, norms, activations, dropout, softmax and the
optimizer are not counted: they are what the step spends beyond the arithmetic. A recomputed forward (the cached
mode's graph-free pass) is not model arithmetic either; :func:`step_flops` reports it apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def encoder_shape(config) -> dict[str, int]:
    """Layers, hidden size and feed-forward size of a BERT-like encoder config (BERT, RoBERTa, MiniLM, ...;
    DistilBERT's names too)."""
    get = lambda *names: next(getattr(config, n) for n in names if getattr(config, n, None) is not None)  # noqa: E731
    return {"layers": int(get("num_hidden_layers", "n_layers")), "hidden": int(get("hidden_size", "dim")),
            "ffn": int(get("intermediate_size", "hidden_dim"))}


def forward_flops(config, lengths: Sequence[int]) -> float:
    """Forward model FLOPs of the encoder on rows of the given token counts (each row attends within itself)."""
    s = encoder_shape(config)
    h, f, layers = s["hidden"], s["ffn"], s["layers"]
    tokens = sum(lengths)
    linear = 2 * tokens * (4 * h * h + 2 * h * f)
    attention = 4 * h * sum(n * n for n in lengths)  # Q K^T and P V: 2 * n * n * h each, per row
    return float(layers * (linear + attention))


def head_flops(hidden: int, rows: int, projector_layers: int = 1) -> float:
    """Forward FLOPs of a ``hidden x hidden`` projector on the pooled rows (SimCSE's MLP head: one layer)."""
    return float(2 * rows * hidden * hidden * projector_layers)


def step_flops(config, rows: int, padded_length: int, real_lengths: Sequence[int] | None = None,
               projector_layers: int = 1, recomputed_forward: bool = False) -> dict[str, float]:
    """Model FLOPs of one training step (forward + backward = 3 forwards) over ``rows`` encoder rows padded to
    ``padded_length``: counting the padding (what the hardware computes) and only ``real_lengths`` (the work the
    batch needs; equal when no length is given). ``recomputed_forward``: the cached mode's extra forward, reported
    as ``hardware_padded`` (model FLOPs + one forward)."""
    real_lengths = list(real_lengths) if real_lengths is not None else [padded_length] * rows
    if len(real_lengths) != rows:
        raise ValueError(f"real_lengths has {len(real_lengths)} rows, expected {rows}.")
    hidden = encoder_shape(config)["hidden"]
    head = head_flops(hidden, rows, projector_layers)
    padded_fwd = forward_flops(config, [padded_length] * rows) + head
    real_fwd = forward_flops(config, real_lengths) + head
    out = {"padded": 3 * padded_fwd, "real": 3 * real_fwd, "padded_tokens": rows * padded_length,
           "real_tokens": sum(real_lengths), "padding_fraction": 1 - sum(real_lengths) / (rows * padded_length)}
    out["hardware_padded"] = out["padded"] + (padded_fwd if recomputed_forward else 0.0)
    return out


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; a CPU needs nothing)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_per_call(fn: Callable[[], object], device, reps: int, warmup: int = 2) -> float:
    """Seconds per call of ``fn``: ``warmup`` untimed calls, then ``reps`` calls between two synchronisations."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / reps


def gemm_tflops(m: int, k: int, n: int, dtype: str, device="cpu", reps: int = 10, warmup: int = 2) -> dict:
    """Measured TFLOP/s of ``(m, k) @ (k, n)`` in ``dtype`` (fp32, bf16, fp16) on ``device``."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(m, k, generator=generator).to(device=device, dtype=DTYPES[dtype])
    b = torch.randn(k, n, generator=generator).to(device=device, dtype=DTYPES[dtype])
    out = torch.empty(m, n, device=device, dtype=DTYPES[dtype])
    seconds = time_per_call(lambda: torch.mm(a, b, out=out), device, reps, warmup)
    return {"m": m, "k": k, "n": n, "dtype": dtype, "seconds": seconds, "tflops": 2 * m * k * n / seconds / 1e12,
            "reps": reps}


def encoder_gemm_shapes(config, tokens: int) -> dict[str, tuple[int, int, int]]:
    """The encoder's own forward products on ``tokens`` rows: a Q/K/V/output projection, feed-forward in and out."""
    s = encoder_shape(config)
    h, f = s["hidden"], s["ffn"]
    return {"proj": (tokens, h, h), "ffn_in": (tokens, h, f), "ffn_out": (tokens, f, h)}


def gemm_peak(config, tokens: int, dtypes: Sequence[str], square: int, device="cpu", reps: int = 10) -> dict:
    """Measured GEMM throughput per dtype: a ``square``^3 product and the encoder's own shapes; ``peak_tflops``
    is the best of them (the reference a step's model FLOPs are divided by)."""
    out = {}
    for dtype in dtypes:
        shapes = {"square": (square, square, square), **encoder_gemm_shapes(config, tokens)}
        runs = {name: gemm_tflops(*shape, dtype, device, reps) for name, shape in shapes.items()}
        out[dtype] = {"shapes": runs, "peak_tflops": max(r["tflops"] for r in runs.values())}
    return out


def fraction_of_peak(flops: float, seconds: float, peak_tflops: float) -> dict[str, float]:
    """Achieved TFLOP/s of ``flops`` done in ``seconds`` and its fraction of ``peak_tflops``."""
    achieved = flops / seconds / 1e12
    return {"achieved_tflops": achieved, "fraction_of_peak": achieved / peak_tflops}
