"""ContrastiveTrainer: the Hugging Face Trainer with contrastive objectives in ``compute_loss``."""

from __future__ import annotations

import logging
from collections import defaultdict

import torch
from transformers import Trainer

from .distributed import gather_with_grad
from .objectives import build_objectives, compute_objectives

logger = logging.getLogger(__name__)


class ContrastiveTrainer(Trainer):
    """A ``transformers.Trainer`` for hf_cse method models.

    ``compute_loss`` asks the model for its embeddings, gathers them across processes *with*
    gradients (every process then uses the global batch as negatives and receives the
    single-process gradient), applies the loss(es) named in the model's config, adds the model's
    per-process auxiliary terms (e.g. DiffCSE's RTD) and records metrics, which are averaged and
    logged with the training loss.

    ``evaluate`` scores STS-B (and SICK-R) dev Spearman with the model's test-time pooler when
    ``senteval_data_dir`` (or ``eval_source="hub"``) is given, logged as ``eval_stsb_spearman``:
    use ``metric_for_best_model="stsb_spearman"`` with ``load_best_model_at_end`` to select
    checkpoints as the papers do.
    """

    def __init__(self, *args, senteval_data_dir: str | None = None, eval_source: str = "local", **kwargs):
        super().__init__(*args, **kwargs)
        self.senteval_data_dir = senteval_data_dir
        self.eval_source = eval_source
        # our loss is a per-batch mean: let the Trainer divide it for gradient accumulation
        self.loss_is_scaled_for_ga = False
        if not self.args.dataloader_drop_last:
            # an incomplete last batch cannot be all-gathered across processes and may hold < 2 rows
            logger.info("ContrastiveTrainer sets dataloader_drop_last=True (incomplete batches are skipped).")
            self.args.dataloader_drop_last = True
        self.objectives = build_objectives(self.accelerator.unwrap_model(self.model).config)
        self._metric_sums: dict[str, float] = defaultdict(float)
        self._metric_counts: dict[str, int] = defaultdict(int)

    # ------------------------------------------------------------------ training
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = model(**inputs)
        embeddings = {name: gather_with_grad(t) for name, t in out.embeddings.items()}
        loss, metrics = compute_objectives(self.objectives, embeddings)
        for name, term in out.aux_losses.items():
            loss = loss + term
            metrics[name] = term.item()
        metrics.update(out.metrics)
        if model.training:
            for key, value in metrics.items():
                self._metric_sums[key] += float(value)
                self._metric_counts[key] += 1
        return (loss, out) if return_outputs else loss

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if "loss" in logs and self._metric_counts:
            for key, total in self._metric_sums.items():
                logs[key] = round(total / self._metric_counts[key], 6)
            self._metric_sums.clear()
            self._metric_counts.clear()
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
