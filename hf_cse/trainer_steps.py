"""How a training step of :class:`hf_cse.trainer.ContrastiveTrainer` runs: transformers' own step, the gradient-cache
step (:mod:`hf_cse.cached`), or either of them as replayed CUDA graphs (:mod:`hf_cse.cuda_graphs`,
:mod:`hf_cse.cached_graphs`), chosen once per run by :func:`hf_cse.cuda_graphs.decide_for_run`."""

from __future__ import annotations

import logging

import torch
from transformers import Trainer

from . import seams
from .cached import IncompatibleOptionsError, cached_step, runs_cached
from .cached_graphs import CachedGraphStep
from .cuda_graphs import CudaGraphStep, GraphDecision, decide_for_run
from .models.fast_dropout import compiled_attention_note
from .optimizer_graph import GraphedOptimizer, why_not_captured

logger = logging.getLogger(__name__)


class StepPaths(seams.GradClipHook, Trainer):
    """The training-step half of ``ContrastiveTrainer`` (a mixin before ``Trainer`` in its bases): it reads
    ``cached_minibatch_size``, ``graph_decision`` / ``graph_step`` and the trainer's ``_loss_and_metrics``,
    ``_global_objectives`` and ``_record``. With CUDA graphs on, the optimizer is wrapped in a
    :class:`~hf_cse.optimizer_graph.GraphedOptimizer` (``graphed_optimizer``) where its step can be captured."""

    graphed_optimizer: GraphedOptimizer | None = None

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        # a later train() call finds the optimizer already made (and wrapped by accelerate)
        if not self.graph_decision.on or isinstance(getattr(optimizer, "optimizer", optimizer), GraphedOptimizer):
            return optimizer
        reason = why_not_captured(optimizer)
        if reason is not None:
            logger.info("CUDA graphs: the optimizer steps eagerly (%s)", reason)
            return optimizer
        self.optimizer = self.graphed_optimizer = GraphedOptimizer(optimizer, self.args.max_grad_norm)
        logger.info("CUDA graphs: gradient clipping and the optimizer step (%s) replay a graph of their own",
                    type(optimizer).__name__)
        return self.optimizer

    def clipped_in_graph(self) -> torch.Tensor | None:
        return None if self.graphed_optimizer is None else self.graphed_optimizer.captured_norm()

    def _transformer_encoders(self) -> list:
        model = self.accelerator.unwrap_model(self.model)
        return model.transformer_encoders() if hasattr(model, "transformer_encoders") else []

    def _decide_cuda_graphs(self, setting: str) -> GraphDecision:
        from .models import method_of

        model = self.accelerator.unwrap_model(self.model)
        encoders = self._transformer_encoders()
        try:
            return decide_for_run(setting, self.args, method_of(model.config),
                                  sharded=bool(self.is_fsdp_enabled or self.is_deepspeed_enabled),
                                  activation_checkpointing=any(getattr(e, "is_activation_checkpointing", False)
                                                               for e in encoders))
        except ValueError as err:
            raise IncompatibleOptionsError(str(err)) from None

    def _step_path_lines(self) -> list[str]:
        """What the run logs of its step: its path (CUDA graphs or eager, and why), and a compiled run's attention."""
        notes = (compiled_attention_note(e, self.args.device, bool(self.args.torch_compile))
                 for e in self._transformer_encoders())
        return [self.graph_decision.describe(), *dict.fromkeys(note for note in notes if note)]

    def _new_graph_step(self, model) -> CudaGraphStep:
        tokenizer = self.processing_class or getattr(self.data_collator, "tokenizer", None)
        encoder_config = getattr(self.accelerator.unwrap_model(model).config, "encoder_config", None)
        params = [p for p in model.parameters() if p.requires_grad]
        shapes = dict(pad_token_id=getattr(tokenizer, "pad_token_id", None),
                      right_padded=getattr(tokenizer, "padding_side", None) == "right",
                      length_cap=getattr(encoder_config, "max_position_embeddings", None))
        if not runs_cached(self.cached_minibatch_size, self.args.per_device_train_batch_size):
            return CudaGraphStep(params, **shapes)

        def embed(chunk):
            with torch.no_grad(), self.compute_loss_context_manager():
                return model(**chunk)

        def backward_chunk(chunk, grads):
            with self.compute_loss_context_manager():
                out = model(**chunk)
                surrogate = sum((z * grads[name].to(z.dtype)).sum() for name, z in out.embeddings.items())
            self.accelerator.backward(surrogate)

        return CachedGraphStep(params, self.cached_minibatch_size, embed=embed, backward_chunk=backward_chunk,
                               loss_fn=self._global_objectives, **shapes)

    def _forward_backward(self, model, inputs):
        """What the CUDA graph holds: forward, loss and backward of one batch (gradient accumulation is off there)."""
        with self.compute_loss_context_manager():
            loss, metrics, _ = self._loss_and_metrics(model, inputs)
        self.accelerator.backward(loss)
        return loss.detach(), metrics

    def _cached_step(self, model, inputs):
        """Gradient-cache step (hf_cse.cached): the same loss scaling as Trainer.training_step (1 / GA steps,
        accelerator.backward for mixed-precision scaling and DDP), but several encoder backward passes."""
        with self.compute_loss_context_manager():
            loss, metrics = cached_step(
                model,
                inputs,
                self.cached_minibatch_size,
                loss_fn=self._global_objectives,
                backward=self.accelerator.backward,
                no_sync=lambda: self.accelerator.no_sync(model),
                loss_scale=1.0 / getattr(self, "current_gradient_accumulation_steps", 1),
            )
        return loss / getattr(self, "current_gradient_accumulation_steps", 1), metrics

    def training_step(self, model, inputs, num_items_in_batch=None):
        rows = inputs["input_ids"].shape[0] if "input_ids" in inputs else 0
        cached = runs_cached(self.cached_minibatch_size, rows)
        if not self.graph_decision.on and not cached:
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        inputs = seams.prepare_inputs(self, inputs)
        if self.graph_decision.on:
            if self.graph_step is None:
                self.graph_step = self._new_graph_step(model)
            eager = (lambda batch: self._cached_step(model, batch)) if cached else (
                lambda batch: self._forward_backward(model, batch))
            loss, metrics = self.graph_step(inputs, eager)
            if self.graphed_optimizer is not None and self.graph_step.last_replayed is not None:
                self.graphed_optimizer.arm(*self.graph_step.last_replayed)
        else:
            loss, metrics = self._cached_step(model, inputs)
        self._record(metrics)
        return loss

    def floating_point_ops(self, inputs) -> int:
        """transformers' estimate (6 x tokens x non-embedding parameters), with the parameter count kept: counting
        it walks every parameter, which the Trainer would do in every step."""
        ids = inputs.get("input_ids") if isinstance(inputs, dict) else None
        if ids is None or not hasattr(self.model, "num_parameters"):
            return super().floating_point_ops(inputs)
        if self._flos_per_token is None:
            self._flos_per_token = 6 * self.model.num_parameters(exclude_embeddings=True)
        return self._flos_per_token * ids.numel()

