"""Every flag is checked before the work starts, and the message names the flag: the optimizer's values, output
folders, --max_train_samples, a changed --max_steps; a divergence after the last logging step and Ctrl-C end in
one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import hang_timeout, random_sentences, scored_pairs_file

from hf_cse.checks import InputError
from hf_cse.cli import evaluate as run_eval
from hf_cse.cli import train as run_unsup
from hf_cse.cli.output_dir import prepare_output_dir
from hf_cse.folder_lock import lock_file
from hf_cse.metrics import DivergedError
from hf_cse.models import CSEPreTrainedModel, SimCSEModel

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(cls, *args, **kwargs):
        pytest.fail("the encoder was loaded although a flag was bad")

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder", classmethod(refuse))
    monkeypatch.setattr(run_unsup, "load_train_dataset", lambda *a, **k: pytest.fail("the corpus was read"))


def _args(encoder, tmp_path, *extra):
    train = tmp_path / "train.txt"
    if not train.exists():
        train.write_text("\n".join(random_sentences(32)) + "\n")
    return ["--model_name_or_path", str(encoder), "--train_file", str(train), "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "out"), "--use_cpu",
            "--disable_tqdm", "true", *extra]


@pytest.mark.parametrize("flag, value, message", [
    ("--learning_rate", "0", "--learning_rate 0.0 must be a finite number > 0.*trains nothing"),
    ("--learning_rate", "-1e-5", "--learning_rate -1e-05 must be a finite number > 0"),
    ("--learning_rate", "nan", "--learning_rate nan must be a finite number > 0"),
    ("--warmup_steps", "nan", "--warmup_steps nan must be >= 0"),  # < 0: TrainingArguments refuses it
    ("--weight_decay", "-0.01", "--weight_decay -0.01 must be a finite number >= 0"),
    ("--weight_decay", "inf", "--weight_decay inf must be"),
    ("--adam_beta2", "1.0", "--adam_beta2 1.0 must be in \\[0, 1\\)"),
    ("--max_grad_norm", "nan", "--max_grad_norm nan must be"),
])
def test_optimizer_flags_are_checked_before_the_encoder_is_loaded(flag, value, message, tiny_bert_dir, tmp_path,
                                                                  no_model_load):
    with pytest.raises(InputError, match=message) as err:
        run_unsup.train_from_args(_args(tiny_bert_dir, tmp_path, f"{flag}={value}"))
    assert len(str(err.value)) < 300
    assert not (tmp_path / "out").exists()


def test_report_to_without_its_package_is_refused_before_the_encoder_is_loaded(tiny_bert_dir, tmp_path,
                                                                              no_model_load, monkeypatch):
    """--report_to tensorboard on a machine without tensorboard: one line naming the flag and the fix, before the
    weights are loaded and the text is read (transformers itself fails only when the Trainer starts)."""
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "is_tensorboard_available", lambda: False)
    with pytest.raises(InputError, match=r"--report_to tensorboard: its package is not installed.*pip install "
                                         r"tensorboard\) or drop --report_to tensorboard") as err:
        run_unsup.train_from_args(_args(tiny_bert_dir, tmp_path, "--report_to", "tensorboard"))
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_max_train_samples_is_named_as_the_cause(tiny_bert_dir, tmp_path):
    with pytest.raises(ValueError, match="train.txt cut to --max_train_samples 4 has 4 sentences, fewer than one "
                                         "global batch of 8"):
        run_unsup.train_from_args(_args(tiny_bert_dir, tmp_path, "--max_train_samples", "4"))


def test_a_larger_max_steps_for_an_interrupted_run_names_resume_from_checkpoint(tmp_path):
    prepare_output_dir(tmp_path, {"max_steps": 2})
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    with pytest.raises(InputError, match="max_steps: 2 then, 4 now.*--resume_from_checkpoint "
                                         f"{tmp_path / 'checkpoint-2'} to go on with these") as err:
        prepare_output_dir(tmp_path, {"max_steps": 4})
    assert len(str(err.value).replace(str(tmp_path), "DIR")) < 300  # short, whatever the length of the user's paths


def test_a_run_folder_without_tokenizer_files_says_so(tiny_bert_dir, tmp_path, no_model_load):
    encoder = tmp_path / "encoder"
    shutil.copytree(tiny_bert_dir, encoder)
    for path in encoder.glob("*"):
        if path.name.startswith(("tokenizer", "vocab", "special_tokens")):
            path.unlink()
    with pytest.raises(InputError, match="holds no tokenizer files.*tokenizer.save_pretrained"):
        run_unsup.train_from_args(_args(encoder, tmp_path))


def test_from_pretrained_of_a_plain_encoder_points_at_from_encoder(tiny_bert_dir):
    with pytest.raises(ValueError, match=r"plain bert model, not an hf_cse one.*SimCSEModel.from_encoder\("):
        SimCSEModel.from_pretrained(str(tiny_bert_dir))


def test_an_unwritable_run_eval_output_dir_fails_before_any_encoding(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(run_eval.SentenceEncoder, "from_pretrained",
                        lambda *a, **k: pytest.fail("a model was loaded before the output folder was checked"))
    (tmp_path / "file.txt").write_text("x")
    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 8, 3, seed=0)
    code = run_eval.main(["--tasks", "none", "--eval_file", str(pairs),
                          "--output_dir", str(tmp_path / "file.txt" / "o")])
    err = capsys.readouterr().err
    assert code == 1 and "--output_dir" in err and "choose a folder you can write to" in err


@pytest.mark.slow
def test_a_divergence_after_the_last_logging_step_is_one_clear_error(tiny_bert_dir, tmp_path):
    """Before: with fewer steps than --logging_steps, a learning rate of 1e30 trained and exported a broken model."""
    with pytest.raises(DivergedError, match="lower the learning rate"):
        run_unsup.train_from_args(_args(tiny_bert_dir, tmp_path, "--learning_rate", "1e30", "--max_steps", "3",
                             "--logging_steps", "5"))
    out = tmp_path / "out"
    assert not (out / "config.json").exists() and not (out / "sentence-transformers").exists()


@pytest.mark.slow
def test_ctrl_c_during_training_is_one_line_and_exit_code_130(tiny_bert_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HF_CSE_DEBUG"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               TOKENIZERS_PARALLELISM="false")
    args = _args(tiny_bert_dir, tmp_path, "--max_steps", "100000", "--logging_steps", "1")
    proc = subprocess.Popen([sys.executable, "run_unsup.py", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:  # wait until it trains
        lines.append(line)
        if "'loss'" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=hang_timeout(300))[0]
    assert proc.returncode == 130, "".join(lines) + rest
    assert "Traceback" not in rest and "run_unsup.py: interrupted (Ctrl-C)" in rest.strip().splitlines()[-1]
    assert not lock_file(tmp_path / "out").exists()
    assert json.loads((tmp_path / "out" / "hf_cse_run.json").read_text())["max_steps"] == 100000
