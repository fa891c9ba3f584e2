"""ContrastiveTrainer: the Hugging Face Trainer with contrastive objectives in ``compute_loss``."""

from __future__ import annotations

import logging

import torch
from transformers import Trainer

from .cached import IncompatibleOptionsError, cached_step, check_cached_compatible
from .distributed import check_not_data_parallel, gather_with_grad
from .losses.base import finite_checks_deferred
from .metrics import MetricAccumulator
from .objectives import build_objectives, compute_objectives
from .precision import check_training_args

logger = logging.getLogger(__name__)


class ContrastiveTrainer(Trainer):
    """A ``transformers.Trainer`` for hf_cse method models.

    ``compute_loss`` asks the model for its embeddings, gathers them across processes *with*
    gradients (every process then uses the global batch as negatives and receives the
    single-process gradient), applies the loss(es) named in the model's config, adds the model's
    per-process auxiliary terms (e.g. DiffCSE's RTD) and records metrics, which are averaged over the
    logging window and over processes and logged with the training loss. A step never reads a device
    value on the host (:mod:`hf_cse.metrics`): metrics are summed on the device and read at logging
    steps, where a NaN/Inf loss term also raises (losses skip their per-step input check here).

    ``evaluate`` scores STS-B (and SICK-R) dev Spearman with the model's test-time pooler when
    ``senteval_data_dir`` (or ``eval_source="hub"``) is given, logged as ``eval_stsb_spearman``:
    use ``metric_for_best_model="stsb_spearman"`` with ``load_best_model_at_end`` to select
    checkpoints as the papers do.

    ``cached_minibatch_size=m`` (``--cached_minibatch_size``) turns on the gradient-cache mode
    (:mod:`hf_cse.cached`): the encoder sees mini-batches of ``m`` sentences, the loss still sees the whole
    (gathered) batch, and the gradient equals the plain one. 0 / None = off.

    Under DDP, ``ddp_find_unused_parameters`` defaults to False (transformers' Trainer: True unless activation
    checkpointing is on): every hf_cse method uses all its parameters in each step. Pass
    ``--ddp_find_unused_parameters true`` for a model of your own that leaves some unused.
    """

    def __init__(
        self,
        *args,
        senteval_data_dir: str | None = None,
        eval_source: str = "local",
        cached_minibatch_size: int | None = None,
        **kwargs,
    ):
        if kwargs.get("eval_dataset") is None and (senteval_data_dir is not None or eval_source == "hub"):
            # evaluate() reads STS dev itself; the Trainer only insists that some eval_dataset exists
            kwargs["eval_dataset"] = [{"task": "STSBenchmark-dev"}]
        super().__init__(*args, **kwargs)
        check_training_args(self.args)  # e.g. fp16 on a CPU, which the Trainer would silently run in fp32
        check_not_data_parallel(self.args)
        self.cached_minibatch_size = cached_minibatch_size or None
        if self.cached_minibatch_size is not None:
            check_cached_compatible(self.accelerator.unwrap_model(self.model).config, self.cached_minibatch_size)
            if self.is_deepspeed_enabled:
                raise IncompatibleOptionsError(
                    "--cached_minibatch_size needs several backward passes per step, which DeepSpeed's engine "
                    "does not allow. Drop --cached_minibatch_size or --deepspeed."
                )
        self.senteval_data_dir = senteval_data_dir
        self.eval_source = eval_source
        # our loss is a per-batch mean: let the Trainer divide it for gradient accumulation
        self.loss_is_scaled_for_ga = False
        if not self.args.dataloader_drop_last:
            # an incomplete last batch cannot be all-gathered across processes and may hold < 2 rows
            logger.info("ContrastiveTrainer sets dataloader_drop_last=True (incomplete batches are skipped).")
            self.args.dataloader_drop_last = True
        if self.args.ddp_find_unused_parameters is None:
            # every method model gives every parameter a gradient in each step (tests/test_models.py), so DDP
            # need not walk the autograd graph for unused ones after every backward (transformers' default)
            self.args.ddp_find_unused_parameters = False
        self.objectives = build_objectives(self.accelerator.unwrap_model(self.model).config)
        self._metrics = MetricAccumulator()
        logger.info(
            "contrastive batch: %d sentences per process x %d processes = %d rows per loss (in-batch negatives); "
            "%d per optimizer step with %d accumulation steps%s",
            self.args.per_device_train_batch_size, self.args.world_size,
            self.contrastive_batch_size, self.contrastive_batch_size * self.args.gradient_accumulation_steps,
            self.args.gradient_accumulation_steps,
            f"; encoder mini-batches of {self.cached_minibatch_size} (cached mode)" if self.cached_minibatch_size
            else "",
        )

    @property
    def contrastive_batch_size(self) -> int:
        """Rows every loss sees: the per-device batch gathered over all processes (the global batch)."""
        return self.args.per_device_train_batch_size * self.args.world_size

    # ------------------------------------------------------------------ training
    def _global_objectives(self, embeddings: dict[str, torch.Tensor]):
        """The loss terms on the batch gathered over processes (equal to one process on the global batch)."""
        with finite_checks_deferred():  # a NaN/Inf loss is caught at the logging step instead (no host sync)
            return compute_objectives(self.objectives,
                                      {name: gather_with_grad(t) for name, t in embeddings.items()})

    def _record(self, metrics) -> None:
        self._metrics.add(metrics)

    def _reduced_metrics(self) -> dict[str, float]:
        """The recorded metrics' means over the logging window and all processes (a collective: every process
        calls it at the same logging step)."""
        return self._metrics.reduce(lambda t: self.accelerator.reduce(t, reduction="sum"),
                                    self.accelerator.num_processes)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = model(**inputs)
        loss, metrics = self._global_objectives(out.embeddings)
        for name, term in out.aux_losses.items():
            loss = loss + term
            metrics[name] = term.detach()
        metrics.update(out.metrics)
        if model.training:
            self._record(metrics)
        return (loss, out) if return_outputs else loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        rows = inputs["input_ids"].shape[0] if "input_ids" in inputs else 0
        if not self.cached_minibatch_size or rows <= self.cached_minibatch_size:
            # one mini-batch: the cache would only add a second forward
            return super().training_step(model, inputs, num_items_in_batch)
        # Gradient-cache step (hf_cse.cached): the same loss scaling as Trainer.training_step (1 / GA steps,
        # accelerator.backward for mixed-precision scaling and DDP), but several encoder backward passes.
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        inputs = self._prepare_inputs(inputs)
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
        self._record(metrics)
        return loss / getattr(self, "current_gradient_accumulation_steps", 1)

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if "loss" in logs and self._metrics:
            logs.update(self._reduced_metrics())
        super().log(logs, *args, **kwargs)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        if self.senteval_data_dir is None and self.eval_source != "hub":
            raise ValueError(
                "ContrastiveTrainer.evaluate scores STS-B dev: pass senteval_data_dir (a SentEval "
                "data/downstream folder) or eval_source='hub' (--senteval_data_dir / --eval_source)."
            )
        from .evaluation import dev_metrics

        # Every process scores the dev set (it is small); this keeps processes in step without a broadcast.
        scores = dev_metrics(
            self.accelerator.unwrap_model(self.model),
            self.processing_class,
            senteval_data_dir=self.senteval_data_dir,
            source=self.eval_source,
            batch_size=max(self.args.per_device_eval_batch_size, 128),
        )
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in scores.items()}
        metrics[f"{metric_key_prefix}_epoch"] = self.state.epoch or 0.0
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    @torch.no_grad()
    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        raise NotImplementedError("ContrastiveTrainer evaluates with STS dev scores; see evaluate().")
