"""The output-folder policy (hf_cse.cli.output_dir): new run, resume an interrupted run, refuse anything else unless
--overwrite_output_dir, never mix two runs' files, never write into the encoder's folder; the same steps for an
evaluation's results."""

import json
import logging
import os
from fnmatch import fnmatchcase

import pytest
from helpers import fake_checkpoint, train_args

from hf_cse.checks import InputError
from hf_cse.cli import older_runs
from hf_cse.cli import train as train_cli
from hf_cse.cli.eval_output_dir import prepare_eval_output_dir, refuse_other_results
from hf_cse.cli.flags import in_flag_terms, use_parser
from hf_cse.cli.output_dir import RUN_FILES, RUN_RECORD_FILE, prepare_output_dir, refuse_occupied_output_dir
from hf_cse.evaluation.report import report_files
from hf_cse.files import weights_fingerprint
from hf_cse.folder_lock import FolderBusyError, lock_file, releases_folder_locks
from hf_cse.output_folder import OutputFolderError
from hf_cse.run_files import RUN_LOADER_FILES, TRAINING_INFO_FILE
from hf_cse.trainer import ContrastiveTrainer

SETTINGS = {"loss": "infonce", "learning_rate": 3e-5}


def _checkpoint(folder):
    """A checkpoint folder as complete as these tests need (the Trainer writes trainer_state.json last)."""
    return fake_checkpoint(folder)


# ------------------------------------------------------------------------------------------------ unit
def test_new_folder_starts_a_run_and_records_its_settings(tmp_path):
    out = tmp_path / "a" / "b"
    assert prepare_output_dir(out, SETTINGS) is None
    assert json.loads((out / RUN_RECORD_FILE).read_text()) == SETTINGS


def test_other_files_are_refused_naming_the_flag_and_kept(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="notes.txt.*--overwrite_output_dir"):
        prepare_output_dir(tmp_path, SETTINGS)
    assert (tmp_path / "notes.txt").read_text() == "mine" and not (tmp_path / RUN_RECORD_FILE).exists()


def test_checkpoints_of_the_same_run_are_resumed(tmp_path, caplog):
    prepare_output_dir(tmp_path, SETTINGS)
    for step in (2, 10, 4):
        _checkpoint(tmp_path / f"checkpoint-{step}")
    with caplog.at_level(logging.WARNING, logger="hf_cse.cli.output_dir"):
        assert prepare_output_dir(tmp_path, SETTINGS) == str(tmp_path / "checkpoint-10")
    assert "resuming the interrupted run" in caplog.text


def test_a_diverged_last_checkpoint_is_refused_naming_the_last_finite_one(tmp_path):
    """The command's refusal and the library's name the way on in one wording (hf_cse.divergence.goes_on_from)."""
    import torch
    from safetensors.torch import save_file

    prepare_output_dir(tmp_path, SETTINGS)
    for step, value in ((2, 1.0), (4, float("nan"))):
        save_file({"w": torch.full((3,), value)}, str(_checkpoint(tmp_path / f"checkpoint-{step}") /
                                                      "model.safetensors"))
    with pytest.raises(InputError, match=r"its last checkpoint, checkpoint-4, holds 3 of 3 weights that are not "
                                         rf"finite .*; --resume_from_checkpoint {tmp_path / 'checkpoint-2'} goes on "
                                         r"from the last finite checkpoint at the run's learning rate \(its .*"
                                         r"--overwrite_output_dir"):
        prepare_output_dir(tmp_path, SETTINGS)


def test_checkpoints_of_a_run_with_other_settings_are_refused(tmp_path):
    prepare_output_dir(tmp_path, SETTINGS)
    _checkpoint(tmp_path / "checkpoint-2")
    with pytest.raises(InputError, match=r"other settings \(loss: 'infonce' then, 'gs_infonce' now\)"):
        prepare_output_dir(tmp_path, {**SETTINGS, "loss": "gs_infonce"})


def test_a_loss_hyperparameter_typed_at_its_default_is_the_same_run(tmp_path):
    """A run that left infonce's temperature to its default (its record names none) resumes with --temperature 0.05
    typed (the default) and the other way round; another value is refused, naming the value the default was."""
    objectives = lambda **hyper: {**SETTINGS, "objectives": [  # noqa: E731
        {"loss": "infonce", "weight": 1.0, "hyperparameters": hyper}]}
    left = tmp_path / "left"
    prepare_output_dir(left, objectives())
    _checkpoint(left / "checkpoint-2")
    assert prepare_output_dir(left, objectives(temperature=0.05)) == str(left / "checkpoint-2")
    with pytest.raises(InputError, match=r"infonce temperature: 0\.05 then, 0\.5 now\)"):
        prepare_output_dir(left, objectives(temperature=0.5))
    typed = tmp_path / "typed"
    prepare_output_dir(typed, objectives(temperature=0.05))
    _checkpoint(typed / "checkpoint-2")
    assert prepare_output_dir(typed, objectives()) == str(typed / "checkpoint-2")


def test_other_settings_are_offered_resume_from_checkpoint_only_where_it_would_be_taken(tmp_path):
    """A learning rate the checkpoint's optimizer state brings back, or later (incomplete) checkpoints that going on
    would overwrite: --resume_from_checkpoint would be refused in turn, so the refusal names only what works."""
    prepare_output_dir(tmp_path, SETTINGS)
    _checkpoint(tmp_path / "checkpoint-2")
    with pytest.raises(InputError) as refused:
        prepare_output_dir(tmp_path, {**SETTINGS, "learning_rate": 1e-4})
    assert "--learning_rate cannot change when resuming" in str(refused.value)
    assert "--resume_from_checkpoint" not in str(refused.value) and "--overwrite_output_dir" in str(refused.value)
    with pytest.raises(InputError, match=f"--resume_from_checkpoint {tmp_path / 'checkpoint-2'} to go on with these"):
        prepare_output_dir(tmp_path, {**SETTINGS, "warmup_steps": 2})
    (tmp_path / "checkpoint-4").mkdir()  # cut short: skipped, but going on from checkpoint-2 would overwrite it
    with pytest.raises(InputError, match=r"would overwrite the later checkpoints \(checkpoint-4\)") as refused:
        prepare_output_dir(tmp_path, {**SETTINGS, "warmup_steps": 2})
    assert "--resume_from_checkpoint" not in str(refused.value)


@pytest.mark.parametrize("scheduler, offered", [("linear", False), ("constant", True)])
def test_other_settings_and_total_are_offered_resume_from_checkpoint_only_where_the_schedule_allows(
        tmp_path, scheduler, offered):
    """Another max_steps is no setting of the run, but under a schedule that follows the total, the checkpoint
    named by --resume_from_checkpoint would be refused by the Trainer (hf_cse.trainer_resume): not offered."""
    from transformers import TrainingArguments

    prepare_output_dir(tmp_path, SETTINGS)
    _checkpoint(tmp_path / "checkpoint-2")
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 2}))
    args = TrainingArguments(str(tmp_path), max_steps=4, lr_scheduler_type=scheduler, use_cpu=True)
    with pytest.raises(InputError) as refused:
        prepare_output_dir(tmp_path, {**SETTINGS, "warmup_steps": 2}, training_args=args)
    assert ("--resume_from_checkpoint" in str(refused.value)) is offered, refused.value
    if not offered:
        assert "its run trains 2 steps and this one 4" in str(refused.value)
        assert "rerun with its settings to resume it, or --overwrite_output_dir" in str(refused.value)


# A changed LoRA flag was offered "--resume_from_checkpoint <its checkpoint> to go on with these", which the next
# check refused ("was trained with other weights"); so would be a checkpoint of an encoder of other sizes.
@pytest.mark.parametrize("changed, encoder_sizes, blocked", [
    ({"lora_r": 4}, None, "--lora_r cannot change when resuming (the checkpoint's weights would not load"),
    ({"method": "imsimcse"}, None, "--method cannot change when resuming"),
    ({"encoder": "wide"}, {"hidden_size": 48}, "the checkpoint was trained from another encoder (hidden_size 32 then, "
                                               "48 now), whose weights do not fit the new one's model"),
    ({"encoder": "copy"}, {"hidden_size": 32}, None),  # the same sizes: the weights load, going on is offered
    ({"lora_alpha": 32}, None, None),
], ids=["lora_r", "method", "encoder-of-other-sizes", "encoder-of-the-same-sizes", "lora_alpha"])
def test_resume_from_checkpoint_is_offered_only_where_the_checkpoints_weights_fit(tmp_path, changed, encoder_sizes,
                                                                                  blocked):
    settings = {**SETTINGS, "method": "simcse", "lora_r": 0, "lora_alpha": 16, "encoder": "bert"}
    prepare_output_dir(tmp_path, settings)
    _checkpoint(tmp_path / "checkpoint-2")
    (tmp_path / "checkpoint-2" / "config.json").write_text(json.dumps({
        "model_type": "hf_cse_simcse", "method": "simcse", "base_encoder": "bert",
        "encoder_config": {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2}}))
    encoder_config = {"model_type": "bert", "num_hidden_layers": 2, **(encoder_sizes or {"hidden_size": 32})}
    with pytest.raises(InputError) as refused:
        prepare_output_dir(tmp_path, {**settings, **changed}, encoder_config=encoder_config)
    message = str(refused.value)
    offer = f"--resume_from_checkpoint {tmp_path / 'checkpoint-2'} to go on with these"
    assert (offer in message) is (blocked is None), message
    if blocked:
        assert blocked in message and "rerun with its settings to resume it, or --overwrite_output_dir" in message


def _stopped_start(folder, settings=SETTINGS, logs=True):
    """The folder of a run killed before its first checkpoint: its record and (reporting to TensorBoard) the events
    folder transformers writes when training begins."""
    prepare_output_dir(folder, settings)
    if logs:
        (folder / "runs" / "May01_10-00-00_host").mkdir(parents=True)
        (folder / "runs" / "May01_10-00-00_host" / "events.out.tfevents.1.host.1.0").write_bytes(b"tb")


def test_the_start_of_a_run_with_other_settings_is_refused_and_kept(tmp_path, caplog):
    """Before: a run killed before its first checkpoint was taken for nothing to resume, its record replaced by the
    new run's and its TensorBoard logs left in runs/ beside the new run's (two runs shown as this folder's)."""
    _stopped_start(tmp_path)
    before = json.loads((tmp_path / RUN_RECORD_FILE).read_text())
    with pytest.raises(InputError) as refused:
        prepare_output_dir(tmp_path, {**SETTINGS, "learning_rate": 5e-4})
    message = str(refused.value)
    assert message == (f"--output_dir {tmp_path} holds the start of a run with other settings (learning_rate: 3e-05 "
                       "then, 0.0005 now), stopped before its first checkpoint (hf_cse_run.json, runs): rerun with its "
                       "settings to start it again, --overwrite_output_dir to start over (removes them), or choose "
                       "another --output_dir."), message
    assert json.loads((tmp_path / RUN_RECORD_FILE).read_text()) == before
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["May01_10-00-00_host"]
    # a record alone (e.g. a run that ran out of memory at its first step, rerun with a smaller batch): nothing of
    # the stopped start's but its settings, replaced with one line
    alone = tmp_path / "alone"
    _stopped_start(alone, logs=False)
    with caplog.at_level(logging.WARNING, logger="hf_cse.cli.output_dir"):
        assert prepare_output_dir(alone, {**SETTINGS, "learning_rate": 5e-4}) is None
    assert (f"hf_cse_run.json in {alone} records a run with other settings (learning_rate: 3e-05 then, 0.0005 now) "
            "that stopped before its first checkpoint and log: replaced by this run's") in caplog.text
    assert json.loads((alone / RUN_RECORD_FILE).read_text())["learning_rate"] == 5e-4
    # logs without a record: whose run they are is unknown
    unknown = tmp_path / "unknown"
    _stopped_start(unknown)
    (unknown / RUN_RECORD_FILE).unlink()
    with pytest.raises(InputError, match=r"the logs of a run whose settings are not recorded \(no hf_cse_run.json\)"):
        prepare_output_dir(unknown, SETTINGS)
    # the way out it names: --overwrite_output_dir removes the stopped start's files
    assert prepare_output_dir(tmp_path, {**SETTINGS, "learning_rate": 5e-4}, overwrite=True) is None
    assert not (tmp_path / "runs").exists()
    assert json.loads((tmp_path / RUN_RECORD_FILE).read_text())["learning_rate"] == 5e-4


def test_the_start_of_a_run_with_the_same_settings_starts_again_keeping_its_logs(tmp_path, caplog):
    _stopped_start(tmp_path)
    with caplog.at_level(logging.WARNING, logger="hf_cse.cli.output_dir"):
        assert prepare_output_dir(tmp_path, SETTINGS) is None
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["May01_10-00-00_host"]
    assert (f"runs/ in {tmp_path} holds the TensorBoard logs of this run's attempt stopped before its first "
            "checkpoint (May01_10-00-00_host): the same settings, so the run starts again from step 0 and they are "
            "kept beside the new attempt's") in caplog.text
    caplog.clear()
    alone = tmp_path / "alone"  # nothing logged: nothing to say
    _stopped_start(alone, logs=False)
    with caplog.at_level(logging.WARNING, logger="hf_cse.cli.output_dir"):
        assert prepare_output_dir(alone, SETTINGS) is None
    assert caplog.text == ""


def test_a_run_whose_pooling_is_only_worded_otherwise_now_resumes(tmp_path):
    """The card's wording of what set the pooling changed (normalize is named since session 16): a run interrupted
    before resumes; another pooler or normalisation is still another run."""
    pooling = {"pooler_type": "cls", "normalize": True, "pooler_source": "set by --pooler_type"}
    prepare_output_dir(tmp_path, {**SETTINGS, **pooling})
    _checkpoint(tmp_path / "checkpoint-2")
    reworded = {**SETTINGS, **pooling, "pooler_source": "set by --pooler_type; normalize set by --normalize"}
    assert prepare_output_dir(tmp_path, reworded) == str(tmp_path / "checkpoint-2")
    with pytest.raises(InputError, match=r"other settings \(normalize: True then, False now\)"):
        prepare_output_dir(tmp_path, {**reworded, "normalize": False})


# the settings an ImSimCSE run recorded before objectives were a list (written by hf_cse at 4e9c843, trimmed):
# the DCL weight was not recorded when it was the method's default
OLDER_IMSIMCSE_RECORD = {"method": "imsimcse", "loss": "off_dropout_infonce",
                         "loss_kwargs": {"m": 0.9, "temperature": 0.05}, "dcl_temperature": 5.0,
                         "dcl_normalization": "code", "off_dropout_grad": True, "seed": 42}


def test_an_older_record_reads_in_objectives_form():
    from hf_cse.models import ImSimCSEConfig, SimCSEConfig

    upgraded = older_runs.record_in_objectives_form(OLDER_IMSIMCSE_RECORD)
    assert upgraded == {"method": "imsimcse", "off_dropout_grad": True, "seed": 42,
                        "objectives": ImSimCSEConfig().objectives}
    simcse = older_runs.record_in_objectives_form({"method": "simcse", "loss": "gs_infonce", "dcl_weight": 0.2,
                                                  "loss_kwargs": {"temperature": 0.07}, "dcl_temperature": 4.0})
    assert simcse["objectives"] == SimCSEConfig(objectives=[
        {"loss": "gs_infonce", "hyperparameters": {"temperature": 0.07}},
        {"loss": "dcl", "weight": 0.2, "hyperparameters": {"temperature": 4.0, "normalization": "code"}}]).objectives
    assert older_runs.record_in_objectives_form(upgraded) is upgraded  # today's records pass through


def test_an_interrupted_run_recorded_by_an_older_version_resumes_and_other_settings_stay_refused(tmp_path):
    (tmp_path / RUN_RECORD_FILE).write_text(json.dumps(OLDER_IMSIMCSE_RECORD))
    _checkpoint(tmp_path / "checkpoint-2")
    today = older_runs.record_in_objectives_form(OLDER_IMSIMCSE_RECORD)
    with pytest.raises(InputError, match="other settings"):  # without the reader the two forms differ
        prepare_output_dir(tmp_path, today)
    read = older_runs.record_in_objectives_form
    assert prepare_output_dir(tmp_path, today, read_record=read) == str(tmp_path / "checkpoint-2")
    other = {**today, "objectives": today["objectives"][:1]}  # DCL dropped: another run
    with pytest.raises(InputError, match="other settings"):
        prepare_output_dir(tmp_path, other, read_record=read)


def test_another_tools_checkpoint_is_neither_resumed_nor_removed(tmp_path):
    """A checkpoint-N whose config.json names no hf_cse method (a Trainer run of a classifier): before, it was resumed
    (torch's unpickling traceback, or advice to raise --max_steps to its step) and --overwrite_output_dir removed it;
    then --overwrite_output_dir kept it, and the new run's checkpoint rotation deleted it (or its step N wrote over
    it): refused with the flag too, nothing removed."""
    theirs = tmp_path / "checkpoint-500"
    _checkpoint(theirs)
    (theirs / "config.json").write_text('{"model_type": "bert", "architectures": ["BertForSequenceClassification"]}')
    (tmp_path / TRAINING_INFO_FILE).write_text("{}")  # an earlier run's, finished beside it
    with pytest.raises(InputError, match="checkpoint-500"):
        refuse_occupied_output_dir(str(tmp_path))  # the command line's check before torch
    for overwrite in (False, True):
        with pytest.raises(InputError, match=r"holds checkpoint-500, which transformers' checkpoint rotation takes "
                                             r"for a checkpoint of the run and may delete"):
            prepare_output_dir(tmp_path, SETTINGS, overwrite=overwrite)
    assert (theirs / "config.json").is_file() and (tmp_path / TRAINING_INFO_FILE).is_file()  # nothing removed


def test_names_that_only_start_like_a_checkpoint_are_the_users_and_are_never_removed(tmp_path):
    """``checkpoint-notes.txt`` and a results folder ``checkpoint-3-eval`` (the name run_eval once suggested) were
    run files for --overwrite_output_dir, which deleted them; transformers' checkpoint rotation takes such a folder for
    a checkpoint and may delete it too, so a run refuses to start beside one."""
    prepare_output_dir(tmp_path, SETTINGS)
    _checkpoint(tmp_path / "checkpoint-2")
    (tmp_path / "checkpoint-notes.txt").write_text("mine")
    with pytest.raises(InputError, match=r"files that are not checkpoints of a run \(checkpoint-notes.txt\)"):
        refuse_occupied_output_dir(str(tmp_path))
    assert prepare_output_dir(tmp_path, SETTINGS, overwrite=True) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([RUN_RECORD_FILE, "checkpoint-notes.txt"])
    (tmp_path / "checkpoint-3-eval").mkdir()
    for overwrite in (False, True):
        with pytest.raises(InputError, match=r"holds checkpoint-3-eval, which transformers' checkpoint rotation takes "
                                             r"for a checkpoint of the run and may delete: rename it \(e.g. "
                                             r"eval-checkpoint-3-eval\)"):
            prepare_output_dir(tmp_path, SETTINGS, overwrite=overwrite)
    assert (tmp_path / "checkpoint-3-eval").is_dir()


def test_a_folder_holding_another_tools_model_is_refused_even_with_overwrite(tmp_path):
    """A folder holding a transformers model (not an hf_cse run) was taken for "a run whose final save was cut
    short", and --overwrite_output_dir, which the line offered, deleted its config, weights and tokenizer."""
    files = {"config.json": '{"model_type": "bert"}', "model.safetensors": "weights", "vocab.txt": "[PAD]"}
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    for overwrite in (False, True):
        with pytest.raises(InputError, match=r"holds another model \(a bert model's config.json\): a run there "
                                             r"would replace its files, overwrite_output_dir or not\.") as refused:
            prepare_output_dir(tmp_path, SETTINGS, overwrite=overwrite)
        use_parser(train_cli.argument_parser()._actions)  # as the command prints it
        try:
            assert ", --overwrite_output_dir or not. Choose another --output_dir." in in_flag_terms(str(refused.value))
        finally:
            use_parser(())
    with pytest.raises(InputError, match="holds another model"):
        refuse_occupied_output_dir(str(tmp_path))  # the command line's check before torch
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == files


@pytest.mark.parametrize("config, theirs", [
    ('{"model_type": "hf_cse_simcse", "method": "simcse"}', None), ('{"model_type": "bert"}', "a bert model's"),
    ('{"architectures": ["MyModel"]}', "an unnamed model's"), ('{"model_type": "be', None), (None, None)])
def test_another_model_is_told_by_its_config(tmp_path, config, theirs):
    """A readable config.json that names no hf_cse model is another tool's, with or without a model_type; none, or
    one cut short, is a save of a run's own that was interrupted (checkpoint_problem)."""
    from hf_cse.checkpoints import other_model

    if config is not None:
        (tmp_path / "config.json").write_text(config)
    assert other_model(tmp_path) == theirs


def test_a_checkpoint_whose_torch_archive_is_cut_short_is_skipped(tmp_path, caplog):
    prepare_output_dir(tmp_path, SETTINGS)
    for step in (2, 4):
        _checkpoint(tmp_path / f"checkpoint-{step}")
    (tmp_path / "checkpoint-4" / "pytorch_model.bin").write_bytes(b"\x80\x02not a zip")
    with caplog.at_level(logging.WARNING, logger="hf_cse.checkpoints"):
        assert prepare_output_dir(tmp_path, SETTINGS) == str(tmp_path / "checkpoint-2")
    assert "pytorch_model.bin is cut short" in caplog.text


# the temporary file safetensors writes a weights file through (.tmp + 6 letters or digits, renamed into place): a run
# killed while saving its model or a checkpoint leaves it, with the start of a safetensors file or nothing yet
KILLED_WEIGHTS = b"H\x00\x00\x00\x00\x00\x00\x00{\"a\": {\"dtype\": \"F32\""


def test_a_killed_weights_write_is_removed_and_the_run_resumed(tmp_path, caplog):
    prepare_output_dir(tmp_path, SETTINGS)
    _checkpoint(tmp_path / "checkpoint-2")
    (tmp_path / "checkpoint-4").mkdir()  # its save killed while writing its weights: skipped, saved again
    (tmp_path / "checkpoint-4" / ".tmpXyZ789").write_bytes(KILLED_WEIGHTS)
    (tmp_path / ".tmpAbC123").touch()  # the final save killed as it began
    (tmp_path / "config.json").write_text('{"model_type": "hf_cse_simcse"}')
    refuse_occupied_output_dir(str(tmp_path))  # the command line's early check lets it through
    with caplog.at_level(logging.WARNING):
        assert prepare_output_dir(tmp_path, SETTINGS) == str(tmp_path / "checkpoint-2")
    assert not (tmp_path / ".tmpAbC123").exists() and not (tmp_path / "checkpoint-4" / ".tmpXyZ789").exists()
    assert "removed .tmpAbC123, checkpoint-4/.tmpXyZ789 in" in caplog.text


@pytest.mark.parametrize("name, content", [(".tmpnotes", b""), (".tmpAbC123", b"my own notes, not weights"),
                                           (".tmpAbC1234", b""), ("tmpAbC123", b"")])
def test_a_users_file_named_like_a_killed_weights_write_is_kept_and_refused(tmp_path, name, content):
    prepare_output_dir(tmp_path, SETTINGS)
    _checkpoint(tmp_path / "checkpoint-2")
    (tmp_path / name).write_bytes(content)
    with pytest.raises(InputError, match=f"files that are not checkpoints of a run \\({name}\\)"):
        prepare_output_dir(tmp_path, SETTINGS)
    assert (tmp_path / name).read_bytes() == content


def test_overwrite_removes_a_killed_weights_write(tmp_path):
    (tmp_path / "training_info.json").write_text("{}")
    (tmp_path / ".tmpAbC123").write_bytes(KILLED_WEIGHTS)
    prepare_output_dir(tmp_path, SETTINGS, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [RUN_RECORD_FILE]


def test_overwrite_removes_the_previous_runs_files_only(tmp_path):
    for name in ("config.json", "model.safetensors", "training_info.json", "vocab.txt", "notes.txt"):
        (tmp_path / name).write_text("old")
    for folder in ("checkpoint-3", "sentence-transformers", "my_data"):
        (tmp_path / folder).mkdir()
    assert prepare_output_dir(tmp_path, SETTINGS, overwrite=True) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([RUN_RECORD_FILE, "notes.txt", "my_data"])


def test_overwrite_keeps_the_old_models_evaluations_and_says_they_are_stale(tmp_path, caplog):
    """hf-cse-eval's results of the replaced model (the run's default eval folders) are the user's and kept, with a
    warning that they no longer describe the folder's model; other folders say nothing."""
    (tmp_path / "training_info.json").write_text("{}")
    for folder in ("eval", "eval-sentence-transformers", "eval-notes"):
        (tmp_path / folder).mkdir()
    for folder in ("eval", "eval-sentence-transformers"):
        (tmp_path / folder / "results.json").write_text("{}")
    with caplog.at_level("WARNING", logger="hf_cse.cli.output_dir"):
        prepare_output_dir(tmp_path, SETTINGS, overwrite=True)
    assert {"eval", "eval-sentence-transformers", "eval-notes"} <= {p.name for p in tmp_path.iterdir()}
    [stale] = [r.getMessage() for r in caplog.records if "hf-cse-eval's results" in r.getMessage()]
    assert stale.startswith("eval, eval-sentence-transformers in ") and "do not describe the model" in stale


def test_overwrite_into_an_evaluations_folder_says_its_results_are_of_another_model(tmp_path, caplog):
    """hf-cse-eval's own output folder taken by a run with overwrite: its results.json / results.md (of the model it
    scored) stay beside the new model without a word before."""
    for name in ("results.json", "results.md", "stsb_cosine_buckets.png"):
        (tmp_path / name).write_text("{}")
    with caplog.at_level("WARNING", logger="hf_cse.cli.output_dir"):
        prepare_output_dir(tmp_path, SETTINGS, overwrite=True)
    assert {"results.json", "results.md"} <= {p.name for p in tmp_path.iterdir()}
    [stale] = [r.getMessage() for r in caplog.records if "hf-cse-eval's results" in r.getMessage()]
    assert stale.startswith("results.json, results.md in ") and "results of another model, kept" in stale


def test_overwrite_keeps_the_users_files_that_only_look_like_a_runs(tmp_path):
    for name in ("model.safetensors", "train_results.json", "model_v1_backup.safetensors", "paper_results.json"):
        (tmp_path / name).write_text("old")
    prepare_output_dir(tmp_path, SETTINGS, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([RUN_RECORD_FILE, "model_v1_backup.safetensors",
                                                                 "paper_results.json"])


def test_an_output_folder_inside_another_runs_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    prepare_output_dir(run, SETTINGS)
    _checkpoint(run / "checkpoint-2")
    for inside in (run / "checkpoint-5000", run / "checkpoint-2", run / "sub" / "deeper"):
        with pytest.raises(InputError, match="lies inside the folder of another training run"):
            prepare_output_dir(inside, SETTINGS)
        assert not (inside / RUN_RECORD_FILE).exists()


def test_another_runs_checkpoint_is_not_resumed_into_a_finished_run(tmp_path):
    finished, other = tmp_path / "finished", tmp_path / "other"
    for folder in (finished, other):
        prepare_output_dir(folder, SETTINGS)
        _checkpoint(folder / "checkpoint-4")
    (finished / "training_info.json").write_text("{}")
    with pytest.raises(InputError, match="already holds a finished run"):
        prepare_output_dir(finished, SETTINGS, resume_from_checkpoint=str(other / "checkpoint-4"))
    # the finished run's own checkpoint continues it (a larger --max_steps trains the steps added)
    own = str(finished / "checkpoint-4")
    assert prepare_output_dir(finished, SETTINGS, resume_from_checkpoint=own) == own


def test_a_finished_run_with_a_later_checkpoint_resumes_the_run_going_on_from_it(tmp_path):
    """A finished run trained further (a larger --max_steps from its last checkpoint) and stopped after a checkpoint
    was refused as "a finished run" by the same command without --resume_from_checkpoint, whose only way on,
    --overwrite_output_dir, deletes it. Its last checkpoint is resumed where it was saved after the finished run."""
    prepare_output_dir(tmp_path, SETTINGS)
    _checkpoint(tmp_path / "checkpoint-4")
    (tmp_path / "training_info.json").write_text("{}")
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 4, "max_steps": 4}))
    with pytest.raises(InputError, match="already holds a finished run"):
        refuse_occupied_output_dir(str(tmp_path))
    _checkpoint(tmp_path / "checkpoint-8")
    finished_at = (tmp_path / "training_info.json").stat().st_mtime
    # saved before the finished run finished: a later checkpoint of the run it went on from an earlier one of
    os.utime(tmp_path / "checkpoint-8" / "trainer_state.json", (finished_at - 60, finished_at - 60))
    with pytest.raises(InputError, match="already holds a finished run"):
        prepare_output_dir(tmp_path, SETTINGS)
    os.utime(tmp_path / "checkpoint-8" / "trainer_state.json", (finished_at + 60, finished_at + 60))
    refuse_occupied_output_dir(str(tmp_path))
    assert prepare_output_dir(tmp_path, SETTINGS) == str(tmp_path / "checkpoint-8")
    # its settings are the record's from its first checkpoint on (hf_cse.cli.run_record): other ones are refused
    with pytest.raises(InputError, match="holds checkpoints of a run with other settings"):
        prepare_output_dir(tmp_path, {**SETTINGS, "max_steps": 12})
    # another run's checkpoint named beside it would go on over the stopped run's: refused as before
    other = tmp_path.parent / f"{tmp_path.name}-other"
    _checkpoint(other / "checkpoint-2")
    with pytest.raises(InputError, match="already holds a finished run"):
        prepare_output_dir(tmp_path, SETTINGS, resume_from_checkpoint=str(other / "checkpoint-2"))


def test_overwrite_and_resume_from_checkpoint_together_are_refused(tmp_path):
    with pytest.raises(InputError, match="give one"):
        prepare_output_dir(tmp_path, SETTINGS, overwrite=True, resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_output_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        prepare_output_dir(tmp_path / "f", SETTINGS)


@pytest.mark.parametrize("where", ["same", "inside", "holds"])
def test_encoder_folder_is_refused(tiny_bert_dir, tmp_path, where):
    out = {"same": tiny_bert_dir, "inside": tiny_bert_dir / "run", "holds": tiny_bert_dir.parent}[where]
    before = sorted(p.name for p in tiny_bert_dir.iterdir())
    with pytest.raises(InputError, match="encoder's folder"):
        prepare_output_dir(out, SETTINGS, encoder=str(tiny_bert_dir), overwrite=True)
    assert sorted(p.name for p in tiny_bert_dir.iterdir()) == before


def test_refused_export_removes_an_earlier_export(tiny_bert_dir, tmp_path):
    """A model the export cannot convert must not leave an earlier run's export beside it."""
    from transformers import AutoTokenizer, TrainingArguments

    from hf_cse.export import export_after_training
    from hf_cse.models import SimCSEModel

    model = SimCSEModel.from_encoder(str(tiny_bert_dir), pooler_type="avg_first_last")
    stale = tmp_path / "sentence-transformers"
    stale.mkdir()
    (stale / "modules.json").write_text("[]")
    (stale / "hf_cse_config.json").write_text("{}")  # an export's markers (hf_cse.export.folders.EXPORT_MARKERS)
    for name in RUN_LOADER_FILES:  # an earlier run's, which pointed sentence-transformers at its export
        (tmp_path / name).write_text("[]")
    args = TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    assert export_after_training(model, AutoTokenizer.from_pretrained(tiny_bert_dir), args) is None
    assert not stale.exists() and (tmp_path / "training_info.json").is_file()
    assert not any((tmp_path / name).exists() for name in RUN_LOADER_FILES)
    assert not list(tmp_path.glob(".training_info.json*"))


# ------------------------------------------------------------------------------------------------ run_unsup.py
@pytest.mark.slow
def test_second_run_is_refused_and_overwrite_replaces_every_file_of_the_first(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    train_cli.train_from_args(train_args(tiny_bert_dir, tmp_path, out, "--save_strategy", "steps", "--save_steps", "1"))
    finished = sorted(p.name for p in out.iterdir())
    assert all(any(fnmatchcase(name, pattern) for pattern in RUN_FILES) for name in finished), finished
    assert set(RUN_LOADER_FILES) <= set(finished)
    assert "checkpoint-1" in finished and "sentence-transformers" in finished
    weights = (out / "model.safetensors").read_bytes()

    with pytest.raises(InputError, match="already holds a finished run.*--overwrite_output_dir"):
        train_cli.train_from_args(train_args(tiny_bert_dir, tmp_path, out, "--loss", "gs_infonce"))
    assert (out / "model.safetensors").read_bytes() == weights  # the first run is untouched

    (out / "notes.txt").write_text("kept")
    train_cli.train_from_args(train_args(tiny_bert_dir, tmp_path, out, "--loss", "gs_infonce",
                                         "--overwrite_output_dir"))
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if n.startswith("checkpoint-")]  # the first run's checkpoints are gone
    assert (out / "notes.txt").read_text() == "kept"
    info = json.loads((out / "training_info.json").read_text())
    card = (out / "sentence-transformers" / "README.md").read_text()
    assert json.loads((out / "config.json").read_text())["objectives"][0]["loss"] == "gs_infonce"
    assert info["training_args"]["max_steps"] == 2 and "gs_infonce" in card


class Interrupted(Exception):
    pass


def _counted_steps(monkeypatch) -> tuple[list[int], dict]:
    """The steps the trainer trains, counted; ``interrupt["at"] = N`` stops the run as its step N begins (after a
    checkpoint saved at N), as a kill would."""
    steps, interrupt = [], {"at": None}
    original = ContrastiveTrainer.training_step

    def counting_step(self, *a, **k):
        if interrupt["at"] is not None and self.state.global_step == interrupt["at"]:
            raise Interrupted
        steps.append(self.state.global_step)
        return original(self, *a, **k)

    monkeypatch.setattr(ContrastiveTrainer, "training_step", counting_step)
    return steps, interrupt


@pytest.mark.slow
def test_relaunching_an_interrupted_run_resumes_it_and_keeps_its_checkpoints(tiny_bert_dir, tmp_path, monkeypatch,
                                                                             caplog):
    """Before: a relaunch restarted at step 0 and --save_total_limit then deleted the interrupted run's checkpoints."""
    out = tmp_path / "out"
    args = train_args(tiny_bert_dir, tmp_path, out, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2",
                 "--save_total_limit", "1")
    steps, interrupt = _counted_steps(monkeypatch)
    interrupt["at"] = 2  # after checkpoint-2 is saved
    with pytest.raises(Interrupted):
        train_cli.train_from_args(args)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2", RUN_RECORD_FILE]

    steps.clear()
    interrupt["at"] = None
    with caplog.at_level(logging.WARNING, logger="hf_cse.cli.output_dir"):
        train_cli.train_from_args(args)
    assert steps == [2, 3]  # only the two missing steps ran
    assert f"from {out / 'checkpoint-2'}" in caplog.text
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4


@pytest.mark.slow
def test_relaunching_with_another_number_of_processes_is_refused_unless_the_checkpoint_is_named(tiny_bert_dir,
                                                                                               tmp_path, monkeypatch,
                                                                                               caplog):
    """A run interrupted under 2 processes and relaunched by the same command in 1 went on with half the contrastive
    batch (16 rows then, 8 now), only warned."""
    out = tmp_path / "out"
    args = train_args(tiny_bert_dir, tmp_path, out, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2")
    steps, interrupt = _counted_steps(monkeypatch)
    interrupt["at"] = 2  # after checkpoint-2 is saved
    with pytest.raises(Interrupted):
        train_cli.train_from_args(args)
    checkpoint = out / "checkpoint-2"
    (checkpoint / "rng_state.pth").rename(checkpoint / "rng_state_0.pth")  # as 2 processes save it
    (checkpoint / "rng_state_1.pth").write_bytes((checkpoint / "rng_state_0.pth").read_bytes())
    steps.clear()
    interrupt["at"] = None
    with pytest.raises(OutputFolderError, match=r"holds checkpoints of a run with other settings \(processes: 2 then, "
                       r"1 now \(launch 2 to resume the run as it was: the contrastive batch \d+ rows then, \d+ "
                       rf"now\)\): rerun with its settings to resume it, --resume_from_checkpoint {checkpoint} to go"):
        train_cli.train_from_args(args)
    assert steps == []
    with caplog.at_level(logging.WARNING, logger="hf_cse.trainer_resume"):
        train_cli.train_from_args([*args, "--resume_from_checkpoint", str(checkpoint)])
    assert steps == [2, 3] and f"resuming {checkpoint}, saved by 2 processes, with 1: the contrastive" in caplog.text


@pytest.mark.slow
def test_a_finished_run_trained_further_records_its_settings_and_resumes_by_the_same_command(tiny_bert_dir, tmp_path,
                                                                                            monkeypatch):
    """A run going on from a named checkpoint never wrote its record: after a finished 3-step run was trained to 9
    steps, hf_cse_run.json still said 3 (its --config reran 3 steps), and the extension stopped after checkpoint-6
    was refused as a finished run by the same command without --resume_from_checkpoint."""
    out = tmp_path / "out"
    args = train_args(tiny_bert_dir, tmp_path, out, "--save_strategy", "steps", "--save_steps", "3",
                      "--lr_scheduler_type", "constant")
    args[args.index("--max_steps") + 1] = "3"
    train_cli.train_from_args(args)
    recorded_steps = lambda: json.loads((out / RUN_RECORD_FILE).read_text())["max_steps"]  # noqa: E731
    assert recorded_steps() == 3
    steps, interrupt = _counted_steps(monkeypatch)
    args[args.index("--max_steps") + 1] = "9"
    interrupt["at"] = 6  # after checkpoint-6 is saved
    with pytest.raises(Interrupted):
        train_cli.train_from_args([*args, "--resume_from_checkpoint", str(out / "checkpoint-3")])
    assert recorded_steps() == 9  # the folder's newest checkpoint is this run's
    steps.clear()
    interrupt["at"] = None
    train_cli.train_from_args(args)
    assert steps == [6, 7, 8]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 9 and recorded_steps() == 9
    # its last checkpoint named into a new folder: finished as it is (no step trained), recorded all the same
    again = tmp_path / "again"
    args[args.index("--output_dir") + 1] = str(again)
    train_cli.train_from_args([*args, "--resume_from_checkpoint", str(out / "checkpoint-9")])
    assert steps == [6, 7, 8] and json.loads((again / RUN_RECORD_FILE).read_text())["max_steps"] == 9


@pytest.mark.slow
def test_a_run_stopped_before_its_first_checkpoint_keeps_its_tensorboard_logs_from_another_run(
        tiny_bert_dir, tmp_path, monkeypatch, caplog):
    """The reviewer's case: a run reporting to TensorBoard stopped before its first checkpoint, then a run with other
    settings into its folder: refused, nothing touched; the same command starts it again, the stopped attempt's logs
    kept beside the new attempt's and said."""
    pytest.importorskip("tensorboard")
    out = tmp_path / "out"
    args = train_args(tiny_bert_dir, tmp_path, out, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "4",
                      "--report_to", "tensorboard", "--logging_steps", "1")
    original = ContrastiveTrainer.training_step

    def stopped_step(self, *a, **k):
        if stop and self.state.global_step == 2:
            raise Interrupted
        return original(self, *a, **k)

    monkeypatch.setattr(ContrastiveTrainer, "training_step", stopped_step)
    stop = True
    with pytest.raises(Interrupted):
        train_cli.train_from_args(args)
    assert sorted(p.name for p in out.iterdir()) == [RUN_RECORD_FILE, "runs"]
    killed_logs = sorted(p.relative_to(out) for p in (out / "runs").rglob("events*"))
    assert killed_logs
    record = (out / RUN_RECORD_FILE).read_text()
    stop = False
    with pytest.raises(InputError, match=r"holds the start of a run with other settings \(learning_rate: 3e-05 then, "
                                         r"0.0005 now\), stopped before its first checkpoint"):
        train_cli.train_from_args([*args, "--learning_rate", "5e-4"])
    assert sorted(p.relative_to(out) for p in (out / "runs").rglob("events*")) == killed_logs
    assert (out / RUN_RECORD_FILE).read_text() == record
    with caplog.at_level(logging.WARNING, logger="hf_cse.cli.output_dir"):
        train_cli.train_from_args(args)
    assert "holds the TensorBoard logs of this run's attempt stopped before its first checkpoint" in caplog.text
    logs = sorted(p.relative_to(out) for p in (out / "runs").rglob("events*"))
    assert set(killed_logs) < set(logs)  # kept, beside the new attempt's
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4


@pytest.mark.slow
def test_the_trainers_settings_check_accepts_what_the_command_resumes(tiny_bert_dir, tmp_path, monkeypatch, caplog):
    """hf-cse-train hands the trainer the checkpoint by its path: the same command resumes without a word from the
    trainer's own comparison (hf_cse.run_settings), and --resume_from_checkpoint PATH with another warmup goes on with
    it, the trainer's one log line naming what changed."""
    out, other = tmp_path / "out", tmp_path / "other"
    args = train_args(tiny_bert_dir, tmp_path, out, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2")
    original = ContrastiveTrainer.training_step

    def interrupted_step(self, *a, **k):
        if interrupt and self.state.global_step == 2:
            raise Interrupted
        return original(self, *a, **k)

    monkeypatch.setattr(ContrastiveTrainer, "training_step", interrupted_step)
    interrupt = True
    with pytest.raises(Interrupted):
        train_cli.train_from_args(args)
    interrupt = False
    # settings the record does not compare but the checkpoint does (the optimizer's, the batches'): the checkpoint
    # the folder chose is compared as resume_from_checkpoint=True, refused in the command's terms, not gone on with
    record = json.loads((out / RUN_RECORD_FILE).read_text())
    assert record["training_arguments"]["adam_beta2"] == 0.999 and record["training_arguments"]["optim"]
    with pytest.raises(InputError, match=rf"--output_dir {out} holds checkpoints of a run with other settings "
                                         r"\(adam_beta2: 0\.999 then, 0\.99 now\): adam_beta2 cannot change when "
                                         r"resuming .* --overwrite_output_dir to start over"):
        train_cli.train_from_args([*args, "--adam_beta2", "0.99"])
    with pytest.raises(InputError, match=r"\(no_duplicates_in_batch: True then, False now\): rerun with its "
                                         rf"settings to resume it, --resume_from_checkpoint {out / 'checkpoint-2'} "
                                         "to go on with these"):
        train_cli.train_from_args([*args, "--no_duplicates_in_batch", "false"])
    with caplog.at_level(logging.WARNING, logger="hf_cse.trainer_folder"):
        train_cli.train_from_args(args)
    assert "other settings" not in caplog.text
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4
    args[args.index("--output_dir") + 1] = str(other)
    with caplog.at_level(logging.WARNING, logger="hf_cse.trainer_folder"):
        train_cli.train_from_args([*args, "--warmup_steps", "1", "--resume_from_checkpoint",
                                   str(out / "checkpoint-2")])
    assert f"resuming {out / 'checkpoint-2'} with other settings than its run's (warmup_steps: 0 then, 1.0 now)" \
        in caplog.text
    assert json.loads((other / "trainer_state.json").read_text())["global_step"] == 4


def test_a_run_that_holds_its_folder_keeps_a_second_one_out_until_it_ends(tmp_path):
    out = tmp_path / "out"

    @releases_folder_locks
    def run():
        assert prepare_output_dir(out, SETTINGS, hold=True) is None
        with pytest.raises(FolderBusyError, match="in use by another run"):
            prepare_output_dir(out, SETTINGS, hold=True)

    run()
    assert not lock_file(out).exists() and (out / RUN_RECORD_FILE).is_file()


# ------------------------------------------------------------------------------------------------ evaluation
EVAL_SETTINGS = {"tasks": ["STSBenchmark", "MR"], "mode": "fast", "pooler": None}


def _results(folder, models, unfinished=(), settings=EVAL_SETTINGS):
    entries = [{"model": m, "unfinished_tasks": list(unfinished), "settings": {"command": settings}} for m in models]
    (folder / "results.json").write_text(json.dumps({"models": entries} if len(entries) > 1 else entries[0]))
    (folder / "results.md").write_text("| task |")


def test_an_evaluation_keeps_what_is_not_results_and_refuses_another_evaluations_results(tmp_path):
    claim = releases_folder_locks(prepare_eval_output_dir)
    (tmp_path / "notes.txt").write_text("mine")
    assert claim(tmp_path, overwrite=False, models=["a"]) == (tmp_path, [])  # no results: a new evaluation
    assert not lock_file(tmp_path).exists()  # held while the evaluation runs, released when it ends
    _results(tmp_path, ["a"])  # a finished evaluation of the same model
    with pytest.raises(InputError, match="already holds the results of an evaluation.*--overwrite_output_dir"):
        claim(tmp_path, overwrite=False, models=["a"])
    assert (tmp_path / "results.json").is_file()
    saved = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    # replaced only when the new evaluation writes its first result (a model failing to load keeps them), and only
    # the results: what the evaluation removes then
    assert claim(tmp_path, overwrite=True, models=["b"]) == (tmp_path, [])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == saved
    assert sorted(p.name for p in report_files(tmp_path)) == ["results.json", "results.md"]


@pytest.mark.parametrize("plot", ["score_by_dimension.png", "align_uniform.png", "task_comparison.png"])
def test_every_plot_of_an_evaluation_is_its_results(tmp_path, plot):
    """score_by_dimension.png (--truncate_dims) was not counted among an evaluation's files: a folder holding only
    it was written into without --overwrite_output_dir, and --overwrite_output_dir left it beside the new results."""
    claim = releases_folder_locks(prepare_eval_output_dir)
    (tmp_path / plot).write_bytes(b"an earlier evaluation's plot")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match=f"already holds the results of an evaluation \\({plot}\\); pass "
                                         "--overwrite_output_dir"):
        claim(tmp_path, overwrite=False, models=["a"])
    assert (tmp_path / plot).read_bytes() == b"an earlier evaluation's plot"
    claim(tmp_path, overwrite=True, models=["a"])
    assert [p.name for p in report_files(tmp_path)] == [plot]  # what goes when the new evaluation writes


def test_the_same_evaluation_stopped_early_is_finished_and_another_ones_partial_results_refused(tmp_path):
    """The same command gets the records to finish, and nothing is removed (they were deleted, and everything was
    evaluated again); the partial files of the writes a kill cut short go."""
    claim = releases_folder_locks(prepare_eval_output_dir)
    _results(tmp_path, ["a"], unfinished=["STSB"])
    with pytest.raises(InputError, match="--overwrite_output_dir"):
        claim(tmp_path, overwrite=False, models=["b"])
    saved = sorted(p.name for p in tmp_path.iterdir())
    (tmp_path / ".results.json.partial-999999").write_text('{"model": "a", "ST')  # a write killed before its rename
    out, earlier = claim(tmp_path, overwrite=False, models=["a"], settings=EVAL_SETTINGS)  # the same command
    assert out == tmp_path and [(r.model, r.unfinished_tasks) for r in earlier] == [("a", ["STSB"])]
    assert sorted(p.name for p in tmp_path.iterdir()) == saved
    _results(tmp_path, ["a"])  # one of two models done
    _, earlier = claim(tmp_path, overwrite=False, models=["a", "b"], settings=EVAL_SETTINGS)
    assert [(r.model, r.unfinished_tasks) for r in earlier] == [("a", [])]
    assert (tmp_path / "results.json").is_file()
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        claim(tmp_path / "f", overwrite=True, models=["a"])


@pytest.mark.parametrize("setting", ["senteval_data_dir", "eval_file"])
def test_a_path_given_relative_then_and_absolute_now_is_the_same_evaluation(tmp_path, monkeypatch, setting):
    """The partial results recorded senteval_data_dir "senteval" (as given, or by an earlier hf_cse); the same command
    given the folder's absolute path (or from another folder) was refused as one with other settings."""
    claim = releases_folder_locks(prepare_eval_output_dir)
    (tmp_path / "senteval").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "ev"
    out.mkdir()
    _results(out, ["a"], unfinished=["MR"], settings={**EVAL_SETTINGS, setting: "senteval"})
    _, earlier = claim(out, overwrite=False, models=["a"],
                       settings={**EVAL_SETTINGS, setting: str(tmp_path / "senteval")})
    assert [r.unfinished_tasks for r in earlier] == [["MR"]]  # the same evaluation: finished by this one
    _results(out, ["a"], unfinished=["MR"], settings={**EVAL_SETTINGS, setting: str(tmp_path / "senteval")})
    monkeypatch.chdir(tmp_path / "work")
    _, earlier = claim(out, overwrite=False, models=["a"], settings={**EVAL_SETTINGS, setting: "../senteval"})
    assert [r.unfinished_tasks for r in earlier] == [["MR"]]
    _results(out, ["a"], unfinished=["MR"], settings={**EVAL_SETTINGS, setting: str(tmp_path / "senteval")})
    with pytest.raises(InputError, match=f"other settings \\({setting}: "):  # another folder is another evaluation
        claim(out, overwrite=False, models=["a"], settings={**EVAL_SETTINGS, setting: "senteval"})
    assert (out / "results.json").is_file()


def test_a_model_folder_given_relative_then_and_absolute_now_is_the_same_evaluation(tmp_path, monkeypatch):
    """The partial results of ``--model_name_or_path m`` were refused as another evaluation's when the same command
    named the folder by its absolute path (or from another folder): the folder is recorded resolved with the results
    (``settings["model_folder"]``); its weights are compared where it is now. A relative name recorded without its
    folder meant a folder of the place it was given from: another folder of that name is not the same model."""
    claim = releases_folder_locks(prepare_eval_output_dir)
    model, out = tmp_path / "m", tmp_path / "ev"
    model.mkdir()
    out.mkdir()
    (model / "model.safetensors").write_bytes(b"the weights scored")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path)
    scored = {"model_weights": weights_fingerprint(model), "model_folder": str(model)}

    def stopped(recorded, settings=scored):
        entries = [{"model": recorded, "unfinished_tasks": ["MR"], "settings": {"command": EVAL_SETTINGS, **settings}}]
        (out / "results.json").write_text(json.dumps(entries[0]))
        (out / "results.md").write_text("| task |")

    for recorded, where, given in [("m", tmp_path, str(model)), (str(model), tmp_path / "work", "../m")]:
        stopped(recorded)
        monkeypatch.chdir(where)
        refuse_other_results(str(out), [given])  # the command's early check lets it through
        _, earlier = claim(out, overwrite=False, models=[given], settings=EVAL_SETTINGS)
        assert [r.unfinished_tasks for r in earlier] == [["MR"]], where
    (tmp_path / "work" / "m").mkdir()  # another folder named m, the stopped one's recorded without its folder
    stopped("m", {"model_weights": scored["model_weights"]})
    with pytest.raises(InputError, match="already holds the results of an evaluation"):
        refuse_other_results(str(out), [str(tmp_path / "work" / "m")])
    stopped(str(model))
    (tmp_path / "other").mkdir()
    with pytest.raises(InputError, match="already holds the results of an evaluation"):  # another folder
        refuse_other_results(str(out), [str(tmp_path / "other")])
    (model / "model.safetensors").write_bytes(b"retrained in place")
    with pytest.raises(InputError, match="the model at ../m changed since"):
        claim(out, overwrite=False, models=["../m"], settings=EVAL_SETTINGS)


@pytest.mark.parametrize("settings, changed", [
    ({"tasks": ["STSBenchmark"], "mode": "test", "pooler": "avg"}, "mode: 'fast' then, 'test' now; pooler: None then, "
                                                                   "'avg' now; and 1 more"),  # tasks, not cut
    ({**EVAL_SETTINGS, "max_seq_length": 32}, "max_seq_length: None then, 32 now"),
])
def test_partial_results_of_the_same_models_with_other_settings_are_refused_and_kept(tmp_path, settings, changed):
    """Only the models matched: another command into the same folder deleted the finished tasks' results."""
    claim = releases_folder_locks(prepare_eval_output_dir)
    _results(tmp_path, ["a"], unfinished=["MR"])
    with pytest.raises(InputError) as err:
        claim(tmp_path, overwrite=False, models=["a"], settings=settings)
    message = str(err.value)
    assert "\n" not in message
    assert f"holds the partial results of an evaluation with other settings ({changed})" in message
    assert "rerun that command to finish it, pass --overwrite_output_dir to start over" in message
    assert (tmp_path / "results.json").is_file() and (tmp_path / "results.md").is_file()


def test_partial_results_without_recorded_settings_are_refused(tmp_path):
    claim = releases_folder_locks(prepare_eval_output_dir)
    _results(tmp_path, ["a"], unfinished=["MR"], settings=None)
    with pytest.raises(InputError, match=r"other settings \(its settings were not recorded\).*--overwrite_output_dir"):
        claim(tmp_path, overwrite=False, models=["a"], settings=EVAL_SETTINGS)
    assert (tmp_path / "results.json").is_file()


def test_partial_results_are_kept_only_for_the_weights_they_were_scored_on(tmp_path):
    """A model folder's weights recorded with its partial results (settings.model_weights) must be the ones it holds
    now: retrained in place since, its kept scores would be the old model's; a Hub id records none and is kept."""
    claim = releases_folder_locks(prepare_eval_output_dir)
    model, out = tmp_path / "model", tmp_path / "ev"
    model.mkdir()
    out.mkdir()
    (model / "model.safetensors").write_bytes(b"the weights scored")

    def saved(weights):
        entries = [{"model": str(model), "settings": {"command": EVAL_SETTINGS, **weights}},
                   {"model": "org/hub-model", "unfinished_tasks": ["MR"], "settings": {"command": EVAL_SETTINGS}}]
        (out / "results.json").write_text(json.dumps({"models": entries}))
        (out / "results.md").write_text("| task |")

    models = [str(model), "org/hub-model"]
    saved({"model_weights": weights_fingerprint(model)})
    _, earlier = claim(out, overwrite=False, models=models, settings=EVAL_SETTINGS)
    assert [r.model for r in earlier] == models  # the same weights, and a Hub id: kept
    saved({"model_weights": weights_fingerprint(model)})
    (model / "model.safetensors").write_bytes(b"retrained in place")
    with pytest.raises(InputError) as err:
        claim(out, overwrite=False, models=models, settings=EVAL_SETTINGS)
    assert str(err.value) == (f"--output_dir {out} holds the partial results of an evaluation, but the model at "
                              f"{model} changed since the stopped evaluation scored it (its weights are not the ones "
                              "scored then: retrained or replaced): rerun with --overwrite_output_dir to score "
                              "everything anew, or choose another --output_dir.")
    assert (out / "results.json").is_file()
    saved({})  # an hf_cse before the weights were recorded: nothing tells they are the same
    with pytest.raises(InputError, match=f"did not record the weights of the model at {model} .*overwrite_output"):
        claim(out, overwrite=False, models=models, settings=EVAL_SETTINGS)


@pytest.mark.parametrize("finished", [True, False])
def test_an_evaluation_refuses_a_training_runs_folder(tmp_path, finished):
    claim = releases_folder_locks(prepare_eval_output_dir)
    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_RECORD_FILE).write_text("{}")
    if finished:
        (run / "training_info.json").write_text("{}")
        (run / "config.json").write_text("{}")
    with pytest.raises(InputError) as err:
        claim(run, overwrite=False, models=["a"])
    expected = (f"--output_dir {run} is a finished training run's folder (training_info.json): results there would "
                f"mix with the run's files. Choose another folder, e.g. {run / 'eval'}" if finished
                else f"--output_dir {run} holds an unfinished training run")
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)
    with pytest.raises(InputError, match="training run"):  # --overwrite_output_dir does not make it an eval folder
        claim(run, overwrite=True, models=["a"])
    assert sorted(p.name for p in run.iterdir()) == sorted([RUN_RECORD_FILE] + (["training_info.json", "config.json"]
                                                                                 if finished else []))


@pytest.mark.parametrize("files", [("config.json", "model.safetensors"), ("modules.json", "README.md"),
                                   ("model-00001-of-00002.safetensors",)])
def test_an_evaluation_refuses_a_models_folder(tmp_path, files):
    """An encoder's folder or a sentence-transformers export: results there would mix with the model's files (and
    go wherever the folder is pushed or copied), --overwrite_output_dir or not; nothing is written."""
    claim = releases_folder_locks(prepare_eval_output_dir)
    model = tmp_path / "model"
    model.mkdir()
    for name in files:
        (model / name).write_text("{}")
    for overwrite in (False, True):
        with pytest.raises(InputError, match=rf"^--output_dir {model} holds a model \({files[0]}.*\): results there "
                                             r"would mix with its files\. Choose another folder, e\.g\. model-eval"):
            claim(model, overwrite=overwrite, models=["a"])
    assert sorted(p.name for p in model.iterdir()) == sorted(files)


# ------------------------------------------------------------------------------------------------ the export
def test_training_evaluation_and_export_share_one_policy_and_one_error(tmp_path):
    """One place decides: a file, a dangling link and another job's files are refused alike, with one error type
    (an InputError, and the FileExistsError the export has always raised); each job names how to start over."""
    from hf_cse.cli.export import build_parser
    from hf_cse.export.folders import check_export_folder
    from hf_cse.output_folder import OutputFolderError

    claims = {"training": lambda out: prepare_output_dir(out, SETTINGS),
              "evaluation": releases_folder_locks(lambda out: prepare_eval_output_dir(out, False, ["a"])),
              "export": lambda out: check_export_folder(out, overwrite=False)}
    (tmp_path / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "missing")
    for job, claim in claims.items():
        for path, what in ((tmp_path / "f", "exists and is a file"), (tmp_path / "link", "link to .*missing")):
            with pytest.raises(OutputFolderError, match=what) as refused:
                claim(path)
            assert isinstance(refused.value, InputError) and isinstance(refused.value, FileExistsError), job
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    with pytest.raises(OutputFolderError, match="notes.txt.*--overwrite_output_dir"):
        claims["training"](notes)
    with pytest.raises(OutputFolderError, match=r"not empty; pass overwrite=True to replace"):
        claims["export"](notes)
    # with overwrite the export removes nothing before it is written (the swap replaces its own files only)
    assert check_export_folder(notes, overwrite=True) == notes and [p.name for p in notes.iterdir()] == ["notes.txt"]
    # nor does it create the folder: it is written beside it and renamed into place
    check_export_folder(tmp_path / "new" / "st", overwrite=False)
    assert not (tmp_path / "new").exists()
    # the export command takes the other commands' flag too
    assert build_parser().parse_args(["ckpt", "out", "--overwrite_output_dir"]).overwrite
