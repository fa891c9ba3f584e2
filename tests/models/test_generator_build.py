"""experiments/build_generator.py: a small masked LM pretrained with the encoder's tokenizer, used as DiffCSE's
generator (DiffCSE, Chuang et al., NAACL 2022, §3: a frozen pretrained MLM fills the masked sentence)."""

import json

import pytest
import torch
from helpers import random_sentences
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

from experiments import build_generator
from hf_cse.cli import train as train_cli
from hf_cse.models import DiffCSEModel
from hf_cse.models.diffcse import MaskedLMGenerator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    path.write_text("\n".join(random_sentences(80, seed=3)) + "\n")
    return path


def _build(out, encoder, corpus, *extra):
    return build_generator.main(["--out", str(out), "--encoder", str(encoder), "--train_file", str(corpus),
                                 "--hidden_size", "16", "--layers", "1", "--heads", "2", "--max_seq_length", "16",
                                 "--batch_size", "8", "--max_steps", "30", "--learning_rate", "1e-2",
                                 "--heldout", "8", "--logging_steps", "10", *extra])


def test_toy_build_learns_loads_as_a_masked_lm_and_is_deterministic(tiny_bert_dir, corpus, tmp_path):
    info = _build(tmp_path / "a", tiny_bert_dir, corpus)
    curve = info["loss_curve"]
    assert [c["step"] for c in curve] == [10, 20, 30] and curve[-1]["loss"] < curve[0]["loss"]
    assert info["heldout_sentences"] == 8 and info["train_sentences"] == 72  # the held-out ones never trained on
    acc = info["heldout_accuracy"]["mlm_0.15"]
    assert acc["positions"] > 0 and 0 <= acc["selected"] <= 1 and 0 <= acc["copy"] <= 1
    assert json.loads((tmp_path / "a" / "build_info.json").read_text())["heldout_accuracy"] == info["heldout_accuracy"]

    model, loading = AutoModelForMaskedLM.from_pretrained(tmp_path / "a", output_loading_info=True)
    assert not loading["missing_keys"] and not loading["mismatched_keys"]
    assert model.dtype == torch.bfloat16 and model.config.vocab_size == AutoModel.from_pretrained(
        tiny_bert_dir).config.vocab_size
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied
    assert AutoTokenizer.from_pretrained(tmp_path / "a").get_vocab() == AutoTokenizer.from_pretrained(
        tiny_bert_dir).get_vocab()

    _build(tmp_path / "b", tiny_bert_dir, corpus)  # same seed, same data order and masks: the same weights
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    _build(tmp_path / "c", tiny_bert_dir, corpus, "--seed", "7")
    c = load_file(tmp_path / "c" / "model.safetensors")
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_embeddings_start_from_the_encoders_principal_directions(tiny_bert_dir):
    """At the encoder's own width the projection is a rotation: the centred word embeddings keep their Gram
    matrix; at a smaller width it keeps the top principal directions (the largest share of the variance)."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    emb = AutoModel.from_pretrained(tiny_bert_dir).get_input_embeddings().weight.detach().double()
    centred = emb - emb.mean(0)
    for width in (emb.shape[1], 8):
        args = build_generator.parse_args(["--out", "unused_folder", "--train_file", __file__, "--hidden_size",
                                           str(width), "--heads", "2"])
        model = build_generator.build_model(args, tok, str(tiny_bert_dir))
        word = model.get_input_embeddings().weight.detach().double()
        assert word.shape == (emb.shape[0], width)
        if width == emb.shape[1]:
            torch.testing.assert_close(word @ word.T, centred @ centred.T, atol=1e-4, rtol=1e-4)
        else:
            top = torch.linalg.eigvalsh(centred.T @ centred)[-width:].sum()  # the most any width-8 map keeps
            torch.testing.assert_close((word ** 2).sum(), top, atol=1e-6, rtol=1e-6)


def test_bad_input_is_refused_in_one_line(tiny_bert_dir, corpus, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "model.safetensors").write_text("someone's run")
    for argv, message in (
        (["--out", str(tmp_path / "taken")], "already holds files"),
        (["--out", str(tmp_path / "x"), "--hidden_size", "10", "--heads", "4"], "not divisible"),
        (["--out", str(tmp_path / "x"), "--train_file", str(tmp_path / "none.txt")], "not found"),
    ):
        with pytest.raises(SystemExit):
            build_generator.parse_args(["--train_file", str(corpus), *argv])
        assert message in capsys.readouterr().err
    assert (tmp_path / "taken" / "model.safetensors").read_text() == "someone's run"


def test_diffcse_trains_with_the_built_generator(tiny_bert_dir, corpus, tmp_path):
    _build(tmp_path / "gen", tiny_bert_dir, corpus)
    model = DiffCSEModel.from_encoder(str(tiny_bert_dir))
    model.attach_generator(str(tmp_path / "gen"), AutoTokenizer.from_pretrained(tiny_bert_dir))
    assert isinstance(model.generator, MaskedLMGenerator)

    train_cli.train_from_args(["--method", "diffcse", "--model_name_or_path", str(tiny_bert_dir), "--train_file",
                    str(corpus),
                    "--generator_name_or_path", str(tmp_path / "gen"), "--output_dir", str(tmp_path / "run"),
                    "--max_steps", "2", "--per_device_train_batch_size", "4", "--use_cpu", "--disable_tqdm", "true",
                    "--logging_steps", "1"])
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    logged = [h for h in state["log_history"] if "rtd_loss" in h]
    assert state["global_step"] == 2 and len(logged) == 2 and all(h["rtd_loss"] > 0 for h in logged)
    assert DiffCSEModel.from_pretrained(tmp_path / "run").config.generator_name_or_path == str(tmp_path / "gen")


def test_committed_generator_loads_as_the_packaged_encoders_generator(minilm_dir):
    """experiments/generator (built by the full command) passes DiffCSE's checks: every masked-LM weight
    present, the encoder's tokenizer, and it fills a masked batch with vocabulary ids."""
    from hf_cse.models.diffcse import load_generator

    folder = build_generator.ROOT / "experiments" / "generator"
    if not (folder / "model.safetensors").is_file():
        pytest.skip(f"{folder} not built")
    tok = AutoTokenizer.from_pretrained(minilm_dir)
    gen = load_generator(str(folder), tok)
    assert isinstance(gen, MaskedLMGenerator) and gen.vocab_size == len(tok) == 30522
    enc = tok(["the cat sat on the mat ."], return_tensors="pt")
    ids = enc["input_ids"].clone()
    ids[0, 2] = tok.mask_token_id
    filled = gen.fill(ids, enc["attention_mask"])
    assert filled.shape == ids.shape and int(filled.max()) < len(tok)
