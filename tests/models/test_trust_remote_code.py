"""--trust_remote_code: an encoder whose code ships in its folder loads only when asked (off by default)."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import tiny_tokenizer
from transformers import AutoTokenizer, BertConfig, BertModel

from hf_cse.cli import evaluate as eval_cli
from hf_cse.cli import train as train_cli
from hf_cse.models import SimCSEModel

REMOTE_CODE = '''
from transformers import BertConfig, BertModel


class RemoteTinyConfig(BertConfig):
    model_type = "MODEL_TYPE"


class RemoteTinyModel(BertModel):
    config_class = RemoteTinyConfig
'''


def _remote_code_encoder(folder, model_type):
    """A tiny BERT saved as a custom-code model: config.json names classes of remote_tiny.py via auto_map.
    Each test gets its own model type: a trusted load registers the classes for the rest of the process."""
    tokenizer = tiny_tokenizer(folder)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "remote_tiny.py").write_text(REMOTE_CODE.replace("MODEL_TYPE", model_type))
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type=model_type, architectures=["RemoteTinyModel"],
                  auto_map={"AutoConfig": "remote_tiny.RemoteTinyConfig", "AutoModel": "remote_tiny.RemoteTinyModel"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_custom_code_encoder_needs_the_flag_and_loads_with_it(tmp_path):
    remote_code_encoder = _remote_code_encoder(tmp_path, "hf_cse_test_remote_bert_a")
    with pytest.raises(ValueError, match="trust_remote_code"):
        SimCSEModel.from_encoder(str(remote_code_encoder))
    model = SimCSEModel.from_encoder(str(remote_code_encoder), trust_remote_code=True)
    assert type(model.encoder).__name__ == "RemoteTinyModel"
    tok = AutoTokenizer.from_pretrained(remote_code_encoder)
    batch = tok(["a small cat", "the river"], padding=True, return_tensors="pt")
    views = {k: v.unsqueeze(1).repeat(1, 2, 1) for k, v in batch.items()}
    assert model(**views).embeddings["z1"].shape == (2, 32)


@pytest.mark.slow
def test_run_unsup_and_run_eval_pass_the_flag(tmp_path, sentences, senteval_dir, capsys):
    remote_code_encoder = _remote_code_encoder(tmp_path / "encoder", "hf_cse_test_remote_bert_b")
    train = tmp_path / "train.txt"
    train.write_text("\n".join(sentences * 2) + "\n")
    common = ["--model_name_or_path", str(remote_code_encoder), "--train_file", str(train), "--max_steps", "1",
              "--per_device_train_batch_size", "4", "--output_dir", str(tmp_path / "out"), "--use_cpu",
              "--disable_tqdm", "true"]
    with pytest.raises(ValueError, match="trust_remote_code"):
        train_cli.train_from_args(common)
    train_cli.train_from_args([*common, "--trust_remote_code", "true"])
    assert json.loads((tmp_path / "out" / "config.json").read_text())["encoder_config"]["model_type"] == (
        "hf_cse_test_remote_bert_b")
    # run_eval on an encoder type this process has not registered yet
    eval_encoder = _remote_code_encoder(tmp_path / "eval_encoder", "hf_cse_test_remote_bert_c")
    eval_args = ["--model_name_or_path", str(eval_encoder), "--senteval_data_dir", str(senteval_dir),
                 "--tasks", "STSBenchmark", "--mode", "dev", "--output_dir", str(tmp_path / "eval"),
                 "--disable_tqdm", "true"]
    assert eval_cli.main(eval_args) == 1  # one error line (run_cli), naming the flag
    assert "trust_remote_code" in capsys.readouterr().err
    assert eval_cli.main([*eval_args, "--trust_remote_code", "true"]) == 0
