"""What ContrastiveTrainer is given (hf_cse/trainer_arguments.py): it adjusts its own copy of the training arguments,
never the caller's object, so one arguments object serves several trainers alike; a keyword it does not take is
refused in one line that says where the option belongs; plain TrainingArguments' precision is said in the log."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch
from datasets import Dataset
from eval_helpers import write_toy_senteval
from helpers import random_sentences, tiny_args
from transformers import AutoTokenizer

from hf_cse import precision
from hf_cse.errors import CSEError
from hf_cse.export.training_info import training_info_from_run
from hf_cse.models import SimCSEModel
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.trainer_arguments import TrainerArgumentError
from hf_cse.training_args import ContrastiveTrainingArguments

#: the fields the trainer adjusts, as a caller leaves them by default
CALLER_DEFAULTS = {"remove_unused_columns": True, "logging_nan_inf_filter": True,
                   "eval_on_start": False, "gradient_checkpointing": True, "activation_checkpointing": True,
                   "ddp_find_unused_parameters": None}


@pytest.fixture
def built(tiny_bert_dir, tmp_path):
    """A trainer's inputs: a fresh model (each call), the tokenizer, 16 sentences."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = Dataset.from_dict({"text": random_sentences(16)})
    return lambda: SimCSEModel.from_encoder(str(tiny_bert_dir)), tok, data


@pytest.mark.slow  # three trainers with dev data
def test_one_arguments_object_serves_two_trainers_alike(built, tmp_path):
    """The trainer turned activation checkpointing off in the caller's arguments once it had moved it into the
    encoder: a second trainer built from them (output_dir changed, or dataclasses.replace) trained without it; the
    other fields it adjusts changed under the caller too."""
    new_model, tok, data = built
    args = ContrastiveTrainingArguments(str(tmp_path / "one"), gradient_checkpointing=True, use_cpu=True,
                                        per_device_train_batch_size=8, report_to="none",
                                        senteval_data_dir=str(write_toy_senteval(tmp_path / "senteval")))
    first_model, second_model, third_model = new_model(), new_model(), new_model()
    first = ContrastiveTrainer(model=first_model, args=args, train_dataset=data, processing_class=tok)
    assert {name: getattr(args, name) for name in CALLER_DEFAULTS} == CALLER_DEFAULTS
    args.output_dir = str(tmp_path / "two")
    second = ContrastiveTrainer(model=second_model, args=args, train_dataset=data, processing_class=tok)
    third = ContrastiveTrainer(model=third_model, args=dataclasses.replace(args, output_dir=str(tmp_path / "three")),
                               train_dataset=data, processing_class=tok)
    assert {name: getattr(args, name) for name in CALLER_DEFAULTS} == CALLER_DEFAULTS
    for model in (first_model, second_model, third_model):
        assert model.encoder.is_activation_checkpointing
    # each trainer runs with (and records) the values it adjusted, in its own copy
    for trainer, folder in ((first, "one"), (second, "two"), (third, "three")):
        assert trainer.args is not args and trainer.args.output_dir == str(tmp_path / folder)
        assert trainer.args.accelerator_config is not args.accelerator_config
        assert {name: getattr(trainer.args, name) for name in CALLER_DEFAULTS} == {
            "remove_unused_columns": False, "logging_nan_inf_filter": False,
            "eval_on_start": True, "gradient_checkpointing": False, "activation_checkpointing": False,
            "ddp_find_unused_parameters": False}
    recorded = training_info_from_run(first.args)["training_args"]
    assert recorded["dataloader_drop_last"] is True and recorded["output_dir"] == str(tmp_path / "one")


def test_the_saved_training_args_are_the_ones_the_trainer_ran_with(built, tmp_path):
    new_model, tok, data = built
    args = tiny_args(tmp_path / "out", dataloader_drop_last=False, remove_unused_columns=True)
    trainer = ContrastiveTrainer(model=new_model(), args=args, train_dataset=data, processing_class=tok)
    trainer.save_model(str(tmp_path / "saved"))
    saved = torch.load(tmp_path / "saved" / "training_args.bin", weights_only=False)
    assert (saved.dataloader_drop_last, saved.remove_unused_columns) == (True, False)
    assert (args.dataloader_drop_last, args.remove_unused_columns) == (False, True)


@pytest.mark.parametrize("keyword, value, message", [
    ("max_seq_length", 64, "max_seq_length is a field of the training arguments, not a keyword argument of "
                           "ContrastiveTrainer: pass args=ContrastiveTrainingArguments(output_dir, max_seq_length=64) "
                           "(plain TrainingArguments have no max_seq_length)."),
    ("precision", "bf16", "precision is a field of the training arguments, not a keyword argument of "
                          "ContrastiveTrainer: pass args=ContrastiveTrainingArguments(output_dir, precision='bf16') "
                          "(plain TrainingArguments have no precision)."),
    ("eval_file", "dev.tsv", "eval_file is a field of the training arguments, not a keyword argument of "
                             "ContrastiveTrainer: pass args=ContrastiveTrainingArguments(output_dir, "
                             "eval_file='dev.tsv') (plain TrainingArguments have no eval_file)."),
    ("learning_rate", 3e-5, "learning_rate is a field of the training arguments, not a keyword argument of "
                            "ContrastiveTrainer: pass args=ContrastiveTrainingArguments(output_dir, "
                            "learning_rate=3e-05)."),
    ("tokenizer", None, "ContrastiveTrainer takes the tokenizer as processing_class= (transformers' Trainer renamed "
                        "tokenizer=): pass processing_class=tokenizer."),
])
def test_a_keyword_the_trainer_does_not_take_is_refused_with_where_it_belongs(keyword, value, message, built,
                                                                              tmp_path):
    """Plain TrainingArguments were said to take the contrastive options as keywords: max_seq_length=64 failed in
    inspect's words (an unexpected keyword argument), as did transformers' old tokenizer=."""
    new_model, tok, data = built
    value = tok if keyword == "tokenizer" else value
    with pytest.raises(TrainerArgumentError) as raised:
        ContrastiveTrainer(model=new_model(), args=tiny_args(tmp_path / "out"), train_dataset=data,
                           processing_class=tok, **{keyword: value})
    assert str(raised.value) == message
    assert isinstance(raised.value, CSEError) and isinstance(raised.value, TypeError)
    assert not (tmp_path / "out").exists()


def test_use_liger_kernel_is_refused_before_anything_is_built(built, tmp_path):
    """use_liger_kernel=True stopped in transformers' ImportError (no liger-kernel), or with it patched nothing: Liger
    knows a model by its type, and an hf_cse model's is its own."""
    new_model, tok, data = built
    with pytest.raises(CSEError, match=r"^use_liger_kernel: Liger patches .* it would patch nothing\. Leave "
                                       r"use_liger_kernel off\.$") as raised:
        ContrastiveTrainer(model=new_model(), args=tiny_args(tmp_path / "out", use_liger_kernel=True),
                           train_dataset=data, processing_class=tok)
    assert raised.value.fields == ("use_liger_kernel",) and not (tmp_path / "out").exists()


def test_a_mistyped_keyword_gets_the_name_it_meant(built, tmp_path):
    new_model, tok, data = built
    with pytest.raises(TrainerArgumentError, match=r"^ContrastiveTrainer has no keyword argument senteval_dir \(did "
                                                   r"you mean senteval_data_dir\?\): it takes transformers Trainer's "
                                                   r"\(model, args, .*\) and its own \(senteval_data_dir, .*\); every "
                                                   r"other option is a field of ContrastiveTrainingArguments, passed "
                                                   r"as args=\.$"):
        ContrastiveTrainer(model=new_model(), args=tiny_args(tmp_path / "out"), train_dataset=data,
                           processing_class=tok, senteval_dir="SentEval")


@pytest.mark.parametrize("native", [True, False])
def test_plain_training_arguments_say_the_precision_they_run(native, built, tmp_path, monkeypatch, caplog):
    """Plain TrainingArguments have no precision="auto": the run is fp32 unless bf16 / fp16 say otherwise, said in
    one log line, a warning where ContrastiveTrainingArguments would have run bf16."""
    monkeypatch.setattr(precision, "native_bf16", lambda device_type: native)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)  # not under accelerate launch
    new_model, tok, data = built
    with caplog.at_level(logging.INFO, logger="hf_cse"):
        ContrastiveTrainer(model=new_model(), args=tiny_args(tmp_path / "out"), train_dataset=data,
                           processing_class=tok)
    [line] = [r for r in caplog.records if r.getMessage().startswith("precision:")]
    auto = "bf16" if native else "fp32"
    assert line.levelno == (logging.WARNING if native else logging.INFO)
    assert line.getMessage().startswith("precision: fp32 (plain TrainingArguments: bf16=True / fp16=True choose "
                                        f"another); ContrastiveTrainingArguments' precision='auto' would run "
                                        f"{auto} here")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hf_cse"):
        ContrastiveTrainer(model=new_model(), args=ContrastiveTrainingArguments(
            str(tmp_path / "out"), use_cpu=True, per_device_train_batch_size=8, report_to="none"),
            train_dataset=data, processing_class=tok)
    # precision='auto' resolved: said once, by the trainer (hf_cse.precision.say_training_precision)
    [line] = [r for r in caplog.records if r.getMessage().startswith("precision:")]
    native_or_not = "computes bf16 natively" if native else "has no native bf16"
    assert (line.levelno, line.getMessage()) == (
        logging.INFO, f"precision: {precision.describe(auto)} on cpu (auto: this CPU {native_or_not})")


def test_the_readme_names_every_keyword_the_trainer_adds_to_transformers_trainers():
    """README's Python API listed the trainer's keyword arguments besides transformers Trainer's without
    stream_shuffle_buffer, which the signature and docstring have."""
    import inspect
    import re
    from pathlib import Path

    from transformers import Trainer

    added = set(inspect.signature(ContrastiveTrainer.__init__).parameters) - set(
        inspect.signature(Trainer.__init__).parameters) - {"kwargs"}
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    listing = re.search(r"Its keyword arguments besides transformers Trainer's are (.*?);", readme, re.S).group(1)
    assert added and added <= set(re.findall(r"`(\w+)`", listing)), added
