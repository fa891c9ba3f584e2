"""``ContrastiveTrainingArguments``: ``transformers.TrainingArguments`` plus the options of contrastive training.

They are training options of :class:`hf_cse.trainer.ContrastiveTrainer` (as ``SentenceTransformerTrainingArguments``
are of sentence-transformers' trainer): how a batch is made and split, what the dev score is computed on, which
precision runs, and where the trainer cuts the sentences it tokenizes. ``hf-cse-train`` parses this class, so each
field is also a flag of the same name. How the training text is read (a file, a Hub data set, a stream) is not here:
it decides the training set given to the trainer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar

from transformers import TrainingArguments

from .best_metric import FILLED_IN, check_best_metric_direction, fill_in_best_metric
from .checks import InputError, check_path_given, resolved_path
from .data import DEFAULT_MAX_SEQ_LENGTH
from .encoders import seq_length_problem
from .evaluation.custom_dev import EvalDataArguments
from .precision import DEFAULT_PRECISION, Precision, launched_precision, training_flags
from .sharding import load_in_fp32_under_deepspeed
from .stream_order import DEFAULT_STREAM_SHUFFLE_BUFFER, check_shuffle_buffer
from .training_values import (
    check_field_types,
    check_loader_and_schedule,
    check_optimizer_values,
    check_step_intervals,
    check_supervised_only,
    filled_in_interval,
    whole_batches_only,
)


def global_batch_size(per_device_train_batch_size: int, world_size: int = 1) -> int:
    """Rows every loss sees in one step: the per-device batch gathered over the processes (the in-batch negatives come
    from all of them), before gradient accumulation. The one place this is computed."""
    return int(per_device_train_batch_size) * int(world_size or 1)


#: lr_scheduler_kwargs that make a schedule transformers refuses without keywords buildable, as the fix says
SCHEDULE_KWARGS_EXAMPLES = {"cosine_with_min_lr": {"min_lr_rate": 0.1},
                            "cosine_warmup_with_min_lr": {"min_lr_rate": 0.1}}


def _said(err: Exception) -> str:
    return " ".join(str(err).split()).rstrip(".")


def check_schedule_builds(args) -> None:
    """The learning-rate schedule is built once, as the Trainer builds it (``transformers.get_scheduler``), on a
    one-parameter optimizer: what it refuses (``cosine_with_min_lr`` without ``min_lr`` or ``min_lr_rate``) is
    refused now, in one line, not with a traceback once the encoder is loaded and the data tokenized."""
    import torch
    from transformers import get_scheduler

    check_optimizer_values(args)  # the warmup and rates it reads: their own refusal first (a NaN warmup_steps)
    kind = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    steps = args.max_steps if args.max_steps > 0 else 1000  # the epochs' steps are not known yet: any count builds
    # lr 1: the schedule only scales the optimizer's rate (learning_rate is checked on its own)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    try:
        get_scheduler(kind, optimizer=optimizer, num_warmup_steps=args.get_warmup_steps(steps),
                      num_training_steps=steps, scheduler_specific_kwargs=args.lr_scheduler_kwargs)
    except (ValueError, TypeError) as err:
        example = SCHEDULE_KWARGS_EXAMPLES.get(kind)
        fix = (f"give lr_scheduler_kwargs='{json.dumps(example)}'" if example and not args.lr_scheduler_kwargs
               else "set lr_scheduler_kwargs as it says")
        given = (f"with lr_scheduler_kwargs='{json.dumps(args.lr_scheduler_kwargs)}'" if args.lr_scheduler_kwargs
                 else "without lr_scheduler_kwargs")
        raise InputError(f"lr_scheduler_type={kind!r} {given}: transformers cannot build this schedule "
                         f"({_said(err)}): {fix}, or choose another lr_scheduler_type.",
                         fields=("lr_scheduler_type", "lr_scheduler_kwargs")) from None


def check_optimizer_builds(args) -> None:
    """The optimizer's class is found as the Trainer finds it (``Trainer.get_optimizer_cls_and_kwargs``): an
    ``optim`` whose package is not installed here (``adamw_bnb_8bit`` without bitsandbytes) or whose own arguments
    are missing is refused now, in one line, not with a traceback once the encoder is loaded. Optimizers that also
    need the model (GaLore, LOMO) are checked up to that point: transformers checks their packages first."""
    from transformers import Trainer

    try:
        Trainer.get_optimizer_cls_and_kwargs(args)
    except (ImportError, ValueError, TypeError, NotImplementedError) as err:
        if isinstance(err, ValueError) and "model" in str(err):
            return  # "You need to pass a model": all that the arguments alone decide was accepted
        optim = str(getattr(args.optim, "value", args.optim))
        fix = "install what it names" if isinstance(err, ImportError) or "install" in str(err) else "give what it asks"
        raise InputError(f"optim={optim!r}: transformers cannot build this optimizer here ({_said(err)}): {fix}, or "
                         "choose another optim (adamw_torch, the default).", fields=("optim",)) from None


def _trainer_field(name: str) -> dict:
    """The help of ``TrainingArguments``' field ``name``, for a field given another default here."""
    return dict(TrainingArguments.__dataclass_fields__[name].metadata)


@dataclass
class ContrastiveTrainingArguments(EvalDataArguments, TrainingArguments):
    """``TrainingArguments`` (their fields come first, so ``ContrastiveTrainingArguments("out")`` names the output
    folder) with the dev-data fields of :class:`~hf_cse.evaluation.custom_dev.EvalDataArguments` (``eval_file``,
    ``eval_dataset_name`` and their columns: your own scored pairs) and the fields below.

    ``precision`` is resolved for this machine when the arguments are made (``bf16`` / ``fp16`` / ``use_cpu`` are set
    to match, :func:`hf_cse.precision.training_flags`): afterwards it holds what will run (``fp32``, ``bf16`` or
    ``fp16``) and ``precision_reason`` says why.
    """

    # SimCSE's unsupervised recipe (Gao et al., EMNLP 2021, Sec. 3 and App. A: batch 64, lr 3e-5, one epoch) instead of
    # transformers' generic 8 / 5e-5 / 3 epochs: a batch of 8 gives each sentence 7 negatives. hf-cse-train has the same
    # defaults (these fields are its flags); a paper's own setting (DiffCSE 7e-6, PromptBERT 1e-5, ...) is its preset.
    per_device_train_batch_size: int = field(default=64, metadata=_trainer_field("per_device_train_batch_size"))
    learning_rate: float = field(default=3e-5, metadata=_trainer_field("learning_rate"))
    num_train_epochs: float = field(default=1.0, metadata=_trainer_field("num_train_epochs"))
    # short runs are the norm here: a loss every 5 steps draws the curves and finds a divergence early
    logging_steps: float = field(default=5, metadata=_trainer_field("logging_steps"))
    # no checkpoint unless asked for (save_strategy "steps" and save_steps N): a checkpoint holds the optimizer's
    # state too, three times the model
    save_strategy: str = field(default="no", metadata=_trainer_field("save_strategy"))
    # a short last batch has fewer negatives than the others (the contrastive loss's difficulty changes with it)
    dataloader_drop_last: bool = field(
        default=True,
        metadata={"help": "Drop an epoch's incomplete last batch. ContrastiveTrainer trains on whole batches only "
                          "(fewer rows mean fewer in-batch negatives, and an incomplete batch cannot be gathered "
                          "across processes): false is refused."},
    )
    # transformers 4's field (transformers 5 dropped it): here it removes only the files a run writes
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Start over in an output_dir that holds another or an interrupted run: that run's files "
                          "(model, checkpoints, logs, export, record; hf_cse.start_over.RUN_FILES) are removed when "
                          "training starts, other files are kept. Without it, a new run there is refused (and the "
                          "command line resumes the same run's checkpoints). Not with resume_from_checkpoint."},
    )
    # transformers' help says "Defaults to 'loss'", a score no contrastive run logs: hf_cse's dev scores instead
    metric_for_best_model: str | None = field(
        default=None,
        metadata={"help": "The dev score that selects the best checkpoint (load_best_model_at_end) and compares the "
                          "trained encoder with the untrained one: stsb_spearman, sickr_spearman or avg_sts (STS dev "
                          "data: senteval_data_dir, or eval_source hub), or <eval_name>_spearman (your eval_file / "
                          "eval_dataset_name pairs); the eval_ prefix is optional. Not set: the run's first dev score, "
                          "STS-B dev's where it is scored, else your pairs', else (in Python) an evaluator's "
                          "primary metric known before it runs (load_best_model_at_end selects checkpoints by it, not "
                          "by transformers' 'loss', which a contrastive run never logs). A preset's stsb_spearman "
                          "gives way to your pairs' score in a run that scores no STS dev data."},
    )
    max_seq_length: int = field(
        default=DEFAULT_MAX_SEQ_LENGTH,
        metadata={"help": "Training truncation length in tokens, special tokens and prompt included (papers: 32). The "
                          "trainer cuts the sentences of a text data set at it; a data set you tokenized yourself "
                          "keeps its own cut."},
    )
    cached_minibatch_size: int | None = field(
        default=None,
        metadata={"help": "Gradient-cache mode: encode the batch in mini-batches of N sentences (bounded memory, "
                          "same gradient as the full batch; ~1.35x the time). 0/None = off. See hf_cse/cached.py."},
    )
    no_duplicates_in_batch: bool = field(
        default=True,
        metadata={"help": "Keep identical texts (NFKC, case-folded, white space collapsed; every view of a row) out of "
                          "one global batch, where a copy would be a false negative: a clashing row waits for a later "
                          "batch. false = the Trainer's plain random batches. Not applied to a stream (streaming "
                          "holds no whole data set; its run records false). See hf_cse/sampler.py."},
    )
    stream_shuffle_buffer: int | None = field(
        default=DEFAULT_STREAM_SHUFFLE_BUFFER,
        metadata={"help": "A streamed training set: shuffle it through a buffer of N rows (each row drawn at random "
                          "from the next N), each pass over the stream in an order of its own, seeded by seed / "
                          "data_seed and the pass, so that a resumed run reads the same batches. The rows after a "
                          "pass's last whole batch differ each pass. 0/None = file order, the same every pass. Not "
                          "used for data held in memory (shuffled whole each epoch). See docs/batches.md."},
    )
    cuda_graphs: str = field(
        default="auto",
        metadata={"help": "auto / on / off: on one CUDA GPU, run each step's forward, loss and backward as a "
                          "replayed CUDA graph (auto: wherever it applies and the run has >= 20 steps; the log says "
                          "which path and why). Speed only: not part of the run's settings. See hf_cse/cuda_graphs.py.",
                  "choices": ["auto", "on", "off"]},
    )
    senteval_data_dir: str | None = field(
        default=None, metadata={"help": "SentEval data/downstream folder for STS-B dev evaluation during training "
                                        "(recorded resolved, as an absolute path, in training_info.json)."}
    )
    eval_source: str = field(
        default="local", metadata={"help": "local (senteval_data_dir) or hub."}
    )
    precision: Precision | None = field(
        default=None,
        metadata={"help": f"auto: the mixed_precision of accelerate launch's config where it sets one, else bf16 "
                          f"autocast where the device computes bf16 natively (a CPU with AVX-512 BF16 / AMX, a GPU "
                          f"with bf16), else fp32; fp32; bf16; fp16 (GPU only). Losses always compute in fp32. bf16 / "
                          f"fp16 mean the same. Default: {DEFAULT_PRECISION}."},
    )
    precision_reason: str = field(default="", init=False, repr=False)
    #: a precision was asked for (precision other than auto, or bf16 / fp16): a run records it, auto it resolves anew
    precision_given: bool = field(default=False, init=False, repr=False)
    #: the fields given a value nobody passed, and by whom: metric_for_best_model / greater_is_better ->
    #: "transformers" (its filling in, e.g. 'loss' where load_best_model_at_end names no metric), "preset NAME"
    #: (hf_cse.presets.from_preset): the trainer may replace them (hf_cse.best_metric.metric_chosen_by)
    filled_in: dict = field(default_factory=dict, init=False, repr=False)
    #: the preset these arguments are of and the method they were made for (hf_cse.presets.from_preset; "": none):
    #: the trainer refuses them for a model of another method (hf_cse.presets.check_preset_method)
    preset_name: str = field(default="", init=False, repr=False)
    preset_method: str = field(default="", init=False, repr=False)
    #: the eval_steps transformers fills in is marked so (training_values.filled_in_interval): any other is given
    marks_filled_in_intervals: ClassVar[bool] = True

    def __post_init__(self):
        check_path_given(self.output_dir, "output_dir")
        check_field_types(self)  # before transformers reads them: "3e-5" or "false" fail or mislead there
        check_step_intervals(self)  # eval_steps without eval_strategy="steps": ignored, without a word
        check_supervised_only(self)  # label smoothing, the evaluation loop's options: read by no hf_cse run
        whole_batches_only(self, made=True)  # dataloader_drop_last=False would be set back to True
        problem = seq_length_problem(self.max_seq_length, None)  # the encoder's own limit is checked with the data
        if problem:
            raise InputError(f"{problem}.", fields=("max_seq_length",))
        check_shuffle_buffer(self.stream_shuffle_buffer)  # before any data is read
        # where the dev data came from, as training_info.json records it: the folder, not a path that means another
        # folder from elsewhere
        self.senteval_data_dir = resolved_path(self.senteval_data_dir)
        # before TrainingArguments checks bf16 / fp16 against the device (e.g. bf16 on a CPU needs use_cpu)
        self.precision_given = self.precision not in (None, "auto") or bool(self.bf16 or self.fp16)
        values, self.precision, self.precision_reason = training_flags(
            self.precision, self.bf16, self.fp16, self.use_cpu, launched_precision())
        for name, value in values.items():
            setattr(self, name, value)
        unset = [name for name in ("metric_for_best_model", "greater_is_better") if getattr(self, name) is None]
        eval_steps_given = bool(self.eval_steps)  # transformers fills in None or 0 (eval_strategy "steps")
        fill_in_best_metric(self)  # save_strategy="best" without a metric: transformers' 'loss', then replaced
        super().__post_init__()  # (sets greater_is_better from the metric's name where not given)
        if not eval_steps_given and self.eval_steps:  # so a copy with evaluation off is not refused for it
            self.eval_steps = filled_in_interval(self.eval_steps)
        self.filled_in = {name: FILLED_IN for name in unset if getattr(self, name) is not None}
        check_best_metric_direction(self)
        check_loader_and_schedule(self)  # (lr_scheduler_kwargs read from JSON) else a traceback as training starts
        check_schedule_builds(self)  # a keyword the schedule needs (cosine_with_min_lr's min_lr_rate): the same
        check_optimizer_builds(self)  # an optimizer whose package is missing (bitsandbytes): the same
        load_in_fp32_under_deepspeed(getattr(self, "deepspeed_plugin", None), self.precision)
