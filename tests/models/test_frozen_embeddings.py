"""``freeze_embeddings``: the encoder's embedding layer stays as pretrained (the gradient paradigm's authors' code,
custom_param_init), found without naming the architecture; training leaves it unchanged and trains the rest."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer, TrainingArguments

from hf_cse.data import TwoViewCollator
from hf_cse.errors import CSEError
from hf_cse.models import SimCSEModel
from hf_cse.models.frozen_embeddings import check_freezable
from hf_cse.trainer import ContrastiveTrainer

#: the parameters of BERT's / RoBERTa's / DistilBERT's embedding layer, as named in the method model
EMBEDDING_LAYER = "encoder.embeddings."


def trainable(model) -> dict[str, bool]:
    return {name: p.requires_grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("kind", [pytest.param("bert", marks=pytest.mark.slow), "roberta", "distilbert"])
def test_exactly_the_embedding_layer_is_frozen(kind, request):
    folder = request.getfixturevalue(f"tiny_{kind}_dir")
    frozen = trainable(SimCSEModel.from_encoder(str(folder), freeze_embeddings=True))
    assert trainable(SimCSEModel.from_encoder(str(folder))) == dict.fromkeys(frozen, True)  # the default trains all
    assert {n for n, on in frozen.items() if not on} == {n for n in frozen if n.startswith(EMBEDDING_LAYER)}
    assert any("word_embeddings" in n for n in frozen if not frozen[n])
    assert any("LayerNorm" in n for n in frozen if n.startswith(EMBEDDING_LAYER))


def test_the_option_is_saved_and_a_reloaded_model_is_frozen_the_same_way(tiny_bert_dir, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), freeze_embeddings=True)
    model.save_pretrained(tmp_path)
    again = SimCSEModel.from_pretrained(tmp_path)
    assert again.config.freeze_embeddings is True
    assert trainable(again) == trainable(model)


def test_an_encoder_without_an_embedding_layer_is_refused_in_one_line(tiny_llama_dir):
    """Llama's embed_tokens sits on the model itself: freezing its holder would freeze the whole encoder."""
    with pytest.raises(CSEError, match="no embedding layer apart from the model") as refused:
        SimCSEModel.from_encoder(str(tiny_llama_dir), freeze_embeddings=True, pooler_type="avg")
    assert "\n" not in str(refused.value) and refused.value.fields == ("freeze_embeddings",)


def test_the_check_before_loading_refuses_from_the_config_alone(tiny_llama_dir, tiny_bert_dir):
    from transformers import AutoConfig

    llama = SimCSEModel.config_class(encoder_config=AutoConfig.from_pretrained(tiny_llama_dir), pooler_type="avg",
                                     freeze_embeddings=True)
    with pytest.raises(CSEError, match="freeze_embeddings"):
        check_freezable(llama)
    check_freezable(SimCSEModel.config_class(encoder_config=AutoConfig.from_pretrained(tiny_bert_dir),
                                             freeze_embeddings=True))


@pytest.mark.slow
def test_with_lora_it_changes_nothing_but_adapters_on_the_embedding_layer(tiny_bert_dir):
    """LoRA freezes the encoder's own weights already; adapters that lora_target_modules puts on the word embeddings
    are frozen with the layer."""
    pytest.importorskip("peft")
    lora = trainable(SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=2))
    assert trainable(SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=2, freeze_embeddings=True)) == lora
    targets = ["query", "word_embeddings"]
    on_embeddings = trainable(SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=2, lora_target_modules=targets))
    adapters = {n for n, on in on_embeddings.items() if on and "embeddings" in n}
    assert adapters  # peft put trainable adapters on the word embeddings
    frozen = trainable(SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=2, lora_target_modules=targets,
                                                freeze_embeddings=True))
    assert {n for n in adapters if not frozen[n]} == adapters
    assert {n for n, on in frozen.items() if on} == {n for n, on in on_embeddings.items() if on} - adapters


@pytest.mark.slow
@pytest.mark.parametrize("cached", [None, 4], ids=["plain", "gradient_cache"])
def test_two_training_steps_leave_the_embedding_layer_unchanged_and_train_the_rest(tiny_bert_dir, sentences,
                                                                                  tmp_path, cached):
    """AdamW with weight decay (transformers' decay / no-decay groups take the trainable parameters only)."""
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), freeze_embeddings=True, projector="linear")
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = [dict(tok(s, truncation=True, max_length=32)) for s in (sentences * 2)[:16]]
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8, max_steps=2,
                             learning_rate=1e-3, weight_decay=0.01, report_to="none", save_strategy="no",
                             disable_tqdm=True, seed=0, logging_steps=1)
    trainer = ContrastiveTrainer(model=model, args=args, train_dataset=data, data_collator=TwoViewCollator(tok),
                                 cached_minibatch_size=cached)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    for name, param in model.named_parameters():
        if name.startswith(EMBEDDING_LAYER):
            assert torch.equal(param, before[name]), name
            assert id(param) not in optimized, name
        else:
            assert not torch.equal(param, before[name]), name
