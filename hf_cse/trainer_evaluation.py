"""The dev-scoring half of :class:`hf_cse.trainer.ContrastiveTrainer`: ``evaluate`` scores the model's sentence
embeddings with the trainer's evaluator (on the main process, its metrics broadcast to the others), and after
training the model held is compared with the untrained encoder's score before the first step."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import Trainer

from .errors import CSEError
from .evaluation.before_after import DevChange, UntrainedCandidate, logged_evaluation

logger = logging.getLogger(__name__)


class DevScoring(Trainer):
    """A mixin before ``Trainer`` in ``ContrastiveTrainer``'s bases; it reads the trainer's ``evaluator``."""

    def _keep_the_best_on_dev(self, untrained: UntrainedCandidate | None) -> DevChange | None:
        """Score the model held now (the best checkpoint with ``load_best_model_at_end``, else the last step) and
        put the untrained weights back when the untrained encoder scored better before the first step."""
        trained_step = self.state.global_step
        if self.args.load_best_model_at_end and self.state.best_model_checkpoint:
            trained_step = int(Path(self.state.best_model_checkpoint).name.rpartition("-")[2])
        # the model held now was scored at its step already when that step was an evaluation step (the best
        # checkpoint always was): scoring it again would only repeat the same forward passes
        final = logged_evaluation(self.state.log_history, trained_step) or self.evaluate()
        dev = DevChange.from_run(self.state.log_history, final, self.args.metric_for_best_model, trained_step)
        if dev is not None and untrained is not None and dev.before > dev.after:
            untrained.restore(self.accelerator.unwrap_model(self.model))
            dev = dev.keeping_untrained()
        return dev

    @property
    def eval_dataset(self):
        """What ``evaluate`` scores: the evaluator holds its own data (transformers' Trainer only checks that this
        is set when an ``eval_strategy`` is)."""
        return self.evaluator

    @eval_dataset.setter
    def eval_dataset(self, value) -> None:
        if value is not None:  # Trainer.__init__ assigns the (rejected) eval_dataset argument, i.e. None
            raise CSEError("ContrastiveTrainer takes evaluator=, not eval_dataset.")

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        if self.evaluator is None:
            raise CSEError(
                "ContrastiveTrainer.evaluate has nothing to score: pass senteval_data_dir (a SentEval data/downstream "
                "folder, for STS-B dev), eval_source='hub', eval_file= or evaluator=."
            )
        from accelerate.utils import broadcast_object_list

        from .evaluation.encoder import SentenceEncoder
        from .evaluation.evaluators import describe_evaluator, run_evaluator

        # The main process scores (sentence-transformers' trainer does the same); an error there is sent to the
        # others too, so that no process waits in the broadcast for a result that never comes.
        outcome: dict = {}
        if self.accelerator.is_main_process:
            step = self.state.global_step
            logger.info("dev: scoring %s on %s", "the untrained encoder (step 0)" if step == 0 else
                        f"the model of step {step}", describe_evaluator(self.evaluator))  # a wait of its own
            encoder = SentenceEncoder(self.accelerator.unwrap_model(self.model), self.processing_class,
                                      batch_size=max(self.args.per_device_eval_batch_size, 128),
                                      show_progress_bar=not self.args.disable_tqdm)
            try:
                outcome["metrics"] = run_evaluator(self.evaluator, encoder, epoch=self.state.epoch or 0.0,
                                                   steps=self.state.global_step)
            except Exception as err:
                if self.args.world_size == 1:
                    raise
                outcome["error"] = f"{type(err).__name__}: {err}"
                outcome["input_error"] = isinstance(err, CSEError)  # else a bug: a traceback on every process
        if self.args.world_size > 1:
            outcome = broadcast_object_list([outcome])[0]
        if "error" in outcome:
            raise (CSEError if outcome["input_error"] else RuntimeError)(
                f"evaluation failed on the main process: {outcome['error']}")
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in outcome["metrics"].items()}
        metrics[f"{metric_key_prefix}_epoch"] = self.state.epoch or 0.0
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    @torch.no_grad()
    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        raise NotImplementedError("ContrastiveTrainer scores embeddings with its evaluator; see evaluate().")
