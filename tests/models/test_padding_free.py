"""Padding-free forward (hf_cse.models.padding_free): the packed forward computes the padded forward's function on
every architecture it is enabled for, gradients included, and falls back to the padded batch wherever it was not
checked."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModel

from hf_cse.models import SimCSEModel
from hf_cse.models.fast_dropout import install_fast_dropout
from hf_cse.models.padding_free import (
    POSITION_STYLES,
    describe_padding_free,
    install_packed_attention,
    packed_forward,
    unsupported_reason,
)
from hf_cse.objectives import build_objectives, compute_objectives


def _tiny_encoder(model_type: str, **overrides):
    # max_position_embeddings 16 < the packed row's length (24 tokens below): positions and token types must come
    # from the padded batch, not from the encoder's own buffers
    config = AutoConfig.for_model(model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, vocab_size=100, max_position_embeddings=16, **overrides)
    torch.manual_seed(0)
    return AutoModel.from_config(config, attn_implementation="sdpa").eval()


def _padded_batch(pad_id: int, left: bool = False):
    torch.manual_seed(1)
    ids = torch.randint(5, 100, (4, 9))
    mask = torch.ones_like(ids)
    for row, real in enumerate((9, 6, 3, 6)):
        if left:
            mask[row, : 9 - real] = 0
        else:
            mask[row, real:] = 0
    return ids.masked_fill(mask == 0, pad_id), mask


@pytest.mark.parametrize("model_type", sorted(POSITION_STYLES))
@pytest.mark.parametrize("fast_dropout", [True, False])
def test_packed_forward_equals_padded_forward_on_every_enabled_architecture(model_type, fast_dropout):
    encoder = _tiny_encoder(model_type)
    ids, mask = _padded_batch(encoder.config.pad_token_id or 0)
    with torch.no_grad():
        want = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        if fast_dropout:
            install_fast_dropout(encoder)
        install_packed_attention(encoder)
        assert unsupported_reason(encoder) is None
        got = packed_forward(encoder, ids, mask, output_hidden_states=True)
    real = mask.bool()
    torch.testing.assert_close(got.last_hidden_state[real], want[real], atol=1e-5, rtol=1e-5)
    assert not got.last_hidden_state[~real].any()  # zeros at the padding, which every pooler masks anyway
    assert len(got.hidden_states) == encoder.config.num_hidden_layers + 1
    torch.testing.assert_close(got.hidden_states[-1], got.last_hidden_state)


def test_left_padding_keeps_the_padded_forwards_positions():
    encoder = _tiny_encoder("bert")
    ids, mask = _padded_batch(0, left=True)
    with torch.no_grad():
        want = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        install_packed_attention(encoder)
        got = packed_forward(encoder, ids, mask).last_hidden_state
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=1e-5)


def _two_models(tiny_bert_dir, **kwargs):
    torch.manual_seed(0)
    packed = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0, **kwargs)
    padded = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0, padding_free=False, **kwargs)
    padded.load_state_dict(packed.state_dict())
    return packed, padded


def _loss(model, batch):
    return compute_objectives(build_objectives(model.config), model(**batch).embeddings)[0]


def _batch(tiny_bert_dir, sentences, model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    rows = [dict(tok(s, truncation=True, max_length=24)) for s in sentences[:8]]
    return model.collator(tok, model.config)(rows)


@pytest.mark.parametrize("pooler_type", ["cls", "avg", "avg_first_last", "max", "last"])
def test_training_loss_and_gradients_equal_the_padded_model(pooler_type, tiny_bert_dir, sentences):
    packed, padded = _two_models(tiny_bert_dir, pooler_type=pooler_type)
    assert packed.runs_padding_free() and not padded.runs_padding_free()
    batch = _batch(tiny_bert_dir, sentences, packed)
    assert not batch["attention_mask"].all()  # the batch has padding to remove
    losses = []
    for model in (packed, padded):
        model.train()
        loss = _loss(model, batch)
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1], atol=1e-6, rtol=1e-5)
    for (name, p), q in zip(packed.named_parameters(), padded.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_activation_checkpointing_and_lora_run_packed(tiny_bert_dir, sentences):
    packed, padded = _two_models(tiny_bert_dir, lora_r=4, lora_dropout=0.0)
    assert packed.runs_padding_free()
    batch = _batch(tiny_bert_dir, sentences, packed)
    for model in (packed, padded):
        model.enable_activation_checkpointing()
        model.train()
        _loss(model, batch).backward()
    grads = [[p.grad for p in m.parameters() if p.requires_grad] for m in (packed, padded)]
    assert grads[0] and len(grads[0]) == len(grads[1])
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


def test_test_time_embeddings_equal_the_padded_model(tiny_bert_dir, sentences):
    packed, padded = _two_models(tiny_bert_dir)
    batch = _batch(tiny_bert_dir, sentences, packed)
    ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
    with torch.no_grad():
        torch.testing.assert_close(packed.eval().sentence_embedding(ids, mask),
                                   padded.eval().sentence_embedding(ids, mask), atol=1e-5, rtol=1e-5)


def test_dropout_stays_on_in_the_packed_forward(tiny_bert_dir, sentences):
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir)).train()
    batch = _batch(tiny_bert_dir, sentences, model)
    views = model.two_view_embeddings(batch["input_ids"], batch["attention_mask"])[0]
    assert model.runs_padding_free()
    assert not torch.allclose(views[:, 0], views[:, 1])  # the two views differ by their dropout masks


def test_falls_back_to_the_padded_batch_where_not_checked(tiny_bert_dir, tiny_llama_dir, monkeypatch):
    off = SimCSEModel.from_encoder(str(tiny_bert_dir), padding_free=False)
    assert not off.runs_padding_free()
    assert describe_padding_free(off.encoder, off.config.padding_free) == "off (padding_free false)"
    eager = SimCSEModel.from_encoder(str(tiny_bert_dir), encoder_attention="eager")
    assert not eager.runs_padding_free()
    assert "attention 'eager'" in describe_padding_free(eager.encoder, True)
    llama = SimCSEModel.from_encoder(str(tiny_llama_dir), pooler_type="last")
    assert not llama.runs_padding_free()
    assert "model type 'llama'" in describe_padding_free(llama.encoder, True)
    torch_dropout = SimCSEModel.from_encoder(str(tiny_bert_dir), fast_dropout=False)
    assert torch_dropout.runs_padding_free()
    assert describe_padding_free(torch_dropout.encoder, True).startswith("on")
    assert not torch_dropout.runs_padding_free("cuda")  # a host sync per batch on a GPU, for a host-bound step
    assert "runs on CPU only" in describe_padding_free(torch_dropout.encoder, True, device_type="cuda")
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # a traced forward keeps fixed shapes
    assert not torch_dropout.runs_padding_free()


def test_a_resumed_run_keeps_the_layout_its_checkpoint_trained_with(tmp_path):
    from hf_cse.cli.older_runs import trained_padding_free

    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "config.json").write_text('{"padding_free": true}')
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text('{"pooler_type": "cls"}')  # written before padding-free existed
    assert trained_padding_free(str(tmp_path / "new")) is True
    assert trained_padding_free(str(tmp_path / "old")) is False
    assert trained_padding_free(str(tmp_path / "missing")) is True
