"""``overwrite_output_dir`` from Python (hf_cse.start_over): a new run starts over in a folder holding another run,
removing only the files a run writes, as the command's --overwrite_output_dir does; never another tool's model, and
not beside ``resume_from_checkpoint``."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers import tiny_train_dataset
from safetensors.torch import load_file

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


def test_overwrite_output_dir_never_removes_another_tools_model_nor_goes_with_a_resume(tiny_bert_dir, sentences,
                                                                                        tmp_path):
    users = tmp_path / "users_model"
    shutil.copytree(tiny_bert_dir, users)
    before = sorted(p.name for p in users.iterdir())
    with pytest.raises(OutputFolderError, match=r"holds another model .*overwrite_output_dir or not"):
        _trainer(tiny_bert_dir, sentences, tmp_path, users, seed=0, overwrite_output_dir=True).train()
    assert sorted(p.name for p in users.iterdir()) == before
    with pytest.raises(OutputFolderError, match=r"^overwrite_output_dir starts a new run .* goes on from a checkpoint: "
                                                r"drop one of them\.$"):
        _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "new", seed=0,
                 overwrite_output_dir=True).train(resume_from_checkpoint=True)
