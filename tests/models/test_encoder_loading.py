"""Loading flags (hf_cse.models.loading): the encoder's weight dtype (--torch_dtype), its attention implementation
(--attn_implementation) and how the CPU fast dropout meets each; fp32 head and losses; refusals before loading."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_args, tiny_train_dataset
from transformers import AutoModel

from hf_cse.cli import train as train_cli
from hf_cse.errors import CSEError
from hf_cse.models import DiffCSEModel, SimCSEModel
from hf_cse.models.fast_dropout import ATTENTION_NAME, FastDropout
from hf_cse.trainer import ContrastiveTrainer


def test_bf16_weights_fp32_head_and_losses_and_they_survive_a_reload(tiny_bert_dir, sentences, tmp_path):
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), encoder_dtype="bf16")
    assert {p.dtype for p in model.encoder.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.projector.parameters()} == {torch.float32}
    train, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data")
    batch = model.collator(tok, model.config)([train[i] for i in range(8)])
    out = model(**batch)
    assert out.embeddings["z1"].dtype == torch.float32  # what the losses receive
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out", max_steps=1), train_dataset=train,
                                 data_collator=model.collator(tok, model.config), processing_class=tok)
    trainer.train()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # without LoRA the bf16 weights' AdamW states are bf16 too (the warning of from_encoder says so)
    weight = model.encoder.embeddings.word_embeddings.weight
    assert trainer.optimizer.state[weight]["exp_avg"].dtype == torch.bfloat16
    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModel.from_pretrained(tmp_path / "saved")
    assert {p.dtype for p in reloaded.encoder.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in reloaded.projector.parameters()} == {torch.float32}


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_fast_dropout_with_each_attention(attention, tiny_bert_dir):
    """sdpa is routed through hf_cse_sdpa (fast attention-probability dropout on CPU); eager stays transformers'
    eager attention (its attention dropout is torch's); the hidden-state dropouts are fast with both; in eval mode
    both compute the plain encoder's function."""
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), encoder_attention=attention)
    expected = ATTENTION_NAME if attention == "sdpa" else "eager"
    assert model.encoder.config._attn_implementation == expected
    dropouts = [m for m in model.encoder.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(isinstance(m, FastDropout) for m in dropouts)
    plain = AutoModel.from_pretrained(tiny_bert_dir, add_pooling_layer=False).eval()
    ids = torch.randint(5, 60, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    with torch.no_grad():
        want = plain(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        got = model.eval().sentence_embedding(ids, mask)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # training mode: dropout is on in both attention paths (two passes differ)
    model.train()
    assert not torch.equal(model.sentence_embedding(ids, mask), model.sentence_embedding(ids, mask))


def test_attn_implementation_and_torch_dtype_flags(tiny_bert_dir, tmp_path):
    args = train_cli.parse_args(["--model_name_or_path", str(tiny_bert_dir), "--torch_dtype", "bf16",
                                 "--attn_implementation", "eager", "--output_dir", str(tmp_path / "o")])
    assert args[0].encoder_dtype == "bf16" and args[0].encoder_attention == "eager"


def test_flash_attention_is_refused_in_one_line_before_loading(tiny_bert_dir, tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "flash_attn" else find_spec(name, *a))
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--attn_implementation", "flash_attention_2",
            "--output_dir", str(tmp_path / "o"), "--use_cpu", "--max_steps", "1"]
    with pytest.raises(ValueError, match="needs the flash-attn package: pip install flash-attn"):
        train_cli.train_from_args(argv)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "flash_attn"
                        else find_spec(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="runs only on a CUDA GPU and none is visible; use attn_implementation sdpa"):
        train_cli.train_from_args(argv)
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fall-back where flash attention cannot run")
def test_a_model_trained_with_flash_attention_loads_where_it_cannot_run(tiny_bert_dir, tmp_path):
    """config.json names flash_attention_2 (a GPU run); on this CPU the model loads with transformers' default
    attention (the same function) instead of failing."""
    import json

    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["encoder_attention"] = "flash_attention_2"
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    model = AutoModel.from_pretrained(tmp_path / "m")
    assert model.config.encoder_attention == "flash_attention_2"
    assert model.encoder.config._attn_implementation in (ATTENTION_NAME, "sdpa")


def test_a_saved_method_model_is_no_encoder_to_build_a_method_around(tiny_bert_dir, tmp_path):
    """from_encoder on a training run's folder nested one method model inside another, which failed at the first
    step; it is refused naming the two ways on, and each load its own kind of folder."""
    from hf_cse.errors import CSEError

    saved = tmp_path / "run"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(saved)
    # no export, no checkpoint here: it is named how to export it, and from_pretrained loads it
    with pytest.raises(CSEError, match=r"run holds an hf_cse simcse model \(a training run's output, .*\), not a "
                                       r"plain encoder. To start a new run from what it learned, use its export "
                                       r"\(hf_cse.export.to_sentence_transformer\(.*\): from_encoder\(folder\); to "
                                       r"go on with the run itself, SimCSEModel.from_pretrained\(.*\) loads it\.$"):
        SimCSEModel.from_encoder(str(saved))
    assert type(SimCSEModel.from_pretrained(saved)) is SimCSEModel
    with pytest.raises(CSEError, match="run holds a simcse model, not a diffcse one: load it with its method's class"):
        DiffCSEModel.from_pretrained(saved)  # its discriminator would be drawn at random
    with pytest.raises(CSEError, match="holds a plain bert model"):
        SimCSEModel.from_pretrained(tiny_bert_dir)


@pytest.mark.parametrize("kind, why", [
    ("t5", "'t5' is an encoder-decoder model, whose forward needs decoder inputs"),
    ("bart", "'bart' is an encoder-decoder model, whose forward needs decoder inputs"),
    ("vit", "'vit' is not a text model (no token vocabulary of its own)"),
    ("clip", "'clip' is not a text model (no token vocabulary of its own)"),
])
def test_an_architecture_that_cannot_embed_sentences_is_refused_before_its_weights_load(kind, why, tmp_path):
    """Accepted, T5 and BART failed at the first step inside transformers (decoder inputs missing), ViT and CLIP
    too (no token ids): refused when the method model is built, naming what hf_cse trains."""
    from transformers import AutoConfig

    folder = tmp_path / kind
    AutoConfig.for_model(kind).save_pretrained(folder)  # a config alone: no weight may be read
    with pytest.raises(CSEError) as err:
        SimCSEModel.from_encoder(str(folder), pooler_type="avg")
    assert str(err.value) == (f"{why}: hf_cse trains text encoders (BERT, RoBERTa, MiniLM...) and decoders (GPT-2, "
                              "Llama...). Start from one of those.")


def test_an_encoder_that_is_not_there_is_refused_in_one_line_without_asking_the_hub(tmp_path, monkeypatch):
    """from_encoder in Python: a mistyped folder was sent to the Hub as a repo id (transformers' "Repo id must be in
    the form ..."), and a Hub id with no network retried for most of a minute."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(CSEError, match=f"^encoder {tmp_path / 'nosuch'}: no such folder. Check the path.$"):
        SimCSEModel.from_encoder(str(tmp_path / "nosuch"))
    with pytest.raises(CSEError, match="^encoder hf-cse-test/not-cached is not a local folder, and the Hugging Face "
                                       "Hub is offline"):
        SimCSEModel.from_encoder("hf-cse-test/not-cached")
