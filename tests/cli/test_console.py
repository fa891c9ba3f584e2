"""What the commands print (issue 38): one line per stage by default, library notices filtered, --verbose for the
rest, progress lines for every wait, the LoRA line, a finished run's folder named so, and evaluation results next
to the model they score (hf_cse/cli/console.py, hf_cse/cli/output_dir.py)."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers import hang_timeout, random_sentences, scored_pairs_file

from hf_cse.checks import InputError
from hf_cse.cli import evaluate as eval_cli
from hf_cse.cli.console import FILTERED_LOG_NOTICES, FILTERED_WARNINGS, setup_console
from hf_cse.cli.eval_output_dir import default_eval_output_dir
from hf_cse.cli.output_dir import prepare_output_dir
from hf_cse.encoders import packaged_encoder_path
from hf_cse.evaluation.before_after import logged_evaluation

ROOT = Path(__file__).resolve().parents[2]
PAD_NOTICE = "The tokenizer has new PAD/BOS/EOS tokens"
PIN_MEMORY = ("'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be "
              "used.")
#: what the quiet console must not print: library notices, bars of trivial steps, other libraries' INFO lines,
#: the Trainer's metrics block (the bar's last line shows them) and hf_cse's debug lines
QUIET_ABSENT = (PAD_NOTICE, "pin_memory", "Generating train split", "Dropping blank lines", "Tokenizing",
                "Dropping special-token-only lines", "Loading weights", "Writing model shards", "Saving model to",
                "Loading SentenceTransformer model", "***** train metrics *****", "rows compared by",
                "sets remove_unused_columns")


@pytest.fixture
def restored_console():
    """setup_console changes process-wide switches: put back what the test run had."""
    import datasets
    import transformers

    levels = {name: logging.getLogger(name).level for name in ("", "hf_cse", "run_unsup", "run_eval")}
    bars = datasets.is_progress_bar_enabled(), transformers.utils.logging.is_progress_bar_enabled()
    yield
    setup_console(verbose=True)  # every filter removed
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    (datasets.enable_progress_bars if bars[0] else datasets.disable_progress_bars)()
    tf = transformers.utils.logging
    (tf.enable_progress_bar if bars[1] else tf.disable_progress_bar)()


def _record(name: str, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, message, None, None)


def test_quiet_console_filters_the_notices_and_verbose_brings_them_back(restored_console):
    import datasets

    notices = logging.getLogger("transformers.trainer_utils")
    pad = _record("transformers.trainer_utils", f"{PAD_NOTICE} that differ from the model config. Updated: {{}}.")
    other = _record("transformers.trainer_utils", "some other warning")
    setup_console(verbose=False)
    assert not notices.filter(pad) and notices.filter(other)  # only the listed notice goes
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn(PIN_MEMORY, UserWarning)
        warnings.warn("another UserWarning", UserWarning)
    assert [str(w.message) for w in caught] == ["another UserWarning"]
    assert not datasets.is_progress_bar_enabled()
    assert logging.getLogger("hf_cse").getEffectiveLevel() == logging.INFO
    assert logging.getLogger().level == logging.WARNING  # other libraries: warnings only

    setup_console(verbose=True)
    assert notices.filter(pad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # pytest's own filters aside: nothing of ours drops it
        warnings.resetwarnings()
        warnings.warn(PIN_MEMORY, UserWarning)
    assert [str(w.message) for w in caught] == [PIN_MEMORY]
    assert datasets.is_progress_bar_enabled()
    assert logging.getLogger("hf_cse").getEffectiveLevel() == logging.DEBUG


def test_other_processes_print_errors_only(restored_console):
    setup_console(verbose=False, main_process=False)
    assert logging.getLogger("hf_cse.trainer").getEffectiveLevel() == logging.ERROR
    setup_console(verbose=True, main_process=False)  # --verbose: every process
    assert logging.getLogger("hf_cse.trainer").getEffectiveLevel() == logging.DEBUG


def test_every_filtered_notice_says_why():
    source = (ROOT / "hf_cse" / "cli" / "console.py").read_text()
    for text in [start for _, start in FILTERED_LOG_NOTICES] + [message for message, _ in FILTERED_WARNINGS]:
        entry = source[:source.index(text)].splitlines()
        assert entry[-2].strip().startswith("#"), text  # a comment just above the entry says which and why


def test_logged_evaluation_is_the_last_one_at_that_step():
    history = [{"eval_a": 1.0, "step": 0}, {"loss": 2.0, "step": 2}, {"eval_a": 3.0, "step": 2, "epoch": 1.0},
               {"eval_a": 4.0, "step": 2}]
    assert logged_evaluation(history, 2) == {"eval_a": 4.0}
    assert logged_evaluation(history, 4) is None


def test_export_takes_verbose_as_the_other_commands_do():
    from hf_cse.cli import export as export_cli

    def verbose_of(parser):
        return next(a for a in parser._actions if a.dest == "verbose")

    ours, theirs = verbose_of(export_cli.build_parser()), verbose_of(eval_cli.argument_parser())
    assert ours.help == theirs.help and ours.option_strings == ["--verbose"]
    for argv, want in (([], False), (["--verbose"], True), (["--verbose", "false"], False),
                       (["--verbose", "true"], True)):
        assert vars(export_cli.build_parser().parse_args(["ckpt", "out", *argv]))["verbose"] is want, argv
        assert vars(eval_cli.argument_parser().parse_args(argv))["verbose"] is want, argv


@pytest.mark.slow
def test_an_export_prints_one_line_per_stage_and_verbose_prints_the_rest(tiny_bert_dir, tmp_path, capsys, caplog,
                                                                        restored_console):
    from transformers import AutoTokenizer

    from hf_cse.cli import export as export_cli
    from hf_cse.models import SimCSEModel

    checkpoint = tmp_path / "run"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(checkpoint)
    printed = {}
    for name, extra in (("quiet", []), ("verbose", ["--verbose"])):
        capsys.readouterr()
        caplog.clear()
        assert export_cli.main([str(checkpoint), str(tmp_path / name), *extra]) == 0
        captured = capsys.readouterr()
        printed[name] = captured.out + captured.err + "\n".join(r.getMessage() for r in caplog.records)
        assert f"sentence-transformers model written to {tmp_path / name}" in printed[name]
        assert "exported simcse model to" in printed[name]  # hf_cse's own line, in both
    # sentence-transformers' INFO lines and transformers' bars of the short steps: only with --verbose
    for back in ("Saving model to", "Loading SentenceTransformer model", "Loading weights", "Writing model shards"):
        assert back not in printed["quiet"] and back in printed["verbose"], (back, printed)


# ------------------------------------------------------------------------------------------------ output folders
def _finished_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "training_info.json", "training_curves.png",
                 "hf_cse_run.json"):
        (folder / name).write_text("{}")
    (folder / "sentence-transformers").mkdir()
    (folder / "sentence-transformers" / "config.json").write_text("{}")
    return folder


def test_a_finished_run_is_called_that_whatever_lies_beside_it(tmp_path):
    run = _finished_run(tmp_path / "run")
    with pytest.raises(InputError, match=r"already holds a finished run\. .*--overwrite_output_dir"):
        prepare_output_dir(run, {"a": 1})
    (run / "eval").mkdir()  # run_eval's default folder for this model
    with pytest.raises(InputError, match=r"already holds a finished run \(and files no run writes: eval\)"):
        prepare_output_dir(run, {"a": 1})
    assert (run / "training_info.json").exists()  # refused: nothing removed
    (run / "training_info.json").unlink()
    (run / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match=r"files that are not checkpoints of a run \(eval, notes.txt\)"):
        prepare_output_dir(run, {"a": 1})


def test_default_evaluation_folder_is_next_to_the_model(tmp_path):
    plain = tmp_path / "my-encoder"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert default_eval_output_dir([str(plain)]) == plain / "eval"
    run = _finished_run(tmp_path / "run")
    assert default_eval_output_dir([str(run)]) == run / "eval"
    # a part of a run: inside the run, beside the part (a run's --overwrite_output_dir removes its parts, not this)
    assert default_eval_output_dir([str(run / "sentence-transformers")]) == run / "eval-sentence-transformers"
    unfinished = tmp_path / "going"
    (unfinished / "checkpoint-2").mkdir(parents=True)
    (unfinished / "hf_cse_run.json").write_text("{}")
    # nothing inside an unfinished run's folder: it would stop the run from resuming
    assert default_eval_output_dir([str(unfinished / "checkpoint-2")]) == tmp_path / "going-eval-checkpoint-2"
    # a Hub id, the packaged default encoder and several models: a folder named after them under eval_results/
    assert default_eval_output_dir(["princeton-nlp/sup-simcse-bert-base-uncased"]) == \
        Path("eval_results/princeton-nlp--sup-simcse-bert-base-uncased")
    if packaged_encoder_path() is not None:  # never into the installed package
        assert default_eval_output_dir([packaged_encoder_path()]) == Path("eval_results/all-MiniLM-L6-v2")
    assert default_eval_output_dir([str(plain), "bert-base-uncased"]) == \
        Path("eval_results/my-encoder+bert-base-uncased")
    # the exports of two runs: by their runs' names (both folders are called sentence-transformers)
    other = _finished_run(tmp_path / "other")
    assert default_eval_output_dir([str(run / "sentence-transformers"), str(other / "sentence-transformers")]) == \
        Path("eval_results/run-sentence-transformers+other-sentence-transformers")


def test_eval_arguments_default_to_the_model_folder(tiny_bert_dir):
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(eval_cli.EvalArguments).parse_args_into_dataclasses(
        args=["--model_name_or_path", str(tiny_bert_dir)])
    assert Path(args.output_dir) == Path(tiny_bert_dir) / "eval"
    (args,) = HfArgumentParser(eval_cli.EvalArguments).parse_args_into_dataclasses(args=[])
    assert Path(args.output_dir).parent == Path("eval_results")


@pytest.mark.slow
def test_two_models_scored_in_a_row_do_not_collide(tmp_path, monkeypatch, capsys, caplog):
    from eval_helpers import make_tiny_bert, write_toy_senteval

    caplog.set_level(logging.INFO, logger="run_eval")
    caplog.set_level(logging.INFO, logger="hf_cse.evaluation")

    data = write_toy_senteval(tmp_path / "senteval")
    first, second = make_tiny_bert(tmp_path / "first", seed=0), make_tiny_bert(tmp_path / "second", seed=1)
    monkeypatch.chdir(tmp_path)  # the repository root of a user who follows the README
    for model in (first, second):
        assert eval_cli.main(["--model_name_or_path", str(model), "--senteval_data_dir", str(data), "--tasks",
                              "STSBenchmark", "--device", "cpu", "--disable_tqdm", "true"]) == 0, \
            capsys.readouterr().err
        saved = json.loads((model / "eval" / "results.json").read_text())
        assert saved["model"] == str(model)
        assert f"results go to {model / 'eval'}" in caplog.text  # and each wait says what it is doing:
        assert "STS: scoring STSBenchmark" in caplog.text
        caplog.clear()
    assert not (tmp_path / "eval_results").exists()  # nothing in the current folder
    # the same command again is refused, naming the flag that replaces the results
    assert eval_cli.main(["--model_name_or_path", str(first), "--senteval_data_dir", str(data), "--tasks",
                          "STSBenchmark", "--device", "cpu", "--disable_tqdm", "true"]) == 1
    assert "already holds the results of an evaluation" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------- real runs
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    env.pop("HF_CSE_DEBUG", None)
    return env


def _run_args(encoder: Path, tmp_path: Path, out: Path, *extra: str) -> list[str]:
    train = tmp_path / f"train-{out.name}.txt"  # a file of its own: datasets' cache would skip a second run's bars
    train.write_text("\n".join(random_sentences(32)) + "\n")
    dev = tmp_path / "dev.tsv"
    if not dev.exists():
        scored_pairs_file(dev, 20, 5, seed=5)
    return [sys.executable, str(ROOT / "run_unsup.py"), "--model_name_or_path", str(encoder), "--train_file",
            str(train), "--max_steps", "2", "--per_device_train_batch_size", "8", "--output_dir", str(out),
            "--use_cpu", "true", "--eval_file", str(dev), "--eval_name", "mine", *extra]


@pytest.mark.slow
def test_a_real_run_prints_one_line_per_stage_and_verbose_prints_the_rest(tiny_bert_dir, tmp_path):
    """Two tiny runs at once (they share the cores): the default console and --verbose."""
    popen = lambda argv: subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE,  # noqa: E731
                                          stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    quiet = popen(_run_args(tiny_bert_dir, tmp_path, tmp_path / "quiet"))
    verbose = popen(_run_args(tiny_bert_dir, tmp_path, tmp_path / "verbose", "--verbose", "true"))
    logs = {}
    for name, proc in (("quiet", quiet), ("verbose", verbose)):
        logs[name] = proc.communicate(timeout=hang_timeout(300))[0]
        assert proc.returncode == 0, logs[name][-3000:]
    log = logs["quiet"]
    for absent in QUIET_ABSENT:
        assert absent not in log, (absent, log[-3000:])
    for stage in ("INFO hf_cse.precision: precision:", "INFO run_unsup: pooling:", "INFO run_unsup: method=simcse",
                  "dev: scoring the untrained encoder (step 0) on 20 mine pairs",
                  "dev: scoring the model of step 2 on 20 mine pairs", "saved simcse model to",
                  "exporting for sentence-transformers with a model card to",
                  "exported simcse model to", "dev: before "):
        assert log.count(stage) == 1, (stage, log[-3000:])
    assert log.rstrip().splitlines()[-1].split(": ", 1)[1].startswith("dev: before ")  # the run's last line
    # --verbose: the notices, the bars of the short steps, other libraries' INFO lines and hf_cse's debug lines
    for back in ("Tokenizing", "Loading weights", "Writing model shards", "Saving model to",
                 "***** train metrics *****", "rows compared by"):
        assert back in logs["verbose"], (back, logs["verbose"][-3000:])
    assert PAD_NOTICE not in logs["verbose"]  # the trainer fills the ids in first: transformers has none to align


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="LoRA needs peft")
def test_a_lora_run_logs_its_trainable_parameters(tiny_bert_dir, tmp_path, caplog):
    import re

    from hf_cse.cli import train as train_cli

    with caplog.at_level(logging.INFO, logger="run_unsup"):
        train_cli.train_from_args(_run_args(tiny_bert_dir, tmp_path, tmp_path / "lora", "--lora_r", "2")[2:])
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("LoRA active"))
    match = re.fullmatch(r"LoRA active: rank 2, alpha 4 on query, key, value, dense; ([\d,]+) trainable parameters "
                         r"of ([\d,]+) \(([\d.]+)%\)", line)
    assert match, line
    trainable, total = (int(g.replace(",", "")) for g in match.groups()[:2])
    from hf_cse.models import SimCSEModel

    frozen = sum(p.numel() for p in SimCSEModel.from_encoder(str(tiny_bert_dir)).encoder.parameters())
    assert total - trainable == frozen  # the encoder's own weights (without BERT's unused pooler) do not train
    assert 0 < trainable < total and float(match.group(3)) == pytest.approx(100 * trainable / total, abs=0.01)
