"""The README's Python API example, run as written (paths swapped for tiny ones), trains the same weights as
``hf-cse-train`` with the same settings and seed, for SimCSE and DiffCSE; and with dev data the saved model is the
best on it, the untrained encoder included."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import torch
from eval_helpers import write_toy_senteval
from helpers import package_methods, random_sentences
from safetensors.torch import load_file
from transformers import set_seed

from hf_cse.cli import train as hf_cse_train
from hf_cse.evaluation.before_after import UntrainedCandidate
from hf_cse.models import get_method

pytestmark = pytest.mark.slow  # runs hf-cse-train end to end

README = Path(__file__).resolve().parents[2] / "README.md"
# the flags that state the example's settings (one epoch: both defaults)
SETTINGS = ["--per_device_train_batch_size", "64", "--learning_rate", "3e-5",
            "--seed", "42", "--loss", "focal_infonce", "--temperature", "0.07", "--m", "0.3",
            "--dcl_weight", "0.1", "--dcl_temperature", "5.0"]


def readme_example() -> str:
    section = README.read_text().split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def inputs(tmp_path, tiny_bert_dir):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(128)) + "\n")
    return tiny_bert_dir, train, write_toy_senteval(tmp_path / "senteval")


def run_example(tmp_path, encoder, train, senteval, model_class="SimCSEModel") -> Path:
    out = tmp_path / "api"
    code = (readme_example().replace("bert-base-uncased", str(encoder)).replace("wiki1m_for_simcse.txt", str(train))
            .replace('"out"', repr(str(out))).replace("SentEval/data/downstream", str(senteval))
            .replace("SimCSEModel", model_class))
    exec(compile(code, "README.md (Python API)", "exec"), {})
    return out


@pytest.mark.parametrize("method, model_class", [("simcse", "SimCSEModel"), ("diffcse", "DiffCSEModel")])
def test_the_readme_example_trains_the_weights_of_hf_cse_train(method, model_class, inputs, tmp_path, monkeypatch):
    encoder, train, senteval = inputs
    # the trained weights are compared: the untrained encoder (which may score better on the toy dev data) is no
    # candidate here; the dev score is still computed before and after (the other test checks the selection)
    monkeypatch.setattr(UntrainedCandidate, "of", classmethod(lambda cls, model, sharded=False, rescore=False: None))
    api = run_example(tmp_path, encoder, train, senteval, model_class)
    cli = tmp_path / "cli"
    assert hf_cse_train.main(["--method", method, "--model_name_or_path", str(encoder), "--train_file", str(train),
                              "--senteval_data_dir", str(senteval), "--output_dir", str(cli), *SETTINGS]) == 0
    by_api, by_cli = load_file(api / "model.safetensors"), load_file(cli / "model.safetensors")
    assert by_api.keys() == by_cli.keys()
    for name, weight in by_cli.items():
        torch.testing.assert_close(by_api[name], weight, rtol=0, atol=0, msg=name)
    set_seed(42)
    untrained = get_method(method).from_encoder(str(encoder)).state_dict()
    assert any(not torch.equal(untrained[name], weight) for name, weight in by_cli.items())  # 2 steps trained
    # the rest of the run folder as the command line writes it: tokenizer, export, record, the dev score
    for folder in (api, cli):
        assert (folder / "tokenizer.json").is_file() and (folder / "sentence-transformers" / "modules.json").is_file()
        info = json.loads((folder / "training_info.json").read_text())
        assert info["training_args"]["num_train_epochs"] == 1 and info["dev"]["kept_step"] == 2
    by_api, by_cli = (json.loads((folder / "training_info.json").read_text()) for folder in (api, cli))
    assert by_api["dev"] == by_cli["dev"]
    # the data's facts the trainer knows without being told (hf-cse-train adds the file's name)
    assert by_api["data"] == {"num_sentences": by_cli["data"]["num_sentences"], "max_seq_length": 32}
    assert by_cli["data"]["max_seq_length"] == 32 and by_cli["data"]["source"] == train.name
    card = (api / "sentence-transformers" / "README.md").read_text()
    assert f"| Training sentences | {by_cli['data']['num_sentences']:,} |" in card


def test_the_untrained_encoder_is_saved_when_training_makes_it_worse_on_the_dev_data(inputs, tmp_path, caplog):
    """A learning rate that wrecks the encoder: the dev score falls, so the saved weights are the untrained ones,
    and the run's last line says so."""
    encoder, train, senteval = inputs
    out = tmp_path / "out"
    args = ["--model_name_or_path", str(encoder), "--train_file", str(train), "--senteval_data_dir", str(senteval),
            "--output_dir", str(out), "--per_device_train_batch_size", "16", "--max_steps", "8",
            "--learning_rate", "0.5", "--lr_scheduler_type", "constant", "--precision", "fp32", "--seed", "7"]
    with caplog.at_level(logging.INFO):
        assert hf_cse_train.main(args) == 0
    info = json.loads((out / "training_info.json").read_text())["dev"]
    assert info["after"] < info["before"] and info["kept_step"] == 0
    assert "saved the untrained encoder (step 0)" in caplog.records[-1].getMessage()

    set_seed(7)  # the untrained model of the run: the encoder's weights, the head drawn with the run's seed
    untrained = get_method("simcse").from_encoder(str(encoder)).state_dict()
    saved = load_file(out / "model.safetensors")
    for name, weight in saved.items():
        torch.testing.assert_close(weight, untrained[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("method", package_methods())
def test_the_trainer_takes_sentences_and_trains_what_tokenized_data_trains(method, tiny_bert_dir, tmp_path):
    """Given sentences (a ``text`` column) the trainer tokenizes them as ``tokenize_dataset`` does by default, so each
    method ends with the weights of the same run on data tokenized first."""
    from datasets import Dataset
    from helpers import tiny_args
    from transformers import AutoTokenizer

    from hf_cse.data import tokenize_dataset
    from hf_cse.trainer import ContrastiveTrainer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    sentences = Dataset.from_dict({"text": random_sentences(32)})
    weights = []
    for name, data in (("text", sentences), ("tokens", tokenize_dataset(sentences, tok, keep_text=True))):
        set_seed(0)
        model = get_method(method).from_encoder(str(tiny_bert_dir))
        trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / name, max_steps=2), train_dataset=data,
                                     processing_class=tok)
        assert trainer.train().global_step == 2
        weights.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    for key, weight in weights[0].items():
        torch.testing.assert_close(weight, weights[1][key], rtol=0, atol=0, msg=key)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the memory is pinned for its copies")
def test_training_on_the_cpu_asks_no_pinned_memory(tiny_bert_dir, tmp_path):
    """transformers asks for pinned memory by default, which only speeds up copies to a GPU: on the CPU torch warned
    "'pin_memory' argument is set as true but no accelerator is found" at every epoch of a Python user's run."""
    import warnings

    from datasets import Dataset
    from helpers import tiny_args
    from transformers import AutoTokenizer

    from hf_cse.models import SimCSEModel
    from hf_cse.trainer import ContrastiveTrainer

    args = tiny_args(tmp_path / "out", max_steps=2, dataloader_pin_memory=True, use_cpu=False)  # a CPU machine
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args,
                                 train_dataset=Dataset.from_dict({"text": random_sentences(32)}),
                                 processing_class=AutoTokenizer.from_pretrained(tiny_bert_dir))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in caught if "pin_memory" in str(w.message)]
    assert trainer.args.dataloader_pin_memory is False and args.dataloader_pin_memory is True  # the caller's: as given
