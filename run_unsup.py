#!/usr/bin/env python
"""Train a sentence encoder with an unsupervised contrastive method.

    accelerate launch run_unsup.py --loss gs_infonce                       # embedded defaults
    accelerate launch run_unsup.py --preset simcse_bert --model_name_or_path bert-base-uncased \
        --train_file wiki1m_for_simcse.txt --senteval_data_dir SentEval/data/downstream --output_dir out/simcse

With no flags it trains the packaged all-MiniLM-L6-v2 on the small demo corpus shipped in the package.
"""

from __future__ import annotations

import logging
import os
import sys

import transformers
from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments, set_seed

from hf_cse.arguments import (
    DataArguments,
    DiffCSEArguments,
    MethodArguments,
    ModelArguments,
    default_encoder,
    diffcse_config_kwargs,
    loss_arguments_class,
    loss_kwargs_from,
)
from hf_cse.data import check_enough_rows, load_train_dataset, tokenize_dataset
from hf_cse.evaluation.custom_dev import EvalDataArguments, pairs_from_args
from hf_cse.evaluation.evaluators import PairsEvaluator
from hf_cse.export import HubPushError, export_after_training, take_over_hub_push
from hf_cse.models import get_method
from hf_cse.plots import CURVES_FILE, plot_training_curves
from hf_cse.presets import PRESETS
from hf_cse.trainer import ContrastiveTrainer

logger = logging.getLogger("run_unsup")

# Defaults of this script where they differ from TrainingArguments' (a preset or a flag overrides them).
SCRIPT_DEFAULTS = {
    "output_dir": None,
    "per_device_train_batch_size": 64,
    "learning_rate": 3e-5,
    "num_train_epochs": 1,
    "logging_steps": 5,
    "save_strategy": "no",
    "report_to": "none",
    "dataloader_drop_last": True,
    "disable_tqdm": False,
}


def parse_args(argv: list[str]):
    LossArguments = loss_arguments_class()
    parser = HfArgumentParser(
        (ModelArguments, DataArguments, MethodArguments, LossArguments, DiffCSEArguments, TrainingArguments,
         EvalDataArguments)
    )
    parser.set_defaults(**SCRIPT_DEFAULTS)
    preset = parser.parse_known_args(argv)[0].preset
    if preset is not None:
        if preset not in PRESETS:
            parser.error(f"unknown --preset {preset!r}; presets: {', '.join(sorted(PRESETS))}")
        parser.set_defaults(**PRESETS[preset])
    if "--output_dir" not in " ".join(argv):
        known = parser.parse_known_args(argv)[0]
        loss = known.loss or get_method(known.method).config_class.loss
        parser.set_defaults(output_dir=f"outputs/{known.method}-{loss}")
    return parser.parse_args_into_dataclasses(args=argv)


def attach_diffcse_generator(model, name: str | None, tokenizer, train_dataset) -> None:
    """DiffCSE's frozen generator, loaded after the model (never part of it); 'unigram' when none is named."""
    if name is None or name == "unigram":
        logger.warning(
            "DiffCSE generator: UNIGRAM replacements drawn from the training corpus (no masked-LM weights). This "
            "DEPARTS FROM THE PAPER, which fills masks with a frozen masked LM: pass --generator_name_or_path "
            "distilbert-base-uncased (BERT vocab) / distilroberta-base (RoBERTa) or a local masked-LM folder."
        )
        model.attach_generator("unigram", tokenizer, train_token_ids=train_dataset["input_ids"])
    else:
        model.attach_generator(name, tokenizer)
    logger.info("DiffCSE generator: %r (frozen, not saved with the model)", model.generator)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    model_args, data_args, method_args, loss_args, diffcse_args, training_args, eval_data_args = args
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)

    # 1. Data first, so bad input fails before any model is loaded.
    raw = load_train_dataset(data_args.train_file, data_args.dataset_name, data_args.dataset_config_name,
                             data_args.text_column)
    if data_args.max_train_samples is not None:
        raw = raw.select(range(min(data_args.max_train_samples, len(raw))))
    source = data_args.train_file or data_args.dataset_name or "the demo corpus"
    check_enough_rows(len(raw), training_args.per_device_train_batch_size * training_args.world_size, source)
    eval_pairs = pairs_from_args(eval_data_args)  # --eval_file / --eval_dataset_name: checkpoint selection data
    if eval_pairs is not None and training_args.eval_strategy == "no":
        logger.warning("--eval_file/--eval_dataset_name are scored only with --eval_strategy steps or epoch.")

    # 2. Model: the method class wraps any AutoModel encoder; everything about the method goes into its config.
    encoder = model_args.model_name_or_path or default_encoder()
    model_cls = get_method(model_args.method)
    method_defaults = model_cls.config_class()
    loss = method_args.loss or method_defaults.loss
    # flags override the method's own loss settings (e.g. imsimcse's m = 0.9) only where given
    loss_kwargs = dict(method_defaults.loss_kwargs) if loss == method_defaults.loss else {}
    loss_kwargs.update(loss_kwargs_from(loss, loss_args))
    config_kwargs = dict(
        pooler_type=model_args.pooler_type,
        mlp_only_train=model_args.mlp_only_train,
        dropout=model_args.dropout,
        fast_dropout=model_args.fast_dropout,
        loss=loss,
        loss_kwargs=loss_kwargs,
        off_dropout_grad=method_args.off_dropout_grad,
        dcl_temperature=method_args.dcl_temperature,
        dcl_normalization=method_args.dcl_normalization,
    )
    # None = keep the method's own default (e.g. imsimcse turns off-dropout and DCL on)
    optional = {"projector": model_args.projector, "off_dropout": method_args.off_dropout,
                "dcl_weight": method_args.dcl_weight}
    config_kwargs.update({k: v for k, v in optional.items() if v is not None})
    config_kwargs.update(diffcse_config_kwargs(model_args.method, diffcse_args))
    model = model_cls.from_encoder(encoder, **config_kwargs)
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    # --activation_checkpointing (transformers 5's name) or the deprecated --gradient_checkpointing
    if getattr(training_args, "activation_checkpointing", False) or training_args.gradient_checkpointing:
        model.enable_activation_checkpointing()  # inside the encoders; the Trainer must not redo it on the wrapper
        training_args.gradient_checkpointing = False
        if hasattr(training_args, "activation_checkpointing"):
            training_args.activation_checkpointing = False

    # Tokens are cached by datasets for file/Hub sources.
    with training_args.main_process_first(desc="tokenizing"):
        train_dataset = tokenize_dataset(raw, tokenizer, data_args.max_seq_length,
                                         data_args.preprocessing_num_workers)
    if model_args.method == "diffcse":
        attach_diffcse_generator(model, diffcse_args.generator_name_or_path, tokenizer, train_dataset)
    logger.info("method=%s loss=%s encoder=%s sentences=%d global batch=%d", model_args.method, loss,
                encoder, len(train_dataset), training_args.per_device_train_batch_size * training_args.world_size
                * training_args.gradient_accumulation_steps)

    # 3. Train.
    training_args.remove_unused_columns = False
    hub_repo = take_over_hub_push(training_args)  # --push_to_hub uploads the export of step 5, not checkpoints
    trainer = ContrastiveTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=model_cls.collator(tokenizer, model.config),
        processing_class=tokenizer,
        senteval_data_dir=method_args.senteval_data_dir,
        eval_source=method_args.eval_source,
        evaluator=None if eval_pairs is None else PairsEvaluator(eval_pairs, eval_data_args.eval_name),
        cached_minibatch_size=method_args.cached_minibatch_size,
    )
    result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()
    if trainer.is_world_process_zero():  # before the export, which copies the curves beside the model card
        run_name = f"{model_args.method} + {loss}: {os.path.basename(training_args.output_dir)}"
        curves = plot_training_curves(trainer.state.log_history, os.path.join(training_args.output_dir, CURVES_FILE),
                                      title=run_name)
        logger.info("training curves: %s", curves)

    # 4. Save the model (the best checkpoint when load_best_model_at_end) and its tokenizer.
    trainer.save_model(training_args.output_dir)
    logger.info("saved %s model to %s", model_args.method, training_args.output_dir)

    # 5. sentence-transformers export + model card in <output_dir>/sentence-transformers (pushed with --push_to_hub).
    if trainer.is_world_process_zero():
        export_after_training(trainer.accelerator.unwrap_model(trainer.model), tokenizer, training_args, data_args,
                              len(train_dataset), result.metrics, hub_repo, preset=method_args.preset)


if __name__ == "__main__":
    try:
        main()
    except (ValueError, FileNotFoundError, HubPushError) as err:  # bad input: say what and how to fix, no traceback
        if os.environ.get("HF_CSE_DEBUG"):
            raise
        sys.exit(f"run_unsup.py: error: {err}\n(set HF_CSE_DEBUG=1 to see the traceback)")
