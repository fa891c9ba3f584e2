"""``overwrite_output_dir`` from Python (hf_cse.start_over): a new run starts over in a folder holding another run,
removing only the files a run writes, as the command's --overwrite_output_dir does; never another tool's model, and
not beside ``resume_from_checkpoint``."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from datasets import Dataset
from helpers import tiny_train_dataset
from safetensors.torch import load_file
from transformers import AutoTokenizer

from hf_cse.files import DataError
from hf_cse.models import SimCSEModel
from hf_cse.output_folder import OutputFolderError
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.training_args import ContrastiveTrainingArguments


def _trainer(encoder, sentences, tmp_path, out, seed: int, **args) -> ContrastiveTrainer:
    ds, tok = tiny_train_dataset(encoder, sentences, tmp_path / "data", repeat=4)
    torch.manual_seed(seed)
    args = ContrastiveTrainingArguments(str(out), per_device_train_batch_size=8, learning_rate=1e-3, max_steps=2,
                                        use_cpu=True, disable_tqdm=True, seed=seed, **args)
    return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(encoder)), args=args, train_dataset=ds,
                              processing_class=tok)


@pytest.mark.slow
def test_overwrite_output_dir_starts_over_keeping_files_no_run_writes(tiny_bert_dir, sentences, tmp_path):
    out = tmp_path / "out"
    first = _trainer(tiny_bert_dir, sentences, tmp_path, out, seed=0, save_strategy="steps", save_steps=1)
    first.train()
    first.save_run()
    first_weights = load_file(out / "model.safetensors")
    (out / "notes.txt").write_text("mine")
    (out / "eval").mkdir()
    (out / "eval" / "results.json").write_text("{}")  # hf-cse-eval's results of that model: the user's work
    with pytest.raises(OutputFolderError, match="overwrite_output_dir=True to start over"):
        _trainer(tiny_bert_dir, sentences, tmp_path, out, seed=1).train()

    second = _trainer(tiny_bert_dir, sentences, tmp_path, out, seed=1, overwrite_output_dir=True)
    second.train()
    second.save_run()
    assert not list(out.glob("checkpoint-*"))  # the first run's, removed; this run saved none
    assert (out / "notes.txt").read_text() == "mine" and (out / "eval" / "results.json").is_file()
    second_weights = load_file(out / "model.safetensors")
    assert any(not torch.equal(first_weights[k], second_weights[k]) for k in first_weights)
    assert json.loads((out / "training_info.json").read_text())["training_args"]["seed"] == 1


def _listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_overwrite_output_dir_never_removes_another_tools_model_nor_goes_with_a_resume(tiny_bert_dir, sentences,
                                                                                        tmp_path):
    users = tmp_path / "users_model"
    shutil.copytree(tiny_bert_dir, users)
    before = _listing(users)
    with pytest.raises(OutputFolderError, match=r"holds another model .*overwrite_output_dir or not"):
        _trainer(tiny_bert_dir, sentences, tmp_path, users, seed=0, overwrite_output_dir=True).train()
    assert _listing(users) == before
    # another tool's model in a checkpoint-N folder beside an earlier run: kept by the start over, it was then
    # written over by the run's own checkpoint-N or deleted by its checkpoint rotation
    beside = tmp_path / "beside"
    shutil.copytree(tiny_bert_dir, beside / "checkpoint-1")
    (beside / "training_info.json").write_text("{}")
    before = _listing(beside)
    with pytest.raises(OutputFolderError, match=r"holds checkpoint-1, which transformers' checkpoint rotation takes "):
        _trainer(tiny_bert_dir, sentences, tmp_path, beside, seed=0, overwrite_output_dir=True).train()
    assert _listing(beside) == before
    with pytest.raises(OutputFolderError, match=r"^overwrite_output_dir starts a new run .* goes on from a checkpoint: "
                                                r"drop one of them\.$"):
        _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "new", seed=0,
                 overwrite_output_dir=True).train(resume_from_checkpoint=True)


def test_a_start_over_whose_data_is_refused_keeps_the_earlier_run(tiny_bert_dir, tmp_path):
    """The training batches are made (and refused) before the earlier run's files go: a refusal keeps them."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("training_info.json", "model.safetensors", "notes.txt"):
        (out / name).write_text("earlier")
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    args = ContrastiveTrainingArguments(str(out), per_device_train_batch_size=8, max_steps=2, use_cpu=True,
                                        disable_tqdm=True, overwrite_output_dir=True)
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args,
                                 train_dataset=Dataset.from_dict({"text": ["one and the same sentence"] * 40}),
                                 processing_class=tok)
    with pytest.raises(DataError, match="without a repeated text"):
        trainer.train()
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors", "notes.txt", "training_info.json"]


def test_a_start_over_says_an_evaluations_results_left_in_the_folder_are_of_another_model(tmp_path, caplog):
    """The Python API's start over (overwrite_output_dir) in hf-cse-eval's output folder: nothing of a run to remove,
    and its results.json stayed beside the new model without a word."""
    import logging

    from hf_cse.start_over import start_over

    (tmp_path / "results.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="hf_cse.start_over"):
        start_over(tmp_path)
    assert (tmp_path / "results.json").is_file()
    assert [r.getMessage() for r in caplog.records] == [
        f"results.json in {tmp_path}: hf-cse-eval's results of another model, kept; they do not describe the model "
        "this run trains (move them aside, or evaluate again)"]
