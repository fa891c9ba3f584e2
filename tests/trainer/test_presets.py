"""``hf_cse.presets.from_preset``: a paper's preset in Python, built as ``run_unsup.py --preset NAME`` builds it."""

from __future__ import annotations

import json
import logging

import pytest
from datasets import Dataset
from helpers import random_sentences, scored_pairs_file
from transformers import AutoTokenizer

from hf_cse.cli import train as train_cli
from hf_cse.errors import CSEError
from hf_cse.models import CSEPreTrainedModel
from hf_cse.presets import PRESETS, from_preset
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.training_args import ContrastiveTrainingArguments

OFFLINE = {"diffcse": {"generator_name_or_path": "unigram"}}  # the presets' generators are Hub downloads


class Built(Exception):
    def __init__(self, cls, config_kwargs):
        super().__init__("model built")
        self.config = cls.config_class(**config_kwargs)


@pytest.fixture
def built_configs(monkeypatch):
    def capture(cls, name_or_path, **config_kwargs):
        raise Built(cls, config_kwargs)

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder", classmethod(capture))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_in_python_is_the_commands_preset(name, tiny_bert_dir, senteval_dir, tmp_path, built_configs):
    """The model config equals the one ``run_unsup.py --preset NAME`` builds; the arguments hold the preset's values."""
    extra = OFFLINE.get(PRESETS[name]["method"], {})
    train_file = tmp_path / "train.txt"
    train_file.write_text("\n".join(random_sentences(600)) + "\n")  # one batch of every preset
    with pytest.raises(Built) as by_command:
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_file),
                                   "--output_dir", str(tmp_path / "cli"), "--preset", name,
                                   "--senteval_data_dir", str(senteval_dir),
                                   *[f"--{k}={v}" for k, v in extra.items()]])
    made = {}
    real = ContrastiveTrainingArguments.__post_init__

    def keep(args):
        real(args)
        made["args"] = args

    with pytest.MonkeyPatch.context() as patch, pytest.raises(Built) as in_python:
        patch.setattr(ContrastiveTrainingArguments, "__post_init__", keep)
        from_preset(name, str(tiny_bert_dir), str(tmp_path / "py"), senteval_data_dir=str(senteval_dir), **extra)
    assert all(getattr(made["args"], k) == v for k, v in PRESETS[name].items() if hasattr(made["args"], k))
    command, python = by_command.value.config, in_python.value.config
    assert type(python) is type(command)
    assert python.objectives == command.objectives
    for key in PRESETS[name]:
        if hasattr(command, key) and key not in extra:
            assert getattr(python, key) == getattr(command, key), key


@pytest.mark.slow
def test_a_preset_trains_in_python_and_its_values_give_way_to_the_callers(tiny_bert_dir, senteval_dir, tmp_path,
                                                                          caplog):
    caplog.set_level(logging.INFO, logger="hf_cse")  # the preset's INFO line, whatever ran before (it was set by one)
    model, args = from_preset("focal_infonce_bert", str(tiny_bert_dir), str(tmp_path / "out"), loss="infonce",
                              senteval_data_dir=str(senteval_dir), max_steps=2, eval_steps=2, save_steps=2,
                              per_device_train_batch_size=8, report_to=[])
    assert model.config.objectives[0]["loss"] == "infonce" and model.config.objectives[0]["hyperparameters"] == {
        "temperature": 0.07}  # the preset's m dropped with its loss; its temperature kept
    assert (args.learning_rate, args.metric_for_best_model, args.max_steps) == (3e-5, "stsb_spearman", 2)
    assert "preset focal_infonce_bert: dropped m" in caplog.text
    from datasets import Dataset

    trainer = ContrastiveTrainer(model=model, args=args, processing_class=AutoTokenizer.from_pretrained(tiny_bert_dir),
                                 train_dataset=Dataset.from_dict({"text": random_sentences(32)}))
    assert trainer.train().global_step == 2
    trainer.save_run()  # the record says the preset its settings came from, as the command's does
    assert json.loads((tmp_path / "out" / "training_info.json").read_text())["preset"] == "focal_infonce_bert"


def test_an_unknown_preset_or_setting_is_refused_with_the_closest_name(tiny_bert_dir, tmp_path):
    with pytest.raises(CSEError, match=r"^unknown preset 'simcse_bret'; did you mean 'simcse_bert'\? presets: "):
        from_preset("simcse_bret", str(tiny_bert_dir), str(tmp_path / "out"))
    # a misspelt training argument was taken for a config field ("a loss's hyperparameters go in its objective")
    with pytest.raises(CSEError, match=r"^from_preset: no setting 'learnig_rate'; did you mean 'learning_rate'\?$"):
        from_preset("simcse_bert", str(tiny_bert_dir), str(tmp_path / "out"), learnig_rate=1e-4)


def test_the_paradigm_preset_freezes_the_embedding_layer_as_the_authors_code_and_the_caller_can_say_no(
        tiny_bert_dir, senteval_dir, tmp_path, built_configs):
    """paradigm_bert follows the authors' custom_param_init: only the encoder's layers (and heads) train; from Python
    and from the command line (--freeze_embeddings False) the caller's value wins."""
    with pytest.raises(Built) as preset:
        from_preset("paradigm_bert", str(tiny_bert_dir), str(tmp_path / "py"))
    with pytest.raises(Built) as python_says_no:
        from_preset("paradigm_bert", str(tiny_bert_dir), str(tmp_path / "py"), freeze_embeddings=False)
    train_file = tmp_path / "train.txt"
    train_file.write_text("\n".join(random_sentences(200)) + "\n")
    with pytest.raises(Built) as command_says_no:
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_file),
                                   "--output_dir", str(tmp_path / "cli"), "--preset", "paradigm_bert",
                                   "--senteval_data_dir", str(senteval_dir), "--freeze_embeddings", "False"])
    assert preset.value.config.freeze_embeddings is True
    assert python_says_no.value.config.freeze_embeddings is False
    assert command_says_no.value.config.freeze_embeddings is False
    assert not any(PRESETS[name].get("freeze_embeddings") for name in PRESETS if name != "paradigm_bert")


@pytest.mark.slow  # three models and two trainers built
def test_a_preset_with_your_own_dev_pairs_selects_by_their_score_as_the_command_line_does(tiny_bert_dir, senteval_dir,
                                                                                          tmp_path, caplog):
    """A preset's stsb_spearman is never logged where only the caller's own pairs are scored, and the trainer refused
    it: their score selects (as hf-cse-train --preset NAME --eval_file does), unless metric_for_best_model is given,
    which is checked as given; with STS dev data the preset's stays."""
    pairs = str(scored_pairs_file(tmp_path / "pairs.tsv", 12, 4, seed=0))
    common = {"eval_file": pairs, "eval_name": "mydev", "use_cpu": True, "per_device_train_batch_size": 8,
              "report_to": []}
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)

    def trainer(model, args):
        return ContrastiveTrainer(model=model, args=args, processing_class=tokenizer,
                                  train_dataset=Dataset.from_dict({"text": random_sentences(32)}))

    with caplog.at_level(logging.INFO, logger="hf_cse.presets"):
        model, args = from_preset("simcse_bert", str(tiny_bert_dir), str(tmp_path / "own"), **common)
    assert (args.metric_for_best_model, args.greater_is_better) == ("mydev_spearman", True)
    [said] = [r.getMessage() for r in caplog.records if "selected by" in r.getMessage()]
    assert said == ("preset simcse_bert selects by stsb_spearman, but these arguments score no STS dev data, only your "
                    "own pairs: checkpoints are selected by mydev_spearman; metric_for_best_model chooses another")
    assert "--" not in said
    trainer(model, args)  # refused before: stsb_spearman is not a score this run logs
    model, chosen = from_preset("simcse_bert", str(tiny_bert_dir), str(tmp_path / "chosen"),
                                metric_for_best_model="stsb_spearman", **common)
    assert chosen.metric_for_best_model == "stsb_spearman"
    with pytest.raises(CSEError, match=r"metric_for_best_model stsb_spearman is not a score this run logs "
                                       r"\(mydev_spearman\)"):
        trainer(model, chosen)
    _, with_sts = from_preset("simcse_bert", str(tiny_bert_dir), str(tmp_path / "sts"),
                              senteval_data_dir=str(senteval_dir), **common)
    assert with_sts.metric_for_best_model == "stsb_spearman"


@pytest.mark.slow  # three models built
def test_a_presets_arguments_with_a_model_of_another_method_are_refused_when_the_trainer_is_built(tiny_bert_dir,
                                                                                                  tmp_path):
    """Seen before: an ESimCSEModel given diffcse_bert's arguments trained at DiffCSE's learning rate and epochs,
    without a word. The preset's method given over (method=, as --preset with --method) stays allowed."""
    from hf_cse.models import ESimCSEModel

    common = {"use_cpu": True, "per_device_train_batch_size": 8, "report_to": [], "generator_name_or_path": "unigram",
              "eval_strategy": "no", "save_strategy": "no", "load_best_model_at_end": False}  # no dev data needed
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = Dataset.from_dict({"text": random_sentences(32)})
    _, args = from_preset("diffcse_bert", str(tiny_bert_dir), str(tmp_path / "diffcse"), **common)
    assert (args.preset_name, args.preset_method) == ("diffcse_bert", "diffcse")
    with pytest.raises(CSEError) as refused:
        ContrastiveTrainer(model=ESimCSEModel.from_encoder(str(tiny_bert_dir)), args=args, processing_class=tokenizer,
                           train_dataset=data)
    said = str(refused.value)
    assert said.startswith("these training arguments are preset diffcse_bert's, made for method diffcse, and the "
                           "model is esimcse: it would train at diffcse's settings.")
    assert "esimcse's presets: esimcse_bert_base" in said and "method='esimcse'" in said and "--" not in said
    assert "\n" not in said
    model, chosen = from_preset("diffcse_bert", str(tiny_bert_dir), str(tmp_path / "esimcse"), method="esimcse",
                                **{k: v for k, v in common.items() if k != "generator_name_or_path"})
    assert isinstance(model, ESimCSEModel) and chosen.preset_method == "esimcse"
    ContrastiveTrainer(model=model, args=chosen, processing_class=tokenizer, train_dataset=data)
