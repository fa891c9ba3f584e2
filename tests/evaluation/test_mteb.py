"""MTEB through the mteb package: a task definition on local files, run_eval's mteb: tasks and their errors."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from helpers import scored_pairs_file

from hf_cse.checks import InputError
from hf_cse.cli import evaluate as eval_cli
from hf_cse.evaluation import SentenceEncoder, evaluate_sts
from hf_cse.evaluation.mteb_tasks import get_mteb_tasks, require_mteb, run_mteb_tasks, split_mteb_tasks

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
