"""An export is never written where a training run would delete it or stop on it: inside one of a run's
checkpoint-N folders (the run's checkpoint rotation, save_total_limit, deletes the checkpoint with the export) or
inside an unfinished run's folder (the same training command would then refuse to resume the run). Refused in one
line, before the model is loaded; a finished run's folder (outside its checkpoints) and the run's own export as it
finishes are not."""

from __future__ import annotations

import re

import pytest
from test_export_refusals import cli_error
from transformers import AutoTokenizer

from hf_cse.export import ExportError, to_sentence_transformer
from hf_cse.export import sentence_transformers as export_module
from hf_cse.folder_lock import folder_held
from hf_cse.models import SimCSEModel
from hf_cse.output_folder import OutputFolderError
from hf_cse.run_files import RUN_RECORD_FILE, TRAINING_INFO_FILE


@pytest.fixture
def run(tiny_bert_dir, tmp_path):
    """An unfinished run's folder: its record and a checkpoint (an hf_cse model with its tokenizer)."""
    folder = tmp_path / "run"
    ckpt = folder / "checkpoint-20"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(ckpt)
    (folder / RUN_RECORD_FILE).write_text("{}")
    return folder, ckpt


@pytest.fixture
def no_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded although the folder is refused")

    monkeypatch.setattr(export_module, "load_model", refuse)


def cli_line(capsys, *argv) -> str:
    capsys.readouterr()  # what the Python calls before printed
    return cli_error(capsys, *argv)


def test_an_export_inside_a_checkpoint_of_a_run_is_refused(run, capsys, no_loading):
    folder, ckpt = run
    for finished in (False, True):
        if finished:
            (folder / TRAINING_INFO_FILE).write_text("{}")
        for out in (ckpt / "myexport", ckpt / "sub" / "myexport"):
            with pytest.raises(OutputFolderError, match=r"out_dir .* lies inside checkpoint-20, a checkpoint of the "
                                                        r"training run .*save_total_limit.*Choose a folder outside"):
                to_sentence_transformer(str(ckpt), out)
            assert not out.exists()
    err = cli_line(capsys, ckpt, ckpt / "myexport")
    assert "lies inside checkpoint-20" in err and "Choose a folder outside the run." in err
    assert not (ckpt / "myexport").exists() and not (ckpt / "sub").exists()


def test_an_export_inside_an_unfinished_runs_folder_is_refused(run, capsys, no_loading):
    folder, ckpt = run
    out = folder / "exp120"
    with pytest.raises(OutputFolderError, match=r"out_dir .*exp120 lies inside the folder of an unfinished training "
                                                r"run .*resuming it. Choose a folder outside the run."):
        to_sentence_transformer(str(ckpt), out)
    err = cli_line(capsys, ckpt, out)
    assert "unfinished training run" in err and "Choose a folder outside the run." in err
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint-20", RUN_RECORD_FILE]


@pytest.mark.slow  # two exports (~0.7 s)
def test_a_finished_run_and_the_runs_own_export_may_hold_an_export(run):
    folder, ckpt = run
    with folder_held(folder, owner="trainer"):  # the run exporting its model as it finishes (export_after_training)
        assert (to_sentence_transformer(str(ckpt), folder / "sentence-transformers") / "modules.json").is_file()
    (folder / TRAINING_INFO_FILE).write_text("{}")
    assert (to_sentence_transformer(str(ckpt), folder / "exp20") / "modules.json").is_file()


@pytest.mark.slow  # one export (~0.4 s) after the refusals
def test_the_folder_offered_for_a_runs_checkpoint_lies_outside_the_run_and_is_taken(run, tmp_path, capsys):
    """``export RUN/checkpoint-20 RUN/checkpoint-20`` offered ``<checkpoint>/sentence-transformers``, which is refused
    in turn (it lies inside checkpoint-20, which the run's rotation deletes); the folder offered now, beside the run,
    is taken, unfinished run or finished."""
    folder, ckpt = run
    offered = tmp_path / "run-checkpoint-20"
    with pytest.raises(ExportError, match=f"Choose another folder, e.g. {re.escape(str(offered))}\\.$"):
        to_sentence_transformer(str(ckpt), ckpt)
    assert cli_line(capsys, ckpt, ckpt).endswith(f"Choose another folder, e.g. {offered}. (HF_CSE_DEBUG=1 shows the "
                                                 "traceback)")
    assert (to_sentence_transformer(str(ckpt), offered) / "modules.json").is_file()
    (folder / TRAINING_INFO_FILE).write_text("{}")  # finished: its checkpoints' rotation is over, the offer the same
    with pytest.raises(ExportError, match=f"e.g. {re.escape(str(offered))}\\.$"):
        to_sentence_transformer(str(ckpt), folder)
    assert (to_sentence_transformer(str(ckpt), offered, overwrite=True) / "modules.json").is_file()
