"""Bad input to `python run_eval.py` and `python -m hf_cse export`, as a user types it: exit code 1 and stderr is one
line that starts with the program's name and names the problem (no traceback unless HF_CSE_DEBUG=1); a loss's own
error gets the flag advice there; `run_unsup.py --help` offers each loss choice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from eval_helpers import write_toy_senteval

REPO = Path(__file__).resolve().parents[1]


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


def run_eval_args(f, *extra, model=None, out=None):
    return ["run_eval.py", "--model_name_or_path", str(model or f["model"]), "--senteval_data_dir", str(f["senteval"]),
            "--tasks", "STSB", "--output_dir", str(out or f["root"] / "eval_out"), "--disable_tqdm", *extra]


CASES = {
    "eval-missing-model": (lambda f: run_eval_args(f, model=f["root"] / "nope"), "no such folder"),
    "eval-model-is-a-file": (lambda f: run_eval_args(f, model=f["root"] / "a_file"), "is a file"),
    "eval-folder-without-config": (lambda f: run_eval_args(f, model=f["root"] / "empty_folder"),
                                   "folder without config.json or modules.json"),
    "eval-hub-model-offline": (lambda f: run_eval_args(f, model="someone/not-cached"), "HF_HUB_OFFLINE"),
    "eval-hub-data-offline": (lambda f: run_eval_args(f, "--senteval_source", "hub"),
                              "cannot read the Hub data set mteb/stsbenchmark-sts: offline mode is on"),
    "eval-output-is-a-file": (lambda f: run_eval_args(f, out=f["root"] / "a_file"), "--output_dir .* is a file"),
    "eval-device-foo": (lambda f: run_eval_args(f, "--device", "foo"), "--device 'foo' is not a device"),
    "eval-device-cuda-99": (lambda f: run_eval_args(f, "--device", "cuda:99"), "--device cuda:99: torch sees"),
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
    "export-missing-tokenizer": (
        lambda f: ["-m", "hf_cse", "export", str(f["ckpt"]), str(f["root"] / "st"), "--tokenizer",
                   str(f["root"] / "no_tokenizer")], "--tokenizer .*no_tokenizer: no such folder"),
}


def run(args, debug: bool = False):
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
    from hf_cse.cli import evaluate as run_eval
    from hf_cse.cli import export

    capsys.readouterr()
    code = run_eval.main(args[1:], prog="run_eval.py") if args[0] == "run_eval.py" else export.main(args[3:])
    return subprocess.CompletedProcess(args, code, "", capsys.readouterr().err)


# the cases run as a subprocess are slow (the fast lane keeps the in-process ones)
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SUBPROCESS else c for c in CASES],
                         ids=list(CASES))
def test_bad_input_is_one_line_without_traceback(case, files, capsys, monkeypatch):
    import re

    make_args, message = CASES[case]
    if case in SUBPROCESS:
        proc = run(make_args(files))
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
    proc = run(run_eval_args(files, model=files["root"] / "nope"), debug=True)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "no such folder" in proc.stderr


@pytest.mark.slow
def test_run_unsup_help_works_and_offers_each_loss_choice_from_its_literal():
    import re
    import typing

    from hf_cse.losses import available_losses, get_loss_class, loss_hyperparameters

    proc = run(["run_unsup.py", "--help"])
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


@pytest.mark.parametrize(
    ("make_error", "advice"),
    [
        (lambda: _loss_error("infonce", 1), "Increase --per_device_train_batch_size"),
        (lambda: _loss_error("off_dropout_infonce", 4), "Use --method imsimcse (or --off_dropout)"),
        (lambda: _loss_error("mpt", 4, z_neg=True), "Drop --negative_column"),
    ],
    ids=["batch-too-small", "missing-no-dropout-embeddings", "hard-negatives-not-taken"],
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
