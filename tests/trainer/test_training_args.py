"""ContrastiveTrainingArguments and what ContrastiveTrainer takes from them (no training here; the whole run is
tests/trainer/test_python_api.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from eval_helpers import write_toy_senteval
from helpers import random_sentences, tiny_args, tiny_train_dataset
from transformers import AutoTokenizer

from hf_cse.data import PairCollator, TwoViewCollator, load_pair_dataset, tokenize_pair_dataset
from hf_cse.export.training_info import TRAINING_INFO_FILE, training_info_from_run
from hf_cse.models import DiffCSEModel, SimCSEModel
from hf_cse.precision import PrecisionError
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.trainer_options import TrainingOptions
from hf_cse.training_args import ContrastiveTrainingArguments


def _args(tmp_path, **kwargs) -> ContrastiveTrainingArguments:
    return ContrastiveTrainingArguments(str(tmp_path / "out"), per_device_train_batch_size=8, use_cpu=True,
                                        report_to="none", **kwargs)


def test_the_first_argument_is_the_output_folder_and_precision_is_resolved(tmp_path):
    args = ContrastiveTrainingArguments(str(tmp_path / "out"), precision="fp32", use_cpu=True)
    assert args.output_dir == str(tmp_path / "out") and args.eval_file is None
    assert (args.precision, args.bf16, args.fp16, args.precision_reason) == ("fp32", False, False, "requested")
    bf16 = ContrastiveTrainingArguments(str(tmp_path / "out"), precision="bf16", use_cpu=True)
    assert bf16.bf16 and bf16.precision == "bf16"
    with pytest.raises(PrecisionError, match="needs a GPU"):
        ContrastiveTrainingArguments(str(tmp_path / "out"), precision="fp16", use_cpu=True)


def test_a_relative_senteval_data_dir_is_recorded_as_the_folder_it_names(tmp_path, monkeypatch):
    """training_info.json recorded senteval_data_dir as given ("../senteval"), a path that names another folder (or
    none) from anywhere but the folder the run started in."""
    (tmp_path / "senteval").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    folder = str((tmp_path / "senteval").resolve())
    args = _args(tmp_path, senteval_data_dir="../senteval")
    assert args.senteval_data_dir == folder
    info = training_info_from_run(args)
    assert info["training_args"]["senteval_data_dir"] == folder
    # the trainer's own keyword (plain TrainingArguments have no such field) reads the same folder
    assert TrainingOptions.from_args(tiny_args(tmp_path / "plain"), senteval_data_dir="../senteval").senteval_data_dir \
        == folder
    assert _args(tmp_path).senteval_data_dir is None and _args(tmp_path, senteval_data_dir=folder).senteval_data_dir \
        == folder


@pytest.mark.slow
@pytest.mark.parametrize("plain", [True, False], ids=["TrainingArguments", "ContrastiveTrainingArguments"])
def test_the_trainers_senteval_data_dir_keyword_is_recorded_resolved(plain, tiny_bert_dir, sentences, tmp_path,
                                                                     monkeypatch):
    """A run from Python given ``senteval_data_dir=`` (relative) scored its dev data on that folder, but its
    training_info.json named none (only the arguments' field was recorded): the card and run_eval could not find it."""
    senteval = write_toy_senteval(tmp_path / "senteval")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    given = str(Path("..", senteval.relative_to(tmp_path)))
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data", repeat=2)
    out = tmp_path / "out"
    args = tiny_args(out, max_steps=1) if plain else _args(tmp_path, max_steps=1, save_strategy="no")
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args, train_dataset=ds,
                                 processing_class=tok, senteval_data_dir=given)
    trainer.train()
    trainer.save_run()
    info = json.loads((out / TRAINING_INFO_FILE).read_text())
    assert info["training_args"]["senteval_data_dir"] == str(senteval.resolve())
    assert info["training_args"]["eval_source"] == "local"
    assert info["dev"]  # scored on it


def test_the_trainer_takes_its_options_from_the_arguments_and_the_old_keywords_win(tiny_bert_dir, sentences,
                                                                                   tmp_path):
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path, repeat=2)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    args = _args(tmp_path, cached_minibatch_size=4, no_duplicates_in_batch=False)
    trainer = ContrastiveTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    assert trainer.cached_minibatch_size == 4 and trainer.no_duplicates_in_batch is False
    # the method's collator, the columns it reads kept, no dev data: no score before the first step
    assert isinstance(trainer.data_collator, TwoViewCollator) and trainer.args.remove_unused_columns is False
    assert trainer.evaluator is None and trainer.args.eval_on_start is False
    again = ContrastiveTrainer(model=model, args=_args(tmp_path, cached_minibatch_size=4), train_dataset=ds,
                               processing_class=tok, cached_minibatch_size=2, no_duplicates_in_batch=False)
    assert again.cached_minibatch_size == 2 and again.no_duplicates_in_batch is False
    plain = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "plain"), train_dataset=ds,
                               processing_class=tok, cached_minibatch_size=2)  # TrainingArguments: keywords only
    assert plain.cached_minibatch_size == 2 and plain.no_duplicates_in_batch is True and plain.precision == "fp32"


@pytest.mark.slow  # an evaluation (~3 s here)
def test_dev_data_in_the_arguments_is_scored_before_the_first_step(tiny_bert_dir, sentences, tmp_path):
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{i % 5}\n" for i, (a, b) in enumerate(
        zip(random_sentences(10, seed=1), random_sentences(10, seed=2), strict=True))))
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), train_dataset=ds,
                                 args=_args(tmp_path, eval_file=str(dev), eval_name="mine"), processing_class=tok)
    assert trainer.args.eval_on_start is True
    assert set(trainer.evaluate()) >= {"eval_mine_spearman"}


def test_settings_of_pairs_that_are_not_there_are_refused_by_the_trainer(tiny_bert_dir, sentences, tmp_path):
    """As the command line refuses them: eval_name or a column without eval_file trained and recorded them without a
    word. eval_name names the trainer's own eval_pairs too, so there it is taken."""
    from hf_cse.checks import InputError

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    for given, name in (({"eval_name": "mine"}, "eval_name mine"), ({"eval_score_column": "s"}, "eval_score_column s")):
        with pytest.raises(InputError, match=f"^{name} does nothing without eval_file or eval_dataset_name"):
            ContrastiveTrainer(model=model, train_dataset=ds, args=_args(tmp_path, **given), processing_class=tok)
    pairs = [("a b", "c d", 1.0), ("e f", "g h", 2.0), ("i j", "k l", 3.0)]
    trainer = ContrastiveTrainer(model=model, train_dataset=ds, args=_args(tmp_path, eval_name="mine"),
                                 processing_class=tok, eval_pairs=pairs)
    assert [e.name for e in trainer.evaluator] == ["mine"]
    # beside eval_pairs, a column names nothing
    with pytest.raises(InputError, match=r"^eval_score_column s does nothing: the trainer's eval_pairs are rows "
                                         r"\(sentence1, sentence2, score\) with no columns or split to name; drop "
                                         r"eval_score_column\.$"):
        ContrastiveTrainer(model=model, train_dataset=ds, args=_args(tmp_path, eval_score_column="s"),
                           processing_class=tok, eval_pairs=pairs)
    # plain TrainingArguments: the trainer checks what ContrastiveTrainingArguments check when made
    with pytest.raises(InputError, match=r"^save_total_limit=2 keeps or deletes nothing"):
        ContrastiveTrainer(model=model, train_dataset=ds, args=tiny_args(tmp_path / "out", save_total_limit=2),
                           processing_class=tok)


def test_eval_pairs_beside_another_eval_file_are_refused(tiny_bert_dir, sentences, tmp_path):
    """eval_pairs beside an eval_file scored eval_pairs alone and left the file unread, without a word. The pairs
    the command line read from that very file (and passes on as eval_pairs) are taken."""
    from hf_cse.checks import InputError
    from hf_cse.evaluation.custom_dev import pairs_from_args

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{i % 5}\n" for i, (a, b) in enumerate(
        zip(random_sentences(10, seed=1), random_sentences(10, seed=2), strict=True))))
    args = _args(tmp_path, eval_file=str(dev), eval_name="mine")
    rows = [("a b", "c d", 1.0), ("e f", "g h", 2.0), ("i j", "k l", 3.0)]
    other_file = tmp_path / "other.tsv"
    other_file.write_text(dev.read_text())
    read_elsewhere = pairs_from_args(_args(tmp_path, eval_file=str(other_file)))
    for other in (rows, read_elsewhere, pairs_from_args(_args(tmp_path, eval_file=str(dev), eval_sentence1_column=
                                                               "sentence2", eval_sentence2_column="sentence1"))):
        with pytest.raises(InputError, match=f"^eval_pairs and eval_file {dev} both give the dev pairs, and only "
                                             "eval_pairs would be scored: drop one of them.$"):
            ContrastiveTrainer(model=model, train_dataset=ds, args=args, processing_class=tok, eval_pairs=other)
    read = pairs_from_args(args)
    trainer = ContrastiveTrainer(model=model, train_dataset=ds, args=args, processing_class=tok, eval_pairs=read)
    [only] = trainer.evaluator
    assert only.name == "mine" and len(only.pairs) == 10


def test_own_dev_pairs_without_senteval_are_all_the_trainer_scores(tmp_path, monkeypatch):
    """eval_file (or the trainer's eval_pairs) and no senteval_data_dir: the pairs alone, in a folder with no SentEval
    data near it, as hf-cse-train scores them; STS-B / SICK-R dev only where asked for."""
    from eval_helpers import write_toy_senteval

    from hf_cse.evaluation.evaluators import PairsEvaluator, STSDevEvaluator

    monkeypatch.delenv("HF_CSE_SENTEVAL_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{i % 5}\n" for i, (a, b) in enumerate(
        zip(random_sentences(10, seed=1), random_sentences(10, seed=2), strict=True))))
    args = _args(tmp_path, eval_file=str(dev), eval_name="mine", eval_strategy="steps", eval_steps=5)
    for given in ({}, {"pairs": [("a b", "c d", 1.0), ("e f", "g h", 2.0), ("i j", "k l", 3.0)]}):
        [only] = TrainingOptions.from_args(args).evaluator(args, **given)
        assert isinstance(only, PairsEvaluator) and only.name == "mine"
    senteval = str(write_toy_senteval(tmp_path / "senteval"))
    both = TrainingOptions.from_args(args, senteval_data_dir=senteval).evaluator(args)
    assert [type(e) for e in both] == [STSDevEvaluator, PairsEvaluator]


def test_pair_rows_get_the_pair_collator_and_diffcse_its_generator(tiny_bert_dir, tmp_path):
    table = tmp_path / "pairs.tsv"
    rows = zip(random_sentences(16, seed=3), random_sentences(16, seed=4), strict=True)
    table.write_text("text\tpositive\n" + "".join(f"{a}\t{b}\n" for a, b in rows))
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    pairs = tokenize_pair_dataset(load_pair_dataset("positive", train_file=str(table)), tok, 32)
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=_args(tmp_path),
                                 train_dataset=pairs, processing_class=tok)
    assert isinstance(trainer.data_collator, PairCollator)

    ds, tok = tiny_train_dataset(tiny_bert_dir, random_sentences(16), tmp_path)
    model = DiffCSEModel.from_encoder(str(tiny_bert_dir))
    assert model.generator is None
    ContrastiveTrainer(model=model, args=_args(tmp_path, activation_checkpointing=True), train_dataset=ds,
                       processing_class=tok)
    assert model.generator is not None  # prepare_for_training: unigram replacements counted on the training set
    assert all(encoder.is_activation_checkpointing for encoder in model.transformer_encoders())


def test_the_python_defaults_are_the_commands_simcse_recipe_not_transformers(tmp_path):
    """ContrastiveTrainingArguments("out") trained with transformers' batch 8 (7 negatives), lr 5e-5 and 3 epochs while
    hf-cse-train ran SimCSE's 64 / 3e-5 / one epoch: the same defaults now, read from the command's own parser."""
    from transformers import TrainingArguments

    from hf_cse.cli.train import argument_parser

    python = ContrastiveTrainingArguments(str(tmp_path / "out"), use_cpu=True)
    command = argument_parser().parse_args(["--output_dir", str(tmp_path / "out")])
    plain = TrainingArguments(str(tmp_path / "out"))
    recipe = {"per_device_train_batch_size": 64, "learning_rate": 3e-5, "num_train_epochs": 1, "logging_steps": 5,
              "save_strategy": "no", "dataloader_drop_last": True}
    for name, value in recipe.items():
        assert getattr(python, name) == value == getattr(command, name), name
        assert getattr(plain, name) != value, name  # transformers' own class keeps its defaults


@pytest.mark.parametrize("name, value", [("label_smoothing_factor", 0.3), ("prediction_loss_only", True),
                                         ("label_names", ["labels"]), ("eval_accumulation_steps", 2),
                                         ("include_for_metrics", ["inputs"]), ("batch_eval_metrics", True)])
def test_an_argument_only_transformers_supervised_paths_read_is_refused(name, value, tmp_path):
    """label_smoothing_factor 0.3 trained bit-identical losses and the card listed it; the evaluation loop's options
    were accepted and ignored alike (a review found them)."""
    from hf_cse.checks import InputError

    with pytest.raises(InputError, match=rf"^{name}=.* does nothing here: .*Drop {name}\.$") as refused:
        _args(tmp_path, **{name: value})
    assert refused.value.fields == (name,)
    _args(tmp_path, label_smoothing_factor=0.0, prediction_loss_only=False)  # their unset values pass


def test_no_duplicates_is_recorded_as_applied_only_where_the_sampler_ran():
    """With another train_sampling_strategy the sampler gives way (said in the log), yet training_info.json and the
    card said no_duplicates_in_batch true."""
    options = TrainingOptions()
    assert options.recorded({"training_args": {"no_duplicates_in_batch": True}})["training_args"][
        "no_duplicates_in_batch"] is True
    for sampling in ("sequential", "group_by_length"):
        info = options.recorded({"training_args": {"no_duplicates_in_batch": True}}, sampling=sampling)
        assert info["training_args"]["no_duplicates_in_batch"] is False


def test_loader_workers_and_schedule_keywords_torch_or_transformers_would_refuse_late_are_one_line(tmp_path):
    """Were a torch traceback (persistent_workers option needs num_workers > 0) and a transformers one
    (get_linear_schedule_with_warmup() got an unexpected keyword argument 'foo') once training started."""
    from hf_cse.checks import InputError

    with pytest.raises(InputError, match=r"^dataloader_persistent_workers=True keeps .* dataloader_num_workers is 0"):
        _args(tmp_path, dataloader_persistent_workers=True)
    _args(tmp_path, dataloader_persistent_workers=True, dataloader_num_workers=1)
    with pytest.raises(InputError, match=r"^lr_scheduler_kwargs 'foo': the linear schedule takes last_epoch "):
        _args(tmp_path, lr_scheduler_kwargs={"foo": 1})
    assert _args(tmp_path, lr_scheduler_type="cosine", lr_scheduler_kwargs={"num_cycles": 0.5}).lr_scheduler_kwargs


def test_a_schedule_transformers_cannot_build_is_refused_as_the_arguments_are_made(tmp_path):
    """cosine_with_min_lr without min_lr / min_lr_rate was transformers' ValueError (One of min_lr or min_lr_rate
    should be set through the `lr_scheduler_kwargs`) as a traceback once the encoder was loaded."""
    from hf_cse.checks import InputError

    with pytest.raises(InputError, match=r"^lr_scheduler_type='cosine_with_min_lr' without lr_scheduler_kwargs: "
                                         r"transformers cannot build this schedule \(One of min_lr or min_lr_rate "
                                         r".*\): give lr_scheduler_kwargs='\{\"min_lr_rate\": 0.1\}', or") as refused:
        _args(tmp_path, lr_scheduler_type="cosine_with_min_lr")
    assert refused.value.fields == ("lr_scheduler_type", "lr_scheduler_kwargs")
    with pytest.raises(InputError, match=r"^lr_scheduler_type='warmup_stable_decay' without lr_scheduler_kwargs: "
                                         r".*'num_decay_steps'\): set lr_scheduler_kwargs as it says"):
        _args(tmp_path, lr_scheduler_type="warmup_stable_decay")
    assert _args(tmp_path, lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs='{"min_lr_rate": 0.1}')


def test_plain_training_arguments_with_a_schedule_transformers_cannot_build_are_refused_by_the_trainer(
        tiny_bert_dir, sentences, tmp_path):
    """transformers' own TrainingArguments are not checked when made: the trainer refuses the same, as it is built."""
    from transformers import TrainingArguments

    from hf_cse.checks import InputError

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data", repeat=2)
    args = TrainingArguments(str(tmp_path / "out"), use_cpu=True, max_steps=2, per_device_train_batch_size=8,
                             report_to=[], lr_scheduler_type="cosine_with_min_lr")
    with pytest.raises(InputError, match=r"^lr_scheduler_type='cosine_with_min_lr' without lr_scheduler_kwargs"):
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args, train_dataset=ds,
                           processing_class=tok)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed here")
def test_an_optimizer_whose_package_is_missing_is_refused_as_the_arguments_are_made(tmp_path):
    """optim='adamw_bnb_8bit' without bitsandbytes was transformers' ImportError as a traceback once the encoder was
    loaded."""
    from hf_cse.checks import InputError

    with pytest.raises(InputError, match=r"^optim='adamw_bnb_8bit': transformers cannot build this optimizer here "
                                         r"\(You need to install `bitsandbytes`.*\): install what it names, or "
                                         r"choose another optim \(adamw_torch, the default\)\.$") as refused:
        _args(tmp_path, optim="adamw_bnb_8bit")
    assert refused.value.fields == ("optim",)
    assert _args(tmp_path, optim="adafactor").optim == "adafactor"
