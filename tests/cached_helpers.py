"""What the gradient-cache tests share (tests/trainer/test_cached.py, tests/models/test_lora.py): a two-view batch, a
seeded model, and the plain and cached steps whose gradients they compare."""

from __future__ import annotations

import torch
from transformers import AutoTokenizer

from hf_cse.cached import cached_step
from hf_cse.data import TwoViewCollator
from hf_cse.models import SimCSEModel
from hf_cse.objectives import build_objectives, compute_objectives

BATCH, CHUNK = 16, 4


def _batch(model_dir, sentences, n=BATCH):
    tok = AutoTokenizer.from_pretrained(model_dir)
    return TwoViewCollator(tok)([tok(s, truncation=True, max_length=32) for s in (sentences * 2)[:n]])


def _model(model_dir, dropout, **config):
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(model_dir, dropout=dropout, **config)
    model.train()
    return model


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _loss_fn(model):
    objectives = build_objectives(model.config)
    return lambda emb: compute_objectives(objectives, emb)


def _plain_step(model, chunks):
    """Plain autograd on the given mini-batches (one forward each, graph kept), loss on the concatenation."""
    model.zero_grad()
    outs = [model(**chunk).embeddings for chunk in chunks]
    emb = {k: torch.cat([o[k] for o in outs]) for k in outs[0]}
    loss, _ = _loss_fn(model)(emb)
    loss.backward()
    return loss.detach(), _grads(model)


def _cached(model, batch, chunk=CHUNK):
    model.zero_grad()
    loss, metrics = cached_step(model, batch, chunk, _loss_fn(model), backward=lambda s: s.backward())
    return loss, _grads(model), metrics


def _assert_same_grads(a, b, atol=1e-7, rtol=1e-5):
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")
