"""The training step as one CUDA graph: forward of every view, the loss and the backward, captured once per batch
shape and replayed.

Why: on a GPU, a BERT-base contrastive step at the papers' batch (64 sentences, two views, 32 tokens) is bound by
the host launching about a thousand small kernels one by one, not by the arithmetic (benchmarks/README.md section
12: 40 ms a step on an H200 for ~3 ms of matrix work). A replayed graph launches them all at once.

How (PyTorch's whole-network capture, ``torch.cuda.graph``):

* **Static shapes.** Each batch is padded on the right to a length bucket (the next power of two, at least 8, at
  most the encoder's position limit), so a run meets a handful of shapes; one graph per shape (at most
  :data:`MAX_GRAPHS`), all sharing one memory pool. Padding positions carry attention mask 0 (labels -100): every
  pooling and loss reads the mask, so the padded batch gives the same embeddings. A tokenizer that pads on the
  left keeps each exact length instead.
* **Warm-up, capture, replay.** The first batch of a shape trains eagerly on the capture stream (libraries create
  their handles and workspaces there); the second is captured, then replayed -- a capture itself computes
  nothing. Every later batch of that shape is copied into the graph's input buffers and replayed.
* **Randomness.** PyTorch's CUDA generator is graph-safe: each replay draws the dropout masks (and any loss noise)
  at the generator's current offset, so two views still get independent masks and successive steps new ones.
* **Gradients.** The captured backward writes the parameters' gradients into buffers of the graph; after each
  replay they are handed back to the parameters (the Trainer sets gradients to None after every optimizer step).
  Gradient clipping and the optimizer step (fused AdamW, transformers' default with torch >= 2.8) replay a graph
  of their own over those buffers (:mod:`hf_cse.optimizer_graph`); the scheduler runs on the host.

What the graph cannot hold is refused by :func:`decide` with its reason (several processes: the gather and DDP's
hooks; gradient accumulation: a captured backward overwrites rather than adds; fp16's loss scaler;
``torch.compile`` in a mode that brings its own graphs; activation checkpointing). ``torch.compile`` in its default
mode composes: its fused kernels are what the graph captures. The gradient-cache mode has its own
graphs (:mod:`hf_cse.cached_graphs`). A capture that fails anyway
(e.g. an operation that reads the device on the host) is logged with its error and the run goes on eagerly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from .errors import CSEError

logger = logging.getLogger(__name__)

#: graphs kept per run (one per batch shape); batches of further shapes train eagerly
MAX_GRAPHS = 8
#: runs shorter than this stay eager in ``auto``: each shape costs one eager warm-up step and a capture
MIN_STEPS = 20
#: the input keys whose padding is ignored by setting this value (everything else pads with 0, the mask with 0)
LABEL_PAD = -100
SETTINGS = ("auto", "on", "off")
#: torch.compile modes that capture CUDA graphs of their own on a GPU (torch's "max-autotune-no-cudagraphs" does not)
CUDA_GRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class GraphDecision:
    """Whether the step runs as a CUDA graph, and why (one log line)."""

    on: bool
    reason: str

    def describe(self) -> str:
        return f"CUDA graphs: {'on' if self.on else 'off'} ({self.reason})"


def decide(setting: str, *, device_type: str, world_size: int, sharded: bool, grad_accumulation: int,
           compile_graphs: bool, fp16: bool, activation_checkpointing: bool, max_steps: int,
           method_reason: str | None) -> GraphDecision:
    """The rule for ``cuda_graphs`` (``auto`` / ``on`` / ``off``). ``on`` where it cannot apply raises
    :class:`ValueError` with the reason; ``auto`` turns it on wherever it applies and the run is at least
    :data:`MIN_STEPS` steps long. ``compile_graphs``: ``torch.compile`` in a mode with CUDA graphs of its own (in
    its default mode the compiled, fused kernels are captured here). ``method_reason``: why the method's forward
    cannot be captured, or None."""
    if setting not in SETTINGS:
        raise CSEError(f"cuda_graphs must be one of {', '.join(SETTINGS)}, got {setting!r}.")
    if setting == "off":
        return GraphDecision(False, "turned off")
    blockers = [
        (device_type != "cuda", f"the step runs on {device_type}, not a CUDA GPU"),
        (world_size > 1, f"{world_size} processes: the gather across processes and DDP's gradient hooks run outside "
                         "a graph"),
        (sharded, "FSDP / DeepSpeed shard the parameters and gather them inside the step"),
        (grad_accumulation > 1, "gradient accumulation: a captured backward overwrites the gradients instead of "
                                "adding to them"),
        (compile_graphs, "torch.compile's mode captures its own CUDA graphs (reduce-overhead / max-autotune)"),
        (fp16, "fp16's loss scaler checks the gradients on the host"),
        (activation_checkpointing, "activation checkpointing recomputes the forward with saved random states"),
        (method_reason is not None, str(method_reason)),
    ]
    reason = next((why for blocked, why in blockers if blocked), None)
    if reason is not None:
        if setting == "on":
            raise CSEError(f"cuda_graphs=on cannot apply: {reason}. Use cuda_graphs=auto or off.")
        return GraphDecision(False, reason)
    if setting == "auto" and 0 < max_steps < MIN_STEPS:
        return GraphDecision(False, f"a run of {max_steps} steps (< {MIN_STEPS}): capturing would not pay off")
    return GraphDecision(True, "forward, loss and backward captured once per batch shape and replayed"
                               + ("" if setting == "on" else "; cuda_graphs=off turns it off"))


def decide_for_run(setting: str, training_args, method_cls=None, *, sharded: bool | None = None,
                   activation_checkpointing: bool = False) -> GraphDecision:
    """:func:`decide` from a run's ``TrainingArguments`` and method class (before anything is loaded, as the command
    line checks ``on``; the trainer again with what it knows: ``sharded`` and the encoders' checkpointing)."""
    args = training_args
    compile_graphs = bool(args.torch_compile) and (args.torch_compile_mode in CUDA_GRAPH_COMPILE_MODES
                                                   or args.torch_compile_backend == "cudagraphs")
    return decide(
        setting, device_type=args.device.type, world_size=args.world_size,
        sharded=bool(args.fsdp or args.deepspeed) if sharded is None else sharded,
        grad_accumulation=args.gradient_accumulation_steps, compile_graphs=compile_graphs, fp16=args.fp16,
        activation_checkpointing=bool(activation_checkpointing or args.gradient_checkpointing
                                      or getattr(args, "activation_checkpointing", False)),
        max_steps=args.max_steps,
        method_reason=None if method_cls is None or method_cls.captures_in_cuda_graph else method_cls.why_no_cuda_graph)


def record_graph(fn, *, pool=None, stream=None):
    """Capture ``fn()`` as a CUDA graph (nothing runs yet) in memory ``pool`` on ``stream`` (torch's defaults where
    None); returns the graph and what ``fn`` returned (tensors each replay writes into)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        result = fn()
    return graph, result


def capture_failed(exc: BaseException, what: str, parameters=()) -> str:
    """After capturing ``what`` (e.g. "the step") raised ``exc``: logs it, sets the gradients of ``parameters`` to
    None (a half-captured backward may have left graph buffers there) and returns the error's first line, for the
    caller's ``failed``; the caller then runs ``what`` eagerly."""
    failed = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    logger.warning("CUDA graphs: capturing %s failed (%s); it runs eagerly", what, failed)
    for param in parameters:
        param.grad = None
    if torch.cuda.is_available():  # let the aborted capture's queued work end before eager kernels follow
        torch.cuda.synchronize()
    return failed


def length_bucket(length: int, cap: int | None) -> int:
    """The padded length of a batch of ``length`` tokens: the next power of two (at least 8), at most ``cap``
    (the encoder's position limit), never below ``length``."""
    bucket = max(8, 1 << (max(length, 1) - 1).bit_length())
    return max(length, min(bucket, cap)) if cap else bucket


class CapturedStep:
    """One shape's graph: its input buffers, and the loss, metrics and gradients it writes."""

    def __init__(self, graph, inputs, loss, metrics, grads):
        self.graph, self.inputs, self.loss, self.metrics, self.grads = graph, inputs, loss, metrics, grads

    def load(self, batch: dict[str, torch.Tensor], pads: dict[str, int]) -> None:
        """Copy ``batch`` into the input buffers, filling the positions past its length with each key's pad."""
        for key, value in batch.items():
            buffer = self.inputs[key]
            if buffer.shape == value.shape:
                buffer.copy_(value)
            else:
                length = value.shape[-1]
                buffer[..., :length].copy_(value)
                buffer[..., length:].fill_(pads[key])


class CudaGraphStep:
    """Runs ``forward_backward(batch) -> (detached loss, metrics)`` as a replayed CUDA graph (see the module
    docstring). ``parameters``: those that train (their gradients are handed back after each replay);
    ``pad_token_id``: what ``input_ids`` are padded with; ``right_padded``: whether batches may be padded further on
    the right (else each exact length is its own shape); ``length_cap``: the encoder's position limit."""

    def __init__(self, parameters, pad_token_id: int | None = 0, right_padded: bool = True,
                 length_cap: int | None = None):
        self.parameters = list(parameters)
        self.pad_token_id = pad_token_id or 0
        self.right_padded = right_padded
        self.length_cap = length_cap
        self.graphs: dict[tuple, CapturedStep] = {}
        self.warmed: set[tuple] = set()
        self.failed: str | None = None  # the error of a failed capture: the run goes on eagerly
        self.captures = 0
        self.replays = 0
        self._stream = None
        self._pool = None
        self._full_warned = False
        #: (graph key, gradient buffers) of the last step when it was a replay, else None: the optimizer's own graph
        #: (hf_cse.optimizer_graph) steps over those buffers
        self.last_replayed: tuple[object, list[torch.Tensor]] | None = None

    # ------------------------------------------------------------------ shapes
    def _pads(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {key: LABEL_PAD if key.endswith("labels") else self.pad_token_id if key.endswith("input_ids") else 0
                for key in batch}

    def _padded_length(self, batch: dict[str, torch.Tensor]) -> int:
        """The length every per-token input is padded to (a batch that :meth:`supports` holds ``input_ids``)."""
        length = batch["input_ids"].shape[-1]
        return length_bucket(length, self.length_cap) if self.right_padded else length

    def _pad(self, batch: dict[str, torch.Tensor], to: int) -> dict[str, torch.Tensor]:
        length, pads = batch["input_ids"].shape[-1], self._pads(batch)
        out = {}
        for key, value in batch.items():
            if value.dim() >= 2 and value.shape[-1] == length and to > length:
                value = torch.nn.functional.pad(value, (0, to - length), value=pads[key])
            out[key] = value
        return out

    def _key(self, batch: dict[str, torch.Tensor], to: int) -> tuple:
        length = batch["input_ids"].shape[-1]
        return tuple(sorted((key, (*v.shape[:-1], to) if v.dim() >= 2 and v.shape[-1] == length else tuple(v.shape),
                             v.dtype) for key, v in batch.items()))

    # ------------------------------------------------------------------ the step
    def supports(self, batch) -> bool:
        """Whether ``batch`` can go through a graph: tensors on a CUDA device only, with ``input_ids``."""
        return (self.failed is None and isinstance(batch, dict) and "input_ids" in batch
                and all(isinstance(v, torch.Tensor) and v.is_cuda for v in batch.values()))

    def __call__(self, batch: dict[str, torch.Tensor], forward_backward):
        """One training step of ``batch``; returns ``forward_backward``'s (loss, metrics)."""
        self.last_replayed = None
        if not self.supports(batch):
            return forward_backward(batch)
        to = self._padded_length(batch)
        key = self._key(batch, to)
        step = self.graphs.get(key)
        if step is None:
            if len(self.graphs) >= MAX_GRAPHS:
                if not self._full_warned:
                    logger.warning("CUDA graphs: %d batch shapes captured; batches of further shapes train eagerly",
                                   MAX_GRAPHS)
                    self._full_warned = True
                return forward_backward(batch)
            padded = self._pad(batch, to)
            if key not in self.warmed:
                self.warmed.add(key)
                return self._on_capture_stream(forward_backward, padded)
            step = self._capture(padded, forward_backward)
            if step is None:
                return forward_backward(batch)
            self.graphs[key] = step
        step.load(batch, self._pads(batch))
        step.graph.replay()
        self.replays += 1
        for param, grad in zip(self.parameters, step.grads):
            param.grad = grad
        self.last_replayed = (key, step.grads)
        # copies: the next replay overwrites the graph's outputs, and the trainer keeps these until a logging step
        return step.loss.clone(), {k: v.clone() for k, v in step.metrics.items()}

    def _side_stream(self):
        if self._stream is None:
            self._stream = torch.cuda.Stream()
            self._pool = torch.cuda.graph_pool_handle()
        return self._stream

    def _on_capture_stream(self, fn, batch):
        stream = self._side_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            result = fn(batch)
        torch.cuda.current_stream().wait_stream(stream)
        return result

    def _record(self, fn):
        """:func:`record_graph` on the capture stream, in the pool all shapes share."""
        stream = self._side_stream()
        return record_graph(fn, pool=self._pool, stream=stream)

    def _capture(self, batch: dict[str, torch.Tensor], forward_backward) -> CapturedStep | None:
        inputs = {k: v.clone() for k, v in batch.items()}  # the graph's input buffers, outside its pool
        for param in self.parameters:
            param.grad = None  # so the captured backward writes (not adds) into buffers of the graph
        try:
            graph, (loss, metrics) = self._record(lambda: forward_backward(inputs))
        except Exception as exc:  # e.g. a host read of a device value inside the step
            self.failed = capture_failed(exc, "the step", self.parameters)
            return None
        self.captures += 1
        metrics = {k: v for k, v in metrics.items() if isinstance(v, torch.Tensor)}  # host floats were read once
        return CapturedStep(graph, inputs, loss, metrics, [p.grad for p in self.parameters])
