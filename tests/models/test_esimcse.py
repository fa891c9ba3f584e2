"""ESimCSE (Wu et al., COLING 2022) against its authors' code, caskcsg/sentemb@5eeec55 ``ESimCSE/``, re-stated here
step by step in float64 (the reference below follows their steps; it is written for this test, not copied):

* word repetition: ``train.py:prepare_features``, branch ``dup_type == "bpe"`` (the one ``run.sh`` uses);
* one training step: ``esimcse/models.py:cl_forward`` (encoder forward, momentum update, InfoNCE of ``z1`` over
  ``[z2 ; pre_z1]``) and ``esimcse/trainers.py:CLTrainer.compute_loss`` (the momentum encoder, dropout off, embeds
  view 1; ``pre_z1 = cat((pre_z1, eval_z))[-neg_size:]``).

Then the training state: a resumed run equals an uninterrupted one, the export holds the encoder only, two processes
equal one, and what ESimCSE cannot do is refused in one line.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from helpers import long_sentences, random_sentences, tiny_args, tiny_train_dataset
from transformers import AutoConfig, AutoTokenizer, BertModel

from hf_cse.cached import IncompatibleOptionsError, check_cached_compatible
from hf_cse.errors import CSEError
from hf_cse.losses import build_loss
from hf_cse.losses.base import QUEUE_INPUT
from hf_cse.models import get_method
from hf_cse.models.esimcse import ESIMCSE, ESimCSEConfig, ESimCSEModel, repeat_tokens
from hf_cse.objectives import build_objectives, compute_objectives


# ------------------------------------------------------------------ the authors' computation, re-stated
def authors_bpe_repetition(input_ids: list[int], dup_rate: float, rng: random.Random) -> list[int]:
    """``train.py:prepare_features`` (dup_type "bpe") for one sentence of the second view, drawing from ``rng``."""
    input_len = len(input_ids)
    if int(dup_rate * input_len) > 0:
        add_len = rng.randrange(min(10, int(dup_rate * input_len)))
        dup = sorted(rng.sample(range(1, input_len - 1), add_len))  # not [CLS], not [SEP]
        new_input_ids = []
        for i, token in enumerate(input_ids):
            if i in dup:
                new_input_ids.append(token)
            new_input_ids.append(token)
        return new_input_ids
    return input_ids


class AuthorsStep:
    """``cl_forward`` + ``CLTrainer.compute_loss`` with ``neg_size > 0``, pooler ``cls`` (the MLP in training)."""

    def __init__(self, online: BertModel, momentum: BertModel, mlp: torch.nn.Linear, lam: float, neg_size: int,
                 temp: float):
        self.online, self.momentum, self.mlp = online, momentum, mlp
        self.lam, self.neg_size, self.temp = lam, neg_size, temp
        self.pre_z1 = None

    def embed(self, encoder, ids, mask, types):
        return torch.tanh(self.mlp(encoder(ids, attention_mask=mask, token_type_ids=types).last_hidden_state[:, 0]))

    def loss(self, batch) -> torch.Tensor:
        ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
        bs, length = ids.shape[0], ids.shape[-1]
        pooled = self.embed(self.online, ids.view(-1, length), mask.view(-1, length), types.view(-1, length))
        z1, z2 = pooled.view(bs, 2, -1)[:, 0], pooled.view(bs, 2, -1)[:, 1]
        with torch.no_grad():  # models.py: right after the encoder forward, before the loss
            for param, param_m in zip(self.online.parameters(), self.momentum.parameters(), strict=True):
                param_m.data = param_m.data * self.lam + param.data * (1.0 - self.lam)
        cos_sim = F.cosine_similarity(z1.unsqueeze(1), z2.unsqueeze(0), dim=-1) / self.temp
        if self.pre_z1 is not None:
            cos_sim = torch.cat([cos_sim, F.cosine_similarity(z1.unsqueeze(1), self.pre_z1.unsqueeze(0), dim=-1)
                                 / self.temp], 1)
        loss = F.cross_entropy(cos_sim, torch.arange(bs))
        self.momentum.eval()  # trainers.py: model.eval(), no_grad, view 1 only, through the momentum encoder
        with torch.no_grad():
            eval_z = self.embed(self.momentum, ids[:, 0], mask[:, 0], types[:, 0])
        self.pre_z1 = eval_z.clone() if self.pre_z1 is None else torch.cat((self.pre_z1, eval_z.clone()), 0)[
            -self.neg_size:]
        return loss


# ------------------------------------------------------------------ word repetition
def test_word_repetition_repeats_what_the_authors_code_repeats_from_the_same_draws():
    data = random.Random(0)
    rows = [[101] + [data.randrange(1000, 2000) for _ in range(n)] + [102] for n in range(0, 40) for _ in range(3)]
    for rate in (0.32, 0.3, 0.28, 0.05, 0.9):
        ours, theirs = random.Random(7), random.Random(7)
        repeated = [repeat_tokens(ids, rate, ours) for ids in rows]
        assert repeated == [authors_bpe_repetition(ids, rate, theirs) for ids in rows]
        assert ours.random() == theirs.random()  # the same number of draws: the streams stayed in step
        assert any(len(r) > len(ids) for r, ids in zip(repeated, rows)) or rate < 0.1


def test_the_collator_pairs_each_sentence_with_its_repeated_copy_the_same_in_any_batch(tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    collate = ESimCSEModel.collator(tok, ESimCSEConfig(dup_rate=0.32))
    features = [tok(s) for s in random_sentences(24)]
    batch = collate(features)
    assert batch["input_ids"].shape[:2] == (24, 2)
    again = collate(features[::-1][:12])  # another batch, another order: the same views
    longer = 0
    for i, f in enumerate(features):
        ids = f["input_ids"]
        one, two = (batch["input_ids"][i, v][batch["attention_mask"][i, v].bool()].tolist() for v in (0, 1))
        assert one == ids and two == repeat_tokens(ids, 0.32, collate.row_rng(ids))
        longer += len(two) > len(ids)
        if i >= 12:
            j = 23 - i
            assert again["input_ids"][j, 1][again["attention_mask"][j, 1].bool()].tolist() == two
    assert longer > 0
    other_seed = type(collate)(tok, dup_rate=0.32, seed=collate.seed + 1)(features)
    assert not torch.equal(other_seed["input_ids"], batch["input_ids"])


def test_padding_and_the_prompt_are_no_part_of_the_repeated_sentence(tiny_bert_dir):
    """A data set tokenized with padding had its [PAD]s counted in the sentence's length, drawn and repeated (and
    the last [PAD], not [SEP], kept out); the model's prompt, tokenized in front of each sentence, was repeated as if
    it were the sentence's words. The draws are now made over the sentence's own tokens with its special tokens."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    collate = ESimCSEModel.collator(tok, ESimCSEConfig(dup_rate=0.32))
    for sentence in random_sentences(40, seed=3):
        plain = tok(sentence)
        padded = tok(sentence, padding="max_length", max_length=len(plain["input_ids"]) + 20)
        assert collate.repeated(padded) == collate.repeated(plain)
    prompted = ESimCSEModel.collator(tok, ESimCSEConfig(dup_rate=0.32, prompt="query: "))
    prompt_ids = tok("query:", add_special_tokens=False)["input_ids"]
    repeats = 0
    for sentence in random_sentences(40, seed=4):
        ids = tok("query: " + sentence)["input_ids"]
        assert ids[1:1 + len(prompt_ids)] == prompt_ids
        two = prompted.repeated({"input_ids": ids})["input_ids"]
        assert two[:1 + len(prompt_ids)] == ids[:1 + len(prompt_ids)]  # the prompt once, in place
        own = ids[:1] + ids[1 + len(prompt_ids):]  # the sentence with its special tokens
        rest = two[:1] + two[1 + len(prompt_ids):]
        extra = len(rest) - len(own)
        assert 0 <= extra < max(1, int(0.32 * len(own))) and rest[0] == own[0] and rest[-1] == own[-1]
        repeats += extra
    assert repeats > 0


def test_the_paper_rule_repeats_at_most_max_2_or_rate_times_n_ordinary_tokens(tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    collate = ESimCSEModel.collator(tok, ESimCSEConfig(dup_rate=0.3, dup_rule="paper"))
    features = [tok(s) for s in random_sentences(32)]
    batch = collate(features)
    extra = [int(batch["attention_mask"][i, 1].sum()) - len(f["input_ids"]) for i, f in enumerate(features)]
    assert all(0 <= e <= max(2, int(0.3 * (len(f["input_ids"]) - 2))) for e, f in zip(extra, features))
    assert max(extra) > 0


def test_repeated_views_are_cut_at_the_encoders_position_limit_and_the_others_are_the_authors(tiny_bert_dir,
                                                                                              tiny_roberta_dir):
    """A sentence tokenized at the encoder's limit grows past it when tokens are repeated; a tokenizer built from a
    vocab has no model_max_length to cut it at. The encoder's limit cuts it, keeping [SEP] as truncation does; a
    repeated view within the limit is the authors' to the bit."""
    for folder, limit in ((tiny_bert_dir, 64), (tiny_roberta_dir, 78)):  # RoBERTa: 80 positions - offset 2
        tok = AutoTokenizer.from_pretrained(folder)
        assert tok.model_max_length > 1_000_000
        collate = ESimCSEModel.collator(tok, ESimCSEConfig(encoder_config=AutoConfig.from_pretrained(folder)))
        features = [tok(s, truncation=True, max_length=limit)
                    for s in long_sentences(24, limit - 2) + random_sentences(24)]
        batch = collate(features)
        assert batch["input_ids"].shape == (48, 2, limit)
        cut = kept = 0
        for i, f in enumerate(features):
            ids = f["input_ids"]
            one, two = (batch["input_ids"][i, v][batch["attention_mask"][i, v].bool()].tolist() for v in (0, 1))
            authors = repeat_tokens(ids, 0.32, collate.row_rng(ids))
            assert one == ids
            if len(authors) > limit:
                assert two == authors[:limit - 1] + authors[-1:] and two[-1] == tok.sep_token_id
                cut += 1
            else:
                assert two == authors
                kept += len(authors) > len(ids)
        assert cut > 0 and kept > 0


@pytest.mark.slow  # two training steps (~0.7 s here); the cut itself: the test above
def test_esimcse_trains_at_max_seq_length_equal_to_the_encoders_limit(tiny_bert_dir, tmp_path):
    from hf_cse.data import tokenize_dataset
    from hf_cse.trainer import ContrastiveTrainer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)  # no model_max_length: before, rows grew to 64 + 9 tokens
    data = tokenize_dataset(Dataset.from_dict({"text": long_sentences(16, 62)}), tok, max_seq_length=64)
    assert {len(ids) for ids in data["input_ids"]} == {64}
    torch.manual_seed(0)
    model = ESimCSEModel.from_encoder(str(tiny_bert_dir), queue_size=8)
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out", max_steps=2), train_dataset=data,
                                 processing_class=tok)
    trainer.train()
    assert trainer.state.global_step == 2 and model.queue.count() == 8


def test_a_collator_without_word_repetition_is_refused_and_dup_rate_0_is_the_ablation(tiny_bert_dir, tmp_path):
    """Seen before: ESimCSE given SimCSE's TwoViewCollator trained SimCSE plus a queue (no repeated tokens in view 2)
    without a word. The ablation without repetition is the method's own collator at dup_rate 0."""
    from hf_cse.data import TwoViewCollator
    from hf_cse.files import DataError
    from hf_cse.trainer import ContrastiveTrainer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = Dataset.from_dict({"text": random_sentences(16)})
    model = ESimCSEModel.from_encoder(str(tiny_bert_dir), queue_size=8, dup_rate=0.0)
    with pytest.raises(DataError, match=r"^data_collator is TwoViewCollator, and esimcse trains on the batches of its "
                                        r"own collator, WordRepetitionCollator: leave data_collator out"):
        ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), train_dataset=data, processing_class=tok,
                           data_collator=TwoViewCollator(tok))
    batch = ESimCSEModel.collator(tok, model.config)([{"input_ids": [101, 7, 8, 9, 102]}] * 2)
    assert torch.equal(batch["input_ids"][:, 0], batch["input_ids"][:, 1])  # dup_rate 0: the two views alike


# ------------------------------------------------------------------ momentum update, queue and loss
@pytest.mark.parametrize("objective", ["infonce", "gs_infonce"])
def test_steps_match_the_authors_momentum_queue_and_loss_in_float64(objective, tiny_bert_dir):
    """Five SGD steps of batch 8 with a queue of 12 (it fills, then drops its oldest rows): after every step the loss,
    the momentum encoder, the queue (contents and order) and the trained weights equal the authors'. GS-InfoNCE
    without noise (lam 0) is InfoNCE, so the queue composes with it unchanged."""
    lam, neg_size, temp = 0.9, 12, 0.05
    hyper = {"lam": 0.0} if objective == "gs_infonce" else {}
    model = ESimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0, queue_size=neg_size, momentum=lam,
                                      loss=objective, loss_kwargs={"temperature": temp, **hyper}).double().train()
    objectives = build_objectives(model.config)
    online = BertModel.from_pretrained(tiny_bert_dir, add_pooling_layer=False, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0).double().train()
    momentum = BertModel(online.config, add_pooling_layer=False).double()
    momentum.load_state_dict(model.momentum_encoder.state_dict())  # the same starting momentum weights
    mlp = torch.nn.Linear(32, 32).double()
    mlp.load_state_dict(model.projector.dense.state_dict())
    authors = AuthorsStep(online, momentum, mlp, lam, neg_size, temp)
    ours_opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    theirs_opt = torch.optim.SGD([*online.parameters(), *mlp.parameters()], lr=0.5)
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    collate = ESimCSEModel.collator(tok, model.config)
    sentences = random_sentences(40)
    for step in range(5):
        batch = collate([tok(s) for s in sentences[8 * step: 8 * step + 8]])
        out = model(**batch)
        assert ("z_queue" in out.embeddings) == (step > 0)
        loss, _ = compute_objectives(objectives, out.embeddings)
        expected = authors.loss(batch)
        assert loss.item() == pytest.approx(expected.item(), rel=1e-10)
        for opt, value in ((ours_opt, loss), (theirs_opt, expected)):
            opt.zero_grad()
            value.backward()
            opt.step()
        queue = model.queue.contents()
        assert queue.shape == authors.pre_z1.shape == (min(8 * (step + 1), neg_size), 32)
        torch.testing.assert_close(queue, authors.pre_z1, rtol=0, atol=1e-12)
        for (name, ours), theirs in zip(model.momentum_encoder.named_parameters(), momentum.parameters(), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12, msg=name)
        for (name, ours), theirs in zip(model.encoder.named_parameters(), online.parameters(), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-10, msg=name)
    assert not torch.equal(queue[:4], authors.embed(momentum, *(batch[k][:4, 0] for k in (
        "input_ids", "attention_mask", "token_type_ids"))))  # the queue holds earlier batches, not this one


def test_losses_take_the_queue_as_extra_negatives_of_every_anchor():
    g = torch.Generator().manual_seed(0)
    z1, z2, q = (torch.randn(n, 6, generator=g, dtype=torch.float64) for n in (5, 5, 7))
    cos = F.normalize(z1, dim=-1) @ F.normalize(torch.cat([z2, q]), dim=-1).T
    tau, m = 0.1, 0.3
    infonce = sum(-cos[i, i] / tau + torch.logsumexp(cos[i] / tau, 0) for i in range(5)) / 5
    assert build_loss("infonce", temperature=tau)(z1, z2, z_queue=q).loss.item() == pytest.approx(infonce.item(),
                                                                                                   rel=1e-12)
    focal = sum(-cos[i, i] ** 2 / tau + torch.logsumexp(torch.stack(
        [cos[i, i] ** 2 / tau] + [cos[i, j] * (cos[i, j] + m) / tau for j in range(12) if j != i]), 0)
        for i in range(5)) / 5
    got = build_loss("focal_infonce", temperature=tau, m=m)(z1, z2, z_queue=q).loss
    assert got.item() == pytest.approx(focal.item(), rel=1e-12)
    with pytest.raises(ValueError, match=r"barlow_twins: got unexpected inputs \['z_queue'\]"):
        build_loss("barlow_twins")(z1, z2, z_queue=q)
    with pytest.raises(ValueError, match="z_queue must have z1's width 6"):
        build_loss("infonce")(z1, z2, z_queue=q[:, :4])


# ------------------------------------------------------------------ the method's settings and refusals
def test_bad_settings_and_what_esimcse_cannot_do_are_one_line_each(tiny_bert_dir):
    enc = {"model_type": "bert"}
    for fields, message in [({"dup_rate": 1.0}, r"dup_rate must be a number in \[0, 1\)"),
                            ({"queue_size": -1}, "queue_size must be an integer >= 0"),
                            ({"momentum": 1.5}, r"momentum must be a number in \[0, 1\]"),
                            ({"dup_rule": "x"}, "unknown dup_rule"),
                            ({"loss": "barlow_twins"}, "no use for the momentum queue.*infonce"),
                            ({"lora_r": 4}, "without lora_r")]:
        with pytest.raises(ValueError, match=message) as err:
            ESimCSEConfig(encoder_config=enc, **fields)
        assert "\n" not in str(err.value)
    ESimCSEConfig(encoder_config=enc, loss="barlow_twins", queue_size=0)  # word repetition only: any loss
    with pytest.raises(IncompatibleOptionsError, match="method=.esimcse.: its momentum encoder and queue") as err:
        check_cached_compatible(ESimCSEConfig(encoder_config=enc), 4)
    assert "\n" not in str(err.value)
    from hf_cse.cli.preflight import check_pair_training
    from hf_cse.data import DataError

    with pytest.raises(DataError, match="--method esimcse \\(its second view is the same sentence"):
        check_pair_training("esimcse", "infonce", "positive", None)


def test_momentum_encoder_starts_as_the_authors_or_as_a_copy(tiny_bert_dir):
    torch.manual_seed(0)
    fresh = ESimCSEModel.from_encoder(str(tiny_bert_dir))
    copied = ESimCSEModel.from_encoder(str(tiny_bert_dir), momentum_init="copy")
    weight = "embeddings.word_embeddings.weight"
    assert torch.equal(copied.momentum_encoder.state_dict()[weight], copied.encoder.state_dict()[weight])
    assert not torch.equal(fresh.momentum_encoder.state_dict()[weight], fresh.encoder.state_dict()[weight])
    assert not any(p.requires_grad for p in fresh.momentum_encoder.parameters())
    bare = ESimCSEModel.from_encoder(str(tiny_bert_dir), projector="none", queue_size=4).train()
    batch = {"input_ids": torch.tensor([[[2, 30, 31, 3], [2, 30, 30, 3]]] * 3), "attention_mask": torch.ones(3, 2, 4)}
    bare(**batch)
    assert bare.training and bare.queue.count() == 3  # no head: the pooled vectors are queued
    assert ESimCSEModel.from_encoder(str(tiny_bert_dir), queue_size=0).momentum_encoder is None
    half = ESimCSEModel.from_encoder(str(tiny_bert_dir), encoder_dtype="bf16")  # the average keeps every update
    assert {p.dtype for p in half.momentum_encoder.parameters()} == {torch.float32}
    assert get_method("esimcse") is ESimCSEModel and ESimCSEModel.references[0] is ESIMCSE


def test_a_queue_that_can_never_fill_is_refused_and_a_large_one_said_once(caplog, monkeypatch):
    """The queue's rows are allocated and saved in full: one far above the batch that one epoch cannot fill is
    refused in one line naming queue_size; one above 10 global batches is said once; the paper's 2.5 x passes."""
    from hf_cse import said_once
    from hf_cse.models.esimcse.momentum import check_queue_size

    monkeypatch.setattr(said_once, "_SAID", set())  # what earlier tests said does not count

    with pytest.raises(CSEError, match=r"queue_size 3,000,000 can never fill: one epoch enqueues at most 192 rows "
                                       r"\(200 training rows in global batches of 16\).*2.5 x the global batch "
                                       r"\(40 here\).*at most 192\.$") as err:
        check_queue_size(3_000_000, 16, 200)
    assert err.value.fields == ("queue_size",) and "\n" not in str(err.value)
    with caplog.at_level("WARNING", logger="hf_cse"):
        check_queue_size(40, 16, 200)  # the paper's
        check_queue_size(160, 16, 200)  # 10 x: not yet
        assert caplog.messages == []
        check_queue_size(3_000_000, 16, None)  # a stream: its rows are not known, so said only
        check_queue_size(1_000, 16, 100_000)  # fills within an epoch
        check_queue_size(1_000, 16, 100_000)  # the command line's check, then the trainer's: said once
    assert len(caplog.messages) == 2 and "queue_size 3,000,000 is 187500 x the global batch of 16" in caplog.messages[0]
    assert "the paper's is 2.5 x, 40 here" in caplog.messages[1]


@pytest.mark.slow
def test_the_trainer_refuses_a_queue_its_epochs_cannot_fill_before_its_rows_are_allocated(tiny_bert_dir, tmp_path):
    """From Python the model is built before the trainer sees the run: the queue's rows wait for the first
    enqueue, so the refused queue has cost no memory; a saved state still holds all its rows."""
    from hf_cse.trainer import ContrastiveTrainer

    ds, tok = tiny_train_dataset(tiny_bert_dir, random_sentences(8, seed=1), tmp_path, repeat=4)
    model = ESimCSEModel.from_encoder(str(tiny_bert_dir), queue_size=1000)
    assert model.queue.rows.numel() == 0
    with pytest.raises(CSEError, match="queue_size 1,000 can never fill: one epoch enqueues at most 32 rows") as err:
        ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), train_dataset=ds,
                           data_collator=ESimCSEModel.collator(tok, model.config), processing_class=tok)
    assert err.value.fields == ("queue_size",) and model.queue.rows.numel() == 0
    assert model.state_dict()["queue.rows"].shape == (1000, model.config.hidden_size)


# ------------------------------------------------------------------ training state: checkpoints, export, processes
def _trainer(folder, tmp_path, config=None, **args):
    """A trainer of 4 batches of 8 rows per epoch, queue_size 12."""
    from hf_cse.trainer import ContrastiveTrainer

    ds, tok = tiny_train_dataset(folder, random_sentences(8, seed=1), tmp_path, repeat=4)
    torch.manual_seed(0)
    model = ESimCSEModel.from_encoder(str(folder), **{"queue_size": 12, "momentum": 0.9, **(config or {})})
    return ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out", **args), train_dataset=ds,
                              data_collator=ESimCSEModel.collator(tok, model.config), processing_class=tok)


@pytest.mark.slow
def test_a_resumed_run_restores_the_momentum_encoder_and_queue_and_ends_as_the_uninterrupted_one(tiny_bert_dir,
                                                                                                  tmp_path):
    common = dict(max_steps=6, save_strategy="steps", save_steps=3, learning_rate=1e-2)
    full = _trainer(tiny_bert_dir, tmp_path / "a", **common)
    full.train()
    _trainer(tiny_bert_dir, tmp_path / "b", **common).train()
    resumed = _trainer(tiny_bert_dir, tmp_path / "b", **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "out" / "checkpoint-3"))
    assert resumed.state.global_step == 6
    # step 4's loss has the 12 queued rows of steps 2-3 among its negatives only if the checkpoint restored them
    losses = lambda t: [h["loss"] for h in t.state.log_history if "loss" in h][-3:]  # noqa: E731
    assert losses(resumed) == pytest.approx(losses(full), abs=1e-5)
    a, b = full.model, resumed.model
    assert a.queue.count() == b.queue.count() == 12
    torch.testing.assert_close(a.queue.contents(), b.queue.contents(), rtol=0, atol=1e-5)
    for (name, x), y in zip(a.named_parameters(), b.parameters(), strict=True):  # momentum encoder included
        torch.testing.assert_close(x, y, rtol=0, atol=1e-5, msg=name)


def _queued_negatives_per_forward(trainer) -> list[int]:
    """The number of queued rows among the negatives of each training forward, filled as the trainer runs."""
    counts = []
    trainer.model.register_forward_hook(
        lambda module, args, out: counts.append(len(out.embeddings.get(QUEUE_INPUT, ()))) if module.training else None)
    return counts


@pytest.mark.slow
@pytest.mark.parametrize(("accumulation", "empty", "expected"), [
    (1, True, [0, 8, 12, 12] * 2),
    (2, True, [0, 8, 12, 12] * 2),  # emptied once per epoch, not at each optimizer step
    (1, False, [0, 8] + [12] * 6),
])
def test_the_queue_is_emptied_as_each_epoch_begins_as_the_authors_code_does(accumulation, empty, expected,
                                                                             tiny_bert_dir, tmp_path):
    trainer = _trainer(tiny_bert_dir, tmp_path, {"empty_queue_each_epoch": empty}, max_steps=-1, num_train_epochs=2,
                       gradient_accumulation_steps=accumulation)
    counts = _queued_negatives_per_forward(trainer)
    trainer.train()
    assert trainer.state.global_step == 8 // accumulation and counts == expected


@pytest.mark.slow
def test_a_run_resumed_inside_an_epoch_keeps_its_queue_and_one_resumed_at_an_epoch_start_empties_it(tiny_bert_dir,
                                                                                                   tmp_path):
    _trainer(tiny_bert_dir, tmp_path / "a", max_steps=-1, num_train_epochs=2, save_strategy="steps",
             save_steps=1).train()
    for step, expected in ((3, [12, 0, 8, 12, 12]), (4, [0, 8, 12, 12])):
        resumed = _trainer(tiny_bert_dir, tmp_path / f"from_{step}", max_steps=-1, num_train_epochs=2)
        counts = _queued_negatives_per_forward(resumed)
        resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "out" / f"checkpoint-{step}"))
        assert counts == expected, step


@pytest.mark.slow
def test_the_export_holds_the_encoder_only_and_a_saved_model_keeps_its_queue(tiny_bert_dir, tmp_path):
    from safetensors import safe_open
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    from hf_cse.export import to_sentence_transformer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = ESimCSEModel.from_encoder(str(tiny_bert_dir), queue_size=6).train()
    sentences = random_sentences(4)
    model(**ESimCSEModel.collator(tok, model.config)([tok(s) for s in sentences]))  # one step: 4 rows queued
    model.save_pretrained(tmp_path / "saved")
    again = AutoModel.from_pretrained(tmp_path / "saved")
    assert again.queue.count() == 4 and torch.equal(again.queue.contents(), model.queue.contents())
    out = to_sentence_transformer(model.eval(), tmp_path / "st", tokenizer=tok)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        # no momentum encoder, no queue; the pooler layer every BERT load builds (fixed weights)
        assert set(f.keys()) == set(model.encoder.state_dict()) | {"pooler.dense.weight", "pooler.dense.bias"}
    batch = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model.sentence_embedding(**batch)
    got = torch.tensor(SentenceTransformer(str(out), device="cpu").encode(sentences))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    card = (out / "README.md").read_text()
    assert card.index(ESIMCSE.bibtex) < card.index("@inproceedings{gao2021simcse")
    assert "momentum encoder and queue" in card and "word repetition" in card


@pytest.mark.slow
def test_two_processes_enqueue_the_gathered_batch_once_and_equal_one_process(tiny_bert_dir, tmp_path):
    """torchrun, 2 gloo processes, three steps of 16 rows with a queue of 24: every process holds the queue of one
    process on the global batch (same rows, same order), and the third step's loss and the gradients agree."""
    from dist_helpers import WORKER, _env, _free_port

    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"name": "esimcse", "method": "esimcse", "loss": "infonce", "steps": 3,
                                  "config": {"queue_size": 24, "momentum": 0.9}}]))
    common = [str(WORKER), "--model_dir", str(tiny_bert_dir), "--cases", str(cases), "--batch", "16"]
    launches = {"one": [sys.executable, *common, "--out", str(tmp_path / "one")],
                "two": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                        "127.0.0.1", "--master_port", str(_free_port()), *common, "--out", str(tmp_path / "two")]}
    for name, cmd in launches.items():
        done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    one, rank0, rank1 = (torch.load(tmp_path / p, weights_only=False)["esimcse"]
                         for p in ("one/rank0.pt", "two/rank0.pt", "two/rank1.pt"))
    for res in (one, rank0, rank1):
        assert "error" not in res, res.get("error")
    assert one["queue"].shape == (24, 32)
    assert torch.equal(rank0["queue"], rank1["queue"])
    torch.testing.assert_close(rank0["queue"], one["queue"], rtol=0, atol=1e-5)
    assert rank0["loss"] == pytest.approx(one["loss"], rel=1e-5)
    torch.testing.assert_close(rank0["grads"], one["grads"], rtol=0, atol=1e-5 * max(1.0, one["grads"].abs().max()))


def test_a_prompt_the_tokenizer_merges_into_the_sentence_is_refused_in_one_line():
    """Byte-level BPE (RoBERTa, GPT-2) merges a prompt without a word boundary into the sentence's first word: its
    tokens cannot be told from the sentence's, so the collator refuses it instead of repeating a mix of both."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["querya sentence", "query: a sentence"] * 50 + random_sentences(200), vocab_size=400,
                            min_frequency=1, special_tokens=["<s>", "</s>", "<pad>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    assert ESimCSEModel.collator(tok, ESimCSEConfig(prompt="query: "))._prompt_ids  # a boundary: kept apart
    with pytest.raises(CSEError, match=r"^esimcse: the tokenizer splits the prompt 'query' differently in front of "
                                       r"a sentence than alone.*train without prompt") as err:
        ESimCSEModel.collator(tok, ESimCSEConfig(prompt="query"))
    assert "\n" not in str(err.value)


def test_the_run_check_is_a_method_hook_on_the_config():
    """check_run_batches is every method's (a no-op but ESimCSE's) and reads the config, so it runs before a model
    (and its queue's rows) exists."""
    from hf_cse.models import SimCSEConfig, SimCSEModel

    with pytest.raises(CSEError, match="queue_size 3,000,000 can never fill"):
        ESimCSEModel.check_run_batches(ESimCSEConfig(queue_size=3_000_000), 16, 200)
    ESimCSEModel.check_run_batches(ESimCSEConfig(queue_size=0), 16, 200)  # no queue
    assert SimCSEModel.check_run_batches(SimCSEConfig(), 16, 200) is None


@pytest.mark.slow
def test_the_command_line_refuses_a_huge_queue_before_allocating_it(tiny_bert_dir, tmp_path, monkeypatch):
    """--queue_size 3000000 was refused when the trainer was built, after zeros(3e6, hidden) (9 GB on bert-base)."""
    from hf_cse.cli import train as train_cli
    from hf_cse.models.esimcse import model as esimcse_model

    def no_queue(*args):
        raise AssertionError("the queue was allocated before the refusal")

    monkeypatch.setattr(esimcse_model, "EmbeddingQueue", no_queue)
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(40)) + "\n")
    with pytest.raises(CSEError, match="queue_size 3,000,000 can never fill: one epoch enqueues at most 40 rows"):
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train),
                                   "--method", "esimcse", "--queue_size", "3000000", "--max_steps", "1",
                                   "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "out"),
                                   "--use_cpu", "--disable_tqdm", "true"])


def test_a_momentum_encoder_that_never_leaves_its_random_start_is_refused_before_loading():
    """--momentum 1 with the authors' random start trained with every queued negative from a random network."""
    with pytest.raises(CSEError, match="esimcse: momentum 1 keeps the momentum encoder as it starts, and "
                                       "momentum_init 'random' starts it at random"):
        ESimCSEModel.check_before_loading(ESimCSEConfig(momentum=1.0))
    ESimCSEModel.check_before_loading(ESimCSEConfig(momentum=1.0, momentum_init="copy"))
    ESimCSEModel.check_before_loading(ESimCSEConfig(momentum=0.995))
