"""ContrastiveTrainer: its loss, logging, optimisation, accumulation and resuming."""

import pytest
import torch
import torch.nn.functional as F
from helpers import collator, tiny_args, tiny_train_dataset

from hf_cse.models import SimCSEModel
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.training_args import ContrastiveTrainingArguments


def _trainer(folder, sentences, tmp_path, model=None, repeat=1, **args):
    ds, tok = tiny_train_dataset(folder, sentences, tmp_path, repeat)
    torch.manual_seed(0)  # the projector's random init
    model = model or SimCSEModel.from_encoder(str(folder))
    return ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out", **args), train_dataset=ds,
                              data_collator=collator(tok), processing_class=tok), ds, tok


def test_trainer_loss_equals_hand_computed_infonce(tiny_bert_dir, sentences, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0, loss_kwargs={"temperature": 0.1})
    trainer, ds, tok = _trainer(tiny_bert_dir, sentences, tmp_path, model=model)
    batch = collator(tok)([ds[i] for i in range(8)])
    model.train()
    loss = trainer.compute_loss(model, batch)
    with torch.no_grad():
        _, z = model.two_view_embeddings(**batch)
        cos = F.cosine_similarity(z[:, 0, None], z[None, :, 1], dim=-1) / 0.1
        expected = F.cross_entropy(cos, torch.arange(8))
    assert torch.allclose(loss, expected, atol=1e-6)


@pytest.mark.slow
def test_training_lowers_the_loss_and_logs_diagnostics(tiny_bert_dir, sentences, tmp_path):
    trainer, *_ = _trainer(tiny_bert_dir, sentences, tmp_path, repeat=4, max_steps=24, learning_rate=2e-3)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 24
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4
    logged = trainer.state.log_history[0]
    for key in ("pos_cos", "neg_cos", "gd_active", "hardest_weight", "contrastive_loss"):
        assert key in logged, key
    # cosines, not their order: a random tiny encoder has pos ~ neg ~ 0.9 and their order flips with the draw
    assert all(-1.0 <= h[k] <= 1.0 for h in trainer.state.log_history if "pos_cos" in h for k in ("pos_cos", "neg_cos"))


@pytest.mark.slow
def test_gradient_accumulation_runs_and_counts_optimizer_steps(tiny_bert_dir, sentences, tmp_path):
    trainer, *_ = _trainer(tiny_bert_dir, sentences, tmp_path, repeat=4, max_steps=3,
                           gradient_accumulation_steps=2, per_device_train_batch_size=4)
    trainer.train()
    assert trainer.state.global_step == 3
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in trainer.state.log_history if "loss" in h)


@pytest.mark.slow
def test_resume_from_checkpoint_continues_the_same_run(tiny_bert_dir, sentences, tmp_path):
    common = dict(repeat=4, max_steps=6, save_strategy="steps", save_steps=3)
    full, *_ = _trainer(tiny_bert_dir, sentences, tmp_path / "a", **common)
    full.train()
    first, *_ = _trainer(tiny_bert_dir, sentences, tmp_path / "b", **common)
    first.train()
    ckpt = tmp_path / "b" / "out" / "checkpoint-3"
    assert ckpt.is_dir()
    resumed, *_ = _trainer(tiny_bert_dir, sentences, tmp_path / "b", **common)
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert resumed.state.global_step == 6
    steps = [h["step"] for h in resumed.state.log_history if "loss" in h]
    assert steps[-3:] == [4, 5, 6]
    # the resumed run ends where the uninterrupted one does
    for (name, a), b in zip(full.model.named_parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-5), name


def test_drop_last_is_enforced_and_evaluate_needs_data(tiny_bert_dir, sentences, tmp_path, caplog):
    trainer, *_ = _trainer(tiny_bert_dir, sentences, tmp_path, dataloader_drop_last=False)  # transformers' default
    assert trainer.args.dataloader_drop_last
    # given to ContrastiveTrainingArguments against their own default it would do nothing: refused
    with pytest.raises(ValueError, match=r"^dataloader_drop_last=False: ContrastiveTrainer trains on whole batches "
                                         r"only .* leave dataloader_drop_last at True\.$"):
        ContrastiveTrainingArguments(str(tmp_path / "x"), dataloader_drop_last=False)
    # set later, as transformers' set_dataloader sets it unasked: set back, with a warning
    args = ContrastiveTrainingArguments(str(tmp_path / "x"), use_cpu=True).set_dataloader(train_batch_size=4)
    assert args.dataloader_drop_last is False
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "d")
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args, train_dataset=ds,
                                 processing_class=tok)
    assert trainer.args.dataloader_drop_last
    assert "dataloader_drop_last=False set back to True" in caplog.text
    with pytest.raises(ValueError, match="senteval_data_dir"):
        trainer.evaluate()


def test_incompatible_loss_and_off_dropout_are_rejected(tiny_bert_dir, sentences, tmp_path):
    with pytest.raises(ValueError, match="off_dropout_infonce"):  # from_encoder: infonce ignores z_nodropout
        SimCSEModel.from_encoder(str(tiny_bert_dir), off_dropout=True)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    model.config.off_dropout = True  # a config changed after construction is still caught by the trainer
    with pytest.raises(ValueError, match="off_dropout_infonce"):
        _trainer(tiny_bert_dir, sentences, tmp_path, model=model)


@pytest.mark.slow  # trains a step
def test_transformers_finds_no_special_token_ids_to_align_and_says_nothing(tiny_bert_dir, sentences, tmp_path):
    """A method config holds no pad/bos/eos ids of its own: transformers' Trainer set the tokenizer's as training
    started and warned on every run of the Python API ("The tokenizer has new PAD/BOS/EOS tokens")."""
    import logging

    data, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data")
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    assert getattr(model.config, "pad_token_id", None) is None
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out", max_steps=1), processing_class=tok,
                                 train_dataset=data)
    said: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = said.append
    notices = logging.getLogger("transformers.trainer_utils")
    notices.addHandler(handler)
    try:
        trainer.train()
    finally:
        notices.removeHandler(handler)
    assert [r.getMessage() for r in said if "PAD/BOS/EOS" in r.getMessage()] == []
    assert model.config.pad_token_id == tok.pad_token_id  # what transformers would have set
