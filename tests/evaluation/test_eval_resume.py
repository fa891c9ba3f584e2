"""Finishing a stopped evaluation: ``evaluate(..., done=<the saved partial record>)`` and run_eval.py run again into
the folder of a stopped run keep the tasks it finished, do not run them again, and give the record (results.json,
results.md, the plots) one uninterrupted run gives. The same command used to delete the saved results as it started,
and evaluate everything again (a second stop then left an empty folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_helpers import FakeEncoder, write_toy_senteval
from helpers import fast_classifier, scored_pairs_file
from tiny_models import make_tiny_encoder

from hf_cse.cli import eval_run
from hf_cse.cli import evaluate as eval_cli
from hf_cse.evaluation import EvalResults, evaluate, runner, transfer
from hf_cse.writing import json_safe

pytestmark = pytest.mark.usefixtures("fresh_evaluation_data_cache")

#: measured again when a task runs again: not part of the comparison
TIMING_KEYS = ("timing", "encode_seconds", "classifier_seconds")
TASKS = "STSBenchmark,SICKRelatedness,geometry,retrieval,MR,CR"


class Stop(Exception):
    pass


class Fake(FakeEncoder):
    """The same model each time it is made (its record names it alike)."""

    def describe(self) -> dict:
        return {"model": "fake"}


def without_timing(value):
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def as_saved(record: EvalResults) -> EvalResults:
    """``record`` as results.json holds it and the next run reads it back."""
    return EvalResults.from_dict(json.loads(json.dumps(json_safe(record.to_dict()))))


@pytest.fixture(scope="module")
def senteval(tmp_path_factory):
    return write_toy_senteval(tmp_path_factory.mktemp("resume") / "senteval")


@pytest.fixture
def tasks_run(monkeypatch):
    """The tasks each evaluate() call scores (STS, geometry / retrieval, each transfer task)."""
    ran: list[str] = []
    real_sts, real_geometry, real_transfer = runner.evaluate_sts, runner.stsb_embeddings, transfer.run_transfer_task

    def sts(encoder, tasks, *args, **kwargs):
        ran.extend(tasks)
        return real_sts(encoder, tasks, *args, **kwargs)

    def geometry(*args, **kwargs):
        ran.append("geometry+retrieval")
        return real_geometry(*args, **kwargs)

    def one_transfer(encode, task, *args, **kwargs):
        ran.append(task)
        return real_transfer(encode, task, *args, **kwargs)

    monkeypatch.setattr(runner, "evaluate_sts", sts)
    monkeypatch.setattr(runner, "stsb_embeddings", geometry)
    monkeypatch.setattr(transfer, "run_transfer_task", one_transfer)
    return ran


@pytest.mark.parametrize("stop_after", [1, 2, 3], ids=["sts", "geometry", "MR"])
def test_a_run_stopped_after_a_task_is_finished_as_one_run(senteval, tasks_run, stop_after):
    """Stopped after the STS tasks / geometry and retrieval / MR (as the progress callback's save leaves it): the
    second run scores only the rest, and its record is the uninterrupted one's, the averages included."""
    whole, whole_extras = evaluate(Fake(), TASKS, data_dir=senteval, mode="fast")
    saved: list[EvalResults] = []

    def save_then_stop(partial: EvalResults) -> None:
        saved.append(partial)
        if len(saved) == stop_after:
            raise Stop

    with pytest.raises(Stop):
        evaluate(Fake(), TASKS, data_dir=senteval, mode="fast", on_progress=save_then_stop)
    earlier = as_saved(saved[-1])
    assert earlier.unfinished_tasks == [["geometry", "retrieval", "MR", "CR"], ["MR", "CR"], ["CR"]][stop_after - 1]
    tasks_run.clear()
    plot_data = {k: whole_extras[k] for k in ("stsb_cosine", "stsb_gold")}  # what the run kept for the plot
    finished, extras = evaluate(Fake(), TASKS, data_dir=senteval, mode="fast", done=earlier,
                                extras=dict(plot_data))
    assert tasks_run == [["geometry+retrieval", "MR", "CR"], ["MR", "CR"], ["CR"]][stop_after - 1]
    assert without_timing(finished.to_dict()) == without_timing(whole.to_dict())
    assert finished.sts_avg == whole.sts_avg and finished.transfer_avg == whole.transfer_avg  # the same numbers
    assert not finished.unfinished_tasks
    assert extras["stsb_cosine"] is plot_data["stsb_cosine"]  # the kept plot, not encoded again


def test_a_task_marked_unfinished_by_hand_is_scored_again_and_the_averages_follow(senteval, tasks_run):
    """SICK-R listed as unfinished (and its score gone): only it is scored, and the STS average is over both tasks
    again, the number one run gives."""
    whole, _ = evaluate(Fake(), TASKS, data_dir=senteval, mode="fast")
    record = json.loads(json.dumps(json_safe(whole.to_dict())))
    del record["SICKRelatedness"], record["avg"], record["details"]["sts"]["SICKRelatedness"]
    earlier = as_saved(EvalResults.from_dict({**record, "unfinished_tasks": ["SICKRelatedness"]}))
    tasks_run.clear()
    finished, _ = evaluate(Fake(), TASKS, data_dir=senteval, mode="fast", done=earlier)
    assert tasks_run == ["SICKRelatedness"]
    assert without_timing(finished.to_dict()) == without_timing(whole.to_dict())
    assert list(finished.sts) == ["STSBenchmark", "SICKRelatedness"]  # in the tasks' order, as one run has them


def test_a_listed_task_whose_score_is_there_is_still_scored_again(senteval, tasks_run):
    """What unfinished_tasks lists is run, whatever else the record holds (a task interrupted mid-way can have
    left nothing trustworthy); geometry and retrieval, measured together, are run again together."""
    whole, _ = evaluate(Fake(), TASKS, data_dir=senteval, mode="fast")
    earlier = as_saved(EvalResults.from_dict({**whole.to_dict(), "unfinished_tasks": ["retrieval", "CR"]}))
    tasks_run.clear()
    finished, _ = evaluate(Fake(), TASKS, data_dir=senteval, mode="fast", done=earlier)
    assert tasks_run == ["geometry+retrieval", "CR"]
    assert without_timing(finished.to_dict()) == without_timing(whole.to_dict())


# ------------------------------------------------------------------------------------------------ run_eval.py
def run_eval(*args) -> int:
    return eval_cli.main(["--disable_tqdm", "--batch_size", "16", *fast_classifier(args), "--device", "cpu",
                          *map(str, args)])


def folder_files(out: Path) -> dict[str, bytes]:
    """Every file under ``out``, by its path in ``out``."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def same_results(out: Path, reference: Path) -> None:
    """``out`` holds the files ``reference`` holds, the same (results.json and the per-model ones but their timings
    and the folder they name; MTEB's own files, which hold their own timings, by name only)."""
    files, expected = folder_files(out), folder_files(reference)
    assert sorted(files) == sorted(expected)
    for name, content in expected.items():
        content = content.replace(str(reference).encode(), str(out).encode())
        if "mteb/" in name:
            continue
        if name.endswith("results.json"):
            assert without_timing(json.loads(files[name])) == without_timing(json.loads(content)), name
        else:
            assert files[name] == content, name  # results.md, every plot: drawn from the same numbers and arrays


@pytest.fixture
def stop_at(monkeypatch):
    """``stop_at(step, nth)``: the next run_eval is stopped (Ctrl-C) as ``step`` begins for the ``nth`` time: a transfer
    task, "own data", "dimensions"; the models loaded and the steps begun since, in order, in ``stop_at.runs``."""
    runs: list[str] = []
    where: list = []
    real_transfer, real_dims = transfer.run_transfer_task, eval_run.evaluate_dimensions
    real_pairs, real_load = eval_run.PairsEvaluator.__call__, eval_run.load_encoder

    def check(step):
        runs.append(step)
        if where and where[0] == step and runs.count(step) == where[1]:
            where.clear()
            raise KeyboardInterrupt

    def one_transfer(encode, task, *args, **kwargs):
        check(task)
        return real_transfer(encode, task, *args, **kwargs)

    def dims(*args, **kwargs):
        check("dimensions")
        return real_dims(*args, **kwargs)

    def pairs(self, *args, **kwargs):
        check("own data")
        return real_pairs(self, *args, **kwargs)

    def load(name, args):
        runs.append(f"load {Path(name).name.rstrip('0123456789')}")  # tiny_bert (pytest numbers it), second
        return real_load(name, args)

    monkeypatch.setattr(transfer, "run_transfer_task", one_transfer)
    monkeypatch.setattr(eval_run, "evaluate_dimensions", dims)
    monkeypatch.setattr(eval_run.PairsEvaluator, "__call__", pairs)
    monkeypatch.setattr(eval_run, "load_encoder", load)

    def stop(step: str | None, nth: int = 1) -> None:
        where[:] = [step, nth] if step else []
        runs.clear()

    stop.runs, stop.check = runs, check
    return stop


@pytest.mark.slow
@pytest.mark.parametrize("stopped_at, unfinished, run_again", [
    ("CR", ["CR", "TREC"], ["load tiny_bert", "CR", "TREC", "own data", "dimensions"]),
    ("own data", ["own data", "dimensions", "plots"], ["load tiny_bert", "own data", "dimensions"]),
    ("dimensions", ["dimensions", "plots"], ["load tiny_bert", "dimensions"]),
])
def test_run_eval_stopped_then_run_again_is_one_run(stopped_at, unfinished, run_again, tiny_bert_dir, senteval,
                                                    tmp_path, stop_at, caplog):
    """Stopped (Ctrl-C) at a transfer task, at your own pairs, at the scores by dimension: the same command keeps
    what was finished, runs the rest, and leaves the folder one uninterrupted run leaves (results.json but its
    timings, results.md and every plot byte for byte); the plot's kept arrays are gone with the run."""
    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 20, 5, seed=3)
    args = ["--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval, "--tasks",
            "STSB,SICKR,geometry,MR,CR,TREC", "--eval_file", pairs, "--truncate_dims", "16,8"]
    stop_at(None)
    assert run_eval(*args, "--output_dir", tmp_path / "one-run") == 0
    out = tmp_path / "stopped"
    stop_at(stopped_at)
    assert run_eval(*args, "--output_dir", out) == 130
    assert json.loads((out / "results.json").read_text())["unfinished_tasks"] == unfinished
    assert list(out.glob(".stsb_cosine_buckets.npz"))  # the plot's arrays, kept for the next run
    stop_at(None)
    caplog.clear()
    assert run_eval(*args, "--output_dir", out) == 0
    assert "keeping what it finished and evaluating the rest" in caplog.text
    assert stop_at.runs == run_again
    same_results(out, tmp_path / "one-run")
    assert not list(out.glob(".*"))  # neither the arrays nor a partial file left


@pytest.mark.slow
def test_a_second_stop_keeps_what_the_first_run_finished(tiny_bert_dir, senteval, tmp_path, stop_at):
    """Stopped again while it finishes the evaluation: every task either run finished is kept (the first run's saved
    results were deleted as the second began: its stop left an empty folder), and the third run finishes it."""
    args = ["--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval, "--tasks", "STSB,MR,CR,TREC",
            "--output_dir", tmp_path / "out"]
    stop_at("CR")
    assert run_eval(*args) == 130
    first = json.loads((tmp_path / "out" / "results.json").read_text())
    stop_at("TREC")
    assert run_eval(*args) == 130
    assert stop_at.runs == ["load tiny_bert", "CR", "TREC"]  # STS-B and MR not run again
    second = json.loads((tmp_path / "out" / "results.json").read_text())
    assert second["unfinished_tasks"] == ["TREC"]
    assert {k: second[k] for k in ("STSBenchmark", "MR")} == {k: first[k] for k in ("STSBenchmark", "MR")}
    assert second["details"]["transfer"]["MR"] == first["details"]["transfer"]["MR"]
    stop_at(None)
    assert run_eval(*args) == 0
    assert stop_at.runs == ["load tiny_bert", "TREC"]
    final = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "unfinished_tasks" not in final and {k: final[k] for k in ("STSBenchmark", "MR", "CR")} == \
        {k: second[k] for k in ("STSBenchmark", "MR", "CR")}


@pytest.mark.slow
@pytest.mark.parametrize("stopped_at, run_again", [
    (("CR", 1), ["load tiny_bert", "CR", "load second", "MR", "CR"]),  # in the first model
    (("MR", 2), ["load second", "MR", "CR"]),  # in the second model: the first one is not even loaded
])
def test_several_models_stopped_then_run_again_are_one_run(stopped_at, run_again, tiny_bert_dir, senteval, tmp_path,
                                                          stop_at):
    """Two models (results.json of both, a folder each, their plots): each one finished is kept as it is."""
    second = tmp_path / "second"
    make_tiny_encoder(second, seed=1)
    args = ["--model_name_or_path", f"{tiny_bert_dir},{second}", "--senteval_data_dir", senteval, "--tasks",
            "STSB,geometry,MR,CR"]
    stop_at(None)
    assert run_eval(*args, "--output_dir", tmp_path / "one-run") == 0
    out = tmp_path / "stopped"
    stop_at(*stopped_at)
    assert run_eval(*args, "--output_dir", out) == 130
    stop_at(None)
    assert run_eval(*args, "--output_dir", out) == 0
    assert stop_at.runs == run_again
    same_results(out, tmp_path / "one-run")  # the models' own folders too


@pytest.mark.slow
@pytest.mark.parametrize("stopped_at, run_again", [("MTEB", ["load tiny_bert", "MTEB", "dimensions"]),
                                                   ("dimensions", ["load tiny_bert", "dimensions"])])
def test_mteb_tasks_finished_before_the_stop_are_kept(stopped_at, run_again, tiny_bert_dir, senteval, tmp_path,
                                                      stop_at, monkeypatch):
    """The MTEB tasks are saved as they finish, and not run again; their results in --mteb_results_dir, which the
    stopped run wrote itself, do not stop the same command from finishing it."""
    pytest.importorskip("mteb")
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 15, 4, seed=7)
    monkeypatch.setattr(eval_cli, "get_mteb_tasks", lambda names: [LocalSTSTask.from_file(pairs, name=n)
                                                                   for n in names])
    real_mteb = eval_run.run_mteb_tasks

    def mteb(*args, **kwargs):
        stop_at.check("MTEB")
        return real_mteb(*args, **kwargs)

    monkeypatch.setattr(eval_run, "run_mteb_tasks", mteb)
    args = ["--model_name_or_path", tiny_bert_dir, "--senteval_data_dir", senteval, "--tasks",
            "STSBenchmark,mteb:MyPairs", "--truncate_dims", "16"]
    stop_at(None)
    assert run_eval(*args, "--output_dir", tmp_path / "one-run", "--mteb_results_dir", tmp_path / "mteb-1") == 0
    out, again = tmp_path / "stopped", [*args, "--output_dir", tmp_path / "stopped", "--mteb_results_dir",
                                        tmp_path / "mteb-2"]
    stop_at(stopped_at)
    assert run_eval(*again) == 130
    stop_at(None)
    assert run_eval(*again) == 0
    assert stop_at.runs == run_again
    same_results(out, tmp_path / "one-run")


@pytest.mark.slow
def test_a_model_retrained_in_place_since_the_stop_is_not_kept_with_its_old_scores(senteval, tmp_path, stop_at,
                                                                                   capsys):
    """The first model finished, then the run was stopped in the second; the first was retrained into its folder
    before the same command ran again: its kept scores were the old weights', shown as the new model's. Refused in
    one line before anything is loaded, naming the model and the fix; the results stay for the old weights."""
    first, second = make_tiny_encoder(tmp_path / "first", seed=1), make_tiny_encoder(tmp_path / "second", seed=2)
    out = tmp_path / "out"
    args = ["--model_name_or_path", f"{first},{second}", "--senteval_data_dir", senteval, "--tasks", "STSB,MR,CR",
            "--output_dir", out]
    stop_at("MR", 2)
    assert run_eval(*args) == 130
    saved = (out / "results.json").read_text()
    make_tiny_encoder(first, seed=3)  # retrained in place
    capsys.readouterr()
    stop_at(None)
    assert run_eval(*args) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"the model at {first} changed since the stopped evaluation scored it" in err
    assert "rerun with --overwrite_output_dir to score everything anew, or choose another --output_dir" in err
    assert stop_at.runs == [] and (out / "results.json").read_text() == saved  # nothing loaded, nothing lost
    assert run_eval(*args, "--overwrite_output_dir") == 0
    new = json.loads((out / "results.json").read_text())["models"][0]
    old = json.loads(saved)["models"][0]
    assert new["settings"]["model_weights"] != old["settings"]["model_weights"]
    assert new["STSBenchmark"] != old["STSBenchmark"]


@pytest.mark.slow
def test_an_older_record_of_a_sentence_transformers_models_pooling_is_finished(tiny_bert_dir, senteval, tmp_path,
                                                                               stop_at):
    """hf_cse recorded a sentence-transformers model's own pooling as "model"; it now records what its modules do. A
    stopped evaluation saved with the old word is finished by the same command (not refused as other settings), and
    the finished record says the pooling."""
    from sentence_transformers import SentenceTransformer

    SentenceTransformer(str(tiny_bert_dir), device="cpu").save(str(tmp_path / "st"))  # mean pooling
    out = tmp_path / "out"
    args = ["--model_name_or_path", tmp_path / "st", "--senteval_data_dir", senteval, "--tasks", "STSB,MR,CR",
            "--output_dir", out]
    stop_at("CR")
    assert run_eval(*args) == 130
    saved = json.loads((out / "results.json").read_text())
    assert saved["settings"]["pooler"] == "avg (sentence-transformers Pooling)"
    saved["settings"]["pooler"] = "model"  # as an older hf_cse saved it
    (out / "results.json").write_text(json.dumps(saved))
    stop_at(None)
    assert run_eval(*args) == 0
    assert stop_at.runs == ["load st", "CR"]
    assert json.loads((out / "results.json").read_text())["settings"]["pooler"] == "avg (sentence-transformers Pooling)"


@pytest.mark.slow
def test_a_model_stopped_while_its_plots_were_drawn_counts_as_scored(tiny_bert_dir, senteval, tmp_path, stop_at,
                                                                     monkeypatch, caplog):
    """Stopped while the first model's plots were drawn, the same command logged "0 of 2 model(s) finished", then
    that the first model's tasks were all finished and its results kept: the two lines now agree."""
    second = make_tiny_encoder(tmp_path / "second", seed=1)
    args = ["--model_name_or_path", f"{tiny_bert_dir},{second}", "--senteval_data_dir", senteval, "--tasks",
            "STSB,MR", "--output_dir", tmp_path / "out"]
    real_report = eval_run.write_report

    def stop_drawing(*args, **kwargs):
        if kwargs.get("plots", True):
            raise KeyboardInterrupt
        return real_report(*args, **kwargs)

    monkeypatch.setattr(eval_run, "write_report", stop_drawing)
    stop_at(None)
    assert run_eval(*args) == 130
    assert [m.get("unfinished_tasks") for m in json.loads((tmp_path / "out" / "results.json").read_text())["models"]
            ] == [["plots"]]
    monkeypatch.setattr(eval_run, "write_report", real_report)
    stop_at(None)
    caplog.clear()
    assert run_eval(*args) == 0
    assert stop_at.runs == ["load second", "MR"]  # the first model's tasks were not run again
    assert (f"finishing the evaluation stopped before: 1 of 2 model(s) scored ({tiny_bert_dir}; its plots left to "
            "draw)") in caplog.text
    assert f"{tiny_bert_dir}: every task was finished before the stop; its results are kept" in caplog.text
