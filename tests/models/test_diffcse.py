"""DiffCSE (Chuang et al., NAACL 2022): contrastive loss + conditional replaced-token detection."""

import math
import random

import pytest
import torch
import torch.nn.functional as F
from helpers import random_sentences, tiny_args, tiny_train_dataset
from safetensors.torch import load_file
from tiny_models import make_tiny_encoder
from transformers import AutoModel, AutoTokenizer, BertConfig, BertForMaskedLM

from hf_cse.cli import train as train_cli
from hf_cse.masking import mask_tokens, special_tokens_mask
from hf_cse.models import DiffCSEModel
from hf_cse.models.diffcse import (
    DiffCSECollator,
    GeneratorError,
    MaskedLMGenerator,
    UnigramGenerator,
    delete_tokens,
    insert_masks,
)
from hf_cse.objectives import build_objectives, compute_objectives
from hf_cse.trainer import ContrastiveTrainer


@pytest.fixture(scope="module")
def tok(tiny_bert_dir):
    return AutoTokenizer.from_pretrained(tiny_bert_dir)


def _model(tiny_bert_dir, tok, generator="unigram", **config):
    model = DiffCSEModel.from_encoder(str(tiny_bert_dir), **{"loss_kwargs": {"temperature": 0.05}, **config})
    if generator is not None:
        model.attach_generator(generator, tok)
    return model.train()


def _batch(tok, sentences, seed=0, **collator_kwargs):
    return DiffCSECollator(tok, seed=seed, **collator_kwargs)([tok(s) for s in sentences])


def _total_loss(model, out):
    loss, _ = compute_objectives(build_objectives(model.config), out.embeddings)
    return loss + sum(out.aux_losses.values())


class ConstantGenerator:
    """Writes ``token`` at every position (a generator that replaces everything)."""

    def __init__(self, token):
        self.token, self.mask_token_id = token, 4

    def fill(self, ids, att):
        return torch.full_like(ids, self.token)


# ----------------------------------------------------------------------------------------------- config
def test_defaults_are_the_papers_bert_sts_setting():
    cfg = DiffCSEModel.config_class()
    assert (cfg.projector, cfg.lambda_rtd, cfg.masking_ratio) == ("batchnorm", 0.005, 0.3)
    assert cfg.edit_operation == "replace"
    assert (cfg.rtd_reduction, cfg.rtd_ignore_pad, cfg.discriminator_init) == ("mean", False, "encoder")
    # the authors' generator is a sub-module of their model, so model.train() turns its dropout on
    assert not cfg.generator_sampling and cfg.generator_train_mode and cfg.generator_fill == "all"
    assert cfg.test_pooler == "cls_before_pooler"
    with pytest.raises(ValueError, match="edit_operation 'swap'"):
        DiffCSEModel.config_class(edit_operation="swap")
    with pytest.raises(ValueError, match="masking_ratio"):
        DiffCSEModel.config_class(masking_ratio=1.5)


def test_discriminator_starts_from_the_encoder_checkpoint_or_random(tiny_bert_dir, tok):
    model = _model(tiny_bert_dir, tok, generator=None)
    enc, disc = model.encoder.state_dict(), model.discriminator.state_dict()
    assert all(torch.equal(enc[k], disc[k]) for k in enc)
    assert model.rtd_head.out_features == 2 and model.rtd_head.in_features == model.config.hidden_size
    # the authors make electra_head after loading (train.py): PyTorch's init, U(+-1/sqrt(H)), a bias too; it was
    # drawn from N(0, 0.02) with a zero bias
    bound = model.config.hidden_size ** -0.5
    weight, bias = model.rtd_head.weight.detach(), model.rtd_head.bias.detach()
    assert weight.abs().max() <= bound and bias.abs().max() > 0 and weight.std() > 0.8 * bound / 3 ** 0.5
    rand = _model(tiny_bert_dir, tok, generator=None, discriminator_init="random")
    key = "embeddings.word_embeddings.weight"
    assert not torch.equal(rand.discriminator.state_dict()[key], enc[key])


@pytest.mark.slow
def test_activation_checkpointing_reaches_the_discriminator_with_the_same_gradients(tiny_bert_dir, tok, sentences):
    """``--activation_checkpointing`` checkpoints both encoders DiffCSE trains; without dropout the recomputed
    forward gives the gradients of the plain one."""
    batch = _batch(tok, sentences[:6])
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = _model(tiny_bert_dir, tok, dropout=0.0)
        assert [m is model.encoder or m is model.discriminator for m in model.transformer_encoders()] == [True] * 2
        if checkpointing:
            model.enable_activation_checkpointing()
        assert [e.is_gradient_checkpointing for e in model.transformer_encoders()] == [checkpointing] * 2
        torch.manual_seed(1)  # the same generator draws
        _total_loss(model, model(**batch)).backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert any(n.startswith("discriminator.") for n in grads[1]) and grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")


# ----------------------------------------------------------------------------------------------- the loss
def test_lambda_zero_is_the_contrastive_loss_on_batchnorm_projected_embeddings(tiny_bert_dir, tok, sentences):
    # padded: the hand-written pass below draws the same dropout masks only over the same (padded) shape
    model = _model(tiny_bert_dir, tok, lambda_rtd=0.0, padding_free=False)
    batch = _batch(tok, sentences[:8])
    torch.manual_seed(11)
    out = model(**batch)
    total = _total_loss(model, out)
    assert out.aux_losses["rtd_loss"].item() == 0.0 and out.metrics["rtd_loss"] > 0  # computed, weighted by 0

    torch.manual_seed(11)  # the same dropout masks: the encoder pass comes first in both
    n, v, length = batch["input_ids"].shape
    flat = {k: batch[k].view(n * v, length) for k in ("input_ids", "attention_mask", "token_type_ids")}
    z = model.projector(model.encoder(**flat).last_hidden_state[:, 0]).view(n, v, -1)
    assert isinstance(model.projector.net[1], torch.nn.BatchNorm1d)
    cos = F.cosine_similarity(z[:, 0].unsqueeze(1), z[:, 1].unsqueeze(0), dim=-1)
    by_hand = F.cross_entropy(cos / 0.05, torch.arange(n))
    assert torch.equal(z[:, 0], out.embeddings["z1"]) and torch.equal(z[:, 1], out.embeddings["z2"])
    assert torch.allclose(total, by_hand, atol=1e-5)


def test_discriminator_layer_one_row_zero_is_h_bit_exactly(tiny_bert_dir, tok, sentences):
    model = _model(tiny_bert_dir, tok)
    seen = {}

    def grab(module, args, kwargs):
        seen["hidden"] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

    handle = model.discriminator.encoder.layer[0].register_forward_pre_hook(grab, with_kwargs=True)
    out = model(**_batch(tok, sentences[:6]))
    handle.remove()
    h = torch.stack([out.embeddings["z1"], out.embeddings["z2"]], dim=1).reshape(12, -1)
    assert torch.equal(seen["hidden"][:, 0], h.detach())
    # used on its own the discriminator is a plain encoder again (the hook is a no-op without a condition)
    ids = torch.tensor([[2, 30, 31, 3]])
    plain = model.discriminator.eval()(input_ids=ids).last_hidden_state
    assert not torch.allclose(plain[:, 0], h[:1].detach())


@pytest.mark.parametrize("kind", ["tiny_roberta_dir", "tiny_distilbert_dir"])
def test_conditioning_works_for_roberta_and_distilbert(kind, request, sentences):
    folder = request.getfixturevalue(kind)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = DiffCSEModel.from_encoder(str(folder)).train()
    model.attach_generator("unigram", tokenizer)
    seen = {}
    layers = model.discriminator.encoder.layer if kind == "tiny_roberta_dir" else model.discriminator.transformer.layer

    def grab(module, args, kwargs):
        seen["hidden"] = (args[0] if args else kwargs.get("hidden_states", kwargs.get("x"))).detach()

    layers[0].register_forward_pre_hook(grab, with_kwargs=True)
    out = model(**DiffCSEModel.collator(tokenizer, model.config)([tokenizer(s) for s in sentences[:4]]))
    h = torch.stack([out.embeddings["z1"], out.embeddings["z2"]], dim=1).reshape(8, -1)
    assert torch.equal(seen["hidden"][:, 0], h.detach())
    out.aux_losses["rtd_loss"].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.encoder.parameters())


def test_rtd_gradient_reaches_the_encoder_only_through_h_and_never_the_generator(tiny_bert_dir, tiny_mlm_dir, tok,
                                                                                  sentences):
    model = _model(tiny_bert_dir, tok, generator=str(tiny_mlm_dir), lambda_rtd=1.0)
    gen_params = list(model.generator.model.parameters())
    assert {id(p) for p in gen_params}.isdisjoint(id(p) for p in model.parameters())
    assert not any("generator" in name for name, _ in model.named_parameters())
    batch = _batch(tok, sentences[:6])
    out = model(**batch)
    out.aux_losses["rtd_loss"].backward()  # the contrastive term switched off
    enc_grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert enc_grads and any(g.abs().sum() > 0 for g in enc_grads)
    assert model.rtd_head.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in gen_params) and model.generator.model.training  # dropout on, frozen

    model.zero_grad(set_to_none=True)
    out = model(**batch)
    ids, att, labels = model.rtd_batch(batch["input_ids"], batch["attention_mask"], batch["mlm_input_ids"])
    h = torch.stack([out.embeddings["z1"], out.embeddings["z2"]], dim=1).reshape(ids.shape[0], -1)
    model.rtd_forward(h.detach(), ids, att, labels).loss.backward()
    assert all(p.grad is None for p in model.encoder.parameters())  # no other path into f


def test_replace_labels_are_zero_at_position_zero_and_padding(tiny_bert_dir, tok, sentences):
    model = _model(tiny_bert_dir, tok, generator=ConstantGenerator(40))
    batch = _batch(tok, [sentences[0], "a cat", sentences[8]])  # different lengths: padding
    ids, att, labels = model.rtd_batch(batch["input_ids"], batch["attention_mask"], batch["mlm_input_ids"])
    orig = batch["input_ids"].view(6, -1)
    assert (att == 0).any() and labels[:, 0].eq(0).all() and labels[att == 0].eq(0).all()
    assert torch.equal(ids[:, 0], orig[:, 0]) and torch.equal(ids[att == 0], orig[att == 0])
    expected = (ids != orig) & att.bool()
    assert torch.equal(labels, expected.long()) and labels[:, 1:][att[:, 1:].bool()].eq(1).all()


@pytest.fixture(scope="module")
def roberta_pad_one(tmp_path_factory):
    """A tiny RoBERTa whose pad id is 1, as RoBERTa's own (tiny_roberta_dir pads with 0)."""
    folder = make_tiny_encoder(tmp_path_factory.mktemp("tiny_roberta_pad1"), "roberta", pad_token_id=1)
    return folder, AutoTokenizer.from_pretrained(folder)


class MaskedCopyGenerator:
    """Returns the masked copy (so [MASK]s and the random tokens count as replaced), junk at padding."""

    def fill(self, ids, att):
        return torch.where(att.bool(), ids, 40)


def _authors_rtd(model, h, input_ids, att, g_pred):
    """voidism/DiffCSE diffcse/models.py cl_forward: g_pred[:, 0] = cls; replaced = (g_pred != input_ids) * att;
    e_inputs = g_pred * att; h replaces the discriminator's position-0 embedding output; per-position CE logits."""
    g_pred = g_pred.clone()
    g_pred[:, 0] = input_ids[:, 0]
    replaced = (g_pred != input_ids).long() * att
    e_inputs = g_pred * att
    put_h = model.discriminator.embeddings.register_forward_hook(
        lambda module, args, output: torch.cat([h.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1))
    try:
        hidden = model.discriminator(input_ids=e_inputs, attention_mask=att).last_hidden_state
    finally:
        put_h.remove()
    ce = F.cross_entropy(model.rtd_head(hidden).reshape(-1, 2), replaced.reshape(-1), reduction="none")
    return ce, replaced


def test_rtd_loss_is_the_authors_on_a_roberta_whose_pad_id_is_one(roberta_pad_one, sentences):
    folder, tokenizer = roberta_pad_one
    model = DiffCSEModel.from_encoder(str(folder)).double().eval()  # eval: no dropout in the two computations
    model.attach_generator(MaskedCopyGenerator())
    batch = DiffCSECollator(tokenizer, seed=0, masking_ratio=0.3)([tokenizer(s) for s in [sentences[0], "a cat"]])
    input_ids, att = batch["input_ids"].view(4, -1), batch["attention_mask"].view(4, -1)
    assert tokenizer.pad_token_id == model.encoder.config.pad_token_id == 1 and input_ids[att == 0].eq(1).all()
    h = torch.randn(4, model.config.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    g_pred = MaskedCopyGenerator().fill(batch["mlm_input_ids"].view(4, -1), att)
    with torch.no_grad():
        ce, replaced = _authors_rtd(model, h, input_ids, att, g_pred)
        ids, rtd_att, labels = model.rtd_batch(batch["input_ids"], batch["attention_mask"], batch["mlm_input_ids"])
        assert torch.equal(labels, replaced) and labels.sum() > 0 and ids[att == 0].eq(0).all()
        # L_RTD's cross-entropy is taken in fp32 (rtd_forward), the rest of both computations in fp64
        assert torch.allclose(model.rtd_forward(h, ids, rtd_att, labels).loss.double(), ce.mean(), rtol=1e-6, atol=0)
        # the pad id kept there would give another mean (the review's 0.6198 vs 0.6415 case)
        kept = torch.where(att.bool(), ids, input_ids)
        assert not torch.allclose(model.rtd_forward(h, kept, rtd_att, labels).loss.double(), ce.mean(), rtol=1e-3)

        model.config.rtd_ignore_pad = True  # padding out of the loss: its id (now the pad id) changes nothing
        ids, rtd_att, labels = model.rtd_batch(batch["input_ids"], batch["attention_mask"], batch["mlm_input_ids"])
        assert torch.equal(ids[att == 0], input_ids[att == 0])
        real = att.reshape(-1).double()
        assert torch.allclose(model.rtd_forward(h, ids, rtd_att, labels).loss.double(),
                              (ce * real).sum() / real.sum(), rtol=1e-6, atol=0)


def test_rtd_loss_is_the_same_with_and_without_the_padding_free_encoder(roberta_pad_one, sentences):
    folder, tokenizer = roberta_pad_one
    model = DiffCSEModel.from_encoder(str(folder)).double().eval()
    model.attach_generator(MaskedCopyGenerator())
    batch = DiffCSECollator(tokenizer, seed=0)([tokenizer(s) for s in [sentences[0], "a cat", sentences[5]]])
    losses = {}
    for padding_free in (True, False):
        model.config.padding_free = padding_free
        assert model.runs_padding_free("cpu") is padding_free
        with torch.no_grad():
            losses[padding_free] = model(**batch).metrics["rtd_loss"]
    assert torch.allclose(losses[True], losses[False], rtol=1e-6, atol=0)  # L_RTD's cross-entropy is fp32


def test_zeroed_head_gives_log_two(tiny_bert_dir, tok, sentences):
    model = _model(tiny_bert_dir, tok)
    with torch.no_grad():
        model.rtd_head.weight.zero_()
        model.rtd_head.bias.zero_()
    batch = _batch(tok, [sentences[0], "a cat", sentences[3]])
    assert math.isclose(model(**batch).metrics["rtd_loss"], math.log(2), rel_tol=1e-6)
    model.config.rtd_reduction = "sum"
    positions = batch["input_ids"].numel()
    assert math.isclose(model(**batch).metrics["rtd_loss"], positions * math.log(2), rel_tol=1e-6)
    model.config.rtd_ignore_pad = True
    real = int(batch["attention_mask"].sum())
    assert real < positions
    assert math.isclose(model(**batch).metrics["rtd_loss"], real * math.log(2), rel_tol=1e-6)


@pytest.mark.slow
def test_metrics_and_errors_in_training(tiny_bert_dir, tok, sentences):
    model = _model(tiny_bert_dir, tok, generator=ConstantGenerator(40))
    out = model(**_batch(tok, sentences[:4]))
    assert out.metrics["rtd_replaced_share"] > 0.9  # everything but the tokens that already were 40
    assert {"rtd_loss", "rtd_accuracy", "rtd_replaced_accuracy"} <= set(out.metrics)
    plain = {k: v for k, v in _batch(tok, sentences[:4]).items() if not k.startswith("mlm")}
    with pytest.raises(ValueError, match="DiffCSEModel.collator"):
        model(**plain)
    assert set(model.eval()(**plain).embeddings) == {"z1", "z2"}  # evaluation needs no edits


def test_another_methods_collator_is_refused_when_the_trainer_is_built(tiny_bert_dir, tok, tmp_path):
    """Seen before: DiffCSE given TwoViewCollator was built, scored its dev data at step 0 and failed inside the
    first step ("DiffCSE training batches need mlm_input_ids"). A collator not hf_cse's is left to the step."""
    from datasets import Dataset

    from hf_cse.data import TwoViewCollator
    from hf_cse.files import DataError

    model = DiffCSEModel.from_encoder(str(tiny_bert_dir), generator_name_or_path="unigram")
    data = Dataset.from_dict({"text": random_sentences(16)})

    def trainer(collator):
        return ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "o"), train_dataset=data,
                                  processing_class=tok, data_collator=collator)

    with pytest.raises(DataError) as refused:
        trainer(TwoViewCollator(tok))
    assert str(refused.value) == ("data_collator is TwoViewCollator, and diffcse trains on the batches of its own "
                                  "collator, DiffCSECollator: leave data_collator out (the trainer makes it), or pass "
                                  "DiffCSEModel.collator(tokenizer, model.config).")
    trainer(lambda rows: DiffCSEModel.collator(tok, model.config)(rows))  # one's own: it may make them


def test_works_with_other_losses_and_the_off_dropout_and_dcl_switches(tiny_bert_dir, tok, sentences):
    model = _model(tiny_bert_dir, tok, loss="off_dropout_infonce", loss_kwargs={"temperature": 0.05, "m": 0.9},
                   off_dropout=True, dcl_weight=0.1)
    out = model(**_batch(tok, sentences[:6]))
    assert set(out.embeddings) == {"z1", "z2", "z_nodropout"} and "rtd_loss" in out.aux_losses
    loss, metrics = compute_objectives(build_objectives(model.config), out.embeddings)
    assert torch.isfinite(loss) and "dcl_loss" in metrics
    focal = _model(tiny_bert_dir, tok, loss="focal_infonce")
    assert torch.isfinite(_total_loss(focal, focal(**_batch(tok, sentences[:6]))))


# ----------------------------------------------------------------------------------------------- training / saving
@pytest.mark.slow
def test_a_few_trainer_steps_lower_both_losses(tiny_bert_dir, tok, sentences, tmp_path):
    # A random tiny encoder's [CLS] barely depends on the sentence, so after the BatchNorm projector the two
    # views are mostly dropout noise: train on the probe sentences themselves and average the probe over
    # dropout draws. 8 steps were not enough (the contrastive loss fell for only 6 of 8 model seeds with torch's
    # dropout, 7 of 8 with fast dropout); with 20 steps both losses fell for every model seed 0-5 checked.
    ds, _ = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    torch.manual_seed(0)
    model = _model(tiny_bert_dir, tok, generator=None, lambda_rtd=0.1)
    model.attach_generator("unigram", tok, train_token_ids=ds["input_ids"])
    probe = _batch(tok, sentences, seed=5)

    def losses():
        contrastive = rtd = 0.0
        for seed in range(4):
            torch.manual_seed(seed)
            out = model.train()(**probe)
            contrastive += compute_objectives(build_objectives(model.config), out.embeddings)[0].item() / 4
            rtd += out.metrics["rtd_loss"] / 4
        return contrastive, rtd

    before = losses()
    args = tiny_args(tmp_path / "o", max_steps=20, learning_rate=1e-3, per_device_train_batch_size=len(sentences))
    trainer = ContrastiveTrainer(model=model, args=args, train_dataset=ds,
                                 data_collator=DiffCSEModel.collator(tok, model.config), processing_class=tok)
    trainer.train()
    after = losses()
    assert after[0] < before[0] and after[1] < before[1], (before, after)
    logged = trainer.state.log_history[0]
    for key in ("contrastive_loss", "rtd_loss", "rtd_accuracy", "rtd_replaced_share", "loss"):
        assert key in logged, key


@pytest.mark.slow
def test_saved_run_reloads_and_exports_as_a_plain_encoder(tiny_bert_dir, tiny_mlm_dir, tok, sentences, tmp_path):
    model = _model(tiny_bert_dir, tok, generator=str(tiny_mlm_dir))
    model(**_batch(tok, sentences[:8]))  # move the BatchNorm running statistics
    model.save_pretrained(tmp_path / "run")
    keys = load_file(tmp_path / "run" / "model.safetensors").keys()
    assert keys == model.state_dict().keys() and any(k.startswith("discriminator.") for k in keys)
    assert not any("generator" in k for k in keys)

    enc = tok(sentences[:4], padding=True, return_tensors="pt")
    model.eval()
    with torch.no_grad():
        ref = model.sentence_embedding(enc["input_ids"], enc["attention_mask"])
        for loaded in (DiffCSEModel.from_pretrained(tmp_path / "run"), AutoModel.from_pretrained(tmp_path / "run")):
            assert isinstance(loaded, DiffCSEModel) and loaded.generator is None
            assert torch.equal(loaded.eval().sentence_embedding(enc["input_ids"], enc["attention_mask"]), ref)
        model.encoder.save_pretrained(tmp_path / "encoder")
        plain = AutoModel.from_pretrained(tmp_path / "encoder").eval()
        assert torch.allclose(plain(**enc).last_hidden_state[:, 0], ref, atol=1e-6)

    reloaded = DiffCSEModel.from_pretrained(tmp_path / "run").train()
    assert reloaded.config.generator_name_or_path == str(tiny_mlm_dir)
    with pytest.raises(GeneratorError, match="attach_generator"):
        reloaded(**_batch(tok, sentences[:4]))
    reloaded.attach_generator(tokenizer=tok)  # the recorded generator
    assert "rtd_loss" in reloaded(**_batch(tok, sentences[:4])).aux_losses


@pytest.mark.slow
@pytest.mark.parametrize("generator", ["unigram", "masked LM"])
def test_a_resumed_run_edits_as_the_uninterrupted_one_and_ends_with_its_weights(generator, tiny_bert_dir, tiny_mlm_dir,
                                                                                 tok, tmp_path):
    # the edits are drawn from torch's generator when the loader fetches a batch, one batch ahead of the step: each
    # batch's collation draws from a seed of its own, not from the stream the checkpoint's RNG state continues
    # (hf_cse.collator_rng)
    name = "unigram" if generator == "unigram" else str(tiny_mlm_dir)
    common = dict(max_steps=6, save_strategy="steps", save_steps=3, learning_rate=1e-2)

    def trainer(folder):  # 32 rows, 4 batches an epoch: checkpoint-3 is mid-epoch, the resumed run crosses an epoch
        ds, _ = tiny_train_dataset(tiny_bert_dir, random_sentences(8, seed=1), folder, repeat=4)
        torch.manual_seed(0)
        model = DiffCSEModel.from_encoder(str(tiny_bert_dir), generator_name_or_path=name)
        return ContrastiveTrainer(model=model, args=tiny_args(folder / "out", **common), train_dataset=ds,
                                  processing_class=tok)

    full = trainer(tmp_path / "a")
    full.train()
    trainer(tmp_path / "b").train()
    resumed = trainer(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "out" / "checkpoint-3"))
    losses = lambda t: [(h["step"], h["loss"], h["rtd_loss"]) for h in t.state.log_history if "loss" in h]  # noqa: E731
    assert losses(resumed)[-3:] == losses(full)[-3:]
    for (key, x), y in zip(full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(x, y), key  # BatchNorm statistics included


# ----------------------------------------------------------------------------------------------- edits
class FixedChoice(random.Random):
    def __init__(self, chosen):
        super().__init__(0)
        self.chosen = chosen

    def sample(self, population, k):
        assert set(self.chosen) <= set(population) and k == len(self.chosen)
        return list(self.chosen)


CLS, SEP, MASK = 2, 3, 4
ROW = [CLS, 50, 51, 52, 53, SEP]  # [CLS] a b c d [SEP]
SPECIAL = {0, 1, CLS, SEP, MASK}


def test_insert_labels_mark_exactly_the_inserted_tokens():
    ids, labels = insert_masks(ROW, SPECIAL, MASK, 0.5, FixedChoice([1, 5]))  # before a, and before [SEP]
    assert ids == [CLS, MASK, 50, 51, 52, 53, MASK, SEP]
    assert labels == [0, 1, 0, 0, 0, 0, 1, 0]


def test_delete_labels_mark_the_token_after_each_deleted_run():
    ids, labels = delete_tokens(ROW, SPECIAL, 0.5, FixedChoice([2, 3]))  # delete b c
    assert (ids, labels) == ([CLS, 50, 53, SEP], [0, 0, 1, 0])
    ids, labels = delete_tokens(ROW, SPECIAL, 0.25, FixedChoice([4]))  # delete the last word: [SEP] follows it
    assert (ids, labels) == ([CLS, 50, 51, 52, SEP], [0, 0, 0, 0, 1])


def test_insert_fills_only_inserted_positions_and_delete_needs_no_generator(tiny_bert_dir, tok, sentences):
    model = _model(tiny_bert_dir, tok, generator=ConstantGenerator(50), edit_operation="insert")
    batch = _batch(tok, sentences[:3], edit_operation="insert")
    mlm, labels = batch["mlm_input_ids"].view(6, -1), batch["rtd_labels"].view(6, -1)
    ids, att, lab = model.rtd_batch(batch["input_ids"], batch["attention_mask"], batch["mlm_input_ids"],
                                    batch["mlm_attention_mask"], batch["rtd_labels"])
    assert torch.equal(lab, labels) and ids[labels == 1].eq(50).all()
    assert torch.equal(ids[labels == 0], mlm[labels == 0])
    n_ordinary = (~special_tokens_mask(batch["input_ids"], tok)).sum(-1).view(-1)
    assert torch.equal(labels.sum(-1), torch.round(0.3 * n_ordinary.float()).long())
    assert "rtd_loss" in model(**batch).aux_losses

    model = _model(tiny_bert_dir, tok, generator=None, edit_operation="delete")
    batch = _batch(tok, [sentences[0], "a cat sat", sentences[8]], edit_operation="delete")
    att, lab = batch["mlm_attention_mask"], batch["rtd_labels"]
    assert lab[..., 0].eq(0).all() and lab[att == 0].eq(0).all()
    n_ordinary = batch["attention_mask"].sum(-1) - 2  # without [CLS] and [SEP]
    assert torch.equal(att.sum(-1), n_ordinary + 2 - torch.round(0.3 * n_ordinary.float()).long())
    assert "rtd_loss" in model(**batch).aux_losses


def test_replace_masking_is_bert_80_10_10_per_row_and_never_touches_special_tokens(tok):
    ids = torch.tensor([[CLS] + [60 + i % 40 for i in range(30)] + [SEP, 0, 0]] * 400)
    masked = mask_tokens(ids, tok, 0.3, torch.Generator().manual_seed(0))
    special = special_tokens_mask(ids, tok)
    assert torch.equal(masked[special], ids[special])
    changed = masked != ids
    as_mask = masked == tok.mask_token_id
    ordinary = (~special).sum().item()
    assert abs(as_mask.sum().item() / ordinary - 0.3 * 0.8) < 0.01
    assert abs((changed & ~as_mask).sum().item() / ordinary - 0.3 * 0.1) < 0.01  # random tokens (a few equal)
    assert len({tuple(r) for r in as_mask.tolist()}) > 390  # independent per row
    views = _batch(tok, ["the cat sat on the old red mat and the dog runs fast in the green park"] * 50)
    assert not torch.equal(views["mlm_input_ids"][:, 0], views["mlm_input_ids"][:, 1])


# ----------------------------------------------------------------------------------------------- generators
def test_unigram_generator_needs_no_weights_and_draws_corpus_tokens(tiny_bert_dir, tok, sentences):
    corpus = [tok(s)["input_ids"] for s in sentences]
    gen = UnigramGenerator.from_token_ids(corpus, len(tok), tok.mask_token_id, tok.all_special_ids)
    assert gen.probs[tok.all_special_ids].sum() == 0
    seen = {t for row in corpus for t in row} - set(tok.all_special_ids)
    assert set(torch.nonzero(gen.probs).view(-1).tolist()) == seen
    ids = torch.tensor([[CLS, MASK, 50, MASK, SEP]])
    out = gen.fill(ids, torch.ones_like(ids))
    assert torch.equal(out[:, [0, 2, 4]], ids[:, [0, 2, 4]]) and set(out[0, [1, 3]].tolist()) <= seen
    uniform = UnigramGenerator.from_token_ids(None, len(tok), tok.mask_token_id, tok.all_special_ids)
    assert torch.allclose(uniform.probs[5:], torch.full((len(tok) - 5,), 1 / (len(tok) - 5)))

    model = _model(tiny_bert_dir, tok, generator=None)
    n_params = len(list(model.parameters()))
    model.attach_generator("unigram", tok)
    assert isinstance(model.generator, UnigramGenerator) and len(list(model.parameters())) == n_params


def test_masked_lm_generator_options(tiny_mlm_dir, tok):
    mlm = BertForMaskedLM.from_pretrained(tiny_mlm_dir)
    ids = torch.tensor([[CLS, MASK, 50, MASK, SEP]])
    only_masked = MaskedLMGenerator(mlm, MASK, fill="masked", train_mode=False).fill(ids, torch.ones_like(ids))
    assert torch.equal(only_masked[:, [0, 2, 4]], ids[:, [0, 2, 4]]) and not mlm.training
    gen = MaskedLMGenerator(mlm, MASK)  # dropout on by default, as the authors' generator
    gen.fill(ids, torch.ones_like(ids))
    assert mlm.training and not any(p.requires_grad for p in mlm.parameters())
    argmax = MaskedLMGenerator(mlm, MASK, train_mode=False)
    assert torch.equal(argmax.fill(ids, torch.ones_like(ids)), argmax.fill(ids, torch.ones_like(ids)))


def test_mismatched_generator_vocabulary_errors_clearly(tiny_bert_dir, tiny_mlm_dir, tok, tmp_path):
    model = _model(tiny_bert_dir, tok, generator=None)
    cfg = BertConfig.from_pretrained(tiny_mlm_dir)
    cfg.vocab_size += 7
    with pytest.raises(GeneratorError, match=r"vocabulary of \d+ tokens but the encoder has \d+"):
        model.attach_generator(BertForMaskedLM(cfg), tok)
    # same size, different tokens: the tokenizers are compared
    vocab = (tiny_mlm_dir / "vocab.txt").read_text().split("\n")
    vocab[60], vocab[61] = vocab[61], vocab[60]
    other = tmp_path / "other_mlm"
    other.mkdir()
    (other / "vocab.txt").write_text("\n".join(vocab))
    from transformers import BertTokenizerFast

    # (transformers 5 ignores vocab_file: that built a tokenizer of the 5 special tokens alone)
    BertTokenizerFast(vocab={t: i for i, t in enumerate(t for t in vocab if t)}).save_pretrained(other)
    BertForMaskedLM.from_pretrained(tiny_mlm_dir).save_pretrained(other)
    with pytest.raises(GeneratorError, match="different tokenizer"):
        model.attach_generator(str(other), tok)
    with pytest.raises(GeneratorError, match="unigram"):
        model.attach_generator(str(tmp_path / "no_such_model"), tok)


def test_a_generator_saved_without_its_tokenizer_is_checked_by_its_vocabulary_size(tiny_bert_dir, tiny_mlm_dir, tok,
                                                                                   tmp_path, caplog):
    """A masked LM saved by save_pretrained alone: the stand-in tokenizer transformers loads from its folder (BERT's 5
    special tokens) was compared with the encoder's, and the generator refused as using "a different tokenizer"."""
    model = _model(tiny_bert_dir, tok, generator=None)
    BertForMaskedLM.from_pretrained(tiny_mlm_dir).save_pretrained(tmp_path / "mlm")
    with caplog.at_level("WARNING", logger="hf_cse.models.diffcse.generators"):
        assert isinstance(model.attach_generator(str(tmp_path / "mlm"), tok), MaskedLMGenerator)
    assert f"generator {tmp_path / 'mlm'} has no tokenizer to compare with the encoder's" in caplog.text


def test_an_encoder_saved_without_its_tokenizer_needs_the_tokenizer_given(tiny_bert_dir, tiny_mlm_dir, tmp_path):
    """attach_generator without a tokenizer loads the encoder's: from a folder of weights only that was the stand-in,
    and the generator was refused as using "a different tokenizer"."""
    AutoModel.from_pretrained(tiny_bert_dir).save_pretrained(tmp_path / "weights_only")
    model = DiffCSEModel.from_encoder(str(tmp_path / "weights_only"))
    with pytest.raises(GeneratorError) as err:
        model.attach_generator(str(tiny_mlm_dir))
    assert str(err.value) == (
        f"{tmp_path / 'weights_only'} holds no tokenizer (what transformers loads from it is a stand-in BertTokenizer "
        "of only 5 special token(s)): pass the encoder's tokenizer to attach_generator(generator, tokenizer).")
    assert isinstance(model.attach_generator(str(tiny_mlm_dir), AutoTokenizer.from_pretrained(tiny_bert_dir)),
                      MaskedLMGenerator)


# ----------------------------------------------------------------------------------------------- script
@pytest.mark.slow
def test_run_unsup_trains_diffcse_end_to_end(tiny_bert_dir, tiny_mlm_dir, tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(12)) + "\n")
    common = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train), "--max_steps", "2",
              "--per_device_train_batch_size", "4", "--use_cpu", "--disable_tqdm", "true"]
    train_cli.train_from_args(["--method", "diffcse", "--output_dir", str(tmp_path / "a"), *common])
    model = DiffCSEModel.from_pretrained(tmp_path / "a")
    assert model.config.generator_name_or_path == "unigram" and model.config.projector == "batchnorm"

    train_cli.train_from_args(["--method", "diffcse", "--output_dir", str(tmp_path / "b"), "--generator_name_or_path",
                    str(tiny_mlm_dir), "--lambda_rtd", "0.05", "--masking_ratio", "0.15", "--edit_operation",
                    "insert", *common])
    cfg = DiffCSEModel.from_pretrained(tmp_path / "b").config
    assert (cfg.lambda_rtd, cfg.masking_ratio, cfg.edit_operation) == (0.05, 0.15, "insert")
    assert cfg.generator_name_or_path == str(tiny_mlm_dir)

    with pytest.raises(ValueError, match="--lambda_rtd only applies to --method diffcse"):
        train_cli.train_from_args(["--lambda_rtd", "0.1", "--output_dir", str(tmp_path / "c"), *common])


@pytest.mark.parametrize("edit", ["replace", "insert", "delete"])
def test_a_seeded_collator_edits_each_batch_by_its_rows_not_by_how_many_came_before(tok, sentences, edit):
    """``DiffCSECollator(seed=...)``: a batch is edited alike whenever it is collated (a resumed run, a loader worker
    that collated other batches first): its generators are seeded by the seed and its rows, not a running stream."""
    rows = [tok(s) for s in sentences]
    first = DiffCSECollator(tok, seed=3, edit_operation=edit)
    fresh = first(rows[:4])
    first(rows[4:])  # a batch collated in between
    again = first(rows[:4])
    assert torch.equal(fresh["mlm_input_ids"], again["mlm_input_ids"])
    new_collator = DiffCSECollator(tok, seed=3, edit_operation=edit)
    assert torch.equal(fresh["mlm_input_ids"], new_collator(rows[:4])["mlm_input_ids"])
    other_seed = DiffCSECollator(tok, seed=4, edit_operation=edit)(rows[:4])["mlm_input_ids"]
    assert not torch.equal(fresh["mlm_input_ids"], other_seed)


def test_generator_settings_before_the_generator_is_attached_are_kept_and_a_zero_rtd_weight_refuses_them(
        tiny_bert_dir):
    """The library's flow names the generator after from_encoder (attach_generator): its settings were refused as
    doing nothing while no generator was named yet (a review of the declared needs)."""
    from hf_cse.errors import CSEError

    model = DiffCSEModel.from_encoder(str(tiny_bert_dir), generator_sampling=True, generator_fill="masked")
    assert model.config.generator_sampling is True and model.config.generator_fill == "masked"
    with pytest.raises(CSEError, match="generator_sampling does nothing while lambda_rtd is 0.0: it acts only with "
                                       "lambda_rtd > 0"):
        DiffCSEModel.from_encoder(str(tiny_bert_dir), generator_sampling=True, lambda_rtd=0.0)
