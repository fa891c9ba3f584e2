"""run_unsup.py end to end (in-process) and its argument errors."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import random_sentences

from hf_cse.cli import train as train_cli
from hf_cse.models import ImSimCSEModel, SimCSEModel

ROOT = str(Path(__file__).resolve().parents[2])  # the checkout: run_unsup.py is at its top


def _train_file(tmp_path, n=24):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(random_sentences(n)) + "\n")
    return str(path)


def _args(folder, tmp_path, *extra):
    return ["--model_name_or_path", str(folder), "--train_file", _train_file(tmp_path), "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "out"), "--use_cpu",
            "--disable_tqdm", "true", *extra]


@pytest.mark.slow
def test_trains_saves_and_reloads(tiny_bert_dir, tmp_path):
    train_cli.train_from_args(_args(tiny_bert_dir, tmp_path, "--loss", "infonce", "--temperature", "0.1"))
    model = SimCSEModel.from_pretrained(tmp_path / "out")
    assert model.config.loss == "infonce" and model.config.loss_kwargs == {"temperature": 0.1}
    assert (tmp_path / "out" / "tokenizer_config.json").is_file()


@pytest.mark.slow
def test_imsimcse_method_keeps_its_defaults_and_takes_flags(tiny_bert_dir, tmp_path):
    train_cli.train_from_args(_args(tiny_bert_dir, tmp_path, "--method", "imsimcse", "--m", "0.8"))
    model = ImSimCSEModel.from_pretrained(tmp_path / "out")
    assert model.config.loss == "off_dropout_infonce"
    assert model.config.loss_kwargs == {"temperature": 0.05, "m": 0.8}
    assert model.config.off_dropout and model.config.dcl_weight == 0.1


def test_flag_not_taken_by_the_loss_is_an_error(tiny_bert_dir, tmp_path):
    with pytest.raises(ValueError, match="does not take --m"):
        train_cli.train_from_args(_args(tiny_bert_dir, tmp_path, "--loss", "infonce", "--m", "0.3"))


def test_unknown_loss_lists_the_losses(tiny_bert_dir, tmp_path):
    with pytest.raises(ValueError, match="Unknown loss 'nce'.*infonce"):
        train_cli.train_from_args(_args(tiny_bert_dir, tmp_path, "--loss", "nce"))


def test_fewer_sentences_than_a_batch(tiny_bert_dir, tmp_path):
    args = _args(tiny_bert_dir, tmp_path)
    args[args.index("--per_device_train_batch_size") + 1] = "64"
    with pytest.raises(ValueError, match="fewer than one global batch"):
        train_cli.train_from_args(args)


@pytest.mark.slow
def test_cli_prints_a_clear_error_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, f"{ROOT}/run_unsup.py", "--train_file", str(tmp_path / "missing.txt"),
                           "--output_dir", str(tmp_path / "o")], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0
    assert "run_unsup.py: error: --train_file" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
