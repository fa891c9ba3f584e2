"""SimCSE model: construction from an encoder, save/load round trip, views, poolers."""

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from hf_cse.losses import get_loss_class
from hf_cse.losses.base import NO_DROPOUT_INPUT
from hf_cse.models import METHODS, SimCSEModel, get_method, pool
from hf_cse.models.config import CSEConfig
from hf_cse.models.heads import LinearProjector


def _batch(tokenizer, sentences, views=None):
    enc = tokenizer(sentences, padding=True, return_tensors="pt")
    if views:
        return {k: v.unsqueeze(1).repeat(1, views, 1) for k, v in enc.items()}
    return dict(enc)


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])
def test_round_trip_gives_bit_identical_embeddings(kind, request, tmp_path, sentences):
    folder = request.getfixturevalue(f"tiny_{kind}_dir")
    tok = AutoTokenizer.from_pretrained(folder)
    model = SimCSEModel.from_encoder(str(folder)).eval()
    model.save_pretrained(tmp_path / "m")
    batch = _batch(tok, sentences[:5])
    with torch.no_grad():
        before = model.sentence_embedding(**batch)
        for loaded in (AutoModel.from_pretrained(tmp_path / "m"), SimCSEModel.from_pretrained(tmp_path / "m")):
            assert type(loaded) is SimCSEModel
            after = loaded.eval().sentence_embedding(**batch)
            assert torch.equal(before, after)
            # the projector (used by pooler "cls") round-trips too
            assert torch.equal(model.sentence_embedding(**batch, pooler="cls"),
                               loaded.sentence_embedding(**batch, pooler="cls"))


def test_from_encoder_keeps_pretrained_weights_and_test_pooler_is_raw_cls(tiny_bert_dir, sentences):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir)).eval()
    plain = AutoModel.from_pretrained(tiny_bert_dir).eval()
    batch = _batch(tok, sentences[:4])
    with torch.no_grad():
        raw_cls = plain(**batch).last_hidden_state[:, 0]
        assert model.config.test_pooler == "cls_before_pooler"
        assert torch.allclose(model.sentence_embedding(**batch), raw_cls, atol=1e-6)
        with_mlp = model.sentence_embedding(**batch, pooler="cls")
        assert torch.allclose(with_mlp, model.projector(raw_cls), atol=1e-6)
        assert not torch.allclose(with_mlp, raw_cls)


def test_two_views_come_from_one_forward_and_differ_only_by_dropout(tiny_bert_dir, sentences):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batch = _batch(tok, sentences[:6], views=2)
    calls = []
    model = SimCSEModel.from_encoder(str(tiny_bert_dir)).train()
    hook = model.encoder.register_forward_hook(lambda m, args, kw, out: calls.append(kw["input_ids"].shape),
                                               with_kwargs=True)
    out = model(**batch)
    hook.remove()
    # ONE forward of the 2N rows' real tokens (packed into one row: hf_cse.models.padding_free)
    assert calls == [torch.Size([1, int(batch["attention_mask"].sum())])]
    assert not torch.allclose(out.embeddings["z1"], out.embeddings["z2"])

    no_dropout = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0).train()
    out = no_dropout(**batch)
    assert torch.allclose(out.embeddings["z1"], out.embeddings["z2"], atol=1e-6)


def test_poolers_match_hand_computation(tiny_bert_dir, sentences):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    plain = AutoModel.from_pretrained(tiny_bert_dir).eval()
    batch = _batch(tok, sentences[:4])
    with torch.no_grad():
        out = plain(**batch, output_hidden_states=True)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    mean = lambda h: (h * mask).sum(1) / mask.sum(1)
    hs = out.hidden_states
    expected = {
        "cls_before_pooler": hs[-1][:, 0],
        "avg": mean(hs[-1]),
        "avg_first_last": mean((hs[1] + hs[-1]) / 2),
        "avg_top2": mean((hs[-2] + hs[-1]) / 2),
        "max": torch.stack([h[m.bool()].max(0).values for h, m in zip(hs[-1], batch["attention_mask"])]),
    }
    for name, want in expected.items():
        got = pool(name, batch["attention_mask"], out.last_hidden_state, out.hidden_states)
        assert torch.allclose(got, want, atol=1e-6), name
    # padding must not leak into the mean
    assert batch["attention_mask"].min() == 0


def test_bad_pooler_projector_and_method_names_are_clear():
    with pytest.raises(ValueError, match="Valid poolers"):
        CSEConfig(pooler_type="maximum")
    with pytest.raises(ValueError, match="Valid projectors"):
        CSEConfig(projector="deep")
    with pytest.raises(ValueError, match="Available methods"):
        get_method("supcse")
    assert {"simcse", "imsimcse"} <= set(METHODS)


def test_an_encoder_that_is_no_path_is_refused_by_its_type_in_one_short_line(tiny_bert_dir):
    """from_encoder(a tokenizer object) was refused as "encoder BertTokenizer(name_or_path=..., added_tokens_decoder=
    {...}): no such folder. Check the path.", the object's repr over about 10 lines; a Path still works."""
    from pathlib import Path

    from hf_cse.checks import InputError

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    with pytest.raises(InputError) as refused:
        SimCSEModel.from_encoder(tokenizer)
    assert str(refused.value) == (f"encoder must be a path or Hub id (str), got a {type(tokenizer).__name__}: pass "
                                  "the model's folder or Hub id.")
    assert isinstance(SimCSEModel.from_encoder(Path(tiny_bert_dir)), SimCSEModel)


def test_linear_projector_uses_seed_002_init(tiny_bert_dir):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), projector="linear")
    assert isinstance(model.projector, LinearProjector)
    std = model.projector.dense.weight.std().item()
    assert 4e-3 < std < 8e-3
    assert model.projector.dense.bias.abs().max() > 0  # bias drawn from N(0, 6e-3) as well, not zero


@pytest.mark.parametrize("method", ["simcse", "promptbert"])
def test_sentences_to_embed_are_refused_naming_the_model_and_the_ways_to_embed(tiny_bert_dir, sentences, method):
    """Sentences to embed (a SentenceTransformer made from the run's folder, or from a folder save_model wrote, sends
    them, its model in eval mode) were refused with "use hf_cse.data.TwoViewCollator" first, the collator of a
    training run; the model is named now, with the ways to embed: SentenceEncoder, sentence_embedding, the export."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = get_method(method).from_encoder(str(tiny_bert_dir)).eval()
    with pytest.raises(ValueError) as refused:
        model(**_batch(tok, sentences[:3]))
    message = str(refused.value)
    assert message.startswith("this is an hf_cse training model (its forward takes views of each sentence; got "
                              "input_ids of shape (3, "), message
    assert "SentenceEncoder.from_pretrained(FOLDER)" in message and "to_sentence_transformer(FOLDER, OUT)" in message
    assert "Collator" not in message and "\n" not in message


@pytest.mark.parametrize("method", ["simcse", "promptbert"])
def test_flat_batches_in_training_are_refused_with_the_collator(tiny_bert_dir, sentences, method):
    """A data_collator of one's own giving flat batches in training: the collator to use, without the advice on
    embedding sentences, which was about another mistake."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = get_method(method).from_encoder(str(tiny_bert_dir)).train()
    with pytest.raises(ValueError, match=r"^training batches must have input_ids of shape \(batch, views, length\); "
                                         r"got \(3, \d+\): use .*collator") as refused:
        model(**_batch(tok, sentences[:3]))
    assert "sentence-transformers" not in str(refused.value)


# ---------------------------------------------------------------------------------- every parameter is used
def _method_cases():
    from hf_cse.losses import available_losses

    cases = [("simcse", {"loss": name, "off_dropout": NO_DROPOUT_INPUT in get_loss_class(name).extra_inputs})
             for name in available_losses()]
    cases += [("imsimcse", {}), ("imsimcse", {"off_dropout_grad": True}), ("diffcse", {}),
              ("diffcse", {"lambda_rtd": 0.0}), ("diffcse", {"loss": "off_dropout_infonce", "off_dropout": True,
                                                            "dcl_weight": 0.1}),
              ("esimcse", {}), ("esimcse", {"loss": "focal_infonce"})]
    return [pytest.param(method, kwargs, id=f"{method}-{'-'.join(f'{k}={v}' for k, v in kwargs.items())}")
            for method, kwargs in cases]


@pytest.mark.parametrize(("method", "config"), _method_cases())
def test_every_parameter_gets_a_gradient_so_ddp_need_not_search_for_unused_ones(method, config, tiny_bert_dir,
                                                                                 sentences, tmp_path):
    """ContrastiveTrainer defaults ``ddp_find_unused_parameters`` to False, which DDP only allows when each
    step's backward reaches every trainable parameter: checked for every loss and method switch."""
    from helpers import tiny_args

    from hf_cse.trainer import ContrastiveTrainer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = get_method(method).from_encoder(str(tiny_bert_dir), **config).train()
    if method == "diffcse":
        model.attach_generator("unigram", tok)
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path))
    assert trainer.args.ddp_find_unused_parameters is False
    batch = model.collator(tok, model.config)([tok(s) for s in sentences[:6]])
    trainer.compute_loss(model, batch).backward()
    unused = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not unused, f"{method} {config}: no gradient for {unused}"


def test_an_explicit_ddp_find_unused_parameters_is_kept(tiny_bert_dir, tmp_path):
    from helpers import tiny_args

    from hf_cse.trainer import ContrastiveTrainer

    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path, ddp_find_unused_parameters=True))
    assert trainer.args.ddp_find_unused_parameters is True
