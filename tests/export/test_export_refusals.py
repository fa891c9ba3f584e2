"""What an export refuses before it writes anything, in one line naming the problem and the fix: a folder holding the
encoder it was trained from or another model (even with overwrite), a truncation length the encoder cannot take,
evaluation results recorded for another model, a training_info.json of another run."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from eval_helpers import write_toy_senteval
from helpers import cut_short_run, fake_checkpoint
from transformers import AutoTokenizer

from hf_cse.export import ExportError, to_sentence_transformer
from hf_cse.models import SimCSEModel
from hf_cse.output_folder import OutputFolderError


@pytest.fixture
def run(tiny_bert_dir, tmp_path):
    """A checkpoint trained from an encoder folder of its own (tmp_path/models/encoder), with its tokenizer."""
    encoder = tmp_path / "models" / "encoder"
    shutil.copytree(tiny_bert_dir, encoder)
    ckpt = tmp_path / "ckpt"
    SimCSEModel.from_encoder(str(encoder)).save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(str(encoder)).save_pretrained(ckpt)
    return ckpt, encoder


def listing(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def cli_error(capsys, *argv) -> str:
    from hf_cse.cli.export import main

    assert main([str(a) for a in argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("hf-cse-export: error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_a_run_whose_final_save_was_cut_short_is_refused_naming_its_last_complete_checkpoint(tmp_path, capsys):
    """Its config.json and Trainer state, no weights and no training_info.json: one line saying so (was transformers'
    traceback ending in "no file named model.safetensors"), naming the two ways on."""
    last = cut_short_run(tmp_path / "run")
    line = cli_error(capsys, tmp_path / "run", tmp_path / "st").removesuffix(" (HF_CSE_DEBUG=1 shows the traceback)")
    assert "holds a training run without its final model" in line and not (tmp_path / "st").exists()
    assert line.endswith(f"rerun its training command to finish it, or export {last} (the last complete one).")
    with pytest.raises(ExportError, match=f"or export {re.escape(last)} \\(the last complete one\\)\\.$"):
        to_sentence_transformer(str(tmp_path / "run"), tmp_path / "st")


def test_a_checkpoint_without_its_weight_file_is_refused_before_loading_naming_the_last_complete_one(tmp_path,
                                                                                                      capsys):
    """A checkpoint whose model.safetensors is gone (its config.json and Trainer state there): one line naming the last
    complete checkpoint, for the export and the evaluation alike (the export was transformers' 51-line traceback
    ending in "OSError: Error no file named model.safetensors", the evaluation that OSError in its line)."""
    from hf_cse.checks import InputError
    from hf_cse.cli.eval_checks import check_model_folder

    config = '{"model_type": "hf_cse_simcse", "method": "simcse"}'
    for step in (2, 4):
        (fake_checkpoint(tmp_path / "run" / f"checkpoint-{step}") / "config.json").write_text(config)
    broken = tmp_path / "run" / "checkpoint-4"
    (broken / "model.safetensors").unlink()
    why = f"{broken} has no weight file (model.safetensors or pytorch_model.bin; its save was cut short, or it was " \
          "removed): "
    line = cli_error(capsys, broken, tmp_path / "st").removesuffix(" (HF_CSE_DEBUG=1 shows the traceback)")
    assert line.endswith(f"{why}export another checkpoint, e.g. {broken.parent / 'checkpoint-2'} (the last complete "
                         "one).") and not (tmp_path / "st").exists()
    with pytest.raises(ExportError, match=re.escape(why)):
        to_sentence_transformer(str(broken), tmp_path / "st")
    with pytest.raises(InputError, match=re.escape(f"--model_name_or_path {why}evaluate another checkpoint")):
        check_model_folder(str(broken), None)


# --------------------------------------------------------------------------------------------- A4: model folders
def test_the_encoders_folder_is_refused_even_with_overwrite(run, tmp_path, capsys):
    ckpt, encoder = run
    before = listing(encoder)
    for out in (encoder, encoder / "sub", encoder.parent):  # is, lies inside, holds the encoder's folder
        with pytest.raises(ExportError, match="folder of the encoder .* this model was trained from"):
            to_sentence_transformer(str(ckpt), out, overwrite=True)
    err = cli_error(capsys, ckpt, encoder, "--overwrite")
    assert "is, holds or lies inside the folder of the encoder" in err and "even with --overwrite" in err
    assert listing(encoder) == before and not (encoder / "sub").exists()


def test_a_folder_holding_another_model_is_refused_even_with_overwrite(run, tmp_path, capsys):
    ckpt, encoder = run
    other = tmp_path / "other_model"
    shutil.copytree(encoder, other)
    before = listing(other)
    with pytest.raises(OutputFolderError, match="holds a model or tokenizer that is not an hf_cse export"):
        to_sentence_transformer(str(ckpt), other, overwrite=True)
    err = cli_error(capsys, ckpt, other, "--overwrite")
    assert "not an hf_cse export (config.json" in err and "even with --overwrite. Choose another folder" in err
    assert listing(other) == before
    # an earlier export is the one model an export replaces (its notes kept)
    out = to_sentence_transformer(str(ckpt), tmp_path / "st")
    (out / "notes.txt").write_text("mine")
    (out / "model_v1_backup.safetensors").write_text("mine too")  # named like a weight file, but not the export's
    to_sentence_transformer(str(ckpt), out, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine" and (out / "modules.json").is_file()
    assert (out / "model_v1_backup.safetensors").read_text() == "mine too"


@pytest.mark.parametrize("config, problem", [('{"model_type": "hf_cse_sim', "config.json is not valid JSON"),
                                             ("[1, 2]", "config.json holds a list, not an object")])
def test_a_broken_config_json_is_one_line_before_anything_is_written(run, tmp_path, capsys, config, problem):
    ckpt, _ = run
    (ckpt / "config.json").write_text(config)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=re.escape(f"{ckpt}: {problem}") + ".*save or copy the model again"):
        to_sentence_transformer(str(ckpt), out)
    assert f"CHECKPOINT {ckpt}: {problem}" in cli_error(capsys, ckpt, out)
    assert not out.exists()


def test_a_runs_folder_holds_the_export_of_that_runs_model_only(run, tmp_path, capsys):
    """``export OTHER <run>/sentence-transformers --overwrite`` replaced a finished run's export with another model's,
    which the run folder then served (its modules.json points there) while its own files described its model."""
    ckpt, _ = run
    finished = tmp_path / "finished_run"
    shutil.copytree(ckpt, finished)
    (finished / "training_info.json").write_text("{}")
    out = finished / "sentence-transformers"
    other = tmp_path / "other_ckpt"
    shutil.copytree(ckpt, other)
    for overwrite in (False, True):
        with pytest.raises(ExportError, match=re.escape(f"out_dir {out} lies inside the training run {finished}, "
                                                        f"and {other} is not that run's model")):
            to_sentence_transformer(str(other), out, overwrite=overwrite)
    assert "is not that run's model" in cli_error(capsys, other, out, "--overwrite")
    assert not out.exists()
    with pytest.raises(ExportError, match=r"and the loaded model \(.*other_ckpt\) is not that run's model"):
        to_sentence_transformer(SimCSEModel.from_pretrained(other), out)
    to_sentence_transformer(str(finished), out)  # the run's own model, as a folder or loaded from it
    to_sentence_transformer(SimCSEModel.from_pretrained(finished), out, overwrite=True)
    assert (out / "modules.json").is_file()


# --------------------------------------------------------------------------------------------- B4: max_seq_length
@pytest.mark.parametrize("length,message", [
    (1, "max_seq_length must be at least 2 (the tokenizer's own special tokens take up to 2 positions; 0 and 1 "
        "would turn truncation off), got 1."),
    (0, "max_seq_length must be at least 2 "),
    (65, "max_seq_length 65 exceeds what the encoder {encoder} takes (64 positions); use max_seq_length 64 or less."),
])
def test_a_length_outside_2_to_the_position_limit_is_refused_before_loading(run, tmp_path, capsys, monkeypatch,
                                                                            length, message):
    import hf_cse.export.sentence_transformers as export

    ckpt, encoder = run
    message = message.format(encoder=encoder)
    monkeypatch.setattr(export, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    err = cli_error(capsys, ckpt, tmp_path / "st", "--max_seq_length", length)
    assert message.replace("max_seq_length", "--max_seq_length") in err
    with pytest.raises(ExportError) as refusal:
        to_sentence_transformer(str(ckpt), tmp_path / "st", max_seq_length=length)
    assert message in str(refusal.value) and "--" not in str(refusal.value)
    assert not (tmp_path / "st").exists()


def test_a_loaded_model_is_held_to_the_same_length_rule(run, tmp_path):
    ckpt, _ = run
    model = SimCSEModel.from_pretrained(str(ckpt))
    with pytest.raises(ExportError, match="max_seq_length must be at least 2"):
        to_sentence_transformer(model, tmp_path / "st", tokenizer=str(ckpt), max_seq_length=1)
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(ckpt), max_seq_length=3)
    assert "longer than 3 tokens are truncated" in (out / "README.md").read_text()


@pytest.mark.parametrize("prompt,length", [(None, 2), ("the city: ", 5)])
def test_a_length_leaving_no_token_of_the_text_is_refused(run, tmp_path, capsys, prompt, length):
    """The training rule (hf_cse.tokenizer_match.check_room_for_text): [CLS] [SEP] (and the prompt's tokens) fill the
    length, so every sentence would get the same embedding; the export shipped such a model."""
    ckpt, _ = run
    model = SimCSEModel.from_pretrained(str(ckpt))
    model.config.prompt = prompt
    with pytest.raises(ValueError, match=rf"max_seq_length {length} leaves no token for the sentences: ") as refusal:
        to_sentence_transformer(model, tmp_path / "st", tokenizer=str(ckpt), max_seq_length=length)
    assert ("the model's prompt takes 3 tokens and" in str(refusal.value)) == bool(prompt)
    assert "shorter prompt" not in str(refusal.value)  # the prompt is the trained model's: only the length is a fix
    assert not (tmp_path / "st").exists()
    if prompt is None:
        err = cli_error(capsys, ckpt, tmp_path / "st", "--max_seq_length", length)
        assert "--max_seq_length 2 leaves no token for the sentences: the tokenizer adds 2 special token(s)" in err


# --------------------------------------------------------------------------------------------- B5: eval_results
def test_results_recorded_for_another_model_are_refused(run, tmp_path, capsys, monkeypatch):
    ckpt, _ = run
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "other_run"
    shutil.copytree(ckpt, other)
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"model": "other_run", "STSBenchmark": 35.4, "avg": 35.4}))
    err = cli_error(capsys, "ckpt", "st", "--eval_results", results)
    assert f"--eval_results {results} holds the results of other_run, not of the exported model ckpt" in err
    assert "leave --eval_results out" in err and not (tmp_path / "st").exists()
    with pytest.raises(ExportError, match="holds the results of other_run, not of the exported model"):
        to_sentence_transformer(str(ckpt), tmp_path / "st", eval_results=results)
    # the run's own results (a path written another way) and those of the export's folder are taken
    for model in (str(ckpt), "./ckpt/", "st"):
        results.write_text(json.dumps({"model": model, "STSBenchmark": 35.4, "avg": 35.4}))
        out = to_sentence_transformer("ckpt", "st", eval_results=results, overwrite=True)
        assert "35.4" in (out / "README.md").read_text()


def test_results_of_another_export_recording_no_weights_are_refused_before_loading(run, tmp_path, capsys,
                                                                                   monkeypatch):
    """Results of an export folder (an export of the checkpoint, as far as anything tells) are taken where the weights
    they record are the export's; an older run_eval.py's, recording none, are refused in one line before loading."""
    import hf_cse.export.sentence_transformers as export

    ckpt, _ = run
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(export, "load_model", lambda *a: pytest.fail("the model was loaded"))
    (tmp_path / "ckpt-st").mkdir()
    for name in ("modules.json", "hf_cse_config.json"):  # what marks an hf_cse export
        (tmp_path / "ckpt-st" / name).write_text("{}")
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"model": "ckpt-st", "STSBenchmark": 35.4}))
    err = cli_error(capsys, "ckpt", "st", "--eval_results", results)
    assert (f"--eval_results {results} holds the results of the export ckpt-st, and they record no weights (an older "
            "run_eval.py's), so nothing tells they are the exported model's: evaluate it again with run_eval.py, or "
            "leave --eval_results out.") in err
    with pytest.raises(ExportError, match="holds the results of the export ckpt-st, and they record no weights"):
        to_sentence_transformer("ckpt", "st", eval_results=results)
    assert not (tmp_path / "st").exists()


@pytest.mark.slow
def test_results_of_weights_retrained_since_are_refused(run, tmp_path, capsys, monkeypatch):
    """results.json records the weights run_eval scored (settings' model_weights): after a retraining into the same
    folder (--overwrite_output_dir) its results name that folder still, and the export refuses them in one line
    before writing anything; the same weights' results, and an older results.json recording none, are taken."""
    import torch

    from hf_cse.evaluation import data as D
    from hf_cse.evaluation import evaluate, write_report
    from hf_cse.evaluation.encoder import SentenceEncoder

    ckpt, _ = run
    monkeypatch.chdir(tmp_path)
    D.clear_cache()
    write_toy_senteval(tmp_path / "se")

    def run_eval(model: str) -> Path:
        encoder = SentenceEncoder.from_pretrained(model, batch_size=16, show_progress_bar=False)
        record, _ = evaluate(encoder, "STSB", "se", mode="fast")
        return write_report([record], tmp_path / f"{model}-eval", plots=False)["results.json"]

    results = run_eval("ckpt")
    recorded = json.loads(results.read_text())
    assert recorded["model"] == "ckpt" and list(recorded["settings"]["model_weights"]) == ["model.safetensors"]
    score = f"{recorded['STSBenchmark']:.2f}"
    out = to_sentence_transformer("ckpt", "st", eval_results=results)  # the weights it scored: taken
    assert score in (out / "README.md").read_text()
    export_results = run_eval("st")  # the export's own results, of its weights

    retrained = SimCSEModel.from_pretrained(str(ckpt))
    with torch.no_grad():
        next(retrained.parameters()).add_(0.5)
    retrained.save_pretrained(ckpt)  # the same folder, other weights
    capsys.readouterr()  # the progress bars so far
    err = cli_error(capsys, "ckpt", "st2", "--eval_results", results)
    assert (f"--eval_results {results} were measured on other weights of ckpt than it holds now (it was retrained "
            "or replaced since): evaluate it again with run_eval.py, or leave --eval_results out.") in err
    with pytest.raises(ExportError, match="were measured on other weights of ckpt than it holds now"):
        to_sentence_transformer(str(ckpt), "st2", eval_results=results)
    with pytest.raises(ExportError, match="other weights of ./ckpt/ than it holds now"):  # the folder, resolved
        to_sentence_transformer("ckpt", "st2", eval_results={**recorded, "model": "./ckpt/"})
    assert not (tmp_path / "st2").exists()

    to_sentence_transformer("ckpt", "st", overwrite=True)  # out_dir's export replaced by the retrained model's
    before = listing(out)
    capsys.readouterr()
    err = cli_error(capsys, "ckpt", "st", "--overwrite", "--eval_results", export_results)
    assert "were measured on other weights of st than it holds now" in err
    with pytest.raises(ExportError, match="other weights of st than it holds now"):
        to_sentence_transformer("ckpt", "st", overwrite=True, eval_results=export_results)
    assert listing(out) == before

    del recorded["settings"]["model_weights"]  # an older run_eval's results.json: taken as before
    out = to_sentence_transformer("ckpt", "st2", eval_results=recorded)
    assert score in (out / "README.md").read_text()


def test_results_of_another_embedding_are_refused_before_loading(run, tmp_path, capsys, monkeypatch):
    """hf-cse-export reads the exported embedding's pooler from config.json (--keep_projector: cls) and refuses results
    of run_eval.py --pooler <another> before the model is loaded."""
    import hf_cse.export.sentence_transformers as export

    ckpt, _ = run
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(export, "load_model", lambda *a: pytest.fail("the model was loaded"))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"model": "ckpt", "STSBenchmark": 35.4, "avg": 35.4, "settings": {"pooler": "avg"}}))
    err = cli_error(capsys, "ckpt", "st", "--eval_results", "results.json")
    assert ("--eval_results results.json holds scores of run_eval.py's pooler 'avg'; the card would show them for the "
            "export's 'cls_before_pooler' embedding. Give results of run_eval.py with pooler 'cls_before_pooler', or "
            "leave --eval_results out.") in err
    results.write_text(json.dumps({"model": "ckpt", "STSBenchmark": 35.4, "settings": {"pooler": "cls_before_pooler"}}))
    err = cli_error(capsys, "ckpt", "st", "--keep_projector", "--eval_results", results)
    assert "the export's 'cls' embedding" in err
    assert not (tmp_path / "st").exists()


def test_results_of_a_sentence_transformers_models_own_modules_are_taken():
    """run_eval.py records a sentence-transformers folder's own pooling as what its modules do (it recorded "model"):
    results of that embedding are taken, as they were; those of another pooler of hf_cse's are still refused."""
    from hf_cse.evaluation import EvalResults
    from hf_cse.export.sources import check_results_pooler

    for own in ("model", "avg (sentence-transformers Pooling, Normalize)", "cls_before_pooler (sentence-transformers "
                "Pooling)"):
        check_results_pooler(EvalResults(model="st", settings={"pooler": own}), "cls_before_pooler")
    with pytest.raises(ExportError, match="pooler 'avg'"):
        check_results_pooler(EvalResults(model="st", settings={"pooler": "avg"}), "cls_before_pooler")


# --------------------------------------------------------------------------------------------- training_info
def test_the_training_info_of_another_run_is_refused_before_loading(run, tmp_path, capsys, monkeypatch):
    """--training_info of another run (its training_args.output_dir is another folder) would put that run's data,
    steps and scores on this model's card: refused in one line naming both runs, before the model is loaded."""
    import hf_cse.export.sentence_transformers as export

    ckpt, _ = run
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "other_run"
    other.mkdir()
    info = {"data": {"source": "other.txt", "num_sentences": 999}, "training_args": {"output_dir": "other_run"}}
    (other / "training_info.json").write_text(json.dumps(info))
    monkeypatch.setattr(export, "load_model", lambda *a: pytest.fail("the model was loaded"))
    err = cli_error(capsys, "ckpt", "st", "--training_info", "other_run/training_info.json")
    assert f"--training_info other_run/training_info.json is the record of the run in {other.resolve()}," in err
    assert ("not of the checkpoint ckpt; give the training_info.json its run wrote, or leave --training_info "
            "out.") in err
    assert not (tmp_path / "st").exists()


@pytest.mark.slow  # seven exports
def test_the_training_info_of_the_checkpoints_own_run_is_taken(run, tmp_path, capsys, monkeypatch):
    """The run's own record is taken: from its folder (whatever it records: a run moved after training), for a
    checkpoint-N of the run, and a copy elsewhere recording the run's folder (as written, relative from the folder
    the run started in, or not); a record naming no folder (written by hand) is taken as it is."""
    from hf_cse.cli.export import main

    ckpt, _ = run
    monkeypatch.chdir(tmp_path)
    shutil.copytree(ckpt, ckpt / "checkpoint-2")
    elsewhere = tmp_path / "kept"
    elsewhere.mkdir()

    def card_of(checkpoint, info_file, info) -> str:
        info_file.write_text(json.dumps({"data": {"source": "mine.txt", "num_sentences": 321}, **info}))
        shutil.rmtree(tmp_path / "st", ignore_errors=True)
        assert main([str(checkpoint), "st", "--training_info", str(info_file)]) == 0, capsys.readouterr().err
        return (tmp_path / "st" / "README.md").read_text()

    moved = {"training_args": {"output_dir": "/somewhere/else/ckpt"}}
    for checkpoint in (ckpt, ckpt / "checkpoint-2"):  # the run's own file, wherever the run was trained
        assert "| Training sentences | 321 |" in card_of(checkpoint, ckpt / "training_info.json", moved)
    for recorded in ("ckpt", str(ckpt), "./ckpt/"):
        for checkpoint in (ckpt, ckpt / "checkpoint-2"):
            info = {"training_args": {"output_dir": recorded}}
            assert "| Training sentences | 321 |" in card_of(checkpoint, elsewhere / "info.json", info)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")  # a relative folder recorded where the run started, read from elsewhere:
    info = {"training_args": {"output_dir": "ckpt"}}  # sub/ckpt, not this run's (its path merely ends alike)
    elsewhere_file = elsewhere / "info.json"
    elsewhere_file.write_text(json.dumps({"data": {"source": "mine.txt", "num_sentences": 321}, **info}))
    assert main([str(ckpt), str(tmp_path / "st2"), "--training_info", str(elsewhere_file)]) == 1
    assert re.search(r"is the record of the run in \S*/sub/ckpt, not of the checkpoint", capsys.readouterr().err)
    monkeypatch.chdir(tmp_path)
    assert "| Training sentences | 321 |" in card_of(ckpt, elsewhere / "info.json", {})  # names no folder


def like_named_runs(root, ckpt):
    """Two projects' runs in ``outputs/simcse-infonce`` (each with its model, record and final metrics), and a copy
    of project a's record kept outside it."""
    runs = {}
    for project, runtime in (("proj_a", 12.5), ("proj_b", 13.25)):
        run = root / project / "outputs" / "simcse-infonce"
        shutil.copytree(ckpt, run)
        metrics = {"train_loss": 0.5, "train_runtime": runtime}
        (run / "train_results.json").write_text(json.dumps(metrics))
        info = {"data": {"source": f"{project}.txt"}, "training_args": {"output_dir": "outputs/simcse-infonce"},
                "train_metrics": metrics}
        (run / "training_info.json").write_text(json.dumps(info))
        runs[project] = run
    (root / "kept").mkdir()
    shutil.copy(runs["proj_a"] / "training_info.json", root / "kept" / "proj_a_info.json")
    return runs["proj_a"], runs["proj_b"], root / "kept" / "proj_a_info.json"


def test_the_record_of_a_like_named_run_of_another_project_is_refused(run, tmp_path, capsys, monkeypatch):
    """Two projects both training into outputs/simcse-infonce: the record of one is not the other's, however the
    paths are spelled and wherever the export runs -- its own file (in its run folder), and a copy kept elsewhere
    whose relative folder names the other project's run but whose final metrics are not that run's -- refused
    before the model is loaded."""
    import hf_cse.export.sentence_transformers as export

    theirs, mine, kept = like_named_runs(tmp_path, run[0])
    info = json.loads(kept.read_text())
    monkeypatch.setattr(export, "load_model", lambda *a: pytest.fail("the model was loaded"))
    for cwd, checkpoint in ((mine.parents[1], "outputs/simcse-infonce"), (tmp_path, mine)):
        monkeypatch.chdir(cwd)
        for given in (theirs / "training_info.json", os.path.relpath(theirs / "training_info.json", cwd)):
            err = cli_error(capsys, checkpoint, "st", "--training_info", given)
            assert "is the record of the run in" in err and "not of the checkpoint" in err
            assert err.removesuffix(" (HF_CSE_DEBUG=1 shows the traceback)").endswith(
                "; give the training_info.json its run wrote, or leave --training_info out.")
            from hf_cse.export.training_info import run_record_problem  # the whole line, its paths unshortened

            assert run_record_problem(info, given, checkpoint) == (
                f"is the record of the run in {theirs.resolve()}, not of the checkpoint {checkpoint}")
    monkeypatch.chdir(mine.parents[1])  # the kept copy's outputs/simcse-infonce, read in project b, is b's folder
    err = cli_error(capsys, "outputs/simcse-infonce", "st", "--training_info", kept)
    assert "names the folder of the checkpoint's run" in err and "final training metrics are not those" in err
    assert run_record_problem(info, kept, "outputs/simcse-infonce") == (
        f"names the folder of the checkpoint's run ({mine.resolve()}), but its final training metrics are not those "
        "that run wrote (train_results.json): it is the record of another run in a folder of that name")
    assert not list(tmp_path.rglob("st"))


def test_the_records_of_the_checkpoints_own_run_match_it(run, tmp_path, monkeypatch):
    """What the command takes (run_record_problem None): the run's own file spelled relative or absolute, for the
    run and a checkpoint-N of it; a run folder copied or moved elsewhere as a whole, with its own file; a kept copy
    recording the folder absolute, or relative from the folder the run started in, with the run's final metrics;
    a kept copy of a run that wrote no final metrics (older runs) by its folder alone."""
    from hf_cse.export.training_info import run_record_problem

    theirs, mine, kept = like_named_runs(tmp_path, run[0])
    info_of = lambda path: json.loads(path.read_text())  # noqa: E731
    shutil.copytree(theirs, theirs / "checkpoint-4", ignore=shutil.ignore_patterns("training_info.json"))
    monkeypatch.chdir(theirs.parents[1])
    own = theirs / "training_info.json"
    for checkpoint in ("outputs/simcse-infonce", theirs, "outputs/simcse-infonce/checkpoint-4"):
        for given in (own, "outputs/simcse-infonce/training_info.json", "./outputs/../outputs/simcse-infonce/"
                      "training_info.json"):
            assert run_record_problem(info_of(own), given, checkpoint) is None, (checkpoint, given)
        assert run_record_problem(info_of(kept), kept, checkpoint) is None  # relative, from where the run started
    copied = tmp_path / "archive" / "simcse-infonce-a"
    shutil.copytree(theirs, copied)  # copied (or moved) as a whole: its own record goes with it
    monkeypatch.chdir(tmp_path)
    assert run_record_problem(info_of(own), copied / "training_info.json", copied) is None
    absolute = {**info_of(kept), "training_args": {"output_dir": str(theirs)}}
    assert run_record_problem(absolute, kept, theirs) is None
    assert run_record_problem(absolute, kept, mine) is not None
    (mine / "train_results.json").unlink()  # a run that wrote no final metrics: its folder alone decides
    monkeypatch.chdir(mine.parents[1])
    assert run_record_problem(info_of(kept), kept, "outputs/simcse-infonce") is None
