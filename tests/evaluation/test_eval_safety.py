"""run_eval.py never throws finished work away: inputs are checked before any encoding, results are saved as each
task finishes (atomically), a bad second model is found up front, and another evaluation's results are not
overwritten without --overwrite_output_dir."""

from __future__ import annotations

import json
import shutil

import pytest
from eval_helpers import write_toy_senteval
from helpers import cut_short_run, fast_classifier

from hf_cse.cli import evaluate as eval_cli
from hf_cse.evaluation import transfer

# every test reads the evaluation data afresh (hf_cse.evaluation.data caches what it reads)
pytestmark = pytest.mark.usefixtures("fresh_evaluation_data_cache")


@pytest.fixture(scope="module")
def senteval(tmp_path_factory):
    return write_toy_senteval(tmp_path_factory.mktemp("run_eval_safety") / "senteval")


@pytest.fixture
def no_model_loading(monkeypatch):
    """Fail the test if run_eval gets as far as loading a model."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded although the inputs were bad")

    monkeypatch.setattr(eval_cli.SentenceEncoder, "from_pretrained", refuse)


def run(capsys, *args):
    """eval_cli.main in-process: (exit code, stderr); transfer tasks with SentEval's fast classifier."""
    capsys.readouterr()
    code = eval_cli.main(["--disable_tqdm", "--batch_size", "16", *fast_classifier(args), *map(str, args)])
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("hf-cse-eval: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_missing_task_file_is_refused_before_any_encoding(tiny_bert_dir, senteval, tmp_path, capsys,
                                                          no_model_loading):
    partial = tmp_path / "senteval"
    shutil.copytree(senteval, partial)
    (partial / "MRPC" / "msr_paraphrase_train.txt").unlink()
    out = tmp_path / "out"
    code, err = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", partial,
                    "--tasks", "sts,MR,CR,MRPC", "--output_dir", out)
    assert code == 1
    assert "msr_paraphrase_train.txt" in one_line(err)
    assert not (out / "results.json").exists()


def test_task_too_small_for_its_folds_is_refused_before_any_encoding(tiny_bert_dir, senteval, tmp_path, capsys,
                                                                    no_model_loading):
    """A toy MR of 4 lines per class: one line naming the file, the sizes and the folds (was scikit-learn's
    StratifiedKFold traceback, after the model was loaded and the earlier tasks were encoded)."""
    small = tmp_path / "senteval"
    shutil.copytree(senteval, small)
    for name in ("rt-polarity.pos", "rt-polarity.neg"):
        path = small / "MR" / name
        path.write_text("\n".join(path.read_text(encoding="latin-1").splitlines()[:4]) + "\n", encoding="latin-1")
    out = tmp_path / "out"
    code, err = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", small,
                    "--tasks", "transfer", "--output_dir", out)
    line = one_line(err)
    assert code == 1 and "MR: 4 rows in the smallest class, of /" in line and "/MR/rt-polarity." in line
    assert "8 in all; --mode 'fast' (5-fold, a 5-fold inside each training part) needs 7 of each class" in line
    assert "SentEval's own MR files" in line and not (out / "results.json").exists()


def test_malformed_task_file_is_refused_before_any_encoding(tiny_bert_dir, senteval, tmp_path, capsys,
                                                            no_model_loading):
    bad = tmp_path / "senteval"
    shutil.copytree(senteval, bad)
    sick = bad / "SICK" / "SICK_test_annotated.txt"
    lines = sick.read_text().split("\n")
    lines[5] += "\textra"
    sick.write_text("\n".join(lines))
    code, err = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", bad,
                    "--tasks", "MR,SICKR", "--output_dir", tmp_path / "out")
    # the line fits 300 characters: a long path keeps its root and its last names
    assert code == 1 and "/senteval/SICK/SICK_test_annotated.txt, line 6: expected 5 tab-separated" in one_line(err)


def test_bad_second_model_is_refused_before_the_first_is_evaluated(tiny_bert_dir, senteval, tmp_path, capsys,
                                                                   no_model_loading):
    missing = tmp_path / "not-a-model"
    code, err = run(capsys, "--model_name_or_path", f"{tiny_bert_dir},{missing}", "--senteval_data_dir", senteval,
                    "--tasks", "STSB", "--output_dir", tmp_path / "out")
    assert code == 1 and f"{missing}: no such folder" in one_line(err)


def test_a_training_run_folder_before_its_model_is_saved_names_its_last_checkpoint(tiny_bert_dir, senteval, tmp_path,
                                                                                    capsys, no_model_loading):
    """A run still training (or stopped) holds checkpoints and no model: the line says which folder to give."""
    run_dir = tmp_path / "run"
    for step, complete in ((2, True), (4, True), (6, False)):  # checkpoint-6: its save was cut short
        shutil.copytree(tiny_bert_dir, run_dir / f"checkpoint-{step}")
        if complete:
            (run_dir / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    code, err = run(capsys, "--model_name_or_path", run_dir, "--senteval_data_dir", senteval, "--tasks", "STSB",
                    "--output_dir", tmp_path / "out")
    line = one_line(err)  # (the line shortens long paths: /tmp/.../run/checkpoint-4)
    assert code == 1 and "holds no saved model yet, only its checkpoints: give one of them, e.g. " in line
    assert "/run/checkpoint-4 (the last complete one)" in line


@pytest.mark.parametrize("device", ["foo", "cuda:99"])
def test_unusable_device_is_refused_up_front(device, tiny_bert_dir, senteval, tmp_path, capsys, no_model_loading):
    code, err = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval,
                    "--tasks", "STSB", "--device", device, "--output_dir", tmp_path / "out")
    assert code == 1 and f"--device {device}" in one_line(err).replace("'", "")


def test_output_path_that_is_a_file_is_refused_up_front(tiny_bert_dir, senteval, tmp_path, capsys,
                                                        no_model_loading):
    target = tmp_path / "results"
    target.write_text("mine")
    code, err = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval,
                    "--tasks", "STSB", "--output_dir", target)
    assert code == 1 and "is a file" in one_line(err)
    assert target.read_text() == "mine"


@pytest.mark.parametrize("failure", [RuntimeError("classifier crashed"), KeyboardInterrupt()],
                         ids=["error", "interrupt"])
def test_finished_tasks_are_saved_when_a_later_task_fails(failure, tiny_bert_dir, senteval, tmp_path, capsys,
                                                          monkeypatch):
    real = transfer.run_transfer_task

    def crash_on_cr(encode, task, *args, **kwargs):
        if task == "CR":
            raise failure
        return real(encode, task, *args, **kwargs)

    monkeypatch.setattr(transfer, "run_transfer_task", crash_on_cr)
    out = tmp_path / "out"
    args = ("--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval, "--tasks", "STSB,MR,CR,TREC",
            "--output_dir", out)
    if isinstance(failure, KeyboardInterrupt):  # Ctrl-C: one line and exit code 130, no traceback
        code, err = run(capsys, *args)
        assert code == 130 and "Traceback" not in err
        assert [line for line in err.splitlines() if line.startswith("hf-cse-eval:")] == [
            f"hf-cse-eval: interrupted (Ctrl-C); the finished tasks are kept in {out / 'results.json'}; the same "
            "command evaluates the rest."]
    else:  # not a refusal (a CSEError) but a bug: its traceback is shown, and what was saved is kept
        with pytest.raises(RuntimeError, match="classifier crashed"):
            run(capsys, *args)
    saved = json.loads((out / "results.json").read_text())
    assert isinstance(saved["STSBenchmark"], float) and isinstance(saved["MR"], float)
    assert "CR" not in saved and "transfer_avg" not in saved
    assert saved["unfinished_tasks"] == ["CR", "TREC"]
    assert set(saved["details"]["transfer"]) == {"MR"}
    md = (out / "results.md").read_text()
    assert "not finished" in md and "CR, TREC" in md
    assert not list(out.glob(".*partial*"))  # every write was completed by its rename
    assert saved["settings"]["command"]["tasks"] == ["STSBenchmark", "MR", "CR", "TREC"]
    # another command into the same folder, with the same model: not "the same evaluation", so nothing is deleted
    code, err = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval, "--tasks",
                    "STSB,MR", "--pooler", "avg", "--output_dir", out)
    assert code == 1 and "holds the partial results of an evaluation with other settings (pooler: None then, 'avg' " \
                         "now; tasks: " in one_line(err)
    assert json.loads((out / "results.json").read_text()) == saved


@pytest.mark.slow
def test_results_are_rewritten_after_every_task(tiny_bert_dir, senteval, tmp_path, capsys, monkeypatch):
    """What results.json holds each time a task finishes: the finished tasks, and the rest listed as unfinished."""
    out = tmp_path / "out"
    seen = []
    real = transfer.run_transfer_task

    def record_then_run(encode, task, *args, **kwargs):
        saved = json.loads((out / "results.json").read_text())
        seen.append((task, sorted(k for k in ("STSBenchmark", "MR", "CR") if k in saved), saved["unfinished_tasks"]))
        return real(encode, task, *args, **kwargs)

    monkeypatch.setattr(transfer, "run_transfer_task", record_then_run)
    code, _ = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval,
                  "--tasks", "STSB,MR,CR", "--output_dir", out)
    assert code == 0
    assert seen == [("MR", ["STSBenchmark"], ["MR", "CR"]), ("CR", ["MR", "STSBenchmark"], ["CR"])]
    final = json.loads((out / "results.json").read_text())
    assert "unfinished_tasks" not in final and isinstance(final["transfer_avg"], float)


@pytest.mark.slow
def test_first_model_is_kept_when_the_second_fails_to_load(tiny_bert_dir, senteval, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_bert_dir, broken)
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')  # found only when loading
    out = tmp_path / "out"
    code, err = run(capsys, "--model_name_or_path", f"{tiny_bert_dir},{broken}", "--senteval_data_dir", senteval,
                    "--tasks", "STSB", "--output_dir", out)
    assert code == 1 and "Traceback" not in err and "cannot load model" in one_line(err)
    saved = json.loads((out / "results.json").read_text())
    assert [m["model"] for m in saved["models"]] == [str(tiny_bert_dir)]
    assert isinstance(saved["models"][0]["STSBenchmark"], float)


def test_a_cut_short_weights_file_is_refused_before_any_encoding(tiny_bert_dir, senteval, tmp_path, capsys,
                                                                 no_model_loading):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_bert_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    code, err = run(capsys, "--model_name_or_path", f"{tiny_bert_dir},{broken}", "--senteval_data_dir", senteval,
                    "--tasks", "STSB", "--output_dir", tmp_path / "out")
    assert code == 1 and "model.safetensors is cut short" in one_line(err)
    assert not (tmp_path / "out" / "results.json").exists()



@pytest.mark.parametrize(("field", "value", "weight", "shapes"), [
    ("hidden_size", 48, "embeddings.word_embeddings.weight", "vocab_size {vocab} and hidden_size 48"),
    ("max_position_embeddings", 8, "embeddings.position_embeddings.weight",
     "max_position_embeddings 8 and hidden_size"),
])
def test_a_config_that_does_not_fit_the_weights_is_one_line_before_loading(tiny_bert_dir, senteval, tmp_path, capsys,
                                                                          no_model_loading, field, value, weight,
                                                                          shapes):
    """transformers printed a table of every weight ("MISMATCH ... Reinit due to size mismatch"), then failed with
    'look at the above report!'."""
    edited = tmp_path / "edited"
    shutil.copytree(tiny_bert_dir, edited)
    config = json.loads((edited / "config.json").read_text())
    vocab = config["vocab_size"]
    (edited / "config.json").write_text(json.dumps({**config, field: value}))
    code, err = run(capsys, "--model_name_or_path", str(edited), "--senteval_data_dir", senteval, "--tasks", "STSB",
                    "--output_dir", tmp_path / "out")
    assert code == 1 and (f"--model_name_or_path {edited}: its weights do not fit its config.json: {weight} is "
                          in one_line(err)) and shapes.format(vocab=vocab) in err
    assert not (tmp_path / "out").exists()

@pytest.mark.parametrize("name", ["config.json", "modules.json"])
def test_a_broken_json_file_of_the_model_is_refused_before_any_encoding(tiny_bert_dir, senteval, tmp_path, capsys,
                                                                       no_model_loading, name):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_bert_dir, broken)
    (broken / name).write_text('{"model_type": "be')
    code, err = run(capsys, "--model_name_or_path", f"{tiny_bert_dir},{broken}", "--senteval_data_dir", senteval,
                    "--tasks", "STSB", "--output_dir", tmp_path / "out")
    assert code == 1 and f"--model_name_or_path {broken}: {name} is not valid JSON" in one_line(err)
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.slow
def test_earlier_results_are_kept_without_the_flag_and_until_new_ones_are_written(tiny_bert_dir, senteval, tmp_path,
                                                                                  capsys, monkeypatch, caplog):
    """Not overwritten without --overwrite_output_dir, nor lost with it before the new evaluation writes its first
    result: --overwrite_output_dir removed them as the folder was claimed, so a model that then failed to load, or a
    stop in the first task, left no results at all."""
    out = tmp_path / "out"
    out.mkdir()
    earlier = {"model": "someone-else", "avg": 12.5}
    (out / "results.json").write_text(json.dumps(earlier))
    (out / "results.md").write_text("| someone-else |")
    (out / "stsb_cosine_buckets_1.png").write_bytes(b"old plot of a second model")
    (out / "notes.txt").write_text("the user's own file")
    saved = {p.name: p.read_bytes() for p in out.iterdir()}
    args = ("--senteval_data_dir", senteval, "--tasks", "STSB", "--output_dir", out, "--model_name_or_path")
    code, err = run(capsys, *args, tiny_bert_dir)
    assert code == 1 and "--overwrite_output_dir" in one_line(err)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == saved

    kept = f"the earlier results in {out} are kept"
    no_weights = _no_weights(tiny_bert_dir, tmp_path / "no-weights")  # passes the checks, fails to load
    code, err = run(capsys, "--overwrite_output_dir", *args, no_weights)
    assert code == 1 and "cannot load model" in one_line(err)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == saved
    assert f"stopped before any new result was written; {kept}" in caplog.text  # a log line
    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:  # Ctrl-C in the first task, before it is saved
        patch.setattr(eval_cli.ModelsEvaluation, "save_partial", stop)
        code, err = run(capsys, "--overwrite_output_dir", *args, tiny_bert_dir)
    assert code == 130 and f"interrupted (Ctrl-C); no new result was written yet: {kept}." in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == saved

    code, _ = run(capsys, "--overwrite_output_dir", *args, tiny_bert_dir)
    assert code == 0
    assert json.loads((out / "results.json").read_text())["model"] == str(tiny_bert_dir)
    assert "someone-else" not in (out / "results.json").read_text() + (out / "results.md").read_text()
    assert not (out / "stsb_cosine_buckets_1.png").exists()  # the earlier run's files do not mix with the new ones
    assert (out / "stsb_cosine_buckets.png").is_file()
    assert (out / "notes.txt").read_text() == "the user's own file"


@pytest.mark.slow
def test_an_unrelated_folder_is_a_valid_output(tiny_bert_dir, senteval, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")
    code, _ = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval, "--tasks", "STSB",
                  "--output_dir", out)
    assert code == 0 and (out / "results.json").is_file() and (out / "notes.txt").is_file()


@pytest.mark.parametrize("length, message", [
    ("0", "--max_seq_length must be at least 2 (the tokenizer's own special tokens take up to 2 positions; 0 and 1 "
          "would turn truncation off), got 0. Leave it out to score whole sentences (up to the model's limit)"),
    ("1", "--max_seq_length must be at least 2"),
    ("100000", "--max_seq_length 100000 exceeds what the encoder"),
])
def test_sequence_length_outside_the_model_limit_is_refused_before_loading(length, message, tiny_bert_dir, senteval,
                                                                           tmp_path, capsys, no_model_loading):
    code, err = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval,
                    "--tasks", "STSB", "--max_seq_length", length, "--output_dir", tmp_path / "out")
    assert code == 1 and message in one_line(err)
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize("length, message", [("2", ": --max_seq_length 2 leaves no token for the sentences: the "
                                                   "tokenizer adds 2 special token(s). Leave --max_seq_length out to "
                                                   "score whole sentences (up to the model's limit), or give more "
                                                   "than 2.")])
def test_sequence_length_outside_the_model_limit_is_refused(length, message, tiny_bert_dir, senteval, tmp_path,
                                                            capsys):
    code, err = run(capsys, "--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval,
                    "--tasks", "STSB", "--max_seq_length", length, "--output_dir", tmp_path / "out")
    assert code == 1 and message in one_line(err)
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_run_whose_final_save_was_cut_short_is_named_so_not_as_missing_its_tokenizer(senteval, tmp_path, capsys,
                                                                                        no_model_loading):
    last = cut_short_run(tmp_path / "run")
    code, err = run(capsys, "--model_name_or_path", tmp_path / "run", "--senteval_data_dir", senteval, "--tasks",
                    "STSB", "--output_dir", tmp_path / "out")
    line = one_line(err).removesuffix(" (HF_CSE_DEBUG=1 shows the traceback)")
    assert code == 1 and "holds a training run without its final model" in line and "tokenizer" not in line
    assert line.endswith(f"rerun its training command to finish it, or evaluate {last} (the last complete one).")


def test_a_model_folder_without_its_tokenizer_files_is_refused_before_loading(tiny_bert_dir, senteval, tmp_path,
                                                                              capsys, no_model_loading):
    """A copy without tokenizer*: transformers would score it with a stand-in tokenizer (STS-B 5 instead of 35)."""
    half = tmp_path / "half"
    shutil.copytree(tiny_bert_dir, half)
    for file in half.glob("tokenizer*"):
        file.unlink()
    code, err = run(capsys, "--model_name_or_path", half, "--senteval_data_dir", senteval, "--tasks", "STSB",
                    "--output_dir", tmp_path / "out")
    line = one_line(err)  # (long paths are shortened in it)
    line = line.removesuffix(" (HF_CSE_DEBUG=1 shows the traceback)")  # the hint, where the line has room
    assert code == 1 and line.startswith("hf-cse-eval: error: --model_name_or_path /") and line.endswith(
        "half holds no tokenizer files (tokenizer_config.json or tokenizer.json): it would be scored with a stand-in "
        "tokenizer. Save the model's tokenizer into it (tokenizer.save_pretrained), or give a complete model folder.")


def test_an_undefined_score_is_not_passed_silently(caplog):
    from hf_cse.evaluation import EvalResults

    with caplog.at_level("WARNING", logger="run_eval"):
        eval_cli.warn_undefined_scores("m", EvalResults(model="m", sts={"STSBenchmark": float("nan"), "SICKR": 70.0}))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("m: the score of STS-B is undefined (NaN: every pair got the same "
                                                   "cosine")


@pytest.mark.parametrize("layout", ["transformers", "sentence-transformers"])
def test_a_hub_models_length_limit_is_checked_from_its_config_before_loading(layout, monkeypatch):
    """A Hub id: its config.json (a sentence-transformers model's: the Transformer module's) is read alone, so a
    --max_seq_length beyond its position embeddings is refused before the weights are downloaded (run_eval calls
    this check before loading; the Hub is stood in for by the files below)."""
    from hf_cse.checks import InputError
    from hf_cse.cli import eval_checks

    sub = "0_Transformer/" if layout == "sentence-transformers" else ""
    hub = {f"{sub}config.json": {"model_type": "bert", "max_position_embeddings": 128}}
    if sub:
        hub["modules.json"] = [{"idx": 0, "name": "0", "path": "0_Transformer",
                                "type": "sentence_transformers.models.Transformer"}]
    read = []
    monkeypatch.setattr(eval_checks, "read_model_json",
                        lambda name, filename, revision=None: read.append((name, filename)) or hub.get(filename))
    with pytest.raises(InputError, match="--max_seq_length 512 exceeds what the encoder"):
        eval_checks.check_model_folder("someorg/some-model", 512)
    assert ("someorg/some-model", f"{sub}config.json") in read
    eval_checks.check_model_folder("someorg/some-model", 128)  # within the limit
    eval_checks.check_model_folder("someorg/some-model", None)  # the model's own limit: nothing to check
    # offline, or no such file: nothing read, left to loading
    monkeypatch.setattr(eval_checks, "read_model_json", lambda name, filename, revision=None: None)
    eval_checks.check_model_folder("someorg/some-model", 100_000)


def _no_weights(tiny_bert_dir, folder):
    shutil.copytree(tiny_bert_dir, folder)
    (folder / "model.safetensors").unlink()  # config.json and the tokenizer: the folder passes for a model's
    return folder


@pytest.mark.parametrize("problem", ["no weights", "dimensions"])
def test_a_refusal_before_anything_is_written_leaves_no_folder_it_made(problem, tiny_bert_dir, senteval, tmp_path,
                                                                       capsys, monkeypatch):
    """Refused once the model is loaded (a folder without its weights, --truncate_dims beyond a width its files do
    not give): the output folder, made when it was claimed, was left behind empty. A folder that was there before
    stays."""
    from hf_cse.cli import eval_checks

    monkeypatch.setattr(eval_checks, "embedding_width", lambda *args, **kwargs: None)  # as for a Hub model
    model, more = (_no_weights(tiny_bert_dir, tmp_path / "model"), []) if problem == "no weights" else \
        (tiny_bert_dir, ["--truncate_dims", "64"])
    expected = "cannot load model" if problem == "no weights" else "--truncate_dims [64]: "
    args = ("--model_name_or_path", model, "--senteval_data_dir", senteval, "--tasks", "STSB", *more)
    code, err = run(capsys, *args, "--output_dir", tmp_path / "new" / "eval")
    assert code == 1 and expected in one_line(err)
    assert not (tmp_path / "new").exists()  # nor its lock file beside it
    (tmp_path / "mine").mkdir()
    code, err = run(capsys, *args, "--output_dir", tmp_path / "mine" / "eval")
    assert code == 1 and expected in one_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["mine", *(["model"] if problem == "no weights"
                                                                           else [])])
    assert not any((tmp_path / "mine").iterdir())
    (tmp_path / "mine" / "eval").mkdir()  # given as it is, empty: kept
    assert run(capsys, *args, "--output_dir", tmp_path / "mine" / "eval")[0] == 1
    assert (tmp_path / "mine" / "eval").is_dir()


def test_a_model_that_fails_to_load_when_finishing_an_evaluation_keeps_its_saved_results(tiny_bert_dir, senteval,
                                                                                          tmp_path, capsys,
                                                                                          monkeypatch):
    """The same command, run again to finish a stopped evaluation, once the model's weights are gone: refused, and
    the results saved so far are all still there (they were deleted as it started, before the model was loaded)."""
    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    real = transfer.run_transfer_task

    def stop_at_cr(encode, task, *args, **kwargs):
        if task == "CR":
            raise KeyboardInterrupt
        return real(encode, task, *args, **kwargs)

    out = tmp_path / "out"
    args = ("--model_name_or_path", model, "--senteval_data_dir", senteval, "--tasks", "STSB,MR,CR", "--output_dir",
            out)
    with monkeypatch.context() as patch:
        patch.setattr(transfer, "run_transfer_task", stop_at_cr)
        assert run(capsys, *args)[0] == 130
    saved = {p.name: p.read_bytes() for p in out.iterdir()}
    assert json.loads(saved["results.json"])["unfinished_tasks"] == ["CR"]
    (model / "model.safetensors").unlink()
    code, err = run(capsys, *args)
    assert code == 1 and "cannot load model" in one_line(err)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == saved


@pytest.mark.slow
def test_a_sentence_transformers_folder_without_its_encoder_is_one_line_before_loading(tiny_bert_dir, senteval,
                                                                                        tmp_path, capsys,
                                                                                        no_model_loading):
    """Its config.json and weights deleted, it failed once loaded with transformers' "Unrecognized model ... Should
    have a `model_type` key in its config.json" (a file that is not there): now named before any model is loaded."""
    from sentence_transformers import SentenceTransformer

    st = tmp_path / "st"
    SentenceTransformer(str(tiny_bert_dir), device="cpu").save(str(st))
    (st / "config.json").unlink()
    args = ("--model_name_or_path", st, "--senteval_data_dir", senteval, "--tasks", "STSB", "--output_dir",
            tmp_path / "out")
    code, err = run(capsys, *args)
    assert code == 1 and (
        f"error: --model_name_or_path {st} is a sentence-transformers model (modules.json) without its encoder: the "
        "folder holds no config.json. Save the model into it again (model.save), or give a complete model folder."
    ) in one_line(err)
    (st / "model.safetensors").unlink()
    code, err = run(capsys, *args)
    assert code == 1 and "the folder holds no config.json and no weights (model.safetensors or pytorch_model.bin)" \
        in one_line(err)
    modules = json.loads((st / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (st / "modules.json").write_text(json.dumps(modules))
    code, err = run(capsys, *args)
    assert code == 1 and "the folder of its Transformer module, 0_Transformer, is not there" in one_line(err)
    assert not (tmp_path / "out").exists()
