"""Matryoshka training (hf_cse.matryoshka): every objective on each leading prefix of one embedding, in the trainer's
objectives, the gradient cache, several processes, DiffCSE / ImSimCSE and the sentence-transformers adapter."""

from __future__ import annotations

import json

import pytest
import torch
from dist_helpers import assert_two_processes_see_the_global_batch
from helpers import random_sentences
from transformers import AutoConfig, AutoTokenizer

from hf_cse.cached import cached_step
from hf_cse.cli import train as train_cli
from hf_cse.data import TwoViewCollator
from hf_cse.errors import CSEError
from hf_cse.integrations.sentence_transformers import CachedCSELoss, CSELoss
from hf_cse.losses import available_losses, build_loss, get_loss_class
from hf_cse.matryoshka import MatryoshkaLoss, check_matryoshka
from hf_cse.models import DiffCSEModel, ImSimCSEModel, SimCSEConfig, SimCSEModel
from hf_cse.objectives import build_objectives, compute_objectives, objective


def _inputs(loss: str, n=6, dim=8, dtype=torch.float32, seed=3):
    g = torch.Generator().manual_seed(seed)
    z1, z2, zbar = (torch.randn(n, dim, generator=g, dtype=dtype) for _ in range(3))
    extra = {"z_nodropout": zbar} if "z_nodropout" in get_loss_class(loss).extra_inputs else {}
    return z1, z2, extra


@pytest.mark.parametrize("loss", available_losses())
def test_one_dimension_is_the_plain_loss_on_the_truncated_embeddings(loss):
    z1, z2, extra = _inputs(loss)
    torch.manual_seed(7)  # GS-InfoNCE draws its noise from torch's global RNG
    got = MatryoshkaLoss(build_loss(loss), [5])(z1, z2, **extra).loss
    torch.manual_seed(7)
    want = build_loss(loss)(z1[:, :5].clone(), z2[:, :5].clone(), **{k: v[:, :5].clone() for k, v in extra.items()})
    assert torch.equal(got, want.loss)


def test_several_dimensions_are_the_weighted_sum_with_hard_negatives_cut_too():
    g = torch.Generator().manual_seed(0)
    z1, z2, zneg = (torch.randn(6, 8, generator=g) for _ in range(3))
    loss = build_loss("infonce", temperature=0.1)
    out = MatryoshkaLoss(loss, [2, 8, 4], [0.5, 1.0, 2.0])(z1, z2, z_neg=zneg)  # given in any order
    per_dim = {d: loss(z1[:, :d], z2[:, :d], z_neg=zneg[:, :d]).loss for d in (8, 4, 2)}
    assert out.loss.item() == pytest.approx((per_dim[8] + 2.0 * per_dim[4] + 0.5 * per_dim[2]).item(), rel=1e-6)
    assert {k: v.item() for k, v in out.metrics.items() if k.startswith("loss_dim")} == pytest.approx(
        {f"loss_dim{d}": v.item() for d, v in per_dim.items()})
    full = loss(z1, z2, z_neg=zneg).metrics  # the diagnostics are those of the largest dimension
    assert out.metrics["pos_cos"].item() == pytest.approx(full["pos_cos"].item())


def test_a_prefix_that_cannot_be_normalised_is_named_by_its_dimensions():
    """A row whose first 4 values are 0 is fine whole; the loss's refusal named z1 only, not the prefix."""
    z1, z2 = torch.randn(8, 16), torch.randn(8, 16)
    z1[3, :4] = 0
    with pytest.raises(CSEError, match=r"^infonce: 1 of 8 rows of z1 cannot be normalised \(row 3's .* \(Matryoshka: "
                                       r"in the embeddings' first 4 dimensions, matryoshka_dims 4\)$"):
        MatryoshkaLoss(build_loss("infonce"), [16, 4])(z1, z2)

@pytest.mark.parametrize("loss", ["infonce", "focal_infonce", "dcl", "arccon", "off_dropout_infonce"])
def test_gradients_in_float64(loss):
    """gradcheck of the wrapped loss, and its gradient equals the sum of the per-prefix losses' gradients (zero on
    the coordinates beyond the largest dimension)."""
    z1, z2, extra = _inputs(loss, n=5, dim=7, dtype=torch.float64)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    wrapped = MatryoshkaLoss(build_loss(loss), [6, 3], [1.0, 0.5])
    assert torch.autograd.gradcheck(lambda a, b: wrapped(a, b, **extra).loss, (z1, z2))
    got = torch.autograd.grad(wrapped(z1, z2, **extra).loss, (z1, z2))
    plain = build_loss(loss)
    cut = lambda d: {k: v[:, :d] for k, v in extra.items()}  # noqa: E731
    by_hand = plain(z1[:, :6], z2[:, :6], **cut(6)).loss + 0.5 * plain(z1[:, :3], z2[:, :3], **cut(3)).loss
    want = torch.autograd.grad(by_hand, (z1, z2))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
        assert torch.count_nonzero(a[:, 6:]) == 0


def test_build_objectives_wraps_every_objective_of_the_config():
    config = SimCSEConfig(objectives=[objective("infonce", temperature=0.05), objective("dcl", 0.1)],
                          matryoshka_dims=[8, 4], projector="none")
    objectives = build_objectives(config)
    assert all(isinstance(o.loss, MatryoshkaLoss) for o in objectives)
    g = torch.Generator().manual_seed(1)
    z = {"z1": torch.randn(6, 8, generator=g), "z2": torch.randn(6, 8, generator=g)}
    total, metrics = compute_objectives(objectives, z)
    main, dcl = build_loss("infonce", temperature=0.05), build_loss("dcl")
    want = sum(main(z["z1"][:, :d], z["z2"][:, :d]).loss + 0.1 * dcl(z["z1"][:, :d], z["z2"][:, :d]).loss
               for d in (8, 4))
    assert total.item() == pytest.approx(want.item(), rel=1e-6)
    assert {"contrastive_loss", "dcl_loss", "loss_dim8", "loss_dim4"} <= set(metrics)


@pytest.mark.parametrize("kwargs, message", [
    ({"matryoshka_dims": [32, 16, 16]}, "repeats a dimension"),
    ({"matryoshka_dims": [64, 16]}, r"\[64\] out of range; each dimension must be in 1\.\.32"),
    ({"matryoshka_dims": [0]}, "out of range"),
    ({"matryoshka_dims": "32,x"}, "comma-separated list of ints"),
    ({"matryoshka_dims": [32, 16], "matryoshka_weights": [1.0]}, "1 values for 2 dimensions"),
    ({"matryoshka_dims": [32, 16], "matryoshka_weights": [1.0, -1.0]}, "finite number > 0"),
    ({"matryoshka_weights": [1.0]}, "without matryoshka_dims"),
    ({"matryoshka_dims": [16], "projector": "mlp"}, "projector='none'"),
])
def test_bad_settings_are_refused_when_the_config_is_made(tiny_bert_dir, kwargs, message):
    kwargs = {"projector": "none", **kwargs}
    with pytest.raises(ValueError, match=message):
        SimCSEConfig(encoder_config=AutoConfig.from_pretrained(tiny_bert_dir), pooler_type="avg", **kwargs)


def test_cls_with_the_head_kept_at_test_time_is_allowed_and_the_setting_is_saved(tiny_bert_dir, tmp_path):
    config = SimCSEConfig(encoder_config=AutoConfig.from_pretrained(tiny_bert_dir), pooler_type="cls",
                          mlp_only_train=False, matryoshka_dims="16,32", matryoshka_weights="1,2")
    assert (config.matryoshka_dims, config.matryoshka_weights) == ([32, 16], [2.0, 1.0])  # largest first
    config.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["matryoshka_dims"] == [32, 16]
    assert SimCSEConfig.from_pretrained(tmp_path).matryoshka_dims == [32, 16]
    assert check_matryoshka(None) == (None, None)


def _batch(model_dir, n=12):
    tok = AutoTokenizer.from_pretrained(model_dir)
    return TwoViewCollator(tok)([tok(s, truncation=True, max_length=16) for s in random_sentences(n)])


def test_gradient_cache_gives_the_plain_gradient(tiny_bert_dir):
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0, projector="none", pooler_type="avg",
                                     matryoshka_dims=[32, 8]).train()
    batch = _batch(tiny_bert_dir)
    objectives = build_objectives(model.config)
    loss_fn = lambda emb: compute_objectives(objectives, emb)  # noqa: E731
    model.zero_grad()
    plain, _ = loss_fn(model(**batch).embeddings)
    plain.backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss, metrics = cached_step(model, batch, 5, loss_fn, backward=lambda s: s.backward())
    assert loss.item() == pytest.approx(plain.item(), rel=1e-6) and "loss_dim8" in metrics
    for name, grad in want.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-7, rtol=1e-5)


def test_imsimcse_and_diffcse_train_their_prefixes(tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    torch.manual_seed(0)
    imsimcse = ImSimCSEModel.from_encoder(str(tiny_bert_dir), projector="none", pooler_type="avg",
                                          matryoshka_dims=[32, 8]).train()
    out = imsimcse(**_batch(tiny_bert_dir))
    total, metrics = compute_objectives(build_objectives(imsimcse.config), out.embeddings)
    assert "z_nodropout" in out.embeddings and {"dcl_loss", "loss_dim8"} <= set(metrics)
    total.backward()
    diffcse = DiffCSEModel.from_encoder(str(tiny_bert_dir), projector="none", pooler_type="avg",
                                        matryoshka_dims=[16]).train()
    diffcse.attach_generator("unigram", tok)
    from hf_cse.models.diffcse import DiffCSECollator

    out = diffcse(**DiffCSECollator(tok, seed=0)([tok(s) for s in random_sentences(8)]))
    total, metrics = compute_objectives(build_objectives(diffcse.config), out.embeddings)
    z = out.embeddings
    assert total.item() == pytest.approx(build_loss("infonce")(z["z1"][:, :16], z["z2"][:, :16]).loss.item(),
                                         rel=1e-6)
    (total + sum(out.aux_losses.values())).backward()


def test_sentence_transformers_adapter_and_its_cached_variant(tiny_bert_dir):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    g = torch.Generator().manual_seed(2)
    z1, z2 = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g)
    adapter = CSELoss(torch.nn.Identity(), "infonce", matryoshka_dims=[8, 2], matryoshka_weights=[1.0, 0.25])
    plain = build_loss("infonce")
    want = plain(z1, z2).loss + 0.25 * plain(z1[:, :2], z2[:, :2]).loss
    assert adapter.compute_loss_from_embeddings([z1, z2]).item() == pytest.approx(want.item(), rel=1e-6)
    assert adapter.get_config_dict()["matryoshka_dims"] == [8, 2]

    torch.manual_seed(0)
    transformer = Transformer(str(tiny_bert_dir), max_seq_length=16)
    model = SentenceTransformer(modules=[transformer, Pooling(32, "mean")], device="cpu").eval()
    features = model.tokenize(random_sentences(8))
    grads = []
    for loss in (CSELoss(model, "infonce", matryoshka_dims=[32, 4]),
                 CachedCSELoss(model, "infonce", mini_batch_size=3, matryoshka_dims=[32, 4])):
        model.zero_grad()
        loss([dict(features), dict(features)]).backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.slow
def test_two_processes_compute_the_prefixes_of_the_gathered_batch(tmp_path):
    assert_two_processes_see_the_global_batch(tmp_path, "infonce", {"matryoshka_dims": [6, 2]}, 2,
                                              lambda z: MatryoshkaLoss(build_loss("infonce"), [6, 2])(z[0], z[1]).loss)


def test_the_flag_takes_a_comma_separated_list_and_bad_values_fail_in_one_line(capsys):
    model_args = train_cli.parse_args(["--matryoshka_dims", "384,128", "--matryoshka_weights", "1,0.5"])[0]
    assert (model_args.matryoshka_dims, model_args.matryoshka_weights) == ([384, 128], [1.0, 0.5])
    with pytest.raises(SystemExit) as stop:
        train_cli.main(["--matryoshka_dims", "38x4"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--matryoshka_dims" in err and "comma-separated list of ints" in err


@pytest.mark.slow
def test_a_short_training_run_records_and_logs_the_dimensions(tiny_bert_dir, tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(24)) + "\n")
    out = tmp_path / "out"
    train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train),
                               "--max_steps", "2", "--per_device_train_batch_size", "8", "--output_dir", str(out),
                               "--use_cpu", "--disable_tqdm", "true", "--logging_steps", "1", "--pooler_type", "avg",
                               "--projector", "none", "--matryoshka_dims", "32,16,8"])
    assert SimCSEModel.from_pretrained(out).config.matryoshka_dims == [32, 16, 8]
    logged = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any("loss_dim8" in entry for entry in logged)
    assert json.loads((out / "hf_cse_run.json").read_text())["matryoshka_dims"] == [32, 16, 8]


@pytest.mark.slow
def test_the_export_records_the_dimensions_and_serves_truncate_dim(tiny_bert_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    from hf_cse.evaluation import EvalResults
    from hf_cse.export import to_sentence_transformer

    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), pooler_type="avg", projector="none",
                                     matryoshka_dims=[32, 16, 8])
    results = EvalResults(model="m", sts={"STSBenchmark": 61.0}, sts_avg=61.0, settings={"embedding_dim": 32},
                          dimensions={"16": {"sts": {"STSBenchmark": 59.5}, "avg": 59.5},
                                      "8": {"sts": {"STSBenchmark": 52.25}, "avg": 52.25}})
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(tiny_bert_dir), eval_results=results)
    assert json.loads((out / "hf_cse_config.json").read_text())["matryoshka_dims"] == [32, 16, 8]
    card = (out / "README.md").read_text()
    assert "Matryoshka dimensions | trained at 32, 16, 8" in card and "truncate_dim=8" in card
    assert "not normalised again: compare them by cosine similarity" in card  # a prefix of a unit vector is not one
    assert "| 32 (full) | 61.00 | 61.00 |" in card and "| 8 | 52.25 | 52.25 |" in card
    sentences = random_sentences(4)
    full = SentenceTransformer(str(out), device="cpu").encode(sentences)
    cut = SentenceTransformer(str(out), device="cpu", truncate_dim=8).encode(sentences)
    assert cut.shape == (4, 8)
    np_full = torch.as_tensor(full)[:, :8]
    torch.testing.assert_close(torch.as_tensor(cut), np_full)


def test_dimensions_that_leave_out_the_full_width_are_warned_once(tiny_bert_dir, caplog, monkeypatch):
    """--matryoshka_dims 16 on a 32-dimensional encoder trained only the first 16 values while the export served 32,
    without a word; the command builds its config several times, and the warning is said once."""
    import logging

    from hf_cse import said_once

    monkeypatch.setattr(said_once, "_SAID", set())  # what earlier tests said does not count
    with caplog.at_level(logging.WARNING, "hf_cse.matryoshka"):
        encoder = AutoConfig.from_pretrained(tiny_bert_dir)  # 32 wide
        SimCSEConfig(encoder_config=encoder, projector="none", pooler_type="avg", matryoshka_dims=[32, 16])
        assert not caplog.records
        for _ in range(3):
            SimCSEConfig(encoder_config=encoder, projector="none", pooler_type="avg", matryoshka_dims=[16, 8])
    assert len(caplog.records) == 1
    assert "leave out the embedding's full width 32: its values past 16 get no training signal" in caplog.text
    assert "list 32 first" in caplog.text


def test_dimensions_given_out_of_order_are_said_reordered_once(tiny_bert_dir, caplog, monkeypatch):
    """8,32,16 with weights 1,2,3 was sorted (the weights following) without a word; the command builds its config
    several times, and the line is said once."""
    import logging

    from hf_cse import said_once

    monkeypatch.setattr(said_once, "_SAID", set())  # what earlier tests said does not count
    encoder = AutoConfig.from_pretrained(tiny_bert_dir)
    with caplog.at_level(logging.INFO, "hf_cse.matryoshka"):
        for _ in range(2):
            config = SimCSEConfig(encoder_config=encoder, projector="none", pooler_type="avg",
                                  matryoshka_dims="8,32,16", matryoshka_weights="1,2,3")
        SimCSEConfig(encoder_config=encoder, projector="none", pooler_type="avg", matryoshka_dims=[32, 16, 8])
        SimCSEConfig.from_dict(config.to_dict())  # a saved config reloads in order
    said = [r.getMessage() for r in caplog.records if "re-ordered" in r.getMessage()]
    assert said == ["matryoshka_dims [8, 32, 16] re-ordered largest first: [32, 16, 8]; matryoshka_weights follow "
                    "their dimensions: [2.0, 3.0, 1.0]"]
    assert (config.matryoshka_dims, config.matryoshka_weights) == ([32, 16, 8], [2.0, 3.0, 1.0])
