"""save_run() finishes only the run its own train() trained, and only while the folder still holds that run
(hf_cse.trainer_claim): another trainer's run trained or saved there since is never overwritten or mixed with; an
output_dir that is a file and save_run's arguments of a wrong type are refused in one line before anything is
written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from helpers import collator, tiny_args, tiny_train_dataset

from hf_cse.errors import CSEError
from hf_cse.models import SimCSEModel
from hf_cse.output_folder import OutputFolderError
from hf_cse.trainer import ContrastiveTrainer


def _trainer(encoder, sentences, tmp_path, out, **args) -> ContrastiveTrainer:
    ds, tok = tiny_train_dataset(encoder, sentences, tmp_path / "data", repeat=4)
    torch.manual_seed(0)
    return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(encoder)), args=tiny_args(out, **args),
                              train_dataset=ds, data_collator=collator(tok), processing_class=tok)


def _snapshot(folder: Path):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


@pytest.mark.slow  # three runs of two or three steps
def test_save_run_never_replaces_or_mixes_with_a_run_another_trainer_trained_there_since(
        tiny_bert_dir, sentences, tmp_path, caplog):
    """The notebook pattern: trainer A trains, trainer B trains and saves its run (with its curves) in the same
    folder, then A's old save_run() cell is run again: it replaced B's record and model and named B's curves its own."""
    out = tmp_path / "out"
    first = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    first.train()
    second = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=3)
    with caplog.at_level(logging.WARNING, logger="hf_cse.trainer_claim"):
        second.train()
    assert "holds the run of another trainer, trained but not saved (save_run): this run takes the folder over" in \
        caplog.text
    second.save_run()
    before = _snapshot(out)
    with pytest.raises(OutputFolderError, match=r"^save_run\(\): another trainer trained in output_dir .*out after "
                                                r"this one") as refused:
        first.save_run()
    assert "\n" not in str(refused.value)
    assert _snapshot(out) == before
    assert json.loads((out / "training_info.json").read_text())["training_args"]["max_steps"] == 3
    # taken over before it saved: the new run saves, the one it took the folder from does not
    third = _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "other", max_steps=2)
    third.train()
    fourth = _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "other", max_steps=2)
    fourth.train()
    with pytest.raises(OutputFolderError, match="another trainer trained in output_dir"):
        third.save_run()
    fourth.save_run()
    assert (tmp_path / "other" / "training_info.json").is_file()


@pytest.mark.slow  # two runs of two steps
def test_a_second_train_says_what_to_do_with_the_run_its_save_run_refuses_or_has_saved(tiny_bert_dir, sentences,
                                                                                       tmp_path):
    """After another trainer took the folder over (and this one's save_run() was refused), a second train() said
    "call save_run() to finish it", just refused; after save_run() it said the same of a saved run."""
    out = tmp_path / "out"
    first = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    first.train()
    second = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    second.train()
    with pytest.raises(OutputFolderError) as refused:
        first.train()
    message = str(refused.value)
    assert message.startswith("this trainer has trained its run already (output_dir "), message
    assert ("another trainer has trained there since and holds the folder, so this trainer's run is not saved there: "
            "save this trainer's model elsewhere with trainer.save_model(folder), and build a new trainer") in message
    assert "call save_run()" not in message
    second.save_run()
    with pytest.raises(OutputFolderError, match=r"\): save_run\(\) has saved it, and build a new trainer"):
        second.train()


@pytest.mark.slow  # two steps trained
def test_save_run_refuses_a_folder_that_received_another_runs_files_since_train(tiny_bert_dir, sentences, tmp_path):
    """Another process (the command line, another notebook) or another tool finished a run in the folder after this
    trainer's train(): its files are another run's, whoever wrote them; the trainer's own save_model() is its own."""
    out = tmp_path / "out"
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    metrics = trainer.train().metrics
    trainer.save_model()  # its own model, saved into its own folder: still this run's
    trainer.save_metrics("train", metrics)  # transformers' examples' calls after train(): still this run's
    trainer.save_state()
    (out / "training_info.json").write_text("{}")  # another run, finished
    (out / "training_curves.png").write_bytes(b"\x89PNG")
    before = _snapshot(out)
    with pytest.raises(OutputFolderError) as refused:
        trainer.save_run()
    assert str(refused.value) == (
        f"save_run(): output_dir {out} received another run's files since this trainer's train() "
        "(training_curves.png, training_info.json): finishing this run there would mix the two. Move them aside to "
        "save this run there, or save this trainer's model elsewhere with trainer.save_model(folder), or train "
        "again into a new output_dir.")
    assert _snapshot(out) == before
    (out / "training_info.json").unlink()  # moved aside: the folder holds this run again
    (out / "training_curves.png").unlink()
    trainer.save_run()
    trainer.save_run(data={"dataset_name": "mine"})  # saved again by the run that saved it
    assert json.loads((out / "training_info.json").read_text())["data"] == {"dataset_name": "mine"}


@pytest.mark.slow  # two steps trained, with checkpoints
def test_a_checkpointed_run_and_a_resumed_one_still_save(tiny_bert_dir, sentences, tmp_path):
    out = tmp_path / "out"
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2, save_strategy="steps", save_steps=1)
    trainer.train()
    trainer.train(resume_from_checkpoint=True)  # its own run again, from its last checkpoint
    trainer.save_run()
    assert (out / "training_info.json").is_file()
    # a new trainer resuming an interrupted run takes it over; it saves it
    out2 = tmp_path / "out2"
    _trainer(tiny_bert_dir, sentences, tmp_path, out2, max_steps=2, save_strategy="steps", save_steps=1).train()
    resumed = _trainer(tiny_bert_dir, sentences, tmp_path, out2, max_steps=2, save_strategy="steps", save_steps=1)
    resumed.train(resume_from_checkpoint=True)
    resumed.save_run()
    assert (out2 / "training_info.json").is_file()


@pytest.mark.slow  # two steps trained
def test_save_run_arguments_of_a_wrong_type_are_refused_before_anything_is_written(tiny_bert_dir, sentences,
                                                                                  tmp_path):
    out = tmp_path / "out"
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    trainer.train()
    before = _snapshot(out)
    for kwargs, words in ((dict(data="wiki sentences"), r"^save_run\(data=\.\.\.\) takes a dict of the training data's "
                                                        r"facts .*, not a str \('wiki sentences'\)"),
                          (dict(data={1: "x"}), r"takes a dict with text keys, not 1"),
                          (dict(preset=3), r"^save_run\(preset=\.\.\.\) takes a str, not a int"),
                          (dict(hub_repo=["me/model"]), r"^save_run\(hub_repo=\.\.\.\) takes a str, not a list"),
                          (dict(hub_repo="not a repo"), r"^hub_repo 'not a repo' is no Hub repo id")):
        with pytest.raises(CSEError, match=words) as refused:
            trainer.save_run(**kwargs)
        assert "\n" not in str(refused.value)
        assert _snapshot(out) == before  # nothing written
    trainer.save_run(data={"dataset_name": "mine"}, preset="simcse")
    assert json.loads((out / "training_info.json").read_text())["data"] == {"dataset_name": "mine"}


def test_an_output_dir_that_is_a_file_is_refused_before_the_trainer_makes_it(tiny_bert_dir, sentences, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    for out, words in ((notes, rf"^output_dir {notes} is a file: give a folder"),
                       (notes / "run", rf"^output_dir {notes / 'run'} lies below {notes}, which is a file: give a "
                                       "folder")):
        with pytest.raises(OutputFolderError, match=words) as refused:
            _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
        assert "\n" not in str(refused.value)
        assert refused.value.fields == ("output_dir",)
    assert notes.read_text() == "my notes\n"


@pytest.mark.slow  # two steps trained
def test_save_run_says_why_there_is_no_run_to_save(tiny_bert_dir, sentences, tmp_path, monkeypatch):
    """Each refusal was right and said something false: "has trained none there: call trainer.train() first" after a
    train() that ended in an error or after output_dir was changed, "another trainer trained there" after os.chdir
    with a relative output_dir."""
    monkeypatch.chdir(tmp_path)
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, "rel_out", max_steps=2)
    trainer.train()
    trainer.args.output_dir = str(tmp_path / "elsewhere")
    with pytest.raises(OutputFolderError, match=r"^save_run\(\) finishes the run that train\(\) trained in output_dir "
                                                r"rel_out, and args.output_dir is .*elsewhere now: set it back"):
        trainer.save_run()
    trainer.args.output_dir = "rel_out"
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    with pytest.raises(OutputFolderError, match=r"^save_run\(\): output_dir rel_out is .*sub/rel_out from the working "
                                                r"directory now, and train\(\) trained in .*/rel_out: change back"):
        trainer.save_run()
    assert not (tmp_path / "sub" / "rel_out").exists()
    monkeypatch.chdir(tmp_path)
    trainer.save_run()
    assert (tmp_path / "rel_out" / "training_info.json").is_file()

    failing = _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "failed", max_steps=2)

    def fail(*args, **kwargs):
        raise RuntimeError("out of disk space\nsecond line")

    monkeypatch.setattr(failing, "_train_in_folder", fail)
    with pytest.raises(RuntimeError):
        failing.train()
    with pytest.raises(OutputFolderError, match=r"^save_run\(\): this trainer's train\(\) ended in an error \(out of "
                                                r"disk space\), so there is no trained run to save"):
        failing.save_run()
