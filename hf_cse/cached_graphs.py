"""The gradient-cache step (:mod:`hf_cse.cached`) with each mini-batch's two encoder passes as replayed CUDA graphs.

The cached mode encodes the batch in mini-batches twice: once without a graph of autograd for the embeddings the
loss needs, once with it to backpropagate the loss's gradient with respect to those embeddings. Under
``torch.compile``'s CUDA graphs it failed on an H200 (2026-11-26): the first pass's embeddings are outputs of a
graph that the next mini-batch's replay overwrites. Here each pass is a graph of its own, captured once per
mini-batch shape (:class:`hf_cse.cuda_graphs.CudaGraphStep`'s length buckets):

* **embed** (no autograd): a mini-batch in, its embeddings out -- copied out after every replay, so the next replay
  cannot overwrite them;
* **replay** (autograd): a mini-batch and its slice of the cached gradient in; the backward *adds* into the
  parameters' gradient buffers, which live outside the graph and are zeroed once per step.

Between the two, the loss and its gradient with respect to the whole batch's embeddings run eagerly (``B x H``:
small). Dropout draws the same masks in both passes of a mini-batch: the random state is recorded before its embed
replay and restored before its backward replay (as in the eager cached mode), and a graph's replay draws from the
generator's current offset. ``tests/trainer/test_cuda.py`` checks that the gradient equals the eager cached step's.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from .cached import RandState, check_no_aux, merge_metrics, split_batch
from .cuda_graphs import MAX_GRAPHS, CapturedStep, CudaGraphStep, capture_failed


class CachedGraphStep(CudaGraphStep):
    """The cached step with graphs. ``minibatch_size``: the mini-batch rows; the callables, given by the trainer:
    ``embed(chunk) -> out`` (the model's output without autograd), ``backward_chunk(chunk, grads)`` (forward with
    autograd and backward of ``sum(z * grads[name])``) and ``loss_fn(embeddings) -> (loss, metrics)``. Other
    arguments as :class:`CudaGraphStep`."""

    def __init__(self, parameters, minibatch_size: int, *, embed, backward_chunk, loss_fn, **kwargs):
        super().__init__(parameters, **kwargs)
        self.minibatch_size = minibatch_size
        self.embed, self.backward_chunk, self.loss_fn = embed, backward_chunk, loss_fn
        self._grad_buffers: list[torch.Tensor] | None = None

    def __call__(self, batch: dict[str, torch.Tensor], eager_step):
        """One cached step of ``batch``; ``eager_step(batch) -> (loss, metrics)`` is the eager cached step (warm-up,
        fallback)."""
        self.last_replayed = None
        if not self.supports(batch):
            return eager_step(batch)
        to = self._padded_length(batch)
        chunks = split_batch(batch, self.minibatch_size)
        keys = [self._key(chunk, to) for chunk in chunks]
        missing = [k for k in dict.fromkeys(keys) if k not in self.graphs]
        if missing:
            if len(self.graphs) + len(missing) > MAX_GRAPHS:
                return eager_step(batch)
            padded = self._pad(batch, to)  # the graph's shapes; a replay pads while loading its buffers
            if any(k not in self.warmed for k in missing):
                self.warmed.update(missing)
                return self._on_capture_stream(eager_step, padded)
            padded_chunks = split_batch(padded, self.minibatch_size)
            for key in missing:
                pair = self._capture_pair(padded_chunks[keys.index(key)])
                if pair is None:
                    return eager_step(batch)
                self.graphs[key] = pair
        return self._replayed(chunks, keys, self._pads(batch))

    # ------------------------------------------------------------------ replay
    def _replayed(self, chunks, keys, pads):
        states, parts, model_metrics = [], defaultdict(list), []
        for chunk, key in zip(chunks, keys):
            embed = self.graphs[key][0]
            states.append(RandState.capture(*chunk.values()))
            embed.load(chunk, pads)
            embed.graph.replay()
            for name, z in embed.loss.items():  # the embeddings: copied before the next replay overwrites them
                parts[name].append(z.clone())
            model_metrics.append({k: v.clone() for k, v in embed.metrics.items()})
        leaves = {name: torch.cat(zs).requires_grad_(True) for name, zs in parts.items()}
        with torch.enable_grad():
            loss, metrics = self.loss_fn(leaves)
            grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)))
        after = RandState.capture(*chunks[0].values())
        torch._foreach_zero_(self._grad_buffers)
        start = 0
        for chunk, key, state in zip(chunks, keys, states):
            backward = self.graphs[key][1]
            rows = chunk["input_ids"].shape[0]
            state.restore()
            backward.load(chunk, pads)
            for name, buffer in backward.loss.items():
                grad = grads.get(name)
                if grad is None:
                    buffer.zero_()
                else:
                    buffer.copy_(grad[start:start + rows])
            backward.graph.replay()
            start += rows
        after.restore()
        self.replays += 1
        for param, grad in zip(self.parameters, self._grad_buffers):
            param.grad = grad
        self.last_replayed = ("cached", self._grad_buffers)
        metrics.update(merge_metrics(model_metrics))
        return loss.detach(), metrics

    # ------------------------------------------------------------------ capture
    def _capture_pair(self, chunk) -> tuple[CapturedStep, CapturedStep] | None:
        """The embed and backward graphs of one mini-batch shape (``loss`` holds the embeddings of the first and the
        gradient inputs of the second)."""
        if self._grad_buffers is None:  # outside any graph: the backward graphs add into them
            self._grad_buffers = [torch.zeros_like(p) for p in self.parameters]
        try:
            embed_inputs = {k: v.clone() for k, v in chunk.items()}
            graph, out = self._record(lambda: self.embed(embed_inputs))
            check_no_aux(out, "first pass")
            metrics = {k: v for k, v in out.metrics.items() if isinstance(v, torch.Tensor)}
            embed = CapturedStep(graph, embed_inputs, dict(out.embeddings), metrics, [])

            backward_inputs = {k: v.clone() for k, v in chunk.items()}
            grad_inputs = {name: torch.zeros_like(z) for name, z in out.embeddings.items()}
            for param, buffer in zip(self.parameters, self._grad_buffers):
                param.grad = buffer
            graph, _ = self._record(lambda: self.backward_chunk(backward_inputs, grad_inputs))
            moved = [p for p, b in zip(self.parameters, self._grad_buffers) if p.grad is not b]
            if moved:
                raise RuntimeError(f"{len(moved)} gradient(s) were replaced instead of added to during capture")
            backward = CapturedStep(graph, backward_inputs, grad_inputs, {}, [])
        except Exception as exc:
            self.failed = capture_failed(exc, "the cached step's mini-batch passes", self.parameters)
            return None
        for param in self.parameters:
            param.grad = None  # the trainer's state between steps
        self.captures += 2
        return embed, backward
