"""Finishing a stopped evaluation: ``evaluate(..., done=<the saved partial record>)`` and run_eval.py run again into
the folder of a stopped run keep the tasks it finished, do not run them again, and give the record (results.json,
results.md, the plots) one uninterrupted run gives. The same command used to delete the saved results as it started,
and evaluate everything again (a second stop then left an empty folder)."""

from __future__ import annotations

import json

import pytest
from eval_helpers import FakeEncoder, write_toy_senteval

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
    real_sts, real_geometry, real_transfer = runner.evaluate_sts, runner._stsb_embeddings, transfer.run_transfer_task

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
    monkeypatch.setattr(runner, "_stsb_embeddings", geometry)
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
