"""Bad input to the commands, as a user types it: exit code 1 and stderr is one line that starts with the program's
name and names the problem, the flag or the file (no traceback unless HF_CSE_DEBUG=1), printed last, within 300
characters (paths shortened, not dropped), before the encoder is loaded where the check needs no model; a loss's own
error gets the flag advice; `run_unsup.py --help` offers each loss choice. Covers evaluation, the export and the
training features (prompts, LoRA, --do_mlm, no-duplicate batches, the run record, the export's training info, the
console scripts), through subprocesses and in-process through each command's main()."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from eval_helpers import write_toy_senteval
from helpers import fake_checkpoint, random_sentences, scored_pairs_file
from transformers import AutoTokenizer

from hf_cse.cli import MAX_LINE, fit_line, run_cli
from hf_cse.cli import evaluate as eval_cli
from hf_cse.cli import export as hf_cse_export
from hf_cse.cli import train as train_cli
from hf_cse.errors import CSEError
from hf_cse.models import CSEPreTrainedModel, SimCSEModel
from hf_cse.run_files import RUN_RECORD_FILE
from hf_cse.tokenizer_match import check_room_for_text

# ------------------------------------------------------------------------------------- evaluation and export, as typed
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_bert_dir):
    from transformers import AutoTokenizer

    from hf_cse.models import SimCSEModel

    root = tmp_path_factory.mktemp("cli_errors")
    senteval = write_toy_senteval(root / "senteval")
    stsb = senteval / "STS" / "STSBenchmark" / "sts-test.csv"
    lines = stsb.read_text().split("\n")
    lines[2] += "\t96"
    (root / "bad_senteval").mkdir()
    bad = write_toy_senteval(root / "bad_senteval")
    (bad / "STS" / "STSBenchmark" / "sts-test.csv").write_text("\n".join(lines))
    ckpt = root / "ckpt"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(ckpt)
    (root / "a_file").write_text("not a folder")
    (root / "empty_folder").mkdir()
    (root / "broken.json").write_text('{"learning_rate": 3e-05,')
    return {"root": root, "senteval": senteval, "bad": bad, "ckpt": ckpt, "model": tiny_bert_dir}


def run_eval_args(f, *extra, model=None, out=None, local_data=True):
    data = ["--senteval_data_dir", str(f["senteval"])] if local_data else []  # not with --senteval_source hub
    return ["run_eval.py", "--model_name_or_path", str(model or f["model"]), *data, "--tasks", "STSB", "--output_dir",
            str(out or f["root"] / "eval_out"), "--disable_tqdm", *extra]


CASES = {
    "eval-missing-model": (lambda f: run_eval_args(f, model=f["root"] / "nope"), "no such folder"),
    "eval-model-is-a-file": (lambda f: run_eval_args(f, model=f["root"] / "a_file"), "is a file"),
    "eval-folder-without-config": (lambda f: run_eval_args(f, model=f["root"] / "empty_folder"),
                                   "folder without config.json or modules.json"),
    "eval-hub-model-offline": (lambda f: run_eval_args(f, model="someone/not-cached"), "HF_HUB_OFFLINE"),
    "eval-hub-data-offline": (lambda f: run_eval_args(f, "--senteval_source", "hub", local_data=False),
                              "cannot read the Hub data set mteb/stsbenchmark-sts: the Hub is offline \\(HF_HUB_"),
    "eval-output-is-a-file": (lambda f: run_eval_args(f, out=f["root"] / "a_file"), "--output_dir .* is a file"),
    "eval-fp16-on-a-cpu": (lambda f: run_eval_args(f, "--precision", "fp16", "--device", "cpu"),
                           "precision fp16 needs a GPU: on a CPU fp16 matrix products are emulated. Use --precision "
                           "fp32, bf16 or auto on a CPU.( |$)"),
    "eval-device-foo": (lambda f: run_eval_args(f, "--device", "foo"), "--device 'foo' is not a device"),
    "eval-device-cuda-99": (lambda f: run_eval_args(f, "--device", "cuda:99"), "--device cuda:99: torch sees"),
    # the eval pairs' columns without the pairs did nothing; typed: refused (--model_name_or_path typed too, a flag
    # whose values add up), the default a flag was typed with too
    "eval-column-without-eval-pairs": (lambda f: run_eval_args(f, "--eval_score_column", "sim"),
                                       "--eval_score_column sim does nothing without --eval_file or "
                                       "--eval_dataset_name .*: add one, or drop --eval_score_column\\. \\("),
    "eval-name-typed-as-its-default": (lambda f: run_eval_args(f, "--eval_name", "custom"),
                                       "--eval_name custom does nothing without --eval_file"),
    "eval-malformed-stsb-row": (lambda f: run_eval_args(f)[:4] + [str(f["bad"])] + run_eval_args(f)[5:],
                                r"sts-test\.csv, line 3: expected 7 tab-separated columns .*found 8"),
    "export-missing-checkpoint": (lambda f: ["-m", "hf_cse", "export", str(f["root"] / "nope"), str(f["root"] / "st")],
                                  "CHECKPOINT .*nope: no such folder"),
    "export-hub-id-offline": (lambda f: ["-m", "hf_cse", "export", "someone/not-cached", str(f["root"] / "st")],
                              "HF_HUB_OFFLINE"),
    "export-output-is-a-file": (lambda f: ["-m", "hf_cse", "export", str(f["ckpt"]), str(f["root"] / "a_file")],
                                "exists and is a file"),
    "export-malformed-training-info": (
        lambda f: ["-m", "hf_cse", "export", str(f["ckpt"]), str(f["root"] / "st"), "--training_info",
                   str(f["root"] / "broken.json")], r"--training_info .*broken\.json is not valid JSON"),
    "export-malformed-eval-results": (
        lambda f: ["-m", "hf_cse", "export", str(f["ckpt"]), str(f["root"] / "st"), "--eval_results",
                   str(f["root"] / "broken.json")], r"broken\.json is not valid JSON"),
    "export-private-without-push": (
        lambda f: ["-m", "hf_cse", "export", str(f["ckpt"]), str(f["root"] / "st"), "--private", "--token", "abc"],
        "--private and --token set the push to the Hub, and nothing is pushed without --push_to_hub: add "
        "--push_to_hub USER/NAME, or drop --private and --token\\."),
    "export-token-without-push": (
        lambda f: ["-m", "hf_cse", "export", str(f["ckpt"]), str(f["root"] / "st"), "--token", "abc"],
        "--token sets the push .* or drop --token\\."),
    "export-missing-tokenizer": (
        lambda f: ["-m", "hf_cse", "export", str(f["ckpt"]), str(f["root"] / "st"), "--tokenizer",
                   str(f["root"] / "no_tokenizer")], "--tokenizer .*no_tokenizer: no such folder"),
}


def run_command(args, debug: bool = False):
    env = {k: v for k, v in os.environ.items() if k != "HF_CSE_DEBUG"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="")
    if debug:
        env["HF_CSE_DEBUG"] = "1"
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


# run as a subprocess (the real command); the other cases in-process through the same main(), which is faster
SUBPROCESS = ("eval-missing-model", "eval-hub-data-offline", "eval-malformed-stsb-row", "export-missing-checkpoint",
              "export-malformed-training-info")


def run_in_process(args, capsys):
    from hf_cse.cli import evaluate as eval_cli
    from hf_cse.cli import export

    capsys.readouterr()
    code = eval_cli.main(args[1:], prog="run_eval.py") if args[0] == "run_eval.py" else export.main(args[3:])
    return subprocess.CompletedProcess(args, code, "", capsys.readouterr().err)


# the cases run as a subprocess are slow (the fast lane keeps the in-process ones)
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SUBPROCESS else c for c in CASES],
                         ids=list(CASES))
def test_bad_input_is_one_line_without_traceback(case, files, capsys, monkeypatch):
    import re

    make_args, message = CASES[case]
    if case in SUBPROCESS:
        proc = run_command(make_args(files))
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
        proc = run_in_process(make_args(files), capsys)
    prog = "run_eval.py" if case.startswith("eval") else "hf-cse-export"
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"{prog}: error: ") and re.search(message, lines[0]), lines[0]
    assert not (files["root"] / "st").exists() and not (files["root"] / "eval_out" / "results.json").exists()


@pytest.mark.slow
def test_debug_switch_shows_the_traceback(files):
    proc = run_command(run_eval_args(files, model=files["root"] / "nope"), debug=True)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "no such folder" in proc.stderr


@pytest.mark.slow
def test_run_unsup_help_works_and_offers_each_loss_choice_from_its_literal():
    import re
    import typing

    from hf_cse.losses import available_losses, get_loss_class, loss_hyperparameters

    proc = run_command(["run_unsup.py", "--help_all"])  # every flag (--help names the loss hyperparameters only)
    assert proc.returncode == 0, proc.stderr
    help_text = " ".join(proc.stdout.split())
    choice_flags = {}
    for loss in available_losses():
        hints = typing.get_type_hints(get_loss_class(loss).__init__)
        for name in loss_hyperparameters(loss):
            if typing.get_origin(hints[name]) is typing.Literal:
                choice_flags[name] = typing.get_args(hints[name])
    assert "normalization" in choice_flags and "weight_norm" in choice_flags
    for name, choices in choice_flags.items():
        # argparse may list them in another order (typing caches equal Literal unions by value)
        offered = re.search(rf"--{name} {{([^}}]*)}}", help_text)
        assert offered and set(offered.group(1).split(",")) == set(choices), name


def test_a_batch_too_small_names_the_flag_of_the_field_it_names(capsys, monkeypatch):
    """BatchTooSmallError names per_device_train_batch_size (its fields): the scripts show it as the flag, once."""
    from hf_cse.cli import run_cli

    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    err = _loss_error("infonce", 1)

    def main():
        raise err

    assert run_cli(main, "run_unsup.py") == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("run_unsup.py: error: infonce: needs a batch of at least 2 sentences to have in-batch "
                           "negatives, got 1; increase --per_device_train_batch_size (or the number of processes).")
    assert line.count("per_device_train_batch_size") == 1


def test_under_torchrun_the_line_is_also_the_launchers_root_cause(tmp_path, capsys, monkeypatch):
    """torchrun (accelerate launch with several processes) ends with a "Root Cause" box that read "error_file: <N/A>"
    and pointed to torch's docs, 40 lines below hf_cse's line: each process's error file holds the line now."""
    from hf_cse.cli import run_cli

    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    import hf_cse.cli

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))

    def main():
        raise CSEError("max_steps 0 trains nothing.", fields=("max_steps",))

    monkeypatch.setattr(hf_cse.cli, "torchrun_worker", lambda: False)  # a command a worker started: not its file
    assert run_cli(main, "run_unsup.py") == 1
    assert not error_file.exists()
    capsys.readouterr()
    monkeypatch.setattr(hf_cse.cli, "torchrun_worker", lambda: True)  # a process the launcher started
    assert run_cli(main, "run_unsup.py") == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert json.loads(error_file.read_text())["message"] == line
    assert line.startswith("run_unsup.py: error: --max_steps 0 trains nothing.")
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(error_file))  # as the launcher reads it
    assert failure.message == line


@pytest.mark.parametrize(
    ("make_error", "advice"),
    [
        (lambda: _loss_error("off_dropout_infonce", 4), "Use --method imsimcse (or --off_dropout)"),
        (lambda: _loss_error("mpt", 4, z_neg=True), "Drop --negative_column"),
    ],
    ids=["missing-no-dropout-embeddings", "hard-negatives-not-taken"],
)
def test_scripts_translate_a_loss_error_into_flag_advice(make_error, advice, capsys, monkeypatch):
    """A loss says what is wrong in its own terms; the scripts' error path (run_cli) adds which flag to change."""
    from hf_cse.cli import run_cli

    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    err = make_error()
    assert "--" not in str(err)

    def main():
        raise err

    assert run_cli(main, "run_unsup.py") == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"run_unsup.py: error: {err} {advice}"), lines


def _loss_error(name: str, n: int, z_neg: bool = False) -> ValueError:
    import torch

    from hf_cse.losses import build_loss

    z = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))
    try:
        build_loss(name)(z, z + 0.1, **({"z_neg": -z} if z_neg else {}))
    except ValueError as err:
        return err
    raise AssertionError(f"{name} accepted the inputs")



# ----------------------------------------------------------------------------------------------- the training features
LONG = "project/experiments_2026/runs"  # paths as deep as a user's


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(cls, *args, **kwargs):
        pytest.fail("the encoder was loaded although the input was bad")

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder", classmethod(refuse))
    monkeypatch.setattr(train_cli, "tokenize_dataset", lambda *a, **k: pytest.fail("data were tokenized"))
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)


def _args(encoder, tmp_path, *extra, sentences=None):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(sentences or random_sentences(32)) + "\n")
    return ["--model_name_or_path", str(encoder), "--train_file", str(train), "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / LONG / "out"), "--use_cpu",
            "--disable_tqdm", "true", *extra]


def _error_line(capsys, code: int, prog: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 1 and "Traceback" not in err, err
    assert lines[-1].startswith(f"{prog}: error: ") and len(lines[-1]) <= MAX_LINE, lines[-1]
    return lines[-1]


THIRTY_WORDS = " ".join(["represent this sentence for searching relevant passages"] * 5) + ": "


TRAIN_CASES = {
    "prompt-fills-the-length": (("--prompt", THIRTY_WORDS, "--max_seq_length", "16"), None,
                                r"--max_seq_length 16 leaves no token for the sentences: --prompt takes \d+ tokens"),
    "length-of-special-tokens": (("--max_seq_length", "2"), None,
                                 "--max_seq_length 2 leaves no token for the sentences: the tokenizer adds 2"),
    "mlm-weight-without-do-mlm": (("--mlm_weight", "0.5"), None,
                                  "--mlm_weight 0.5 does nothing while --do_mlm is false"),
    "lora-dropout-without-lora": (("--lora_dropout", "0.1"), None,
                                  "--lora_dropout 0.1 does nothing while --lora_r is 0"),
    # settings that trained to the end doing nothing (review_cli entry 5), refused as --mlm_weight is
    "dcl-temperature-without-dcl": (("--dcl_temperature", "2.0"), None, "--dcl_temperature does nothing while "
                                    "--dcl_weight is 0 \\(no DCL objective\\): add --dcl_weight 0.1, or drop "
                                    "--dcl_temperature\\."),
    "dcl-eps-without-dcl": (("--dcl_eps", "0.1"), None, "--dcl_eps does nothing while --dcl_weight is 0"),
    "dcl-temperature-with-dcl-weight-0": (("--method", "imsimcse", "--dcl_weight", "0", "--dcl_temperature", "2"), None,
                                          "--dcl_temperature does nothing while --dcl_weight is 0"),
    "off-dropout-grad-without-off-dropout": (("--off_dropout_grad", "false"), None,
                                             "--off_dropout_grad false does nothing while --off_dropout is false: "
                                             "it acts only with --off_dropout true. Set that, or drop "
                                             "--off_dropout_grad\\."),
    "eval-name-without-eval-pairs": (("--eval_name", "mydev"), None, "--eval_name mydev does nothing without "
                                     "--eval_file or --eval_dataset_name .*: add one, or drop --eval_name\\."),
    "eval-column-without-eval-pairs": (("--eval_sentence1_column", "a"), None,
                                       "--eval_sentence1_column a does nothing without --eval_file"),
    "save-total-limit-without-checkpoints": (("--save_total_limit", "2"), None,
                                             "--save_total_limit 2 keeps or deletes nothing: no checkpoint is saved "
                                             "during training \\(with --save_strategy 'no'\\); add --save_strategy "
                                             "'steps', or drop --save_total_limit\\."),
    # off-dropout said in flags: the fix as typed, the method (not its Python class), the method's default as such
    "off-dropout-loss-without-off-dropout": (("--loss", "off_dropout_infonce"), None,
                                             "loss 'off_dropout_infonce' needs no-dropout embeddings "
                                             "\\(off-dropout\\): add --off_dropout \\(or use --method "
                                             "imsimcse\\)\\. \\(HF_CSE_DEBUG"),
    "off-dropout-loss-with-off-dropout-false": (("--loss", "off_dropout_infonce", "--off_dropout", "false"), None,
                                                "which --off_dropout false turns off: drop --off_dropout false\\."),
    "imsimcse-with-a-loss-without-off-dropout": (("--method", "imsimcse", "--loss", "infonce"), None,
                                                 "^hf-cse-train: error: --method imsimcse trains with off-dropout "
                                                 "negatives \\(its default\\), but loss 'infonce' does not use them: "
                                                 "pass --off_dropout false, use --loss off_dropout_infonce, or choose "
                                                 "another --method\\."),
    "off-dropout-typed-with-a-loss-without-it": (("--off_dropout",), None,
                                                 "--off_dropout makes no-dropout negatives, but loss 'infonce' does "
                                                 "not use them: use --loss off_dropout_infonce, or drop "
                                                 "--off_dropout\\."),
    "lora-target-not-linear": (("--lora_r", "2", "--lora_target_modules", "LayerNorm"), None,
                               "LayerNorm.*LayerNorm modules, which LoRA cannot adapt.*--lora_target_modules"),
    "typo-in-a-flag": (("--lerning_rate", "1e-5"), None, "unknown flag --lerning_rate; did you mean --learning_rate"),
    "one-sentence-repeated": ((), ["the same sentence again"] * 40,
                              r"train\.txt holds one distinct text in its 40 rows: every in-batch negative would be "
                              r"the positive's own text, so there is nothing to contrast\. Use varied data\. "),
    # the repeats a refusal used to suggest allowing leave nothing to contrast either
    "one-sentence-repeated-repeats-allowed": (("--no_duplicates_in_batch", "false"),
                                              ["the same sentence again"] * 40, r"holds one distinct text in its 40"),
    "two-sentences-repeated": ((), ["one sentence", "another one"] * 20,
                               r"train\.txt has 2 distinct text\(s\) in 40 rows.*--no_duplicates_in_batch false"),
    # (with none typed the run selects by its dev score: tests/cli/test_train_checks.py)
    "best-metric-not-logged": (("--eval_file", "PAIRS", "--eval_strategy", "steps", "--save_strategy", "steps",
                                "--load_best_model_at_end", "--metric_for_best_model", "loss"),
                               None, "--metric_for_best_model loss is not a score this run logs "
                                     "\\(custom_spearman\\): use --metric_for_best_model 'custom_spearman'"),
    "lowest-correlation-as-best": (("--eval_file", "PAIRS", "--eval_strategy", "steps", "--save_strategy", "steps",
                                    "--load_best_model_at_end", "--metric_for_best_model", "custom_spearman",
                                    "--greater_is_better", "false"),
                                   None, "^hf-cse-train: error: --greater_is_better False would keep the checkpoint of "
                                         "the lowest custom_spearman, the worst: it is a correlation, higher the "
                                         r"better\. Leave --greater_is_better out \(or set it True\)\."),
    "streaming-without-duplicates": (("--streaming", "--no_duplicates_in_batch", "true"), None,
                                     "--no_duplicates_in_batch true needs the whole data set"),
    "streaming-save-each-epoch": (("--streaming", "--save_strategy", "epoch"), None,
                                  "--save_strategy 'epoch' would save a checkpoint only when the run ends: a run on a "
                                  "stream is one epoch"),
    "streaming-score-each-epoch": (("--streaming", "--eval_file", "PAIRS", "--eval_strategy", "epoch"), None,
                                   "--eval_strategy 'epoch' would score the dev data only when the run "
                                   "ends.*--eval_steps N"),
    "fp16-full-eval": (("--fp16_full_eval", "true"), None,
                       "--fp16_full_eval does nothing here: the dev data is scored in the training precision"),
    "shuffle-without-stream": (("--stream_shuffle_buffer", "5"), None,
                               "--stream_shuffle_buffer shuffles a stream, and the training set is not streamed"),
    # transformers refused both with a traceback (once per process) after the encoder was loaded
    "schedule-without-its-keyword": (("--lr_scheduler_type", "cosine_with_min_lr"), None,
                                     "^hf-cse-train: error: --lr_scheduler_type 'cosine_with_min_lr' without "
                                     "--lr_scheduler_kwargs: transformers cannot build this schedule \\(One of "
                                     "min_lr or min_lr_rate .*\\): give --lr_scheduler_kwargs "
                                     "'\\{\"min_lr_rate\": 0.1\\}', or choose another --lr_scheduler_type\\."),
    "negative-is-the-positive": (("--train_file", "PAIRS", "--pair_column", "sentence2", "--negative_column",
                                  "sentence2", "--text_column", "sentence1"), None,
                                 "--pair_column and --negative_column name the same column \\('sentence2'\\)"),
}


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_odd_training_input_is_one_line_before_the_model_is_loaded(case, tiny_bert_dir, tmp_path, capsys,
                                                                   no_model_load):
    import re

    extra, sentences, message = TRAIN_CASES[case]
    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 12, 4, seed=0)
    extra = [str(pairs) if arg == "PAIRS" else arg for arg in extra]
    code = train_cli.main(_args(tiny_bert_dir, tmp_path, *extra, sentences=sentences))
    line = _error_line(capsys, code, "hf-cse-train")
    assert re.search(message, line), line
    assert not (tmp_path / LONG / "out").exists()  # refused before the output folder was claimed


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed here")
def test_an_optimizer_whose_package_is_missing_is_one_line_before_the_model_is_loaded(tiny_bert_dir, tmp_path, capsys,
                                                                                      no_model_load):
    """Was transformers' ImportError (You need to install `bitsandbytes` ...) as a traceback, once per process, after
    the encoder was loaded."""
    code = train_cli.main(_args(tiny_bert_dir, tmp_path, "--optim", "adamw_bnb_8bit"))
    line = _error_line(capsys, code, "hf-cse-train")
    assert line.startswith("hf-cse-train: error: --optim 'adamw_bnb_8bit': transformers cannot build this optimizer "
                           "here (You need to install `bitsandbytes`") and "or choose another --optim" in line, line
    assert not (tmp_path / LONG / "out").exists()


@pytest.mark.slow
def test_run_unsup_says_a_schedule_transformers_cannot_build_in_one_line(tiny_bert_dir, tmp_path):
    """Was a full traceback ending in transformers' ValueError (One of min_lr or min_lr_rate should be set ...), after
    the encoder was loaded, once per process."""
    proc = run_command(["run_unsup.py", *_args(tiny_bert_dir, tmp_path, "--lr_scheduler_type", "cosine_with_min_lr")])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "pooling:" not in proc.stderr, proc.stderr
    assert lines[-1].startswith("run_unsup.py: error: --lr_scheduler_type 'cosine_with_min_lr' without "
                                "--lr_scheduler_kwargs: ") and "'{\"min_lr_rate\": 0.1}'" in lines[-1], lines[-1]


def test_an_output_dir_that_is_a_dangling_link_is_one_line(tiny_bert_dir, tmp_path, capsys, no_model_load):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    args = _args(tiny_bert_dir, tmp_path)
    args[args.index("--output_dir") + 1] = str(link)
    line = _error_line(capsys, train_cli.main(args), "hf-cse-train")
    assert f"--output_dir {link} is a link to {tmp_path / 'gone'}, which does not exist" in line
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_a_long_prompt_that_leaves_few_tokens_warns(tiny_bert_dir, caplog):
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    with caplog.at_level(logging.WARNING, logger="hf_cse.tokenizer_match"):
        check_room_for_text(tokenizer, 32, "a b c d e f g h i j k l m n o p q r s t u v w ")
    assert "max_seq_length 32 leaves 7 token(s) of each sentence" in caplog.text
    caplog.clear()
    check_room_for_text(tokenizer, 32, "a b c ")
    assert not caplog.text


def test_train_files_with_a_column_of_numbers_is_one_line(tiny_bert_dir, tmp_path, capsys, no_model_load):
    (tmp_path / "ids.csv").write_text("text\n1\n2\n3\n")
    args = _args(tiny_bert_dir, tmp_path)
    at = args.index("--train_file")
    args[at:at + 2] = ["--train_files", str(tmp_path / "train.txt"), str(tmp_path / "ids.csv")]
    line = _error_line(capsys, train_cli.main(args), "hf-cse-train")
    assert "ids.csv: column 'text' holds only numbers, not sentences; pass --text_column" in line


def test_streaming_puts_the_prompt_in_front_of_each_sentence(tiny_bert_dir, tmp_path):
    from hf_cse.cli.arguments import StreamingArguments
    from hf_cse.streaming import load_training_text, tokenize_stream

    (tmp_path / "a.txt").write_text("b c d\ne f g\n")
    data = SimpleNamespace(text_column=None, train_file=str(tmp_path / "a.txt"), dataset_name=None,
                           dataset_config_name=None)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    stream = load_training_text(StreamingArguments(streaming=True), data, seed=0)
    rows = list(tokenize_stream(stream, tokenizer, 32, prompt="a a "))
    assert [row["input_ids"] for row in rows] == tokenizer(["a a b c d", "a a e f g"])["input_ids"]


@pytest.mark.parametrize("extra, message", [
    (("--max_steps", "2", "--lr_scheduler_type", "constant"), "is at step 3, past --max_steps 2: give --max_steps 3 or "
                                                              "more"),
    # counted in epochs: the checkpoint's epoch against --num_train_epochs, before the data is counted
    (("--max_steps", "-1", "--num_train_epochs", "2", "--lr_scheduler_type", "constant"),
     "is at epoch 3, past --num_train_epochs 2: give --num_train_epochs 3 or more"),
    # a schedule that follows the total: only the run's own total resumes it
    (("--max_steps", "2"), r"its run trains 3 steps and this one 2 .* Resume with the run's total \(--max_steps 3\)"),
    (("--max_steps", "5"), r"its run trains 3 steps and this one 5 \(--max_steps or --num_train_epochs changed\), "
                           "and the linear learning-rate schedule follows the total"),
    (("--method", "imsimcse"), "holds a hf_cse_simcse model, not hf_cse_imsimcse: resume it with its own --method"),
    (("--lora_r", "2"), r"was trained with other weights \(--lora_r 0 then, 2 now\)"),
], ids=["past-max-steps", "past-epochs", "fewer-steps-linear", "more-steps-linear", "other-method",
        "lora-on-a-full-checkpoint"])
def test_a_checkpoint_that_cannot_resume_is_one_line_before_loading(extra, message, saved_model, tiny_bert_dir,
                                                                   tmp_path, capsys, no_model_load):
    import re
    import shutil

    ckpt = tmp_path / "run" / "checkpoint-3"
    shutil.copytree(saved_model, ckpt)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 3, "max_steps": 3, "epoch": 3.0}))
    args = _args(tiny_bert_dir, tmp_path)
    args[args.index("--max_steps") + 1] = "3"
    line = _error_line(capsys, train_cli.main([*args, "--resume_from_checkpoint", str(ckpt), *extra]),
                       "hf-cse-train")
    assert re.search(message, line), line
    assert not (tmp_path / "project").exists()  # the refusal leaves none of the folders it made for --output_dir


# A checkpoint of another encoder got a warning about the pooler, then transformers' missing and unexpected keys and a
# traceback (the optimizer's group sizes for another architecture, torch's size mismatch for other sizes).
@pytest.mark.parametrize("encoder, differs", [
    ("llama", "model_type bert then, llama now"),
    ("wider bert", "hidden_size 32 then, 48 now; intermediate_size 64 then, 96 now"),
])
def test_a_checkpoint_of_another_encoder_is_one_line_before_loading(encoder, differs, saved_model, tiny_bert_dir,
                                                                   tiny_llama_dir, tmp_path, capsys, no_model_load):
    import shutil

    from tiny_models import make_tiny_encoder

    ckpt = tmp_path / "run" / "checkpoint-3"
    shutil.copytree(saved_model, ckpt)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 3, "max_steps": 3}))
    other = tiny_llama_dir if encoder == "llama" else make_tiny_encoder(tmp_path / "wide", hidden=48)
    args = _args(other, tmp_path, "--pooler_type", "avg", "--resume_from_checkpoint", str(ckpt))
    args[args.index("--max_steps") + 1] = "3"
    line = _error_line(capsys, train_cli.main(args), "hf-cse-train")
    assert f"--resume_from_checkpoint {ckpt} was trained from another encoder ({differs}" in line, line
    assert f"trained from (--model_name_or_path {tiny_bert_dir}) to resume it" in line, line
    assert "start a new run (without --resume_from_checkpoint) in another --output_dir" in line, line
    assert not (tmp_path / "project").exists()


# ------------------------------------------------------------------------------------------------ export
@pytest.fixture(scope="module")
def saved_model(tiny_bert_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved") / "run"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    return folder


def test_export_over_an_interrupted_run_keeps_its_record(saved_model, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    run = tmp_path / "run"
    (run / "checkpoint-1").mkdir(parents=True)
    (run / RUN_RECORD_FILE).write_text('{"loss": "infonce"}')
    line = _error_line(capsys, hf_cse_export.main([str(saved_model), str(run), "--overwrite"]), "hf-cse-export")
    assert "is a training run's folder (checkpoint-1, hf_cse_run.json)" in line
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint-1", RUN_RECORD_FILE]


@pytest.mark.parametrize("info, key", [({"data": "x"}, '"data" holds a str'),
                                       ({"dev": [1, 2]}, '"dev" holds a list'),
                                       ({"world_size": "two"}, '"world_size" holds a str')])
def test_export_of_a_hand_edited_training_info_is_one_line(info, key, saved_model, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    path = tmp_path / "records" / "training_info.json"  # not in tmp_path, which it would make a finished run
    path.parent.mkdir()
    path.write_text(json.dumps(info))
    code = hf_cse_export.main([str(saved_model), str(tmp_path / "st"), "--training_info", str(path)])
    line = _error_line(capsys, code, "hf-cse-export")
    assert f"{path}: {key}" in line and not (tmp_path / "st").exists()


def test_a_typo_in_an_evaluation_flag_names_the_closest_one(saved_model, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    code = eval_cli.main(["--model_name_or_path", str(saved_model), "--taks", "STSB", "--output_dir",
                          str(tmp_path / "eval")], prog="run_eval.py")
    assert "unknown flag --taks; did you mean --tasks?" in _error_line(capsys, code, "run_eval.py")
    assert not (tmp_path / "eval").exists()


def test_a_typo_in_an_export_flag_names_the_closest_one(saved_model, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    code = hf_cse_export.main([str(saved_model), str(tmp_path / "st"), "--overwite"])
    assert "unknown flag --overwite; did you mean --overwrite?" in _error_line(capsys, code, "hf-cse-export")


# ------------------------------------------------------------------------------------------------ error lines
def test_long_lines_keep_the_last_names_of_each_path():
    path = "/tmp/" + "/".join(f"level{i}_{'x' * 20}" for i in range(30)) + "/run/out"
    text = f"--output_dir {path} holds checkpoints of a run with other settings; choose another --output_dir."
    short = fit_line(text)
    assert len(short) <= MAX_LINE and short.startswith("--output_dir /tmp/.../") and short.endswith("--output_dir.")
    assert "_xxxxxxxxxxxxxxxxxxxx/run/out holds" in short  # only as many folders go as the line needs
    assert "/tmp/.../run/out holds" in fit_line(text, 120)  # at most, down to the root and the last two names
    assert fit_line("x" * 1000).startswith("x" * 100) and len(fit_line("x" * 1000)) <= MAX_LINE
    assert fit_line("short /a/b/c/d/e") == "short /a/b/c/d/e"  # a line that fits is left as it is


def test_the_middle_cut_goes_around_a_quoted_path_to_copy():
    """The middle cut fell inside the quoted checkpoint path a line offered to resume from ("--resume_from_checkpoint
    '/tmp/. ... goes on from"): it is cut beside it, at words, and the path stays whole."""
    path = "/data/" + "/".join(f"folder_{i}" for i in range(12)) + "/checkpoint-4"
    text = f"{'the problem in many words ' * 10}; --resume_from_checkpoint '{path}' goes on from it{' and so on' * 20}."
    short = fit_line(text, 400)
    assert len(short) <= 400 and f"--resume_from_checkpoint '{path}' " in short and short.count(" ... ") == 1
    assert set(short.split()) - {"..."} <= set(text.split())  # whole words
    assert fit_line(text, 100).count(" ... ") == 1 and len(fit_line(text, 100)) <= 100  # where nothing else can go


def test_a_long_quoted_error_is_cut_at_its_end_keeping_the_fix_whole():
    """The middle cut kept the start and end of the line, and cut hf_cse's own words when another library's error was
    quoted in it: the quote (in brackets, sentences) is shortened first, at a word; hf_cse's own bracketed lists are
    not (the middle cut, where the line needs it)."""
    quoted = "We couldn't connect to 'https://huggingface.co' to load the files. Check your connection " + \
        "and more words " * 30
    text = f"--model_name_or_path org/model: its config cannot be read ({quoted.strip()}). Check the name, or give a " \
           "local folder."
    short = fit_line(text)
    assert len(short) <= MAX_LINE and " ... " not in short.split("(")[0]
    assert short.startswith("--model_name_or_path org/model: its config cannot be read (We couldn't connect to")
    assert re.search(r" (and|more|words) \.\.\.\)\. Check the name, or give a local folder\.$", short)  # at a word
    settings = "settings (" + "; ".join(f"setting_{i}: {i} then, {i + 1} now" for i in range(20)) + ")"
    assert " ... " in fit_line(f"--output_dir out holds a run with other {settings}: rerun it.")  # the middle cut


def test_a_changed_max_steps_is_one_line_under_the_limit(tiny_bert_dir, tmp_path, capsys, monkeypatch):
    def stop(cls, *args, **kwargs):
        raise CSEError("stopped where the model would load")

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder", classmethod(stop))
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    args = _args(tiny_bert_dir, tmp_path)
    assert train_cli.main(args) == 1  # a new run: its record is written, then it stops
    out = tmp_path / LONG / "out"
    fake_checkpoint(out / "checkpoint-1")
    args[args.index("--max_steps") + 1] = "3"
    capsys.readouterr()
    line = _error_line(capsys, train_cli.main(args), "hf-cse-train")
    assert "holds checkpoints of a run with other settings (max_steps: 2 then, 3 now)" in line, line
    # paths whole where the line has room, else shortened from the root, never dropped
    assert re.search(r"--output_dir /tmp/\S*/runs/out holds", line), line
    assert re.search(r"--resume_from_checkpoint /tmp/\S*/out/checkpoint-1 to go on", line), line
    assert line.removesuffix(" (HF_CSE_DEBUG=1 shows the traceback)").endswith("start over.")


def test_the_error_is_printed_after_any_progress_bar(capsys, monkeypatch):
    from tqdm.auto import tqdm

    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)

    def fails():
        bar = tqdm(total=10, file=sys.stderr)
        bar.update(3)
        raise CSEError("the loss diverged at step 3 " + os.sep.join(["", "x"] * 80))

    assert run_cli(fails, "hf-cse-train") == 1
    err = capsys.readouterr().err
    assert err.rstrip("\n").splitlines()[-1].startswith("hf-cse-train: error: the loss diverged at step 3")
    assert len(err.rstrip("\n").splitlines()[-1]) <= MAX_LINE


def test_evaluation_results_are_not_written_into_an_unfinished_run(saved_model, tmp_path, capsys, monkeypatch):
    from eval_helpers import write_toy_senteval

    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / RUN_RECORD_FILE).write_text("{}")
    code = eval_cli.main(["--model_name_or_path", str(saved_model), "--senteval_data_dir",
                          str(write_toy_senteval(tmp_path / "senteval")), "--tasks", "STSB", "--output_dir", str(run)],
                         prog="run_eval.py")
    line = _error_line(capsys, code, "run_eval.py")
    assert "holds an unfinished training run (checkpoint-2, hf_cse_run.json)" in line and "run-eval beside it" in line
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint-2", RUN_RECORD_FILE]


@pytest.mark.parametrize("case", ["missing-mrpc-file", "model-without-tokenizer"])
def test_evaluation_errors_fit_the_line(case, saved_model, tmp_path, capsys, monkeypatch):
    import shutil

    from eval_helpers import write_toy_senteval

    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    senteval = write_toy_senteval(tmp_path / LONG / LONG / "senteval")
    model = saved_model
    tasks = "STSB"
    if case == "missing-mrpc-file":
        shutil.rmtree(senteval / "MRPC")
        tasks = "MRPC"
    else:
        model = tmp_path / LONG / LONG / "no_tokenizer"
        shutil.copytree(saved_model, model, ignore=shutil.ignore_patterns("tokenizer*", "vocab*", "special*"))
    code = eval_cli.main(["--model_name_or_path", str(model), "--senteval_data_dir", str(senteval), "--tasks",
                          tasks, "--output_dir", str(tmp_path / "eval"), "--disable_tqdm"], prog="run_eval.py")
    line = _error_line(capsys, code, "run_eval.py")
    assert ("MRPC" in line) if case == "missing-mrpc-file" else ("no_tokenizer" in line and "tokenizer" in line)



@pytest.mark.slow  # subprocesses
@pytest.mark.parametrize("command, argv, words", [
    ("train", ["--method", "bogus"], "argument --method: invalid choice: 'bogus'"),
    ("train", ["--learning_rate", "abc"], "argument --learning_rate: invalid float value: 'abc'"),
    ("eval", ["--batch_size", "abc"], "invalid int value: 'abc'"),
    ("export", ["only_the_checkpoint"], "the following arguments are required: out_dir (usage: hf-cse-export "
                                        "[options] CHECKPOINT OUT_DIR)"),
])
def test_a_value_argparse_cannot_read_is_one_line_not_every_flag(command, argv, words):
    """argparse prints the whole usage (every flag: 187 lines for hf-cse-train) above such an error; the commands
    print the error alone, in one line (a missing positional with the usage's words)."""
    proc = subprocess.run([sys.executable, "-m", "hf_cse", command, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"hf-cse-{command}: error: ") and words in lines[0]


def test_a_presets_best_model_selection_that_the_flags_contradict_names_the_preset(tiny_bert_dir, tmp_path, capsys,
                                                                                 no_model_load, senteval_dir):
    """transformers refuses load_best_model_at_end without saves; the user gave --save_strategy no, the preset the
    selection: the line says which set it and how to go without."""
    args = _args(tiny_bert_dir, tmp_path, "--preset", "simcse_bert", "--save_strategy", "no", "--senteval_data_dir",
                 str(senteval_dir))
    line = _error_line(capsys, train_cli.main(args), "hf-cse-train")
    assert "(--preset simcse_bert sets --load_best_model_at_end true; --load_best_model_at_end false goes without)" \
        in line, line


def test_a_record_given_as_the_other_kind_is_one_line(saved_model, tmp_path, capsys, monkeypatch):
    """A training record given as evaluation results would publish its numbers (world_size, ...) as scores; results
    given as the training record would show their scores as training information."""
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    records = tmp_path / "records"
    records.mkdir()
    info = records / "training_info.json"
    info.write_text(json.dumps({"training_args": {"learning_rate": 3e-5}, "world_size": 1}))
    results = records / "results.json"
    results.write_text(json.dumps({"STSBenchmark": 80.0, "settings": {}, "timing": {}, "details": {}}))
    line = _error_line(capsys, hf_cse_export.main([str(saved_model), str(tmp_path / "a"), "--eval_results",
                                                   str(info)]), "hf-cse-export")
    assert f"{info} is a training record (training_info.json), not evaluation results; give it as --training_info" \
        in line, line
    line = _error_line(capsys, hf_cse_export.main([str(saved_model), str(tmp_path / "b"), "--training_info",
                                                   str(results)]), "hf-cse-export")
    assert f"--training_info {results} holds evaluation results (run_eval.py's results.json), not a training " \
           "record: give it as --eval_results" in line, line
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
