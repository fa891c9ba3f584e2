"""run_unsup.py checks every argument before a model is loaded or data are tokenized; presets combine with
explicit flags; bad input ends in one line, not a traceback; several GPUs without a launcher are refused."""

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import random_sentences
from transformers import TrainingArguments

from hf_cse.cli import train as run_unsup
from hf_cse.models import CSEOutput, CSEPreTrainedModel

ROOT = str(Path(__file__).resolve().parents[1])  # the checkout: run_unsup.py is at its top


class ModelLoaded(Exception):
    """Raised by the patched model loader: every check before it passed."""

    def __init__(self, config_kwargs, config):
        super().__init__("model loaded")
        self.config_kwargs = config_kwargs
        self.config = config  # the method's config the model would have been built with


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(cls, name_or_path, **config_kwargs):
        raise ModelLoaded(config_kwargs, cls.config_class(**config_kwargs))

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder", classmethod(refuse))
    monkeypatch.setattr(run_unsup, "tokenize_dataset", lambda *a, **k: pytest.fail("data were tokenized"))


@pytest.fixture
def train_file(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(random_sentences(24)) + "\n")
    return str(path)


def _args(encoder, train_file, out, *extra):
    return ["--model_name_or_path", str(encoder), "--train_file", train_file, "--max_steps", "1",
            "--per_device_train_batch_size", "8", "--output_dir", str(out), "--use_cpu", "--disable_tqdm", "true",
            *extra]


BAD = [
    (["--max_seq_length", "65"], "--max_seq_length 65 exceeds .* \\(64 positions"),
    (["--max_seq_length", "0"], "--max_seq_length must be at least 2"),
    (["--max_seq_length", "1"], "--max_seq_length must be at least 2"),
    (["--max_seq_length", "-5"], "--max_seq_length must be at least 2"),
    (["--gradient_accumulation_steps", "0"], "--gradient_accumulation_steps must be at least 1"),
    (["--per_device_train_batch_size", "1"], "at least 2 sentences"),
    (["--max_steps", "0"], "--max_steps 0 trains nothing"),
    (["--max_steps", "-1", "--num_train_epochs", "0"], "--num_train_epochs 0.0 trains nothing"),
    (["--loss", "infonce", "--temperature", "-1"], "temperature must be a finite number > 0"),
    (["--loss", "nce"], "Unknown loss 'nce'"),
    (["--method", "diffcse", "--cached_minibatch_size", "4"], "incompatible with method='diffcse'"),
    (["--cuda_graphs", "on"], "cuda_graphs=on cannot apply: the step runs on cpu, not a CUDA GPU"),
    (["--loss", "off_dropout_infonce"], "needs no-dropout embeddings"),
    (["--eval_strategy", "steps", "--eval_steps", "1"], "no --senteval_data_dir was given"),
    (["--preset", "simcse_bert"], "--preset simcse_bert evaluates on STS-B dev .* --senteval_data_dir"),
    (["--eval_source", "web"], "--eval_source 'web': use local"),
    (["--senteval_data_dir", "/no/such/senteval", "--eval_strategy", "steps"], "/no/such/senteval does not exist"),
    (["--model_name_or_path", "/no/such/model"], "no such folder"),
    (["--generator_name_or_path", "/no/such/mlm", "--method", "diffcse"], "generator_name_or_path .* no such"),
]


@pytest.mark.parametrize("extra,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_arguments_fail_before_the_model_is_loaded(tiny_bert_dir, train_file, tmp_path, no_model_load, extra,
                                                       message):
    with pytest.raises((ValueError, OSError), match=message):  # SentEval's missing data is a FileNotFoundError
        run_unsup.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", *extra))
    assert not (tmp_path / "out").exists()


def test_good_arguments_reach_the_model(tiny_bert_dir, train_file, tmp_path, no_model_load):
    with pytest.raises(ModelLoaded):
        run_unsup.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--max_seq_length", "64"))


def test_sequence_limit_subtracts_robertas_position_offset(tiny_roberta_dir, train_file, tmp_path, no_model_load):
    """RoBERTa's positions start after the padding index: 80 position embeddings hold 78 tokens."""
    with pytest.raises(ValueError, match="--max_seq_length 79 exceeds .* \\(78 positions"):
        run_unsup.train_from_args(_args(tiny_roberta_dir, train_file, tmp_path / "out", "--max_seq_length", "79"))
    with pytest.raises(ModelLoaded):
        run_unsup.train_from_args(_args(tiny_roberta_dir, train_file, tmp_path / "out", "--max_seq_length", "78"))


def test_output_folder_is_checked_before_the_model_is_loaded(tiny_bert_dir, train_file, tmp_path, no_model_load):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.csv").write_text("x")
    with pytest.raises(ValueError, match="--overwrite_output_dir"):
        run_unsup.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out"))
    with pytest.raises(ValueError, match="encoder's folder"):
        run_unsup.train_from_args(_args(tiny_bert_dir, train_file, tiny_bert_dir))


# ----------------------------------------------------------------------------------------------- presets
@pytest.mark.parametrize("preset,extra,expected", [
    ("focal_infonce_bert", ["--loss", "infonce"], {"loss": "infonce", "loss_kwargs": {"temperature": 0.07}}),
    ("gs_infonce_bert", ["--loss", "infonce"], {"loss": "infonce", "loss_kwargs": {"temperature": 0.05}}),
    ("diffcse_bert", ["--method", "simcse"], {"loss": "infonce", "projector": "batchnorm"}),
    ("simcse_bert", ["--loss", "gs_infonce", "--num_noise", "8"],
     {"loss": "gs_infonce", "loss_kwargs": {"temperature": 0.05, "num_noise": 8}}),
])
def test_preset_values_the_chosen_loss_or_method_does_not_take_are_dropped(
        tiny_bert_dir, train_file, tmp_path, no_model_load, senteval_dir, caplog, preset, extra, expected):
    with pytest.raises(ModelLoaded) as loaded, caplog.at_level(logging.INFO, logger="run_unsup"):
        run_unsup.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--preset", preset,
                             "--senteval_data_dir", str(senteval_dir), *extra))
    kwargs, config = loaded.value.config_kwargs, loaded.value.config
    assert {k: getattr(config, k) for k in expected} == expected
    assert not {"masking_ratio", "lambda_rtd"} & set(kwargs)
    if preset != "simcse_bert":
        assert f"--preset {preset}: dropped" in caplog.text


def test_preset_value_typed_by_the_user_is_still_an_error(tiny_bert_dir, train_file, tmp_path, no_model_load,
                                                          senteval_dir):
    with pytest.raises(ValueError, match="--loss infonce does not take --m"):
        run_unsup.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--preset", "focal_infonce_bert",
                             "--loss", "infonce", "--m", "0.3", "--senteval_data_dir", str(senteval_dir)))


# ----------------------------------------------------------------------------------------------- one line
def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, f"{ROOT}/run_unsup.py", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow
def test_cli_errors_are_one_line_without_traceback(tiny_bert_dir, tmp_path):
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("text,label\na sentence,1\nan extra,column,1\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "n.txt").write_text("x")
    base = ["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(tmp_path / "out")]
    cases = [
        ([*base, "--max_seq_length", "0"], "--max_seq_length"),
        (["--model_name_or_path", str(tmp_path / "missing"), "--output_dir", str(tmp_path / "o")], "no such folder"),
        ([*base[:2], "--output_dir", str(tiny_bert_dir)], "encoder's folder"),
        ([*base[:2], "--output_dir", str(tmp_path / "notes")], "--overwrite_output_dir"),
        ([*base, "--train_file", str(bad_csv)], "line 3"),
    ]
    for args, needle in cases:
        proc = _cli(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1, proc.stderr
        assert len(lines) == 1 and lines[0].startswith("run_unsup.py: error:") and needle in lines[0], proc.stderr


# ----------------------------------------------------------------------------------------------- several GPUs
def test_dataparallel_gather_cannot_merge_the_models_output():
    """Why several GPUs in one process are refused: nn.DataParallel's gather fails on CSEOutput (and each replica's
    loss would see only its slice of the batch as negatives)."""
    from torch.nn.parallel.scatter_gather import gather

    outputs = [CSEOutput(embeddings={"z1": torch.zeros(2, 3)}), CSEOutput(embeddings={"z1": torch.ones(2, 3)})]
    with pytest.raises(TypeError, match="'CSEOutput' object is not iterable"):
        gather(outputs, "cpu")


def test_several_gpus_in_one_process_are_refused(tiny_bert_dir, train_file, tmp_path, monkeypatch, no_model_load):
    from hf_cse.models import SimCSEModel
    from hf_cse.trainer import ContrastiveTrainer

    monkeypatch.setattr(TrainingArguments, "n_gpu", property(lambda self: 2))
    with pytest.raises(ValueError, match="2 GPUs are visible to one process.*accelerate launch"):
        run_unsup.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out"))
    monkeypatch.undo()  # also restores the model loader of no_model_load
    tiny = SimCSEModel.from_encoder(str(tiny_bert_dir))
    monkeypatch.setattr(TrainingArguments, "n_gpu", property(lambda self: 2))
    with pytest.raises(ValueError, match="accelerate launch"):
        ContrastiveTrainer(model=tiny, args=TrainingArguments(str(tmp_path / "t"), use_cpu=True, report_to="none"))


# ----------------------------------------------------------------------------------------------- training data
@pytest.mark.parametrize("rows,message", [
    ("text,label\na sentence,1\nan extra,column,1\n", "line 3 has 3 fields, the header has 2"),
    ("text,label\na sentence,1\ntoo few\n", "line 3 has 1 fields, the header has 2"),
    ("text,label\n3,1\n4.5,0\n", "column 'text' holds only numbers"),
])
def test_malformed_training_csv_is_named_with_its_line(tmp_path, rows, message):
    from hf_cse.data import DataError, load_train_dataset

    path = tmp_path / "train.csv"
    path.write_text(rows)
    with pytest.raises(DataError, match=message):
        load_train_dataset(str(path), text_column="text")


def test_hub_data_set_while_offline_names_the_fix(monkeypatch):
    import datasets

    from hf_cse.data import DataError, load_train_dataset

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/data' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="HF_HUB_OFFLINE .* or give a local train_file"):
        load_train_dataset(dataset_name="someone/data")
