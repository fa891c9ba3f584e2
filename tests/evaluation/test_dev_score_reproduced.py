"""The dev score a training run logs (STS-B dev, the run's last evaluation) is the number ``run_eval --mode dev`` gives
for the saved model (its folder and its sentence-transformers export) at the same precision: the trainer scores under
the run's precision, and a task's score does not depend on the other tasks scored with it."""

from __future__ import annotations

import json
import logging

import pytest
from helpers import train_args
from transformers import AutoModel, AutoTokenizer

from hf_cse.cli import evaluate as eval_cli
from hf_cse.cli import train as train_cli
from hf_cse.evaluation import dev_metrics
from hf_cse.evaluation.before_after import UntrainedCandidate
from hf_cse.models import SimCSEModel

pytestmark = pytest.mark.slow  # trains and evaluates end to end


def run_eval_stsb(model, senteval_dir, out, tasks: str, precision: str) -> float:
    assert eval_cli.main(["--model_name_or_path", str(model), "--tasks", tasks, "--mode", "dev",
                          "--senteval_data_dir", str(senteval_dir), "--precision", precision,
                          "--output_dir", str(out), "--disable_tqdm"]) == 0
    return json.loads((out / "results.json").read_text())["STSBenchmark"]


def test_the_logged_dev_score_is_what_run_eval_gives_for_the_saved_model(tiny_bert_dir, senteval_dir, tmp_path,
                                                                          monkeypatch, caplog):
    # the trained weights are saved whatever they score (the untrained encoder is no candidate), so the run's last
    # evaluation, its "after", is the saved model's
    monkeypatch.setattr(UntrainedCandidate, "of", classmethod(lambda cls, model, sharded=False, rescore=False: None))
    run = tmp_path / "run"
    with caplog.at_level(logging.INFO):
        assert train_cli.main(train_args(tiny_bert_dir, tmp_path, run, "--senteval_data_dir", str(senteval_dir),
                                         "--precision", "bf16", "--learning_rate", "1e-3")) == 0
    # the log says under which precision and batch size the dev data were scored
    assert "dev: scoring the model of step 2 on STS-B, SICK-R dev (bf16 autocast, batches of 128)" in caplog.text
    dev = json.loads((run / "training_info.json").read_text())["dev"]
    assert dev["kept_step"] == 2 and dev["precision"] == "bf16 autocast"
    history = json.loads((run / "trainer_state.json").read_text())["log_history"]
    assert [e["eval_stsb_spearman"] for e in history if e.get("step") == 2 and "eval_stsb_spearman" in e] == \
        [dev["after"]]
    scores = {(model.name, tasks): run_eval_stsb(model, senteval_dir, tmp_path / f"eval-{model.name}-{tasks}", tasks,
                                                 "bf16")
              for model in (run, run / "sentence-transformers") for tasks in ("sts", "STSBenchmark")}
    assert scores == {key: pytest.approx(dev["after"], abs=1e-9) for key in scores}
    # and the library's own dev scoring of the saved model, given the run's precision
    model = AutoModel.from_pretrained(run)
    assert isinstance(model, SimCSEModel)
    assert dev_metrics(model, AutoTokenizer.from_pretrained(run), senteval_dir, precision="bf16")["stsb_spearman"] \
        == pytest.approx(dev["after"], abs=1e-9)
    # the precision matters (so the check above is not vacuous): fp32 gives another figure here
    assert run_eval_stsb(run, senteval_dir, tmp_path / "eval-fp32", "STSBenchmark", "fp32") != \
        pytest.approx(dev["after"], abs=1e-6)
