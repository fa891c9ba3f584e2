"""Gradient-cache mode: contrastive batches larger than memory allows (Gao et al., 2021, "Scaling Deep
Contrastive Learning Batch Size under Memory Limited Setup", GradCache).

A contrastive loss couples every row of the batch, so the batch cannot simply be split into gradient
accumulation steps (that would shrink the set of negatives). GradCache splits only the *encoder* work:

1. **embed**: run each mini-batch of ``m`` rows through the model without a graph, recording the RNG
   state before each one; concatenate the embeddings ``z`` of the whole batch (cheap: ``B x H``);
2. **loss**: compute the loss on the full batch of embeddings (gathered across processes as usual) and
   its gradient ``g = dL/dz`` — the "gradient cache";
3. **replay**: for each mini-batch, restore its RNG state (so dropout draws the *same* masks), recompute
   its embeddings with a graph and backpropagate ``sum(z_chunk * g_chunk)``, whose parameter gradient is
   exactly the mini-batch's share of ``dL/dtheta`` (chain rule).

Peak activation memory is that of one mini-batch of ``m`` sentences instead of ``B``; the price is a
second forward of the encoder without a graph (about +35 % step time: a forward is ~1/3 of fwd + bwd).
The gradient equals the plain one computed with the same dropout masks (``tests/trainer/test_cached.py``).

Not row-separable models are refused: a method whose forward computes a term over the whole batch (DiffCSE's RTD
loss) and a projector that mixes the batch's rows (BatchNorm's statistics) each declare that their rows do not split
(``splits_into_minibatches``), so neither would match the plain full-batch step.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import get_device_states, set_device_states

from .cuda_graphs import CUDA_GRAPH_COMPILE_MODES
from .errors import CSEError

Embeddings = dict[str, torch.Tensor]


class IncompatibleOptionsError(CSEError):
    """A combination of training options that cannot work together; the message names the fix."""


@dataclass
class RandState:
    """The RNG state of the CPU and of every accelerator device a mini-batch lives on.

    Captured before a mini-batch's first forward and restored before its replay, so dropout (and any other
    random op in the forward) draws exactly the same numbers twice — as GradCache's ``RandContext``.
    """

    cpu: torch.Tensor
    devices: list[int]
    device_states: list[torch.Tensor]

    @classmethod
    def capture(cls, *tensors: torch.Tensor) -> "RandState":
        devices, states = get_device_states(*tensors)
        return cls(torch.get_rng_state(), devices, states)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.devices:
            set_device_states(self.devices, self.device_states)




def runs_cached(minibatch_size: int | None, rows: int) -> bool:
    """Whether a batch of ``rows`` takes the cached step: a batch no larger than one mini-batch trains plainly (the
    cache would only add a second forward)."""
    return bool(minibatch_size) and rows > minibatch_size


def cached_mode_note(minibatch_size: int | None, batch_size: int) -> str:
    """What the trainer's batch log line says of the cached mode (:func:`runs_cached`): its mini-batches, or that
    each step trains plainly."""
    if not minibatch_size:
        return ""
    if not runs_cached(minibatch_size, batch_size):
        return (f"; cached mode off: a batch of {batch_size} fits in one encoder mini-batch of {minibatch_size}, so "
                "each step trains plainly")
    return f"; encoder mini-batches of {minibatch_size} (cached mode)"


def check_cached_without_cuda_graphs(training_args, minibatch_size: int | None) -> None:
    """Refuse the cached mode under CUDA graphs: a graph's outputs are overwritten by its next replay, and the
    cached mode keeps every mini-batch's embeddings of its first pass (on an H200, 2026-11-26: "accessing tensor
    output of CUDAGraphs that has been overwritten"). A CPU compiles without graphs, which works."""
    mode = getattr(training_args, "torch_compile_mode", None)
    backend = getattr(training_args, "torch_compile_backend", None)
    graphs = (f"torch_compile_mode {mode}" if mode in CUDA_GRAPH_COMPILE_MODES
              else "torch_compile_backend cudagraphs" if backend == "cudagraphs" else None)
    if minibatch_size and getattr(training_args, "torch_compile", False) and graphs and \
            training_args.device.type == "cuda":
        raise IncompatibleOptionsError(
            f"cached_minibatch_size is incompatible with {graphs} on a GPU: its CUDA graphs "
            "overwrite each mini-batch's embeddings with the next one's. Drop one of them, or compile with "
            "torch_compile_mode max-autotune-no-cudagraphs (or the default mode)."
        )


def check_cached_run(config, training_args, minibatch_size: int, deepspeed: bool) -> None:
    """What the trainer checks of a cached-mode run: the model (:func:`check_cached_compatible`), CUDA graphs
    (:func:`check_cached_without_cuda_graphs`) and DeepSpeed, whose engine allows one backward pass per step."""
    check_cached_compatible(config, minibatch_size)
    check_cached_without_cuda_graphs(training_args, minibatch_size)
    if deepspeed:
        raise IncompatibleOptionsError(
            "cached_minibatch_size needs several backward passes per step, which DeepSpeed's engine "
            "does not allow. Drop cached_minibatch_size or deepspeed."
        )


def check_cached_compatible(config, minibatch_size: int) -> None:
    """Raise :class:`IncompatibleOptionsError` for a model the cached mode would train differently."""
    if not isinstance(minibatch_size, int) or isinstance(minibatch_size, bool) or minibatch_size < 1:
        raise IncompatibleOptionsError(
            f"cached_minibatch_size must be a positive integer (0 or unset turns it off), got {minibatch_size!r}."
        )
    from .models import method_of
    from .models.heads import NO_PROJECTOR, projector_class

    method = method_of(config)
    if method is not None and not method.splits_into_minibatches:
        raise IncompatibleOptionsError(
            f"cached_minibatch_size is incompatible with method={method.method_name()!r}: "
            f"{method.why_no_minibatch_split}. Drop cached_minibatch_size (use more processes or "
            "activation_checkpointing for memory)."
        )
    if getattr(config, "do_mlm", False):
        raise IncompatibleOptionsError(
            "cached_minibatch_size is incompatible with do_mlm: the masked-LM term is computed in the model's own "
            "forward, which the cached mode splits. Drop one of them."
        )
    name = getattr(config, "projector", NO_PROJECTOR)
    projector = projector_class(name)
    if projector is not None and not projector.splits_into_minibatches:
        raise IncompatibleOptionsError(
            f"cached_minibatch_size is incompatible with the {name} projector: {projector.why_no_minibatch_split}. "
            "Drop cached_minibatch_size (use more processes or gradient checkpointing for memory), or use "
            "projector='mlp'."
        )


def split_batch(inputs: dict[str, torch.Tensor], minibatch_size: int) -> list[dict[str, torch.Tensor]]:
    """Rows ``[0, m), [m, 2m), ...`` of every tensor of ``inputs`` (the last chunk may be smaller)."""
    sizes = {v.shape[0] for v in inputs.values() if isinstance(v, torch.Tensor)}
    if len(sizes) != 1:
        raise CSEError(f"cached mode: every input tensor needs the same batch size, got sizes {sorted(sizes)}.")
    n = sizes.pop()
    return [
        {k: (v[start : start + minibatch_size] if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        for start in range(0, n, minibatch_size)
    ]


def merge_metrics(per_chunk: list[dict]) -> dict:
    """Mean over mini-batches, except durations (``*_seconds``), which add up. Device tensors stay on the device
    (no host synchronisation; :mod:`hf_cse.metrics`)."""
    sums: dict = defaultdict(float)
    for metrics in per_chunk:
        for key, value in metrics.items():
            sums[key] = sums[key] + value
    return {k: v if k.endswith("_seconds") else v / len(per_chunk) for k, v in sums.items()}


def check_no_aux(out, where: str) -> None:
    """Refuse a model output with auxiliary losses (computed per mini-batch, they cannot be cached)."""
    if out.aux_losses:
        raise IncompatibleOptionsError(
            f"cached_minibatch_size is incompatible with a model that returns per-process auxiliary losses "
            f"({', '.join(out.aux_losses)}; {where}): they are computed inside the forward on each mini-batch. "
            "Drop cached_minibatch_size for this method."
        )


@torch.no_grad()
def embed_minibatches(
    model: torch.nn.Module, chunks: list[dict[str, torch.Tensor]]
) -> tuple[Embeddings, list[RandState], dict]:
    """Step 1: the full batch's embeddings without a graph, and the RNG state before each mini-batch."""
    states: list[RandState] = []
    parts: dict[str, list[torch.Tensor]] = defaultdict(list)
    metrics: list[dict] = []
    for chunk in chunks:
        states.append(RandState.capture(*[v for v in chunk.values() if isinstance(v, torch.Tensor)]))
        out = model(**chunk)
        check_no_aux(out, "first pass")
        for name, z in out.embeddings.items():
            parts[name].append(z)
        metrics.append(out.metrics)
    return {name: torch.cat(zs) for name, zs in parts.items()}, states, merge_metrics(metrics)


def replay_minibatches(
    model: torch.nn.Module,
    chunks: list[dict[str, torch.Tensor]],
    states: list[RandState],
    grads: Embeddings,
    backward: Callable[[torch.Tensor], None],
    no_sync: Callable[[], AbstractContextManager] = nullcontext,
) -> Iterator[Embeddings]:
    """Step 3: recompute each mini-batch with its recorded RNG state and backpropagate the cached gradient.

    ``backward`` is the trainer's backward (``accelerator.backward``: loss scaling, DDP hooks). Every
    mini-batch but the last runs inside ``no_sync()`` so DDP all-reduces the parameter gradients once.
    Yields each mini-batch's recomputed (detached) embeddings, which tests compare with the first pass.
    """
    start = 0
    for i, (chunk, state) in enumerate(zip(chunks, states)):
        state.restore()
        context = no_sync() if i < len(chunks) - 1 else nullcontext()
        with context:
            out = model(**chunk)
            check_no_aux(out, "replay")
            n = next(iter(out.embeddings.values())).shape[0]
            surrogate = None
            for name, z in out.embeddings.items():
                g = grads.get(name)
                if g is None:  # an embedding no loss used (e.g. z_nodropout of a loss that ignores it)
                    continue
                term = (z * g[start : start + n].to(z.dtype)).sum()
                surrogate = term if surrogate is None else surrogate + term
            if surrogate is not None:
                backward(surrogate)
        start += n
        yield {name: z.detach() for name, z in out.embeddings.items()}


def cached_step(
    model: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    minibatch_size: int,
    loss_fn: Callable[[Embeddings], tuple[torch.Tensor, dict]],
    backward: Callable[[torch.Tensor], None],
    no_sync: Callable[[], AbstractContextManager] = nullcontext,
    loss_scale: float = 1.0,
) -> tuple[torch.Tensor, dict]:
    """One GradCache step: embed (no graph) -> loss and d loss / d embeddings -> replay with backward.

    ``loss_fn`` maps the local batch's embeddings to ``(loss, metrics)`` (the trainer gathers across
    processes inside it). ``loss_scale`` multiplies the loss before differentiation (``1/GA steps``).
    Returns the detached, unscaled loss and the merged metrics; parameter gradients are accumulated.
    """
    chunks = split_batch(inputs, minibatch_size)
    embeddings, states, model_metrics = embed_minibatches(model, chunks)
    leaves = {name: z.detach().requires_grad_(True) for name, z in embeddings.items()}
    with torch.enable_grad():
        loss, metrics = loss_fn(leaves)
        grads = torch.autograd.grad(loss * loss_scale, list(leaves.values()), allow_unused=True)
    cache = {name: g for name, g in zip(leaves, grads) if g is not None}
    # the replay rewinds the RNG; afterwards continue from where the first pass and the loss left it, so the
    # next step does not reuse the random numbers the loss drew (e.g. GS noise) as dropout masks
    after = RandState.capture(*[v for v in inputs.values() if isinstance(v, torch.Tensor)])
    for _ in replay_minibatches(model, chunks, states, cache, backward, no_sync):
        pass
    after.restore()
    metrics.update(model_metrics)
    return loss.detach(), metrics
