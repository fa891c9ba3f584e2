"""ImSimCSE: off-dropout sampling and DCL as switches on any method model."""

import pytest
import torch
from helpers import collator, tiny_args, tiny_train_dataset
from transformers import AutoTokenizer, BertConfig, BertModel

from hf_cse.losses import build_loss
from hf_cse.models import ImSimCSEModel, SimCSEModel
from hf_cse.objectives import build_objectives, compute_objectives
from hf_cse.trainer import ContrastiveTrainer


def _batch(folder, sentences):
    tok = AutoTokenizer.from_pretrained(folder)
    enc = tok(sentences, padding=True, return_tensors="pt")
    return {k: v.unsqueeze(1).repeat(1, 2, 1) for k, v in enc.items()}


def test_defaults_are_the_papers_setting():
    cfg = ImSimCSEModel.config_class()
    assert cfg.loss == "off_dropout_infonce" and cfg.loss_kwargs == {"temperature": 0.05, "m": 0.9}
    assert cfg.off_dropout and cfg.off_dropout_grad
    assert (cfg.dcl_weight, cfg.dcl_temperature, cfg.dcl_normalization) == (0.1, 5.0, "code")


def test_with_both_parts_off_the_loss_is_simcse(tiny_bert_dir, sentences):
    batch = _batch(tiny_bert_dir, sentences[:8])
    simcse = SimCSEModel.from_encoder(str(tiny_bert_dir))
    plain = ImSimCSEModel.from_encoder(str(tiny_bert_dir), off_dropout=False, dcl_weight=0.0, loss="infonce",
                                       loss_kwargs={})
    plain.load_state_dict(simcse.state_dict())
    losses = []
    for model in (simcse, plain):
        torch.manual_seed(3)
        out = model.train()(**batch)
        assert set(out.embeddings) == {"z1", "z2"}
        losses.append(compute_objectives(build_objectives(model.config), out.embeddings)[0])
    assert torch.equal(losses[0], losses[1])


def test_no_dropout_pass_is_deterministic_and_dropout_comes_back(tmp_path, tiny_bert_dir, sentences):
    # attention dropout only: SDPA attention reads module.training, so toggling nn.Dropout is not enough
    folder = tmp_path / "attn_dropout"
    cfg = BertConfig.from_pretrained(tiny_bert_dir)
    cfg.hidden_dropout_prob, cfg.attention_probs_dropout_prob = 0.0, 0.5
    BertModel.from_pretrained(tiny_bert_dir, config=cfg).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    model = ImSimCSEModel.from_encoder(str(folder)).train()
    batch = _batch(folder, sentences[:6])
    out1, out2 = model(**batch), model(**batch)
    assert not torch.allclose(out1.embeddings["z1"], out1.embeddings["z2"])  # the two views differ
    assert torch.equal(out1.embeddings["z_nodropout"], out2.embeddings["z_nodropout"])
    assert all(m.training for m in model.encoder.modules())  # restored after the third pass
    with torch.no_grad():
        eval_emb = model.projector(model.eval()._encode(batch["input_ids"][:, 0], batch["attention_mask"][:, 0]))
    assert torch.allclose(out1.embeddings["z_nodropout"], eval_emb, atol=1e-6)
    assert "off_dropout_seconds" in out1.metrics


def test_gradient_flows_through_the_third_pass_unless_disabled(tiny_bert_dir, sentences):
    batch = _batch(tiny_bert_dir, sentences[:6])
    model = ImSimCSEModel.from_encoder(str(tiny_bert_dir), dcl_weight=0.0).train()
    out = model(**batch)
    loss_fn = build_loss("off_dropout_infonce")
    # only the negatives term depends on the parameters: the views are detached
    loss_fn(out.embeddings["z1"].detach(), out.embeddings["z2"].detach(),
            z_nodropout=out.embeddings["z_nodropout"]).loss.backward()
    grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)

    frozen = ImSimCSEModel.from_encoder(str(tiny_bert_dir), off_dropout_grad=False).train()
    assert frozen(**batch).embeddings["z_nodropout"].grad_fn is None


def test_dcl_is_added_with_its_weight(tiny_bert_dir, sentences):
    batch = _batch(tiny_bert_dir, sentences[:8])
    model = ImSimCSEModel.from_encoder(str(tiny_bert_dir), dcl_weight=0.25).train()
    emb = model(**batch).embeddings
    total, metrics = compute_objectives(build_objectives(model.config), emb)
    main = build_loss("off_dropout_infonce", temperature=0.05, m=0.9)(emb["z1"], emb["z2"],
                                                                      z_nodropout=emb["z_nodropout"]).loss
    dcl = build_loss("dcl", temperature=5.0, normalization="code")(emb["z1"], emb["z2"]).loss
    assert torch.allclose(total, main + 0.25 * dcl, atol=1e-6)
    assert metrics["dcl_loss"] == dcl.item() and metrics["contrastive_loss"] == main.item()


@pytest.mark.slow
def test_trainer_logs_both_terms_and_third_pass_time(tiny_bert_dir, sentences, tmp_path):
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path, repeat=2)
    model = ImSimCSEModel.from_encoder(str(tiny_bert_dir))
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "o", max_steps=3), train_dataset=ds,
                                 data_collator=collator(tok), processing_class=tok)
    trainer.train()
    logged = trainer.state.log_history[0]
    for key in ("contrastive_loss", "dcl_loss", "off_dropout_seconds", "loss"):
        assert key in logged, key


@pytest.mark.slow
def test_imsimcse_on_diffcse_trains_a_few_steps(tiny_bert_dir, tiny_mlm_dir, sentences, tmp_path):
    from hf_cse.models import DiffCSEModel

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path, repeat=2)
    model = DiffCSEModel.from_encoder(str(tiny_bert_dir), loss="off_dropout_infonce",
                                      loss_kwargs={"temperature": 0.05, "m": 0.9}, off_dropout=True, dcl_weight=0.1)
    model.attach_generator(str(tiny_mlm_dir), tok)
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "o", max_steps=3), train_dataset=ds,
                                 data_collator=DiffCSEModel.collator(tok, model.config), processing_class=tok)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 3
    for entry in logged:
        for key in ("contrastive_loss", "dcl_loss", "rtd_loss", "off_dropout_seconds"):
            assert key in entry and torch.isfinite(torch.tensor(entry[key])), key
