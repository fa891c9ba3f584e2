"""SimCSE's own options checked against the authors' code (princeton-nlp/SimCSE, ``simcse/models.py`` cl_forward and
``train.py``'s collator) on identical inputs: ``hard_negative_weight`` and the auxiliary MLM objective."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hf_cse.losses import build_loss, loss_hyperparameters


def authors_hard_negative_loss(z1, z2, z3, temp, z3_weight):
    """cl_forward with num_sent == 3, written as the authors do (float64)."""
    cos = lambda a, b: F.cosine_similarity(a, b, dim=-1) / temp  # noqa: E731  (their Similarity)
    cos_sim = cos(z1.unsqueeze(1), z2.unsqueeze(0))
    z1_z3_cos = cos(z1.unsqueeze(1), z3.unsqueeze(0))
    cos_sim = torch.cat([cos_sim, z1_z3_cos], 1)
    labels = torch.arange(cos_sim.size(0)).long()
    weights = torch.tensor(
        [[0.0] * (cos_sim.size(-1) - z1_z3_cos.size(-1)) + [0.0] * i + [z3_weight]
         + [0.0] * (z1_z3_cos.size(-1) - i - 1) for i in range(z1_z3_cos.size(-1))], dtype=cos_sim.dtype)
    return F.cross_entropy(cos_sim + weights, labels)


@pytest.mark.parametrize("weight", [0.0, 0.7, -2.0])
def test_infonce_hard_negative_weight_equals_the_authors_code(weight):
    g = torch.Generator().manual_seed(0)
    z1, z2, z3 = (torch.randn(6, 5, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ours = build_loss("infonce", temperature=0.05, hard_negative_weight=weight)(z1, z2, z_neg=z3).loss
    theirs = authors_hard_negative_loss(z1, z2, z3, 0.05, weight)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    g_ours = torch.autograd.grad(ours, (z1, z2, z3))
    g_theirs = torch.autograd.grad(theirs, (z1, z2, z3))
    for a, b in zip(g_ours, g_theirs):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("loss", "kwargs"), [("focal_infonce", {"m": 0.3}), ("gs_infonce", {"num_noise": 0})])
def test_hard_negative_weight_shifts_only_the_own_hard_negative_logit(loss, kwargs):
    """The other losses taking hard negatives: the weight is the same log-weight on the anchor's own hard negative;
    with 0 nothing changes, and a large weight drives the loss towards log(e^w ...) of that one column."""
    g = torch.Generator().manual_seed(1)
    z1, z2, z3 = (torch.randn(5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    base = build_loss(loss, **kwargs)(z1, z2, z_neg=z3).loss
    assert build_loss(loss, hard_negative_weight=0.0, **kwargs)(z1, z2, z_neg=z3).loss.item() == base.item()
    up = build_loss(loss, hard_negative_weight=1.0, **kwargs)(z1, z2, z_neg=z3).loss
    down = build_loss(loss, hard_negative_weight=-1.0, **kwargs)(z1, z2, z_neg=z3).loss
    assert down < base < up
    if loss == "focal_infonce":
        fn = build_loss(loss, hard_negative_weight=0.5, **kwargs)
        logits = fn.logits(z1, z2, z3)
        plain = build_loss(loss, **kwargs).logits(z1, z2, z3)
        assert torch.allclose(logits - plain, F.pad(0.5 * torch.eye(5, dtype=torch.float64), (5, 0)), atol=1e-12)


def test_hard_negative_weight_is_a_hyperparameter_of_the_losses_taking_hard_negatives_only():
    from hf_cse.losses import available_losses, get_loss_class

    for name in available_losses():
        assert ("hard_negative_weight" in loss_hyperparameters(name)) == get_loss_class(name).takes_hard_negatives
    with pytest.raises(ValueError, match="hard_negative_weight"):
        build_loss("infonce", hard_negative_weight=float("nan"))


@pytest.mark.parametrize(("extra", "message"), [
    (["--hard_negative_weight", "0.5"], r"--hard_negative_weight 0.5 weighs hard negatives, but the data has none"),
    (["--loss", "mpt", "--hard_negative_weight", "0.5"], r"--loss mpt does not take --hard_negative_weight"),
])
def test_hard_negative_weight_without_hard_negatives_is_one_line_before_any_model(tiny_bert_dir, tmp_path,
                                                                                   monkeypatch, extra, message):
    import run_unsup
    from hf_cse.models import SimCSEModel

    monkeypatch.setattr(SimCSEModel, "from_encoder", classmethod(lambda *a, **k: pytest.fail("model loaded")))
    with pytest.raises(Exception, match=message) as err:
        run_unsup.main(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(tmp_path / "out"),
                        "--use_cpu", "--max_steps", "1", *extra])
    assert "\n" not in str(err.value)
