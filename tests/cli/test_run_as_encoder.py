"""An hf_cse run's folder given as the encoder to start from (``--model_name_or_path``, ``from_encoder``): one line
that recognises the run and names the fixes (its export, or resuming the run itself), not "'hf_cse_simcse' is not a
text model"."""

from __future__ import annotations

import pytest
from transformers import AutoConfig

from hf_cse.checks import InputError
from hf_cse.cli import entry_points
from hf_cse.cli.preflight import encoder_config
from hf_cse.errors import CSEError
from hf_cse.models import SimCSEConfig, SimCSEModel
from hf_cse.models.loading import check_text_encoder
from hf_cse.run_as_encoder import METHOD_MODEL_TYPE_PREFIX


@pytest.fixture(scope="module")
def run_folder(tiny_bert_dir, tmp_path_factory):
    """A finished run's folder as hf_cse writes it (the parts read here): the method model with its tokenizer, a
    checkpoint of it, and its export."""
    from transformers import AutoTokenizer

    run = tmp_path_factory.mktemp("run") / "simcse-run"
    model, tokenizer = SimCSEModel.from_encoder(str(tiny_bert_dir)), AutoTokenizer.from_pretrained(tiny_bert_dir)
    for folder in (run, run / "checkpoint-2", run / "checkpoint-10"):
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    (run / "sentence-transformers").mkdir()
    return run


def test_every_method_model_type_has_the_prefix():
    from hf_cse.models import METHODS

    assert all(cls.config_class.model_type.startswith(METHOD_MODEL_TYPE_PREFIX) for cls in METHODS.values())


def test_the_training_command_names_the_export_and_the_resume(run_folder, tmp_path, capsys):
    train = tmp_path / "train.txt"
    train.write_text("a sentence\nanother one\n")
    argv = ["--model_name_or_path", str(run_folder), "--train_file", str(train), "--output_dir", str(tmp_path / "o")]
    assert entry_points.train(argv, prog="run_unsup.py") == 1  # the start's check: before torch is imported
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"run_unsup.py: error: --model_name_or_path {run_folder} holds an hf_cse simcse model")
    assert f"give --model_name_or_path {run_folder / 'sentence-transformers'} (its export" in line
    assert f"--output_dir {run_folder} --resume_from_checkpoint {run_folder / 'checkpoint-10'}" in line
    assert "not a text model" not in line
    with pytest.raises(InputError, match="holds an hf_cse simcse model") as late:  # the command's own check
        encoder_config(str(run_folder))
    assert str(late.value) in line


def test_a_checkpoint_without_an_export_is_told_to_export_it(run_folder):
    with pytest.raises(InputError, match=r"export it \(hf-cse-export \S+checkpoint-2 OUT: the merged plain encoder\) "
                                         r"and give --model_name_or_path OUT; to go on with that run itself, give "
                                         r"--output_dir \S+ --resume_from_checkpoint \S+checkpoint-10\."):
        encoder_config(str(run_folder / "checkpoint-2"))


def test_from_encoder_names_the_export_and_from_pretrained(run_folder):
    with pytest.raises(CSEError) as refused:
        SimCSEModel.from_encoder(str(run_folder))
    message = str(refused.value)
    assert f"from_encoder({str(run_folder / 'sentence-transformers')!r})" in message
    assert f"SimCSEModel.from_pretrained({str(run_folder)!r})" in message
    assert f"resume_from_checkpoint={str(run_folder / 'checkpoint-10')!r}" in message
    assert "--" not in message  # the Python API's terms


def test_a_config_built_around_a_runs_config_names_the_export(run_folder):
    run_config = AutoConfig.from_pretrained(run_folder)
    with pytest.raises(CSEError, match="encoder_config is an hf_cse model's config .*<run>/sentence-transformers"):
        check_text_encoder(run_config)
    with pytest.raises(CSEError, match="resume_from_checkpoint"):
        SimCSEConfig(encoder_config=run_config)
