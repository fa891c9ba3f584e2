"""ContrastiveTrainer from Python keeps the command line's promises about its output folder (hf_cse.trainer_folder):
no new run into another run's folder, none inside one, ``resume_from_checkpoint=True`` as the last complete
checkpoint (a run whose last checkpoint is its final step trains no further), no resume across methods, one trainer
at a time; and the input mistakes a Python caller can make are refused in one line before any step."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from eval_helpers import write_toy_senteval
from helpers import collator, fake_checkpoint, tiny_args, tiny_train_dataset
from safetensors.torch import load_file
from transformers import TrainerCallback

from hf_cse.errors import CSEError
from hf_cse.folder_lock import FolderBusyError
from hf_cse.models import ImSimCSEModel, SimCSEModel
from hf_cse.output_folder import OutputFolderError
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.trainer_folder import OtherRunsCheckpointError


def _trainer(encoder, sentences, tmp_path, out, model_class=SimCSEModel, **args) -> ContrastiveTrainer:
    ds, tok = tiny_train_dataset(encoder, sentences, tmp_path / "data", repeat=4)
    torch.manual_seed(0)
    return ContrastiveTrainer(model=model_class.from_encoder(str(encoder)), args=tiny_args(out, **args),
                              train_dataset=ds, data_collator=collator(tok), processing_class=tok)


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


@pytest.mark.slow
def test_a_new_run_is_refused_in_a_folder_holding_a_finished_run_or_checkpoints(tiny_bert_dir, sentences, tmp_path):
    finished, interrupted = tmp_path / "finished", tmp_path / "interrupted"
    first = _trainer(tiny_bert_dir, sentences, tmp_path, finished, max_steps=2)
    first.train()
    first.save_run()
    _trainer(tiny_bert_dir, sentences, tmp_path, interrupted, max_steps=2, save_strategy="steps",
             save_steps=1).train()
    results = tmp_path / "results"
    (results / "checkpoint-2-eval").mkdir(parents=True)  # the rotation would take it for a checkpoint
    users = tmp_path / "users_model"  # another tool's model: "remove that run's files" would have deleted it
    shutil.copytree(tiny_bert_dir, users)
    for folder, words in ((finished, "already holds a trained run"),
                          (users, r"holds another model \(a bert model's config.json\): a run there would replace its "
                                  r"files\. Choose another output_dir\.$"),
                          (interrupted, "pass resume_from_checkpoint=True to continue it"),
                          (results, "holds checkpoint-2-eval, which transformers' checkpoint rotation takes for")):
        before = _snapshot(folder)
        with pytest.raises(OutputFolderError, match=words) as refused:
            _trainer(tiny_bert_dir, sentences, tmp_path, folder, model_class=ImSimCSEModel, max_steps=3).train()
        assert "\n" not in str(refused.value)
        assert _snapshot(folder) == before  # nothing written, nothing removed
    # save_run() of a trainer whose train() was refused: that folder is another run's, nothing is written
    refused_trainer = _trainer(tiny_bert_dir, sentences, tmp_path, finished, max_steps=3)
    with pytest.raises(OutputFolderError):
        refused_trainer.train()
    before = _snapshot(finished)
    with pytest.raises(OutputFolderError, match=r"^save_run\(\) finishes the run that train\(\) trained .* call "
                                                r"trainer.train\(\) first"):
        refused_trainer.save_run()
    assert _snapshot(finished) == before


def test_a_new_run_is_refused_beside_an_earlier_runs_tensorboard_logs(tmp_path):
    """A run killed before its first checkpoint leaves its TensorBoard logs (runs/): a new run there would show its
    own beside them, as one run's. An empty runs/ holds nothing to mix."""
    from hf_cse.trainer_folder import check_new_run_folder

    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    check_new_run_folder(out)
    (out / "runs" / "May01_10-00-00_host").mkdir()
    with pytest.raises(OutputFolderError) as refused:
        check_new_run_folder(out)
    assert str(refused.value) == (f"output_dir {out} holds the TensorBoard logs of an earlier run (runs/: "
                                  "May01_10-00-00_host) and no checkpoint to resume: this run's logs would show beside "
                                  "them as one run's. Move or remove runs/ to start over, or choose another "
                                  "output_dir.")


def test_a_new_run_is_refused_in_a_folder_holding_files_its_final_save_writes(tmp_path):
    """A user's own tokenizer.json or all_results.json in the output folder: the final save (save_model, save_metrics)
    would have replaced them without a word. Files of other names are left beside the run."""
    from hf_cse.trainer_folder import check_new_run_folder

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "hf_cse_run.json").write_text("{}")  # the record of a run stopped before its first checkpoint
    check_new_run_folder(out)
    for name in ("tokenizer.json", "all_results.json", "training_args.bin"):
        (out / name).write_text("mine")
    with pytest.raises(OutputFolderError) as refused:
        check_new_run_folder(out)
    assert str(refused.value) == (f"output_dir {out} holds all_results.json, tokenizer.json, training_args.bin, which "
                                  "this run's final save writes: they would be replaced. Move them out, or choose "
                                  "another output_dir.")


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_keeps_its_tensorboard_logs_from_the_next_trainer(
        tiny_bert_dir, sentences, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    out = tmp_path / "out"
    original = ContrastiveTrainer.training_step

    def killed_step(self, *a, **k):
        if self.state.global_step == 1:
            raise KeyboardInterrupt
        return original(self, *a, **k)

    monkeypatch.setattr(ContrastiveTrainer, "training_step", killed_step)
    with pytest.raises(KeyboardInterrupt):
        _trainer(tiny_bert_dir, sentences, tmp_path, out, report_to="tensorboard", logging_steps=1, max_steps=2).train()
    monkeypatch.setattr(ContrastiveTrainer, "training_step", original)
    assert list((out / "runs").rglob("events*"))
    before = _snapshot(out)
    with pytest.raises(OutputFolderError, match=r"holds the TensorBoard logs of an earlier run \(runs/: "):
        _trainer(tiny_bert_dir, sentences, tmp_path, out, report_to="tensorboard", max_steps=2,
                 learning_rate=5e-4).train()
    assert _snapshot(out) == before


@pytest.mark.slow  # two steps trained
def test_a_second_train_of_the_same_trainer_is_refused_and_its_run_still_finishes(tiny_bert_dir, sentences,
                                                                                  tmp_path):
    """Without checkpoints, a second train() started the schedule and the optimizer over on the trained weights,
    which it then scored and kept as "the untrained encoder"."""
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "out", max_steps=2)
    trainer.train()
    trained = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    with pytest.raises(OutputFolderError, match=r"^this trainer has trained its run already \(output_dir .*out\): "
                                                r"call save_run\(\) to finish it, and build a new trainer"):
        trainer.train()
    assert all(torch.equal(p, trained[name]) for name, p in trainer.model.named_parameters())
    assert trainer.state.global_step == 2
    trainer.save_run()
    assert (tmp_path / "out" / "training_info.json").is_file()


def test_save_run_before_train_writes_nothing(tiny_bert_dir, sentences, tmp_path):
    """No finished run of an untrained model: save_run() is the end of train()'s run."""
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "out", max_steps=2)
    with pytest.raises(OutputFolderError, match="this trainer has trained none there"):
        trainer.save_run()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_encoders_own_folder_is_no_output_folder(tiny_bert_dir, sentences, tmp_path):
    """The folder the model's encoder was loaded from, a folder inside it or one holding it: refused when the trainer
    is built (before transformers creates the folder), naming the encoder (not advising to remove its files); the
    encoder's files are left as they were."""
    before = _snapshot(tiny_bert_dir)
    for out in (tiny_bert_dir, tiny_bert_dir / "run", tiny_bert_dir.parent):
        with pytest.raises(OutputFolderError, match=r"is, holds or lies inside the encoder's folder .* Choose another "
                                                    r"output_dir\.$") as refused:
            _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
        assert refused.value.fields == ("output_dir",)
    assert _snapshot(tiny_bert_dir) == before


@pytest.mark.slow
def test_save_model_into_a_folder_of_the_callers_choice_never_replaces_an_encoder_a_model_or_a_run(
        tiny_bert_dir, sentences, tmp_path):
    """trainer.save_model(folder) replaced any folder's config and weights without a word: the encoder's own, another
    model's beside the user's notes, another finished run's (whose record then described a model no longer there), a
    checkpoint of another run or of its own (whose weights then were no longer those of its optimizer state)."""
    other_run = tmp_path / "other_run"
    finished = _trainer(tiny_bert_dir, sentences, tmp_path, other_run, max_steps=2, save_strategy="steps",
                        save_steps=1, save_total_limit=None)
    finished.train()
    finished.save_run()
    (other_run / "eval").mkdir()  # its results folder
    users = tmp_path / "users_model"
    users.mkdir()
    (users / "config.json").write_text('{"model_type": "bert"}')
    (users / "notes.txt").write_text("mine")
    unnamed = tmp_path / "unnamed_model"
    unnamed.mkdir()
    (unnamed / "config.json").write_text('{"architectures": ["MyEncoder"]}')
    tokenizer_only = tmp_path / "my_tokenizer"  # a tokenizer the user saved: the save would replace its files
    tokenizer_only.mkdir()
    (tokenizer_only / "tokenizer.json").write_text('{"mine": true}')
    (tokenizer_only / "vocab.txt").write_text("mine")
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "out", max_steps=1, save_strategy="steps",
                       save_steps=1)
    trainer.train()
    own_checkpoint = tmp_path / "out" / "checkpoint-1"
    for folder, words in ((tiny_bert_dir, "is, holds or lies inside the encoder's folder"),
                          (other_run / "checkpoint-1", r"lies inside the folder of another training run"),
                          (other_run / "eval", r"lies inside the folder of another training run"),
                          (own_checkpoint, r"lies inside checkpoint-1, a checkpoint of this run"),
                          (users, r"holds another model \(a bert model's config.json\); saving there would replace "
                                  "its files"),
                          (unnamed, r"holds another model \(an unnamed model's config.json\)"),
                          (tokenizer_only, r"holds tokenizer.json, vocab.txt and no model; saving there would replace "
                                           r"them\. Choose a new folder"),
                          (other_run, r"holds a training run \(.*training_info.json.*\); saving there would replace")):
        before = _snapshot(folder)
        with pytest.raises(OutputFolderError, match=words):
            trainer.save_model(str(folder))
        assert _snapshot(folder) == before
    for folder in (tmp_path / "saved", tmp_path / "saved", tmp_path / "out" / "best", None):  # a new folder, again
        # (its own save), one inside the trainer's own run, the run's
        trainer.save_model(None if folder is None else str(folder))
        assert (Path(folder or trainer.args.output_dir) / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_run_inside_another_runs_folder_is_refused(tiny_bert_dir, sentences, tmp_path):
    interrupted, finished = tmp_path / "interrupted", tmp_path / "finished"
    (interrupted / "checkpoint-2").mkdir(parents=True)
    finished.mkdir()
    (finished / "training_info.json").write_text("{}")
    for inside in (interrupted / "checkpoint-2", interrupted / "checkpoint-2" / "more", finished / "sub"):
        trainer = _trainer(tiny_bert_dir, sentences, tmp_path, inside, max_steps=2)
        for resume in (None, True):
            with pytest.raises(OutputFolderError, match="lies inside the folder of another training run") as refused:
                trainer.train(resume_from_checkpoint=resume)
            assert "\n" not in str(refused.value) and "--" not in str(refused.value)
            assert trainer.state.global_step == 0
        assert not any(inside.rglob("*")) if inside.exists() else True  # nothing written there
    # beside another run (not inside it) is a run of its own
    beside = _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "beside", max_steps=1)
    beside.train()
    assert beside.state.global_step == 1


@pytest.mark.slow
def test_resuming_a_run_whose_last_checkpoint_is_its_final_step_trains_no_further(tiny_bert_dir, sentences,
                                                                                 tmp_path):
    out = tmp_path / "out"
    common = dict(max_steps=4, save_strategy="steps", save_steps=2)
    _trainer(tiny_bert_dir, sentences, tmp_path, out, **common).train()  # killed before its final save
    resumed = _trainer(tiny_bert_dir, sentences, tmp_path, out, **common)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 4
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    saved = load_file(out / "checkpoint-4" / "model.safetensors")
    for name, weight in resumed.model.state_dict().items():
        torch.testing.assert_close(weight, saved[name], rtol=0, atol=0, msg=name)


@pytest.mark.slow
def test_a_resumed_run_removes_what_a_killed_weights_save_left(tiny_bert_dir, sentences, tmp_path, caplog):
    """safetensors writes weights through a temporary file (.tmp + 6 letters or digits) renamed into place: a run
    killed mid-save leaves it, beside the model or in the checkpoint being saved; the run that resumes removes it."""
    out = tmp_path / "out"
    common = dict(max_steps=4, save_strategy="steps", save_steps=2)
    _trainer(tiny_bert_dir, sentences, tmp_path, out, **common).train()
    (out / "checkpoint-4" / "trainer_state.json").unlink()  # its save killed while writing its weights
    (out / "checkpoint-4" / ".tmpXyZ789").write_bytes((out / "checkpoint-4" / "model.safetensors").read_bytes()[:99])
    (out / ".tmpAbC123").touch()
    resumed = _trainer(tiny_bert_dir, sentences, tmp_path, out, **common)
    with caplog.at_level("WARNING"):
        resumed.train(resume_from_checkpoint=True)
    resumed.save_model()
    assert resumed.state.global_step == 4 and (out / "checkpoint-4" / "trainer_state.json").is_file()
    assert not list(out.rglob(".tmp*")) and "removed .tmpAbC123, checkpoint-4/.tmpXyZ789 in" in caplog.text


@pytest.mark.slow
def test_resume_is_refused_without_a_checkpoint_or_from_another_methods(tiny_bert_dir, sentences, tmp_path):
    with pytest.raises(OutputFolderError, match="holds no complete checkpoint"):
        _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "empty").train(resume_from_checkpoint=True)
    out = tmp_path / "simcse"
    _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2, save_strategy="steps", save_steps=2).train()
    other = _trainer(tiny_bert_dir, sentences, tmp_path, out, model_class=ImSimCSEModel, max_steps=4)
    with pytest.raises(OutputFolderError, match="holds a simcse model, and this trainer trains a imsimcse model"):
        other.train(resume_from_checkpoint=True)
    with pytest.raises(OutputFolderError, match="is not a folder"):
        other.train(resume_from_checkpoint=str(out / "checkpoint-9"))


# A checkpoint of another encoder was resumed into the model: transformers' missing and unexpected keys, then the
# optimizer's "parameter group that doesn't match" (another architecture) or torch's size mismatch (other sizes).
@pytest.mark.slow
@pytest.mark.parametrize("encoder, differs", [
    ("llama", "model_type bert then, llama now"),
    ("wider bert", "hidden_size 32 then, 48 now; intermediate_size 64 then, 96 now"),
])
def test_a_checkpoint_of_another_encoder_is_refused_before_its_weights_load(encoder, differs, tiny_bert_dir,
                                                                           tiny_llama_dir, sentences, tmp_path):
    from tiny_models import make_tiny_encoder

    checkpoint = tmp_path / "bert_run" / "checkpoint-2"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(checkpoint)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 2, "max_steps": 4}')
    other = tiny_llama_dir if encoder == "llama" else make_tiny_encoder(tmp_path / "wide", hidden=48)
    ds, tok = tiny_train_dataset(other, sentences, tmp_path / "data")
    model = SimCSEModel.from_encoder(str(other), pooler_type="avg")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), train_dataset=ds,
                                 data_collator=collator(tok), processing_class=tok)
    with pytest.raises(OutputFolderError) as refused:
        trainer.train(resume_from_checkpoint=str(checkpoint))
    message = str(refused.value)
    assert f"resume_from_checkpoint {checkpoint} was trained from another encoder ({differs}" in message
    assert f"Build the model from the encoder it was trained from (model_name_or_path {tiny_bert_dir})" in message
    assert "another output_dir" in message and "\n" not in message and "--" not in message
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing of it loaded


@pytest.mark.slow
def test_a_second_trainer_cannot_train_in_a_folder_while_the_first_trains_there(tiny_bert_dir, sentences, tmp_path):
    out = tmp_path / "out"
    first = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    second = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    refusals = []

    class StartTheSecond(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                with pytest.raises(FolderBusyError, match="is in use by another run") as refused:
                    second.train()
                refusals.append(str(refused.value))

    first.add_callback(StartTheSecond())
    first.train()
    assert len(refusals) == 1 and second.state.global_step == 0
    first.save_run()  # the lock was given back after train(): saving takes it again


def test_python_callers_mistakes_are_refused_in_one_line_before_training(tiny_bert_dir, sentences, tmp_path):
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data")
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    args = tiny_args(tmp_path / "out")
    cases = [
        (dict(model=model.encoder, args=args, train_dataset=ds, processing_class=tok), "trains hf_cse method models"),
        (dict(model=model, args=args, train_dataset=ds), "pass processing_class=tokenizer"),
        (dict(model=model, args=args, train_dataset=ds, processing_class=tok, eval_source="hubb"),
         "eval_source must be one of local, hub, got 'hubb'"),
        (dict(model=model, args=tiny_args(""), train_dataset=ds, processing_class=tok), "output_dir is empty"),
    ]
    for kwargs, words in cases:
        with pytest.raises(CSEError, match=words) as refused:
            ContrastiveTrainer(**kwargs)
        assert "\n" not in str(refused.value)
    with pytest.raises(CSEError, match="SimCSEConfig has no field 'pooler'; did you mean 'pooler_type'"):
        SimCSEModel.from_encoder(str(tiny_bert_dir), pooler="avg")
    with pytest.raises(CSEError, match="no field 'torch_dtype'; did you mean 'encoder_dtype'"):
        SimCSEModel.from_encoder(str(tiny_bert_dir), torch_dtype="bf16")


@pytest.mark.slow
def test_a_resumed_run_keeps_the_untrained_encoder_when_training_made_it_worse(tiny_bert_dir, sentences, tmp_path,
                                                                              caplog):
    senteval = write_toy_senteval(tmp_path / "senteval")
    out = tmp_path / "out"
    wreck = dict(learning_rate=0.5, lr_scheduler_type="constant", save_strategy="steps", save_steps=3)

    def trainer(max_steps):
        ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data", repeat=4)
        torch.manual_seed(0)
        return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)),
                                  args=tiny_args(out, max_steps=max_steps, **wreck), train_dataset=ds,
                                  data_collator=collator(tok), processing_class=tok, senteval_data_dir=str(senteval))

    trainer(3).train()  # the run until its checkpoint at step 3; then it goes on in another process
    resumed = trainer(6)
    untrained = {k: v.clone() for k, v in resumed.model.state_dict().items()}
    with caplog.at_level("INFO", logger="hf_cse.trainer_evaluation"):
        resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 6
    assert resumed.dev.after < resumed.dev.before and resumed.dev.kept_step == 0
    # the given weights scored again are named as what they are, not as the model of the last step
    assert "dev: scoring the model given to this resumed trainer on" in caplog.text
    for name, weight in resumed.model.state_dict().items():
        torch.testing.assert_close(weight, untrained[name], rtol=0, atol=0, msg=name)


def test_another_number_of_processes_than_saved_a_checkpoint_is_a_changed_setting(tmp_path):
    """A checkpoint saved by 2 processes resumed by 1 with resume_from_checkpoint=True (the contrastive batch 16 rows
    then, 8 now: another run) was only warned, though the docs said it was refused."""
    from hf_cse.resume_processes import processes_change

    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"train_batch_size": 8}))
    for rank in (0, 1):
        (checkpoint / f"rng_state_{rank}.pth").write_bytes(b"")
    one = SimpleNamespace(world_size=1, per_device_train_batch_size=8)
    assert processes_change(checkpoint, one) == [
        "processes: 2 then, 1 now (launch 2 to resume the run as it was: the contrastive batch 16 rows then, 8 now)"]
    # the same contrastive batch from one process: still other data and dropout masks after the checkpoint
    assert processes_change(checkpoint, SimpleNamespace(world_size=1, per_device_train_batch_size=16)) == [
        "processes: 2 then, 1 now (launch 2 to resume the run as it was)"]
    assert processes_change(checkpoint, SimpleNamespace(world_size=2, per_device_train_batch_size=8)) == []
    assert processes_change(tmp_path, one) == []  # no RNG states (an older checkpoint): not known, not compared


@pytest.mark.slow
def test_a_checkpoint_resumed_by_another_number_of_processes_says_so(tiny_bert_dir, sentences, tmp_path, caplog):
    from hf_cse.resume_processes import saved_world_size

    out = tmp_path / "out"
    common = dict(max_steps=4, save_strategy="steps", save_steps=2)
    _trainer(tiny_bert_dir, sentences, tmp_path, out, **common).train()
    checkpoint = out / "checkpoint-2"
    assert saved_world_size(checkpoint) == 1 and saved_world_size(tmp_path) is None
    with caplog.at_level("WARNING", logger="hf_cse.trainer_folder"):
        _trainer(tiny_bert_dir, sentences, tmp_path, out, **common).train(resume_from_checkpoint=str(checkpoint))
    assert "saved by" not in caplog.text  # the same number of processes: nothing to say
    # checkpoint-4 beside it is trained again: said, since resume_from_checkpoint=True would have gone on from it
    assert (f"resuming {checkpoint}: output_dir {out} holds later checkpoints (checkpoint-4), which this run trains "
            "again and overwrites one by one as it reaches their steps (resume_from_checkpoint=True goes on from "
            "checkpoint-4 instead)") in caplog.text
    # the same checkpoint as two processes save it: one RNG file each
    (checkpoint / "rng_state.pth").rename(checkpoint / "rng_state_0.pth")
    (checkpoint / "rng_state_1.pth").write_bytes((checkpoint / "rng_state_0.pth").read_bytes())
    assert saved_world_size(checkpoint) == 2
    with caplog.at_level("WARNING", logger="hf_cse.trainer_folder"):
        resumed = _trainer(tiny_bert_dir, sentences, tmp_path, out, **common)
        resumed.train(resume_from_checkpoint=str(checkpoint))
    assert (f"resuming {checkpoint}, saved by 2 processes, with 1: the contrastive batch has another size (16 rows "
            "then, 8 now), the data after the checkpoint is not what the run would have trained on (the batches "
            "skipped as already trained are counted in this run's batches, not in the checkpoint's run's)"
            ) in caplog.text
    assert resumed.state.global_step == 4
    caplog.clear()  # twice the per-device batch on one process: the same contrastive batch, not said to differ
    other = tmp_path / "other"
    shutil.copytree(checkpoint, other / checkpoint.name)
    # continuing "the run" (True) with another number of processes is another run: refused, naming the ways on
    with pytest.raises(OtherRunsCheckpointError, match=r"^resume_from_checkpoint=True: .*checkpoint-2 is a checkpoint "
                       r"of a run with other settings \(processes: 2 then, 1 now \(launch 2 to resume the run as it "
                       r"was: the contrastive batch 16 rows then, 8 now\)\): resume it with its run's settings, pass "
                       r"resume_from_checkpoint='.*checkpoint-2' to go on"):
        _trainer(tiny_bert_dir, sentences, tmp_path, other, **common).train(resume_from_checkpoint=True)
    with caplog.at_level("WARNING", logger="hf_cse.trainer_resume"):
        _trainer(tiny_bert_dir, sentences, tmp_path, other, **common, per_device_train_batch_size=16).train(
            resume_from_checkpoint=str(other / checkpoint.name))
    checkpoint = other / checkpoint.name
    assert f"resuming {checkpoint}, saved by 2 processes, with 1: the data after" in caplog.text


@pytest.mark.slow
def test_a_named_checkpoint_removed_after_the_check_is_one_line(tiny_bert_dir, sentences, tmp_path, monkeypatch):
    """Another run's save_total_limit may remove a checkpoint between the folder check and its load: transformers'
    ValueError traceback ("Can't find a valid checkpoint") became one line naming what happened."""
    source, out = tmp_path / "source", tmp_path / "out"
    _trainer(tiny_bert_dir, sentences, tmp_path, source, max_steps=2, save_strategy="steps", save_steps=2).train()
    checkpoint = source / "checkpoint-2"
    resumed = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    checked = ContrastiveTrainer._train_in_folder

    def removed_meanwhile(self, resume_from_checkpoint, **kwargs):
        shutil.rmtree(checkpoint)
        return checked(self, resume_from_checkpoint, **kwargs)

    monkeypatch.setattr(ContrastiveTrainer, "_train_in_folder", removed_meanwhile)
    with pytest.raises(OutputFolderError) as refused:
        resumed.train(resume_from_checkpoint=str(checkpoint))
    assert str(refused.value) == (
        f"resume_from_checkpoint {checkpoint} was complete when the run started, and no longer is (it is gone): "
        "something removed it meanwhile (another run's save_total_limit, or by hand). Name a checkpoint that is "
        "there, or resume_from_checkpoint=True for the last one in output_dir.")


@pytest.mark.slow
def test_a_refused_trainer_leaves_no_folder_it_made(tiny_bert_dir, sentences, tmp_path):
    """transformers' Trainer makes its output folder as it is built: a refusal by the built trainer's checks, or by
    train() before anything is written, removes the folders it made (they were left behind, empty); a folder that was
    there before is kept."""
    new = tmp_path / "new" / "run"
    with pytest.raises(CSEError, match="fp16"):
        _trainer(tiny_bert_dir, sentences, tmp_path, new, fp16=True)
    assert not (tmp_path / "new").exists()
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, new, max_steps=2)
    assert new.is_dir()
    with pytest.raises(OutputFolderError, match="holds no complete checkpoint"):
        trainer.train(resume_from_checkpoint=True)
    assert not (tmp_path / "new").exists()
    trainer.train()  # the same trainer, asked right, trains and saves into the folder made again
    trainer.save_run()
    assert trainer.state.global_step == 2 and (new / "model.safetensors").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()
    with pytest.raises(OutputFolderError, match="holds no complete checkpoint"):
        _trainer(tiny_bert_dir, sentences, tmp_path, mine).train(resume_from_checkpoint=True)
    assert mine.is_dir()


def test_a_later_checkpoint_whose_save_was_cut_short_is_neither_counted_nor_offered(tmp_path):
    """A run killed while saving checkpoint-920 left it without trainer_state.json; going on from checkpoint-915 with
    other settings was refused for it, advising to resume from checkpoint-920, which holds nothing to resume."""
    from hf_cse.later_checkpoints import check_no_later_checkpoints

    out = tmp_path / "out"
    named = fake_checkpoint(out / "checkpoint-915")
    (out / "checkpoint-920").mkdir()
    (out / "checkpoint-920" / "model.safetensors").write_bytes(b"")  # the save cut short before its state
    check_no_later_checkpoints(named, out)
    fake_checkpoint(out / "checkpoint-925")
    with pytest.raises(OutputFolderError, match=r"holds later checkpoints \(checkpoint-925\), .* Resume from "
                                                rf"{re.escape(str(out / 'checkpoint-925'))}, or go on"):
        check_no_later_checkpoints(named, out)
