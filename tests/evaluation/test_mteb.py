"""MTEB through the mteb package: a task definition on local files, run_eval's mteb: tasks and their errors."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from helpers import scored_pairs_file

from hf_cse.checks import InputError
from hf_cse.cli import eval_run
from hf_cse.cli import evaluate as eval_cli
from hf_cse.evaluation import SentenceEncoder, evaluate_sts
from hf_cse.evaluation.mteb_tasks import get_mteb_tasks, require_mteb, run_mteb_tasks
from hf_cse.task_names import split_mteb_tasks

mteb = pytest.importorskip("mteb")


@pytest.mark.slow
def test_mteb_evaluator_on_local_stsb_test_equals_run_evals_stsb_score(minilm_dir, senteval_dir, tmp_path):
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    enc = SentenceEncoder.from_pretrained(str(minilm_dir), device="cpu", show_progress_bar=False)
    task = LocalSTSTask.from_file(senteval_dir / "STS" / "STSBenchmark" / "sts-test.csv", "5", "6", "4",
                                  name="SentEvalSTSB")
    scores, details = run_mteb_tasks(enc, [task], tmp_path / "mteb")
    ours = evaluate_sts(enc, ["STSBenchmark"], str(senteval_dir))["STSBenchmark"]
    # both: cosine Spearman over the 1,379 test pairs (MTEB in float32 via sklearn, hf_cse in float64)
    assert scores["SentEvalSTSB"] == pytest.approx(ours, abs=0.01)
    saved = mteb.TaskResult.from_disk(tmp_path / "mteb" / "SentEvalSTSB.json")  # MTEB's own result file
    assert saved.task_name == "SentEvalSTSB" and saved.get_score() * 100 == pytest.approx(ours, abs=0.01)
    assert details["SentEvalSTSB"]["main_score"] == "cosine_spearman"




@pytest.mark.slow
def test_run_eval_writes_mteb_result_files_and_tables_for_several_models(tiny_bert_dir, tiny_roberta_dir, tmp_path,
                                                                         monkeypatch):
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    path = scored_pairs_file(tmp_path / "pairs.tsv", 15, 4, seed=7)
    seen = []

    def local_tasks(names):  # an offline stand-in for MTEB's Hub data, under the name asked for
        seen.append(names)
        return [LocalSTSTask.from_file(path, name=name) for name in names]

    monkeypatch.setattr(eval_cli, "get_mteb_tasks", local_tasks)
    out = tmp_path / "ev"
    assert eval_cli.main(["--model_name_or_path", f"{tiny_bert_dir},{tiny_roberta_dir}", "--tasks", "mteb:MyPairs",
                          "--output_dir", str(out), "--disable_tqdm", "true", "--device", "cpu"]) == 0
    assert seen == [["MyPairs"]]
    models = json.loads((out / "results.json").read_text())["models"]
    md = (out / "results.md").read_text()
    assert "## MTEB" in md
    assert (out / "task_comparison.png").is_file()  # several models: one bar chart of per-task scores
    for i, result in enumerate(models):
        facts = result["details"]["mteb"]["MyPairs"]  # what names the score (the model card reads it)
        assert {k: facts[k] for k in ("main_score", "task_type", "dataset", "splits", "subsets")} == {
            "main_score": "cosine_spearman", "task_type": "STS", "dataset": "local", "splits": ["test"],
            "subsets": ["default"]}
        file = facts["file"]
        assert file.startswith(str(out / f"model_{i}_")) and file.endswith("mteb/MyPairs.json")
        assert mteb.TaskResult.from_disk(Path(file)).get_score() * 100 == pytest.approx(
            result["mteb"]["MyPairs"], abs=1e-3)  # the file holds scores rounded to 6 decimals
        assert f"{result['mteb']['MyPairs']:.2f}" in md


def test_an_mteb_score_records_its_metric_data_set_and_the_splits_and_subsets_it_averages():
    """results.json's details["mteb"][task] said only the main metric: the card could not name the data set a score
    is of, nor tell a mean over a task's subsets (STS22: languages) from one subset's score."""
    from types import SimpleNamespace

    from hf_cse.evaluation.mteb_tasks import score_facts

    task = mteb.get_task("STS22")
    scored = SimpleNamespace(dataset_revision="abc", scores={"test": [{"hf_subset": "en", "main_score": 0.5},
                                                                      {"hf_subset": "de", "main_score": 0.4}]})
    assert score_facts(task, scored) == {
        "main_score": "cosine_spearman", "task_type": "STS", "dataset": task.metadata.dataset["path"],
        "revision": "abc", "splits": ["test"], "subsets": ["en", "de"]}


def test_split_mteb_tasks():
    assert split_mteb_tasks("sts,mteb:STS22,Banking77Classification") == ("sts", ["STS22", "Banking77Classification"])
    assert split_mteb_tasks("mteb:STS22") == ("", ["STS22"])
    assert split_mteb_tasks("none") == ("", [])
    assert split_mteb_tasks("sts,transfer") == ("sts,transfer", [])
    with pytest.raises(InputError, match="must be followed by an MTEB task name"):
        split_mteb_tasks("sts,mteb:")
    for nothing in ("", " ", ",", " , "):  # an empty shell variable ran as none, without a word
        with pytest.raises(InputError, match=r"names no task \(an empty variable\?\): name the tasks"):
            split_mteb_tasks(nothing)
    for beside in ("STSBenchmark,none", "none,mteb:STS22"):  # none was dropped without a word
        with pytest.raises(InputError, match=r"none means no task, beside other tasks; leave none out"):
            split_mteb_tasks(beside)


def test_unknown_mteb_task_names_the_fix():
    with pytest.raises(InputError, match=r"unknown MTEB task 'Bankng77Classification' .*Banking77Classification"):
        get_mteb_tasks(["Bankng77Classification"])


def test_mteb_data_offline_is_one_line(tmp_path, capsys):
    from huggingface_hub import constants

    # the tests run with HF_HUB_OFFLINE=1
    if (Path(constants.HF_HUB_CACHE) / "datasets--mteb--stsbenchmark-sts").exists():
        pytest.skip("MTEB's STSBenchmark data are in the local Hub cache")
    assert eval_cli.main(["--tasks", "mteb:STSBenchmark", "--output_dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "MTEB task STSBenchmark" in err and "HF_HUB_OFFLINE" in err


def test_mteb_not_installed_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "mteb", None)  # import mteb -> ImportError
    with pytest.raises(InputError, match=r"pip install 'hf_cse\[mteb\]'"):
        require_mteb()


@pytest.mark.slow
def test_mteb_results_dir_is_what_mtebs_own_loader_reads_back(tiny_bert_dir, tmp_path, monkeypatch, capsys):
    """--mteb_results_dir: mteb's ResultCache layout (model_meta.json, per-task files, the --truncate_dims results as
    mteb experiments), loaded back by mteb's own ResultCache.load_results; a second run into it is refused."""
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 15, 4, seed=7)
    # a local stand-in for MTEB's STSBenchmark (offline), under MTEB's own task name so mteb's loader knows the task
    monkeypatch.setattr(eval_cli, "get_mteb_tasks", lambda names: [LocalSTSTask.from_file(pairs, name=n)
                                                                   for n in names])
    cache = tmp_path / "mteb-results"
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--tasks", "mteb:STSBenchmark", "--mteb_results_dir",
            str(cache), "--mteb_model_name", "me/tiny-bert", "--mteb_model_revision", "r1", "--truncate_dims", "8",
            "--output_dir", str(tmp_path / "ev"), "--disable_tqdm", "true", "--device", "cpu"]
    assert eval_cli.main(argv) == 0
    folder = cache / "results" / "me__tiny-bert" / "r1"
    meta = json.loads((folder / "model_meta.json").read_text())
    assert meta["name"] == "me/tiny-bert" and meta["revision"] == "r1" and meta["embed_dim"] == 32
    assert (folder / "STSBenchmark.json").is_file()
    ours = json.loads((tmp_path / "ev" / "results.json").read_text())
    load = mteb.ResultCache(cache).load_results
    [model_result] = load(models=["me/tiny-bert"], include_remote=False, require_model_meta=True,
                          load_experiments="no_experiments").model_results
    assert model_result.model_name == "me/tiny-bert" and model_result.model_revision == "r1"
    [task_result] = model_result.task_results
    assert task_result.task_name == "STSBenchmark"
    assert task_result.get_score() * 100 == pytest.approx(ours["mteb"]["STSBenchmark"], abs=1e-3)
    [cut] = load(models=["me/tiny-bert"], include_remote=False, require_model_meta=True,
                 load_experiments="match_kwargs", experiment_kwargs={"truncate_dim": 8}).model_results
    assert cut.experiment_name == "truncate_dim_8" and cut.model_meta.embed_dim == 8
    assert cut.task_results[0].get_score() * 100 == pytest.approx(ours["dimensions"]["8"]["mteb"]["STSBenchmark"],
                                                                  abs=1e-3)

    argv[argv.index(str(tmp_path / "ev"))] = str(tmp_path / "ev2")
    assert eval_cli.main(argv) == 1  # the same model's results are there: refused before any work
    assert "--mteb_results_dir already holds MTEB results under this model's name, me/tiny-bert" in \
        capsys.readouterr().err


def test_two_models_saved_under_one_mteb_name_are_refused_up_front(tiny_bert_dir, tmp_path, capsys):
    """Two runs' checkpoint-500 are both local/checkpoint-500 in MTEB's results: the second replaced the first's
    results in --mteb_results_dir without a word."""
    runs = [tmp_path / run / "checkpoint-500" for run in ("run1", "run2")]
    for run in runs:
        shutil.copytree(tiny_bert_dir, run)
    argv = ["--model_name_or_path", ",".join(map(str, runs)), "--tasks", "mteb:STS22", "--mteb_results_dir",
            str(tmp_path / "mteb")]
    assert eval_cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "would both be saved as local/checkpoint-500 (revision local) in --mteb_results_dir" in err
    assert "each with its own --mteb_model_name" in err and not (tmp_path / "mteb").exists()


def test_mteb_results_dir_without_mteb_tasks_is_refused(capsys):
    assert eval_cli.main(["--tasks", "sts", "--mteb_results_dir", "x"]) == 1
    assert "names no MTEB task" in capsys.readouterr().err


def test_a_local_task_on_a_missing_file_is_refused_when_it_is_built(tmp_path):
    """It failed only when MTEB ran the task, naming run_eval's eval_file setting."""
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    with pytest.raises(InputError, match=f"^LocalSTSTask.from_file: {tmp_path / 'nosuch.csv'}: no such file.$"):
        LocalSTSTask.from_file(tmp_path / "nosuch.csv")


@pytest.mark.parametrize("flag, value, problem", [
    ("--mteb_model_revision", "../me__m/r1", "must be one folder name"),  # was another model's results replaced
    ("--mteb_model_revision", "../../escape", "must be one folder name"),  # was written outside --mteb_results_dir
    ("--mteb_model_revision", "a\\b", "must be one folder name"),
    ("--mteb_model_revision", "", "it is empty"),  # was the task files straight in results/<model>/
    ("--mteb_model_name", "noslash", "must be org/name"),
    ("--mteb_model_name", "a/b/c", "must be org/name"),
    ("--mteb_model_name", "org/", "must be org/name"),
    ("--mteb_model_name", "me/..", "may hold only letters"),
    ("--mteb_model_name", "me/my model", "may hold only letters"),
])
def test_an_mteb_name_or_revision_that_is_no_folder_of_the_results_is_refused_in_one_line(flag, value, problem,
                                                                                          tmp_path, capsys):
    """They were used as folders of --mteb_results_dir unchecked: another model's results overwritten, files written
    outside it; now refused before any model or task data loads (STS22's data are not cached offline)."""
    argv = ["--tasks", "mteb:STS22", "--mteb_results_dir", str(tmp_path / "mteb"), "--output_dir", str(tmp_path / "ev"),
            "--mteb_model_name", "me/m", "--mteb_model_revision", "r1"]
    argv[argv.index(flag) + 1] = value
    assert eval_cli.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{flag} {value!r}: " in err and problem in err
    assert not (tmp_path / "mteb").exists() and not (tmp_path / "ev").exists()


def test_mteb_names_as_mteb_and_the_hub_take_them_and_the_derived_local_name_passes(tmp_path):
    from hf_cse.evaluation.mteb_tasks import (
        model_meta_fields,
        mteb_model_name,
        mteb_name_problem,
        mteb_revision_problem,
    )

    for name in ("sentence-transformers/all-MiniLM-L6-v2", "me/tiny_bert.v2", "local/checkpoint-500"):
        assert mteb_name_problem(name) is None
    for revision in ("local", "r1", "0123abcd", "v1.0"):
        assert mteb_revision_problem(revision) is None
    folder = tmp_path / "my run (1)--best.."
    folder.mkdir()
    assert mteb_model_name(str(folder)) == "local/my-run-1-best"
    assert mteb_name_problem(mteb_model_name(str(folder))) is None
    assert mteb_model_name(str(tmp_path / "checkpoint-500")) == "local/checkpoint-500"  # as before
    assert mteb_model_name("bert-base-uncased") == "local/bert-base-uncased"
    with pytest.raises(InputError, match=r"^MTEB model revision '\.\./x': it must be one folder name") as err:
        model_meta_fields("me/m", "../x")  # the library's own check names no command-line flag
    assert "--" not in str(err.value)


@pytest.mark.slow
def test_overwriting_mteb_results_removes_the_earlier_runs_experiments_of_those_tasks(tiny_bert_dir, tmp_path,
                                                                                        monkeypatch, capsys, caplog):
    """A second run under the same name and revision with --overwrite_output_dir replaced STSBenchmark.json but
    kept the first run's truncate_dim_16/8 files, which mteb's loader read back as the same model's."""
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 15, 4, seed=7)
    monkeypatch.setattr(eval_cli, "get_mteb_tasks", lambda names: [LocalSTSTask.from_file(pairs, name=n)
                                                                   for n in names])
    cache = tmp_path / "mteb-results"
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--tasks", "mteb:STSBenchmark", "--mteb_results_dir",
            str(cache), "--mteb_model_name", "me/m", "--mteb_model_revision", "r1", "--output_dir",
            str(tmp_path / "ev"), "--disable_tqdm", "true", "--device", "cpu"]
    assert eval_cli.main([*argv, "--truncate_dims", "16,8"]) == 0
    folder = cache / "results" / "me__m" / "r1"
    experiments = folder / "experiments"
    assert (experiments / "truncate_dim_16" / "STSBenchmark.json").is_file()
    others = [folder / "OtherTask.json", experiments / "truncate_dim_16" / "OtherTask.json",
              cache / "results" / "me__other" / "r1" / "STSBenchmark.json"]  # other tasks' and models' results
    for other in others:
        other.parent.mkdir(parents=True, exist_ok=True)
        other.write_text("{}")

    (folder / "STSBenchmark.json").unlink()  # only the experiments' files are left: still taken
    argv[argv.index(str(tmp_path / "ev"))] = str(tmp_path / "ev2")
    assert eval_cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "already holds MTEB results under this model's name, me/m" in err and "truncate_dim_16" in err

    # a model that fails to load: nothing was written, so nothing earlier is gone (they were removed up front)
    def saved():
        return {p: p.read_bytes() for folder in (cache, tmp_path / "ev") for p in folder.rglob("*") if p.is_file()}

    files = saved()
    no_weights = tmp_path / "no-weights"
    shutil.copytree(tiny_bert_dir, no_weights)
    (no_weights / "model.safetensors").unlink()
    failing = [*argv, "--overwrite_output_dir", "true"]
    failing[failing.index(str(tiny_bert_dir))] = str(no_weights)
    failing[failing.index(str(tmp_path / "ev2"))] = str(tmp_path / "ev")
    assert eval_cli.main(failing) == 1
    assert "cannot load model" in capsys.readouterr().err
    assert saved() == files
    assert f"the earlier results in {tmp_path / 'ev'} and the earlier MTEB results under {cache} are kept" in \
        caplog.text
    caplog.clear()

    assert eval_cli.main([*argv, "--overwrite_output_dir", "true"]) == 0
    [said] = [r.getMessage() for r in caplog.records if "earlier MTEB result" in r.getMessage()]  # one line
    assert said.startswith("--overwrite_output_dir: removed 2 earlier MTEB result file(s) of me/m (revision r1) for "
                           f"STSBenchmark from {cache}")
    assert (folder / "STSBenchmark.json").is_file() and all(other.is_file() for other in others)
    assert not (experiments / "truncate_dim_8").exists()  # nothing of it left
    assert not (experiments / "truncate_dim_16" / "STSBenchmark.json").exists()
    load = mteb.ResultCache(cache).load_results
    for dim in (16, 8):  # mteb reads back no STSBenchmark result of the earlier run's experiments
        found = load(models=["me/m"], tasks=["STSBenchmark"], include_remote=False, require_model_meta=True,
                     load_experiments="match_kwargs", experiment_kwargs={"truncate_dim": dim}).model_results
        assert not [r for r in found if r.task_results]


@pytest.mark.slow
def test_a_stop_in_the_mteb_tasks_keeps_the_earlier_results_and_mteb_results_byte_for_byte(tiny_bert_dir, tmp_path,
                                                                                            monkeypatch, capsys):
    """With --mteb_results_dir, --overwrite_output_dir removed the earlier results before mteb ran, as mteb saved each
    task's result there when it finished: a stop or failure in the first task left neither the output folder's results
    nor the model's MTEB results, and the stop line said "nothing was written"."""
    from hf_cse.evaluation.mteb_staging import STAGING_PREFIX
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 15, 4, seed=7)
    monkeypatch.setattr(eval_cli, "get_mteb_tasks", lambda names: [LocalSTSTask.from_file(pairs, name=n)
                                                                   for n in names])
    cache, ev = tmp_path / "mteb-results", tmp_path / "ev"
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--tasks", "mteb:STSBenchmark", "--mteb_results_dir",
            str(cache), "--mteb_model_name", "me/m", "--mteb_model_revision", "r1", "--truncate_dims", "8",
            "--output_dir", str(ev), "--disable_tqdm", "true", "--device", "cpu"]
    assert eval_cli.main(argv) == 0
    other = cache / "results" / "me__other" / "r1" / "STSBenchmark.json"  # another model's result
    other.parent.mkdir(parents=True)
    other.write_text("{}")

    def saved():
        return {p: p.read_bytes() for folder in (cache, ev) for p in folder.rglob("*") if p.is_file()}

    files = saved()
    evaluate = mteb.evaluate

    def stopped_after_the_tasks(*args, **kwargs):  # mteb has saved every task's new result: a stop then
        evaluate(*args, **kwargs)
        raise KeyboardInterrupt

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mteb, "evaluate", stopped_after_the_tasks)
    assert eval_cli.main([*argv, "--overwrite_output_dir", "true"]) == 130
    err = capsys.readouterr().err
    assert saved() == files  # neither removed nor mixed with the new run's
    assert (f"interrupted (Ctrl-C); no new result was written yet: the earlier results in {ev} and the earlier MTEB "
            f"results under {cache} are kept.") in err

    monkeypatch.setattr(mteb, "evaluate", evaluate)
    with monkeypatch.context() as patch:  # a stop once the earlier results went, before the first record
        patch.setattr(eval_run, "write_report", stopped)
        assert eval_cli.main([*argv, "--overwrite_output_dir", "true"]) == 130
    assert (f"interrupted (Ctrl-C); the earlier results were removed (--overwrite_output_dir) just before the first "
            f"new one was written; {ev} holds no record of the new evaluation yet.") in capsys.readouterr().err

    assert eval_cli.main([*argv, "--overwrite_output_dir", "true"]) == 0
    now = saved()
    assert set(now) == set(files) and not list(cache.glob(f"{STAGING_PREFIX}*"))  # the same files, nothing staged
    assert now[other] == files[other]
    folder = cache / "results" / "me__m" / "r1"
    for mine, theirs in ((ev / "mteb" / "STSBenchmark.json", folder / "STSBenchmark.json"),
                         (ev / "mteb" / "dim_8" / "STSBenchmark.json",
                          folder / "experiments" / "truncate_dim_8" / "STSBenchmark.json")):
        assert now[mine] == now[theirs] != files[theirs]  # the new evaluation's results, in both places
    for settings in (folder / "run_settings.jsonl", folder / "experiments" / "truncate_dim_8" / "run_settings.jsonl"):
        rows = [json.loads(line) for line in settings.read_text().splitlines()]
        assert [row["task"] for row in rows] == ["STSBenchmark"]  # merged as mteb merges: one row, not two
