"""hf_cse losses inside sentence-transformers (hf_cse.integrations.sentence_transformers.CSELoss)."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from dist_helpers import assert_two_processes_see_the_global_batch
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

from hf_cse.cached import split_batch
from hf_cse.integrations.sentence_transformers import CachedCSELoss, CSELoss, LossTerms
from hf_cse.losses import available_losses, build_loss, get_loss_class
from hf_cse.references import FOCAL_INFONCE, SIMCSE

BATCH = 4


@pytest.fixture
def st_model(tiny_bert_dir):
    torch.manual_seed(0)
    transformer = Transformer(str(tiny_bert_dir), max_seq_length=16)
    return SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "mean")],
                               device="cpu")


def _train(model, loss, columns: dict[str, list[str]], tmp_path, steps=3):
    args = SentenceTransformerTrainingArguments(str(tmp_path / "out"), per_device_train_batch_size=BATCH,
                                                max_steps=steps, use_cpu=True, report_to="none",
                                                save_strategy="no", disable_tqdm=True, logging_steps=1,
                                                learning_rate=1e-3, seed=0)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_dict(columns), loss=loss)
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return trainer, losses, changed


@pytest.mark.slow
@pytest.mark.parametrize("loss", available_losses())
def test_every_registry_loss_trains_three_steps_unsupervised(st_model, sentences, tmp_path, loss):
    """The same sentence in both columns: the two forwards differ by dropout (SimCSE)."""
    texts = (sentences * 2)[: 3 * BATCH]
    _, losses, changed = _train(st_model, CSELoss(st_model, loss), {"a": texts, "b": texts}, tmp_path)
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert changed


def test_same_sentence_columns_get_different_dropout_masks(st_model, sentences):
    st_model.train()
    features = st_model.tokenize(sentences[:BATCH])
    z1 = st_model(dict(features))["sentence_embedding"]
    z2 = st_model(dict(features))["sentence_embedding"]
    assert not torch.allclose(z1, z2)  # otherwise the positive would be trivially identical
    loss = CSELoss(st_model, "infonce")
    assert loss([dict(features), dict(features)], None).item() > 0


@pytest.mark.slow
def test_pairs_and_triplets_train(st_model, sentences, tmp_path):
    texts = (sentences * 3)[: 3 * BATCH + 2]
    columns = {"anchor": texts[:-2], "positive": texts[1:-1], "negative": texts[2:]}
    _, losses, changed = _train(st_model, CSELoss(st_model, "focal_infonce", temperature=0.07, m=0.3), columns,
                                tmp_path)
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses) and changed


def test_hard_negative_column_for_a_loss_without_them_is_refused(st_model, sentences):
    features = [dict(st_model.tokenize(sentences[i : i + BATCH])) for i in range(3)]
    with pytest.raises(ValueError, match=r"'mpt' has no defined use for hard negatives \(a third column\)"):
        CSELoss(st_model, "mpt")(features, None)
    with pytest.raises(ValueError, match=r"takes 1 text column .* the data set has 4\.$"):
        CSELoss(st_model, "infonce")(features + features[:1], None)


@pytest.mark.parametrize("cached", [False, True])
def test_one_column_of_single_sentences_is_encoded_twice(st_model, sentences, cached):
    """A data set of single sentences (one column, as hf_cse's trainer takes them) trains as the same column twice:
    two forwards, two dropout masks (it was refused: 'takes 2 text columns')."""
    st_model.train()
    features = st_model.tokenize(sentences[:BATCH])
    make = (lambda: CachedCSELoss(st_model, "infonce", mini_batch_size=2)) if cached else (
        lambda: CSELoss(st_model, "infonce"))
    torch.manual_seed(5)
    one = make()([dict(features)], None)
    torch.manual_seed(5)
    two = make()([dict(features), dict(features)], None)
    assert one.item() == pytest.approx(two.item(), rel=1e-6) and one.item() > 0


@pytest.mark.parametrize("loss", available_losses())
def test_loss_on_fixed_embeddings_equals_build_loss(loss):
    g = torch.Generator().manual_seed(3)
    z1, z2, zbar = (torch.randn(6, 8, generator=g) for _ in range(3))
    extra = {"z_nodropout": zbar} if "z_nodropout" in get_loss_class(loss).extra_inputs else {}
    adapter = CSELoss(torch.nn.Identity(), loss)
    torch.manual_seed(7)  # GS-InfoNCE draws its noise from torch's global RNG
    got = adapter.compute_loss_from_embeddings([z1, z2], None, extra.get("z_nodropout"))
    torch.manual_seed(7)
    want = build_loss(loss)(z1, z2, **extra).loss
    assert torch.equal(got, want)


def test_hyperparameters_reach_the_loss_and_the_config():
    adapter = CSELoss(torch.nn.Identity(), "focal_infonce", temperature=0.1, m=0.2)
    assert adapter.loss_fn.temperature == 0.1 and adapter.loss_fn.m == 0.2
    assert adapter.get_config_dict() == {"loss": "focal_infonce", "temperature": 0.1, "m": 0.2,
                                         "hard_negative_weight": 0.0, "gather_across_devices": True}
    g = torch.Generator().manual_seed(0)
    z1, z2, z3 = (torch.randn(5, 4, generator=g) for _ in range(3))
    assert torch.equal(adapter.compute_loss_from_embeddings([z1, z2, z3]),
                       build_loss("focal_infonce", temperature=0.1, m=0.2)(z1, z2, z_neg=z3).loss)
    with pytest.raises(ValueError, match="does not take hyperparameter"):
        CSELoss(torch.nn.Identity(), "infonce", m=0.3)


def test_off_dropout_loss_gets_a_no_dropout_pass(st_model, sentences):
    st_model.train()
    features = st_model.tokenize(sentences[:BATCH])
    seen = {}
    adapter = CSELoss(st_model, "off_dropout_infonce")
    original = adapter.compute_loss_from_embeddings

    def spy(embeddings, labels=None, no_dropout=None):
        seen["no_dropout"] = no_dropout
        return original(embeddings, labels, no_dropout)

    adapter.compute_loss_from_embeddings = spy
    adapter([dict(features), dict(features)], None).backward()
    assert all(m.training for m in st_model.modules())  # train mode restored after the no-dropout pass
    assert seen["no_dropout"].requires_grad  # gradients flow through it (ImSimCSE's code)
    st_model.eval()
    with torch.no_grad():
        expected = st_model(dict(features))["sentence_embedding"]
    torch.testing.assert_close(seen["no_dropout"].detach(), expected)  # the eval-mode (dropout-free) forward


@pytest.mark.slow
def test_citation_reaches_the_sentence_transformers_model_card(st_model, sentences, tmp_path):
    loss = CSELoss(st_model, "focal_infonce")
    assert loss.citation == FOCAL_INFONCE.bibtex + "\n\n" + SIMCSE.bibtex  # the loss's paper first
    texts = (sentences * 2)[: 3 * BATCH]
    _train(st_model, loss, {"a": texts, "b": texts}, tmp_path, steps=1)
    assert st_model.model_card_data.citations["CSELoss"] == loss.citation
    st_model.save(str(tmp_path / "saved"))
    card = (tmp_path / "saved" / "README.md").read_text()
    assert "CSELoss" in card and '"loss": "focal_infonce"' in card and FOCAL_INFONCE.bibtex in card


@pytest.mark.slow
def test_two_processes_gather_the_global_batch_with_its_gradient(tmp_path):
    """Each process's loss is the global-batch loss; its local gradient is P x the single-process one (DDP's
    average over the P processes then gives exactly the single-process gradient, as in hf_cse's trainer)."""
    assert_two_processes_see_the_global_batch(tmp_path, "focal_infonce", {}, 3,
                                              lambda z: build_loss("focal_infonce")(z[0], z[1], z_neg=z[2]).loss)


@pytest.mark.slow
def test_cached_loss_trains_under_two_processes_as_the_plain_loss(tiny_bert_dir, tmp_path):
    """CachedCSELoss inside SentenceTransformerTrainer on two processes (torchrun, gloo, DDP): with dropout 0, the same
    data and seed, every step's loss (each process's, on the gathered global batch, and the logged one) and the trained
    weights equal those of the plain CSELoss, and both processes end with the same weights."""
    import subprocess

    from dist_helpers import WORKER, _env, torchrun_cmd
    from helpers import hang_timeout

    proc = subprocess.run(torchrun_cmd(WORKER.with_name("st_ddp_worker.py"), str(tiny_bert_dir), str(tmp_path)),
                          env=_env(), capture_output=True, text=True, timeout=hang_timeout(300), cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    runs = {(rank, kind): torch.load(tmp_path / f"rank{rank}_{kind}.pt") for rank in (0, 1)
            for kind in ("plain", "cached")}
    plain = runs[0, "plain"]
    assert plain["world_size"] == 2 and len(plain["logged"]) == len(plain["computed"]) == 3
    for (rank, kind), run in runs.items():
        assert run["computed"] == pytest.approx(plain["computed"], rel=1e-5), (rank, kind)  # the global batch's
        assert run["logged"] == pytest.approx(plain["logged"], rel=1e-4), (rank, kind)
        torch.testing.assert_close(run["params"], plain["params"], rtol=1e-5, atol=1e-6, msg=f"{rank} {kind}")
    assert len(set(plain["computed"])) == 3  # the weights moved between steps


# ------------------------------------------------------------------ a second objective, the cached variant, logs
def _grads(model):
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def _total(out):
    return sum(out.values()) if isinstance(out, dict) else out


def test_dcl_objective_adds_its_weighted_term_and_returns_the_terms(st_model, sentences):
    st_model.eval()  # no dropout: both columns give the same embeddings as the reference below
    features = st_model.tokenize(sentences[:BATCH * 2])
    adapter = CSELoss(st_model, "infonce", dcl_weight=0.1, temperature=0.05)
    out = adapter([dict(features), dict(features)])
    assert set(out) == {"contrastive_loss", "dcl_loss"}
    with torch.no_grad():
        z = st_model(dict(features))["sentence_embedding"]
        main = build_loss("infonce", temperature=0.05)(z, z).loss
        dcl = build_loss("dcl", temperature=5.0, normalization="code")(z, z).loss
    assert _total(out).item() == pytest.approx((main + 0.1 * dcl).item(), rel=1e-6)
    assert out["dcl_loss"].item() == pytest.approx(0.1 * dcl.item(), rel=1e-6)
    assert out["contrastive_loss"].requires_grad and not out["dcl_loss"].requires_grad
    assert adapter.get_config_dict()["objectives"][1]["loss"] == "dcl"
    for weight in (-1.0, float("nan")):  # NaN left the DCL objective out without a word
        with pytest.raises(ValueError, match="^CSELoss: dcl_weight must be a finite number >= 0"):
            CSELoss(st_model, "infonce", dcl_weight=weight)


@pytest.mark.parametrize("dcl_weight", [0.0, 0.1])
def test_cached_variant_gives_the_plain_loss_and_gradient(st_model, sentences, dcl_weight):
    """Dropout off: the cached loss and parameter gradient equal the plain ones (mini-batches 3, 3, 2)."""
    st_model.eval()
    features = st_model.tokenize(sentences[:8])
    plain = _total(CSELoss(st_model, "focal_infonce", dcl_weight=dcl_weight)([dict(features), dict(features)]))
    st_model.zero_grad()
    plain.backward()
    expected = _grads(st_model)
    cached = CachedCSELoss(st_model, "focal_infonce", mini_batch_size=3, dcl_weight=dcl_weight)
    got = _total(cached([dict(features), dict(features)]))
    st_model.zero_grad()
    got.backward()
    assert got.item() == pytest.approx(plain.item(), rel=1e-6)
    scale = max(g.abs().max().item() for g in expected)
    assert max((a - b).abs().max().item() for a, b in zip(_grads(st_model), expected)) <= 1e-5 * scale


def test_cached_variant_replays_the_dropout_masks_of_its_first_pass(st_model, sentences):
    """Dropout on: the gradient equals that of the same mini-batch forwards (same RNG stream) with a graph."""
    st_model.train()
    features = st_model.tokenize(sentences[:8])
    chunks = split_batch(dict(features), 3)
    torch.manual_seed(3)
    z = [torch.cat([st_model(dict(c))["sentence_embedding"] for c in chunks]) for _ in range(2)]
    reference = build_loss("infonce")(z[0], z[1]).loss
    st_model.zero_grad()
    reference.backward()
    expected = _grads(st_model)
    torch.manual_seed(3)
    got = CachedCSELoss(st_model, "infonce", mini_batch_size=3)([dict(features), dict(features)])
    st_model.zero_grad()
    got.backward()
    assert got.item() == pytest.approx(reference.item(), rel=1e-6)
    scale = max(g.abs().max().item() for g in expected)
    assert max((a - b).abs().max().item() for a, b in zip(_grads(st_model), expected)) <= 1e-5 * scale


@pytest.mark.slow
@pytest.mark.parametrize("cached", [False, True])
def test_per_objective_terms_reach_the_trainer_logs(st_model, sentences, tmp_path, cached):
    texts = (sentences * 2)[: 3 * BATCH]
    loss = (CachedCSELoss(st_model, "infonce", mini_batch_size=2, dcl_weight=0.1) if cached
            else CSELoss(st_model, "infonce", dcl_weight=0.1))
    trainer, losses, changed = _train(st_model, loss, {"a": texts, "b": texts}, tmp_path, steps=2)
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2 and changed
    for h in logged:
        assert h["contrastive_loss"] > 0 and h["dcl_loss"] > 0
        assert h["loss"] == pytest.approx(h["contrastive_loss"] + h["dcl_loss"], rel=1e-3, abs=1e-3)


MATRYOSHKA_DIMS, MATRYOSHKA_WEIGHTS = [32, 16, 8], [1.0, 0.5, 0.25]


def test_matryoshka_loss_around_several_objectives_returns_their_terms(st_model, sentences):
    """sentence-transformers' MatryoshkaLoss weights and adds its inner loss's outputs: with two objectives CSELoss
    returns their terms (a dict), which must add name by name (it raised TypeError: int * dict)."""
    st_model.eval()
    features = st_model.tokenize(sentences[:8])
    out = MatryoshkaLoss(st_model, CSELoss(st_model, "infonce", dcl_weight=0.1), MATRYOSHKA_DIMS,
                         MATRYOSHKA_WEIGHTS)([dict(features), dict(features)], None)
    assert isinstance(out, LossTerms) and set(out) == {"contrastive_loss", "dcl_loss"}
    with torch.no_grad():
        z = st_model(dict(features))["sentence_embedding"]
    main = dcl = 0.0
    for dim, weight in zip(MATRYOSHKA_DIMS, MATRYOSHKA_WEIGHTS):
        zd = torch.nn.functional.normalize(z[:, :dim], dim=-1)  # MatryoshkaLoss's shrink
        main += weight * build_loss("infonce")(zd, zd).loss.item()
        dcl += weight * 0.1 * build_loss("dcl", temperature=5.0, normalization="code")(zd, zd).loss.item()
    assert out["contrastive_loss"].item() == pytest.approx(main, rel=1e-5)
    assert out["dcl_loss"].item() == pytest.approx(dcl, rel=1e-5)
    assert out["contrastive_loss"].requires_grad and not out["dcl_loss"].requires_grad


def test_loss_terms_weight_and_add_name_by_name():
    terms = LossTerms(a=torch.tensor(1.0), b=torch.tensor(2.0))
    total = 0.0
    total += 0.5 * terms  # MatryoshkaLoss: loss = 0.0; loss += weight * inner
    total = total + terms * 2 + torch.tensor(3.0)  # AdaptiveLayerLoss adds its KL term to the sum
    assert isinstance(total, LossTerms)
    assert {k: v.item() for k, v in (total / 2).items()} == {"a": (0.5 + 2 + 3) / 2, "b": (1 + 4) / 2}


@pytest.mark.parametrize("dcl_weight", [0.0, 0.1])
def test_matryoshka_loss_wraps_the_cached_variant_as_the_plain_one(st_model, sentences, dcl_weight):
    """MatryoshkaLoss around CachedCSELoss decorates its calculate_loss (sentence-transformers' gradient-cache
    contract, uses_gradient_cache), as for its own Cached losses: dropout off, the loss, its terms and the parameter
    gradient equal those around CSELoss (the replay ran the model's full-size forward against truncated
    gradients: a shape error in the backward)."""
    st_model.eval()
    features = st_model.tokenize(sentences[:8])
    want = MatryoshkaLoss(st_model, CSELoss(st_model, "focal_infonce", dcl_weight=dcl_weight), MATRYOSHKA_DIMS,
                          MATRYOSHKA_WEIGHTS)([dict(features), dict(features)], None)
    st_model.zero_grad()
    _total(want).backward()
    expected = _grads(st_model)
    cached = CachedCSELoss(st_model, "focal_infonce", mini_batch_size=3, dcl_weight=dcl_weight)
    got = MatryoshkaLoss(st_model, cached, MATRYOSHKA_DIMS, MATRYOSHKA_WEIGHTS)([dict(features), dict(features)], None)
    st_model.zero_grad()
    _total(got).backward()
    assert type(got) is type(want)
    for name in want if isinstance(want, dict) else ():
        assert got[name].item() == pytest.approx(want[name].item(), rel=1e-5)
    assert _total(got).item() == pytest.approx(_total(want).item(), rel=1e-6)
    scale = max(g.abs().max().item() for g in expected)
    assert max((a - b).abs().max().item() for a, b in zip(_grads(st_model), expected)) <= 1e-5 * scale


@pytest.mark.parametrize("cached", [False, True])
def test_an_epochs_last_batch_of_one_sentence_is_skipped_with_a_warning(st_model, sentences, cached, caplog):
    """sentence-transformers' trainer keeps an epoch's incomplete last batch (dataloader_drop_last=False): one sentence
    over has no in-batch negatives. After larger batches it is skipped (a zero loss whose backward runs; it raised
    BatchTooSmallError at the end of the epoch), with one warning naming the fix; a first batch of one is refused."""
    st_model.train()
    loss = CachedCSELoss(st_model, "infonce", mini_batch_size=2, dcl_weight=0.1) if cached else CSELoss(st_model,
                                                                                                         "infonce")
    full, one = st_model.tokenize(sentences[:BATCH]), st_model.tokenize(sentences[:1])
    assert _total(loss([dict(full), dict(full)], None)).item() > 0
    for _ in range(2):
        out = loss([dict(one), dict(one)], None)
        assert _total(out).item() == 0.0
        _total(out).backward()
    warnings = [r.getMessage() for r in caplog.records if "batch of 1 sentence" in r.getMessage()]
    assert len(warnings) == 1 and "dataloader_drop_last=True" in warnings[0]
    with pytest.raises(ValueError, match="needs a batch of at least 2 sentences") as first:
        CSELoss(st_model, "infonce")([dict(one), dict(one)], None)
    # the setting to change, named as the training arguments name it (the command line shows its flag)
    assert "increase per_device_train_batch_size" in str(first.value)
    assert first.value.fields == ("per_device_train_batch_size",)


def test_matryoshka_dims_beyond_the_models_embedding_are_refused_when_the_loss_is_built(st_model):
    """The model's embedding size is known when CSELoss is built: dimensions above it fail then, not at the first
    training step."""
    with pytest.raises(ValueError, match=r"matryoshka_dims: \[64\] out of range; each dimension must be in 1..32"):
        CSELoss(st_model, "infonce", matryoshka_dims=[64, 16])
    assert CSELoss(torch.nn.Identity(), "infonce", matryoshka_dims=[64, 16]).matryoshka_dims == [64, 16]
