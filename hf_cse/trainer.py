"""ContrastiveTrainer: the Hugging Face Trainer with contrastive objectives in ``compute_loss``."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import Trainer, TrainerState
from transformers.trainer_utils import TrainOutput

from . import seams
from .cached import cached_mode_note, check_cached_run
from .checkpoints import TRAINER_STATE_FILE
from .collator_rng import CollatorDraws
from .cuda_graphs import CudaGraphStep
from .distributed import gather_with_grad, main_process_outcome
from .divergence import finished_not_diverged, with_diverged_checkpoints
from .errors import CSEError, unwrapped_from_worker
from .evaluation.before_after import DevChange, UntrainedCandidate
from .evaluation.custom_dev import check_pairs_settings_used
from .folder_lock import claimed_by_command, first_missing_folder, made_folders_removed_on_failure
from .later_checkpoints import checkpoint_gone
from .log_window import LogWindow
from .losses.base import QUEUE_INPUT
from .losses.inputs import finite_checks_deferred
from .metrics import MetricAccumulator
from .objectives import build_objectives, compute_objectives
from .resume_processes import warn_other_world_size
from .run_settings import save_run_settings, training_data_description
from .sampler import NoDuplicatesBatchSampler, check_distinct_texts
from .start_over import start_over
from .streaming import check_settings_for_data
from .trainer_arguments import given_arguments
from .trainer_batches import TrainingBatches
from .trainer_claim import FolderClaim, check_output_dir
from .trainer_dataset import check_method_against_run, check_rows_for_a_batch, is_stream
from .trainer_evaluation import DevScoring, ScoreTheLastStep
from .trainer_folder import (
    check_new_run_folder,
    check_no_names_taken_for_checkpoints,
    check_not_encoder_folder,
    check_not_inside_a_run,
    check_resume_or_start_over,
    checkpoint_to_resume,
    remove_killed_writes,
)
from .trainer_options import (
    TrainingOptions,
    check_built_trainer,
    check_dev_ready,
    check_training_values,
    prepare_run,
    set_batch_copying,
)
from .trainer_resume import ResumedRun
from .trainer_saving import RunSaving
from .trainer_steps import StepPaths
from .training_args import global_batch_size
from .training_values import whole_batches_only
from .zero_loss import ZeroLossWatch

logger = logging.getLogger(__name__)


# TrainingBatches first: its on_epoch_start overrides the hook's default
class ContrastiveTrainer(TrainingBatches, seams.EpochStartHook, seams.RngStateSaveHook, seams.CheckpointSaveHook,
                         StepPaths, DevScoring, RunSaving, ResumedRun, Trainer):
    """A ``transformers.Trainer`` for hf_cse method models that does what ``hf-cse-train`` does: given a model,
    :class:`~hf_cse.training_args.ContrastiveTrainingArguments`, a training set (sentences in a ``text`` column, which
    it tokenizes at the arguments' ``max_seq_length``, or tokenized ones) and the tokenizer (``processing_class``), it
    picks the method's collator, keeps the columns the collator reads, lets the method prepare (DiffCSE's generator,
    :mod:`hf_cse.trainer_options`), checkpoints activations inside the encoder, scores the dev data (if any) before
    the first step and after the last, keeping the untrained encoder when it scored better (:meth:`train`), and
    finishes the run folder with :meth:`save_run`. It adjusts its own copy of the arguments (``trainer.args``, which
    the run records): the ``args`` passed in are left as given (:mod:`hf_cse.trainer_arguments`).

    Keyword arguments: transformers ``Trainer``'s, and ``senteval_data_dir``, ``eval_source``,
    ``cached_minibatch_size``, ``no_duplicates_in_batch``, ``stream_shuffle_buffer``, ``cuda_graphs`` (below; each wins
    over the arguments' field of its name), ``evaluator``, ``eval_pairs`` and ``trust_remote_code``; any other
    (``max_seq_length``, ``precision``, ``eval_file``, ``tokenizer``) is refused in one line naming its place. Plain
    ``TrainingArguments`` work too: the trainer cuts the text it tokenizes at SimCSE's 32 tokens and computes in what
    ``bf16`` / ``fp16`` say (fp32 by default; under ``accelerate launch``, its ``mixed_precision`` where neither is set,
    as the Trainer's accelerator does), each said in the log: the precision in one line when the trainer is
    built, a warning where bf16 is emulated on this CPU.

    ``compute_loss`` asks the model for its embeddings, gathers them across processes *with*
    gradients (every process then uses the global batch as negatives and receives the
    single-process gradient), applies the loss(es) named in the model's config, adds the model's
    per-process auxiliary terms (e.g. DiffCSE's RTD) and records metrics, which are averaged over the
    logging window and over processes and logged with the training loss. A step never reads a device
    value on the host (:mod:`hf_cse.metrics`): metrics are summed on the device and read at logging
    steps, where a NaN/Inf loss term also raises (losses skip their per-step input check here).

    ``evaluate`` runs ``evaluator`` on the model's test-time embedding (:mod:`hf_cse.evaluation.evaluators`): an
    hf_cse evaluator, any sentence-transformers ``SentenceEvaluator`` (``EmbeddingSimilarityEvaluator``,
    ``InformationRetrievalEvaluator``, ...) or a list of them. With ``senteval_data_dir`` (or ``eval_source="hub"``)
    STS-B and SICK-R dev Spearman are scored too, logged as ``eval_stsb_spearman``: use
    ``metric_for_best_model="stsb_spearman"`` with ``load_best_model_at_end`` to select checkpoints as the papers
    do. The evaluator runs on the main process only; its metrics are broadcast to the others. ``eval_pairs``: scored
    dev pairs, ``STSPairs`` (``hf_cse.evaluation.custom_dev.read_pair_file``) or a list of ``(sentence1, sentence2,
    score)``, scored as ``eval_file``'s are (logged as ``eval_<eval_name>_spearman``); refused in another form, and
    beside an ``eval_file`` / ``eval_dataset_name`` (one of them would go unread).

    ``no_duplicates_in_batch`` (default True; ``no_duplicates_in_batch false`` turns it off): batches come from
    :class:`hf_cse.sampler.NoDuplicatesBatchSampler`, so that no text occurs twice in one global batch (a false
    negative); it applies to data sets with text or ``input_ids`` columns and the Trainer's default random order. A
    stream is shuffled through a buffer of ``stream_shuffle_buffer`` rows instead (10,000; 0: file order), each pass
    in an order of its own (:func:`hf_cse.stream_order.shuffled_stream`).

    ``cached_minibatch_size=m`` turns on the gradient-cache mode (:mod:`hf_cse.cached`; 0 / None: off): the encoder
    sees mini-batches of ``m`` sentences, the loss sees the whole (gathered) batch; the gradient is the plain one's.

    ``cuda_graphs`` (``auto``, the default; ``on``; ``off``): on one CUDA GPU the forward of
    every view, the loss and the backward run as a replayed CUDA graph, captured once per batch shape
    (:mod:`hf_cse.cuda_graphs`, which says where it does not apply and why); one log line says which path a run takes.
    Transformers' per-step NaN filter of the logged loss (``logging_nan_inf_filter``) is turned off: it reads the
    loss on the host every step, and a NaN/Inf loss already stops the run at the next logging step.

    Under DDP, ``ddp_find_unused_parameters`` defaults to False (transformers' Trainer: True unless activation
    checkpointing is on): every hf_cse method uses all its parameters in each step. It is set (where it is None) in
    the trainer's arguments before the Trainer builds DDP's settings from them. Pass
    ``ddp_find_unused_parameters=True`` (kept as given) for a model of your own that leaves some unused.
    """

    def __init__(
        self,
        *args,
        senteval_data_dir: str | None = None,
        eval_source: str | None = None,
        evaluator=None,
        eval_pairs=None,
        cached_minibatch_size: int | None = None,
        no_duplicates_in_batch: bool | None = None,
        stream_shuffle_buffer: int | None = None,
        cuda_graphs: str | None = None,
        trust_remote_code: bool = False,
        **kwargs,
    ):
        # Trainer.__init__'s arguments by name (model, args, data_collator, ...); args: the trainer's own copy
        given = given_arguments(args, kwargs)
        training_args = given["args"]
        check_output_dir(training_args.output_dir)  # transformers would fail in os.makedirs (empty, a file)
        check_training_values(training_args)
        from .export.hub import take_over_hub_push

        # push_to_hub uploads the export (save_run), not the Trainer's raw checkpoints; refused now if it cannot work
        self._hub_repo = take_over_hub_push(training_args, given.get("model"))
        # before Trainer.__init__, which creates the output folder
        check_not_encoder_folder(training_args.output_dir,
                                 getattr(getattr(given.get("model"), "config", None), "base_encoder", None))
        # the keyword arguments of earlier versions win over the training arguments' fields
        options = TrainingOptions.from_args(training_args, senteval_data_dir=senteval_data_dir,
                                            eval_source=eval_source, cached_minibatch_size=cached_minibatch_size,
                                            no_duplicates_in_batch=no_duplicates_in_batch,
                                            stream_shuffle_buffer=stream_shuffle_buffer)
        check_pairs_settings_used(training_args, pairs=eval_pairs)  # e.g. eval_name, no eval_file
        # set before Trainer.__init__, which checks that there is something to evaluate (see eval_dataset below)
        self.evaluator = options.evaluator(training_args, extra=evaluator, pairs=eval_pairs)
        if self.evaluator is None and getattr(training_args, "eval_strategy", "no") not in (None, "no"):
            strategy = getattr(training_args.eval_strategy, "value", training_args.eval_strategy)
            raise CSEError(f"eval_strategy={strategy} needs something to evaluate: pass "
                           "senteval_data_dir=, eval_source='hub', eval_file= or evaluator=.")
        check_dev_ready(self.evaluator, training_args)
        streamed = is_stream(given.get("train_dataset"))
        shuffle_field = getattr(training_args, "stream_shuffle_buffer", None)  # asked for where not its default
        check_settings_for_data(training_args, streamed, no_duplicates_asked=bool(no_duplicates_in_batch),
                                shuffle_asked=stream_shuffle_buffer is not None or shuffle_field not in (
                                    None, TrainingOptions.stream_shuffle_buffer))
        # collator, kept columns, DiffCSE's generator, activation checkpointing; the data's facts for save_run
        self._data_facts = prepare_run(given, trust_remote_code)
        if streamed:  # its first rows, before any pass reads it (data in memory: at the first checkpoint)
            training_data_description(given.get("train_dataset"))
        check_rows_for_a_batch(given.get("train_dataset"), training_args)
        check_method_against_run(given.get("model"), given.get("train_dataset"), training_args)
        self.no_duplicates_in_batch = options.no_duplicates_in_batch
        if not self.no_duplicates_in_batch and not streamed and hasattr(given.get("train_dataset"), "__len__"):
            # one distinct text refused, too few for a batch said (repeats refused: the sampler's plan checks)
            check_distinct_texts(given["train_dataset"], global_batch_size(
                training_args.per_device_train_batch_size, training_args.world_size), "the training set",
                repeats_allowed=True)
        # the order of a stream's batches, recorded (a resumed run reads them so again); None: no stream to shuffle
        self.stream_shuffle_buffer = options.stream_shuffle_buffer if streamed else None
        self._options = options  # what the run's record says it scored on (save_run)
        self._batch_sampler: NoDuplicatesBatchSampler | None = None
        self._collator_draws = CollatorDraws()  # each batch's draws its own, in workers too (hf_cse.collator_rng)
        self._log_window = LogWindow()  # a logging window across a checkpoint (hf_cse.log_window)
        self._flos_per_token: int | None = None
        set_batch_copying(training_args)
        self.dev: DevChange | None = None  # the dev score before and after training, once train() has run
        self.export_folder: Path | None = None  # the run's sentence-transformers export, once save_run wrote it
        self.train_metrics: dict[str, float] = {}
        self._trained_in: str | None = None  # the output folder train() trained in (save_run finishes only that run)
        self._claim = FolderClaim()  # and only while the folder holds that run (hf_cse.trainer_claim)
        self._start_over_in: str | None = None  # overwrite_output_dir's folder, cleared once the batches are made
        if training_args.ddp_find_unused_parameters is None:
            # every method model gives every parameter a gradient in each step (tests/models/test_models.py), so DDP
            # need not walk the autograd graph for unused ones after every backward (transformers' default); set before
            # Trainer.__init__, which builds DDP's settings from it
            training_args.ddp_find_unused_parameters = False
        # transformers' Trainer makes the output folder as it is built: a refusal before anything is written in it (here
        # or in train()) removes the folders it made
        self._made_folders = first_missing_folder(Path(training_args.output_dir)) if training_args.should_save else None
        with made_folders_removed_on_failure(Path(training_args.output_dir), self._made_folders):
            super().__init__(**given)
            self._set_up_run(options, cuda_graphs)

    def _set_up_run(self, options: TrainingOptions, cuda_graphs: str | None) -> None:
        """After ``Trainer.__init__``: the arguments checked against the built trainer, the objectives, the step."""
        check_built_trainer(self)  # its precision, devices and sharding
        self.cached_minibatch_size = options.cached_minibatch_size
        if self.cached_minibatch_size is not None:
            check_cached_run(self.accelerator.unwrap_model(self.model).config, self.args, self.cached_minibatch_size,
                             deepspeed=self.is_deepspeed_enabled)
        # our loss is a per-batch mean: let the Trainer divide it for gradient accumulation
        self.loss_is_scaled_for_ga = False
        whole_batches_only(self.args)  # plain TrainingArguments' dataloader_drop_last=False set to True
        # the filter reads every step's loss on the host (a GPU sync per step); MetricAccumulator raises on a NaN/Inf
        # loss term at the next logging step instead
        self.args.logging_nan_inf_filter = False
        # the dev score before the first step, the untrained encoder's: a candidate for the saved model; and after the
        # last, inside the loop (hf_cse.trainer_evaluation.ScoreTheLastStep)
        self.args.eval_on_start = self.evaluator is not None
        if self.evaluator is not None:
            self.add_callback(ScoreTheLastStep)
        self.objectives = build_objectives(self.accelerator.unwrap_model(self.model).config)
        self._metrics = MetricAccumulator()
        self._zero_loss = ZeroLossWatch()  # a loss of exactly 0 trains nothing: said (hf_cse.zero_loss)
        self.graph_decision = self._decide_cuda_graphs(cuda_graphs or getattr(self.args, "cuda_graphs", "auto"))
        self.graph_step: CudaGraphStep | None = None
        for line in self._step_path_lines():
            logger.info(line)
        logger.info(
            "contrastive batch: %d sentences per process x %d processes = %d rows per loss (in-batch negatives); "
            "%d per optimizer step with %d accumulation steps%s",
            self.args.per_device_train_batch_size, self.args.world_size,
            self.contrastive_batch_size, self.contrastive_batch_size * self.args.gradient_accumulation_steps,
            self.args.gradient_accumulation_steps,
            cached_mode_note(self.cached_minibatch_size, self.args.per_device_train_batch_size),
        )

    @property
    def contrastive_batch_size(self) -> int:
        """Rows every loss sees: the per-device batch gathered over all processes (the global batch)."""
        return global_batch_size(self.args.per_device_train_batch_size, self.args.world_size)

    def train(self, resume_from_checkpoint=None, **kwargs):
        """transformers' ``train``, then what makes a finished run: the divergence check of the steps after the last
        logging step and of the weights (:mod:`hf_cse.divergence`), and with dev data the dev score of the trained
        model, kept only if it beats the untrained encoder's (scored before the first step; a NaN score beats none)
        -- otherwise the untrained weights are put back.

        The output folder is checked first (:mod:`hf_cse.trainer_folder`: no run inside another run's folder, no new
        run into one; ``resume_from_checkpoint=True`` is the last complete checkpoint, of the same method, never a
        diverged one) and held for the training (:func:`hf_cse.folder_lock.folder_held`); an unsaved run of another
        trainer there is taken over (its ``save_run()`` is then refused, :mod:`hf_cse.trainer_claim`). A checkpoint
        taken at the run's last step (a run killed during its final save or export) is loaded as it is: transformers'
        loop would train one step past ``max_steps``, as it checks the step count only after a step."""
        self._claim.check_not_trained_twice(self._trained_in, resume_from_checkpoint)
        # a refusal before anything is written (the folder's checks, the data loader's) leaves no folder it made
        with made_folders_removed_on_failure(Path(self.args.output_dir), self._made_folders):
            resume_from_checkpoint = self._checked_folder(resume_from_checkpoint)
            if self.args.should_save:  # made again where an earlier call's refusal removed it
                Path(self.args.output_dir).mkdir(parents=True, exist_ok=True)
            output = self._train_held(resume_from_checkpoint, **kwargs)
        self._trained_in = self.args.output_dir
        return output

    def _train_held(self, resume_from_checkpoint, **kwargs) -> TrainOutput:
        with self._claim.training(self):  # the folder held (hf_cse.trainer_claim)
            try:
                output, untrained = self._train_in_folder(resume_from_checkpoint, **kwargs)
            except CSEError as err:  # e.g. a streamed file's bad line, read by a DataLoader worker; a divergence
                raised = with_diverged_checkpoints(unwrapped_from_worker(err), self)  # names its checkpoints
                if raised is err:
                    raise
                raise raised from err
            except (OSError, ValueError) as err:  # transformers' own, where the checkpoint was removed meanwhile
                gone = checkpoint_gone(resume_from_checkpoint)
                if gone is None:
                    raise
                raise gone from err
            finished_not_diverged(self, self._reduced_metrics)  # the steps after the last logging step, the weights
            self.train_metrics = dict(output.metrics)
            self._zero_loss.at_end(self.train_metrics, self.state.log_history)
            if self.evaluator is not None:
                self.dev = self._keep_the_best_on_dev(untrained)
        return output

    def _checked_folder(self, resume_from_checkpoint):
        """The output folder checked by process 0 (:mod:`hf_cse.trainer_folder`) and its outcome, the checkpoint to
        resume or the refusal, handed to every process: a process that went on after process 0 refused would train
        alone and wait for the others forever."""

        def check():
            check_output_dir(self.args.output_dir)
            check_not_inside_a_run(self.args.output_dir)
            check_no_names_taken_for_checkpoints(self.args.output_dir)
            start_anew = self._asked_to_start_over()
            check_resume_or_start_over(resume_from_checkpoint, self.args.output_dir, start_anew)
            if not resume_from_checkpoint:
                check_new_run_folder(self.args.output_dir, start_anew)
                return resume_from_checkpoint
            return checkpoint_to_resume(resume_from_checkpoint, self.args.output_dir,
                                        getattr(self.accelerator.unwrap_model(self.model).config, "method", None), self)

        return main_process_outcome(self.args, check)

    def _asked_to_start_over(self) -> bool:
        return getattr(self.args, "overwrite_output_dir", False)  # not a field of plain TrainingArguments

    def get_train_dataloader(self):
        loader = super().get_train_dataloader()  # refuses data that makes no batch: before an earlier run goes
        if self._start_over_in is not None:  # overwrite_output_dir: nothing of this run is written there yet
            start_over(self._start_over_in)
            self._start_over_in = None
        return loader

    def _train_in_folder(self, resume_from_checkpoint, **kwargs) -> tuple[TrainOutput, UntrainedCandidate | None]:
        self.dev, self.export_folder = None, None  # this training's, once it ends and is saved
        if self.is_world_process_zero():  # it holds the folder: a killed save's temporary files go
            if self._asked_to_start_over() and not claimed_by_command(self.args.output_dir):
                self._start_over_in = self.args.output_dir  # (the command has, when it claimed the folder)
            remove_killed_writes(self.args.output_dir)
            if resume_from_checkpoint:
                warn_other_world_size(resume_from_checkpoint, self.args)
        state_file = Path(resume_from_checkpoint) / TRAINER_STATE_FILE if resume_from_checkpoint else None
        state = TrainerState.load_from_json(str(state_file)) if state_file and state_file.is_file() else None
        # a run asked to go further (a larger max_steps or num_train_epochs than the checkpoint's run had) trains on
        asked_more = state is not None and (self.args.max_steps > state.global_step if self.args.max_steps > 0
                                            else (state.epoch or 0.0) < self.args.num_train_epochs)
        untrained = None
        if self.args.eval_on_start:
            # a resumed run's step-0 score is in the checkpoint's log; the model handed to this trainer is a candidate
            # only once it is scored again (it is the run's untrained encoder only if it was built the same way)
            untrained = UntrainedCandidate.of(self.accelerator.unwrap_model(self.model), self.is_fsdp_enabled
                                              or self.is_deepspeed_enabled, rescore=bool(resume_from_checkpoint))
        if state is not None and state.max_steps and state.global_step >= state.max_steps and not asked_more:
            output = self._finished_from(str(resume_from_checkpoint), state)
        else:
            self._resume_from(resume_from_checkpoint, state)  # hf_cse.trainer_resume
            self.dev_scoring_seconds = 0.0
            output = self._whole_run_loss(super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs))
        return output, untrained

    # ------------------------------------------------------------------ training
    def _global_objectives(self, embeddings: dict[str, torch.Tensor]):
        """The loss terms on the batch gathered over processes (equal to one process on the global batch); a queue of
        earlier batches (ESimCSE's) is the same on every process and is not gathered."""
        with finite_checks_deferred():  # a NaN/Inf loss is caught at the logging step instead (no host sync)
            return compute_objectives(self.objectives, {name: t if name == QUEUE_INPUT else gather_with_grad(t)
                                                        for name, t in embeddings.items()})

    def _record(self, metrics) -> None:
        self._metrics.add(metrics)

    def _reduced_metrics(self) -> dict[str, float]:
        """The recorded metrics' means over the logging window and all processes (a collective: every process
        calls it at the same logging step)."""
        return self._metrics.reduce(lambda t: self.accelerator.reduce(t, reduction="sum"),
                                    self.accelerator.num_processes)

    def _loss_and_metrics(self, model, inputs):
        out = model(**inputs)
        loss, metrics = self._global_objectives(out.embeddings)
        for name, term in out.aux_losses.items():
            loss = loss + term
            metrics[name] = term.detach()
        metrics.update(out.metrics)
        return loss, metrics, out

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, metrics, out = self._loss_and_metrics(model, inputs)
        if model.training:
            self._record(metrics)
        return (loss, out) if return_outputs else loss

    def on_epoch_start(self, epoch: int) -> None:
        super().on_epoch_start(epoch)
        if (self.state.epoch or 0) <= epoch:  # past it: resumed inside this epoch (its state is the checkpoint's)
            self.accelerator.unwrap_model(self.model).training_epoch_begins()
        self._take_up_resumed()  # a resumed run, before its first step (hf_cse.trainer_resume)

    def on_rng_state_saved(self, folder: str) -> None:
        self._log_window.save(self, self._metrics, folder)
        save_run_settings(self, folder)  # what a resume with resume_from_checkpoint=True compares (hf_cse.run_settings)
        # process 0 writes trainer_state.json next, which marks the checkpoint complete (hf_cse.checkpoints): only once
        # every process has written its files, or a run killed now leaves a "complete" checkpoint without them
        self.accelerator.wait_for_everyone()

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if "loss" in logs:  # a logging step's (not the final metrics')
            logs.update(self._reduced_metrics() if self._metrics else {})
            self._zero_loss.on_log(logs, self.state.global_step)
        if "train_runtime" in logs and self.evaluator is not None:  # the final metrics (the dict train() returns)
            logs["train_dev_scoring_runtime"] = round(self.dev_scoring_seconds, 4)  # part of train_runtime
        super().log(logs, *args, **kwargs)
