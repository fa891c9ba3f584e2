"""The dev-scoring half of :class:`hf_cse.trainer.ContrastiveTrainer`: ``evaluate`` scores the model's sentence
embeddings with the trainer's evaluator (on the main process, its metrics broadcast to the others), and after
training the model held is compared with the untrained encoder's score before the first step.

The embeddings are encoded in the run's precision (bf16 autocast for a bf16 run), in batches of
``per_device_eval_batch_size`` (:func:`dev_batch_size`: 128 where it is transformers' default), as ``run_eval``
encodes them given the same precision and batch size: its dev-mode STS-B score of the saved model is the logged one
(each log line names the precision and batch size)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

from .errors import CSEError, raised_on_every_process
from .evaluation.before_after import DevChange, UntrainedCandidate, logged_evaluation, primary_metric
from .out_of_memory import TRANSFORMERS_EVAL_BATCH, dev_out_of_memory_as_refusal
from .precision import describe_scoring, run_precision
from .trainer_resume import DevDataChange
from .training_values import strategy_name

logger = logging.getLogger(__name__)

#: what to use instead of a per-row prediction
EMBED_INSTEAD = ("embed sentences with hf_cse.evaluation.SentenceEncoder(model, tokenizer).encode(sentences) (or the "
                 "run's sentence-transformers export), and score the model with trainer.evaluate() or run_eval.")
#: the refusal of a data set handed to evaluate()
EVALUATE_INSTEAD = ("ContrastiveTrainer.evaluate() scores the trainer's evaluator, which holds its own data; it "
                    "takes no eval_dataset: pass the data to the trainer as evaluator= (e.g. a sentence-transformers "
                    "EmbeddingSimilarityEvaluator) or eval_file= in its arguments.")


def _best_metric_not_logged(args, scores: list[str]) -> str:
    """The refusal of a ``metric_for_best_model`` the evaluation did not log: one nobody gave (transformers' ``loss``
    where an evaluator's main score could not be known before it ran, :func:`~hf_cse.trainer_arguments.
    select_unchosen_metric`) is said to be none of the caller's."""
    from .best_metric import FILLED_IN, checkpoint_selector, metric_chosen_by

    best, chosen_by = args.metric_for_best_model, metric_chosen_by(args)
    if chosen_by == FILLED_IN and best.removeprefix("eval_") == "loss":
        by_save = checkpoint_selector(args) == "save_strategy"
        option = "save_strategy='best'" if by_save else "load_best_model_at_end=True"
        return (f"{option} without metric_for_best_model (transformers fills in 'loss', which a "
                "contrastive run never logs), and the evaluator's main score was not known before it ran: give "
                f"metric_for_best_model, one of the dev metrics ({', '.join(scores)}).")
    return (f"metric_for_best_model={best!r}{' (which you did not give)' if chosen_by else ''} is not among the dev "
            f"metrics ({', '.join(scores)}); choose one of them.")


#: the dev data's encoding batch where ``per_device_eval_batch_size`` is transformers' default (8 made scoring slow)
DEV_BATCH_SIZE = 128


def dev_batch_size(args) -> int:
    """The batch the dev data is encoded in: ``per_device_eval_batch_size`` as given, :data:`DEV_BATCH_SIZE` where
    it is transformers' default (a smaller one is what a device short of memory needs)."""
    given = args.per_device_eval_batch_size
    return DEV_BATCH_SIZE if given == TRANSFORMERS_EVAL_BATCH else given


class ScoreTheLastStep(TrainerCallback):
    """The trained model's dev score taken at the run's last step, inside transformers' loop (which scores it there
    itself only with ``eval_strategy='steps'``, and at the end of the epoch the loop stops in with ``'epoch'``):
    scored after ``train`` returned, it was logged once the reporters had closed (``on_train_end``: TensorBoard opened
    a second event file, trackio a second run) and after the console's progress bar had stopped printing. Not with
    ``load_best_model_at_end``: the best checkpoint was scored at its step, and a score taken where no checkpoint is
    saved must not become the best one."""

    def on_step_end(self, args, state, control, **kwargs):
        last = state.global_step >= state.max_steps or control.should_training_stop
        if last and strategy_name(args.eval_strategy) != "epoch" and not args.load_best_model_at_end:
            control.should_evaluate = True
        return control


class DevScoring(Trainer):
    """A mixin before ``Trainer`` in ``ContrastiveTrainer``'s bases; it reads the trainer's ``evaluator`` and
    ``_dev_data_change`` (:class:`~hf_cse.trainer_resume.ResumedRun`)."""

    _dev_data_change: DevDataChange | None = None
    #: seconds spent in :meth:`evaluate` since training started: ``train_runtime`` includes them
    dev_scoring_seconds: float = 0.0

    #: the names of the dev metrics of the last scoring, once training ended (for the run's last line)
    dev_metrics_scored: list[str] = []
    _dev_identity: tuple[str | None] | None = None

    @property
    def precision(self) -> str:
        """The precision the run computes in: ``fp32``, ``bf16`` or ``fp16`` (:func:`~hf_cse.precision.run_precision`:
        under ``accelerate launch`` its ``mixed_precision`` where the arguments set neither ``bf16`` nor ``fp16``)."""
        return run_precision(self.args)

    @property
    def dev_data_identity(self) -> str | None:
        """What the evaluator scores and a hash of its data
        (:func:`~hf_cse.evaluation.evaluators.dev_data_fingerprint`), computed once: recorded in each checkpoint
        (:mod:`hf_cse.run_settings`), compared when a run resumes (:mod:`hf_cse.trainer_resume`)."""
        if self._dev_identity is None:
            from .evaluation.evaluators import dev_data_fingerprint

            self._dev_identity = (dev_data_fingerprint(self.evaluator),)
        return self._dev_identity[0]

    def _keep_the_best_on_dev(self, untrained: UntrainedCandidate | None) -> DevChange | None:
        """Score the model held now (the best checkpoint with ``load_best_model_at_end``, else the last step) and
        put the untrained weights back when the untrained encoder scored better before the first step, said at once:
        ``trainer.model`` then holds them, and ``save_model`` would save them. The scores are said once, by
        ``save_run``'s last line (:func:`~hf_cse.evaluation.before_after.log_dev_change`)."""
        dev = self._best_on_dev(untrained)
        if dev is not None and dev.kept_step == 0:
            logger.warning("dev: training did not beat the untrained encoder (%s; trainer.dev holds both scores), so "
                           "the model (trainer.model) holds the untrained weights again, and save_run / save_model "
                           "save those", dev.metric)
        return dev

    def _best_on_dev(self, untrained: UntrainedCandidate | None) -> DevChange | None:
        trained_step = self.state.global_step
        if self.args.load_best_model_at_end and self.state.best_model_checkpoint:
            trained_step = int(Path(self.state.best_model_checkpoint).name.rpartition("-")[2])
        # the model held now was scored at its step already when that step was an evaluation step (the best
        # checkpoint always was): scoring it again would only repeat the same forward passes
        changed = self._dev_data_change  # a resume on other dev data: only this trainer's evaluations score it
        history = self.state.log_history[changed.logged_before:] if changed else self.state.log_history
        final = logged_evaluation(history, trained_step) or self.evaluate()
        from .evaluation.evaluators import primary_metric_name

        # a sentence-transformers evaluator names its own primary metric (e.g. ``sts-dev_spearman_cosine``)
        preferred = self.args.metric_for_best_model or (None if primary_metric(final)
                                                        else primary_metric_name(self.evaluator))
        dev = DevChange.from_run(self.state.log_history, final, preferred, trained_step,
                                 describe_scoring(self.precision))
        chosen_by = (self.args.metric_for_best_model or "").removeprefix("eval_")
        if dev is not None and dev.metric == chosen_by and self.args.greater_is_better is False:
            dev = replace(dev, greater_is_better=False)  # compared the way the best checkpoint was chosen
        self.dev_metrics_scored = sorted(k.removeprefix("eval_") for k in final if k != "eval_epoch")
        if changed and dev is not None:
            return self._before_on_changed_dev(untrained, dev, changed)
        if dev is None or untrained is None or not dev.beats_trained(dev.before):
            return dev
        model = self.accelerator.unwrap_model(self.model)
        if not untrained.rescore:
            untrained.restore(model)
            return dev.keeping_untrained()
        return self._keep_rescored(model, untrained, dev)

    def _keep_rescored(self, model, untrained: UntrainedCandidate, dev: DevChange) -> DevChange:
        """A resumed run: the weights this trainer was given are kept only if, scored now, they beat the trained
        model (the run's step-0 score was another process's model)."""
        trained = UntrainedCandidate.of(model)
        untrained.restore(model)
        score = self._dev_scores("the model given to this resumed trainer").get(dev.metric, float("nan"))
        if dev.beats_trained(score):
            if abs(score - dev.before) > 1e-3 * max(1.0, abs(dev.before)):
                logger.warning("dev: the model given to this resumed trainer scores %.4g, the run's step 0 %.4g: "
                               "it is not the run's untrained encoder, but beats the trained model and is kept",
                               score, dev.before)
            return replace(dev, before=score, kept_step=0)
        trained.restore(model)
        logger.warning("dev: the model given to this resumed trainer scores %.4g, not the run's step-0 %.4g: it is not "
                       "the run's untrained encoder, so the trained model is kept", score, dev.before)
        return dev

    def _before_on_changed_dev(self, untrained: UntrainedCandidate | None, dev: DevChange,
                               changed: DevDataChange) -> DevChange | None:
        """A run resumed on other dev data than its step 0 was scored on: that score is of other data, so the model
        given to this resumed trainer is scored on the new data as the score before training (and kept if it beats
        the trained model); nothing to compare where it is no candidate (a model sharded over processes)."""
        if untrained is None:
            logger.info("dev: the dev data changed since the run's step 0 was scored (%s then), so its score is no "
                        "score before training on %s", changed.then, changed.now)
            return None
        model = self.accelerator.unwrap_model(self.model)
        trained = UntrainedCandidate.of(model)
        untrained.restore(model)
        score = self._dev_scores("the model given to this resumed trainer").get(dev.metric, float("nan"))
        logger.info("dev: the dev data changed since the run's step 0 was scored (%s then, %s now): the model given "
                    "to this resumed trainer, scored on it, is the score before training (%.4g; step 0's %.4g was "
                    "of the earlier data)", changed.then, changed.now, score, dev.before)
        if dev.beats_trained(score):
            return replace(dev, before=score, kept_step=0)
        trained.restore(model)
        return replace(dev, before=score)

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
        if eval_dataset is not None:  # the evaluator holds its own data: the set given would be silently ignored
            raise CSEError(EVALUATE_INSTEAD)
        started = time.perf_counter()
        scores = self._dev_scores()
        self.dev_scoring_seconds += time.perf_counter() - started
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in scores.items()}
        best = self.args.metric_for_best_model
        if best and f"eval_{best.removeprefix('eval_')}" not in metrics and metric_key_prefix == "eval":
            # transformers would stop with a KeyError when it next compares checkpoints, possibly hours in
            raise CSEError(_best_metric_not_logged(self.args, sorted(scores)))
        self.log(metrics)  # which adds transformers' "epoch"
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _dev_scores(self, scored: str | None = None) -> dict[str, float]:
        """The evaluator's metrics of the model held now (nothing logged), on every process; ``scored``: how the log
        line names that model (by its step where not given)."""
        if self.evaluator is None:
            raise CSEError(
                "ContrastiveTrainer.evaluate has nothing to score: pass senteval_data_dir (a SentEval data/downstream "
                "folder, for STS-B dev), eval_source='hub', eval_file= or evaluator=."
            )
        from accelerate.utils import broadcast_object_list

        from .evaluation.dev import scoring_dev
        from .evaluation.encoder import SentenceEncoder
        from .evaluation.evaluators import describe_evaluator, run_evaluator

        # The main process scores (sentence-transformers' trainer does the same); an error there is sent to the
        # others too, so that no process waits in the broadcast for a result that never comes.
        outcome: dict = {}
        if self.accelerator.is_main_process:
            step = self.state.global_step
            if not scored:
                put_back = self.dev is not None and self.dev.kept_step == 0  # the untrained weights, after training
                scored = ("the untrained encoder (step 0)" if step == 0 else
                          f"the untrained encoder (held again after step {step})" if put_back else
                          f"the model of step {step}")
            batch_size = dev_batch_size(self.args)
            # a wait of its own; how it encodes, for run_eval to give the same figure (its precision and batch_size)
            logger.info("dev: scoring %s on %s (%s, batches of %d)", scored, describe_evaluator(self.evaluator),
                        describe_scoring(self.precision), batch_size)
            model = self.accelerator.unwrap_model(self.model)
            encoder = SentenceEncoder(model, self.processing_class, batch_size=batch_size, precision=self.precision,
                                      show_progress_bar=not self.args.disable_tqdm)
            try:
                with scoring_dev(model), dev_out_of_memory_as_refusal(self.args.device, batch_size):
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
            raise raised_on_every_process((CSEError if outcome["input_error"] else RuntimeError)(
                f"evaluation failed on the main process: {outcome['error']}"))
        return outcome["metrics"]

    def predict(self, test_dataset, ignore_keys=None, metric_key_prefix: str = "test"):
        """Refused: there is no per-row prediction of a contrastive objective (transformers' ``predict`` would fail
        inside the tokenizer on a text column)."""
        raise CSEError(f"ContrastiveTrainer has no predict(): {EMBED_INSTEAD}")

    @torch.no_grad()
    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        raise CSEError(f"ContrastiveTrainer has no prediction step: {EMBED_INSTEAD}")
