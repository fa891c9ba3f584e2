"""Closed forms and limits of infonce, gs_infonce, focal_infonce, off_dropout_infonce and dcl (float64)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hf_cse.losses import build_loss

D64 = torch.float64


def unit_leaf(n, d, seed):
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(n, d, generator=g, dtype=D64), dim=-1).requires_grad_(True)


def tangent(h, g):
    """Projection of the rows of g on the tangent space at the unit rows of h."""
    return g - (g * h).sum(-1, keepdim=True) * h


def grads_from_similarity(grad_s, h1, h2):
    """Expected gradients w.r.t. unit leaves z1 = h1, z2 = h2 of a loss whose gradient w.r.t. the cosine
    matrix S = h1 h2^T is ``grad_s`` (normalisation inside the loss => tangent projection)."""
    return tangent(h1, grad_s @ h2), tangent(h2, grad_s.T @ h1)


# ------------------------------------------------------------------ infonce


def test_infonce_gradient_wrt_logits_is_softmax_minus_identity_over_n():
    n, tau = 6, 0.05
    z1, z2 = unit_leaf(n, 5, 0), unit_leaf(n, 5, 1)
    build_loss("infonce", temperature=tau)(z1, z2).loss.backward()
    s = (z1 @ z2.T).detach()
    grad_logits = (torch.softmax(s / tau, dim=1) - torch.eye(n, dtype=D64)) / n
    g1, g2 = grads_from_similarity(grad_logits / tau, z1.detach(), z2.detach())
    torch.testing.assert_close(z1.grad, g1, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(z2.grad, g2, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [2, 5, 64])
def test_infonce_constant_embeddings_give_log_n(n):
    z = torch.ones(n, 7, dtype=D64) * 3.0
    assert build_loss("infonce", temperature=0.05)(z, z).loss.item() == pytest.approx(math.log(n), abs=1e-12)


def test_infonce_matches_gradient_paradigm_eq1_on_unit_vectors():
    n, tau = 5, 0.1
    h, hp = unit_leaf(n, 6, 2), unit_leaf(n, 6, 3)
    build_loss("infonce", temperature=tau)(h, hp).loss.backward()
    hd, hpd = h.detach(), hp.detach()
    e = torch.exp(hd @ hpd.T / tau)
    eq1 = torch.stack(
        [sum(e[i, j] * (hpd[j] - hpd[i]) for j in range(n) if j != i) / (tau * e[i].sum()) for i in range(n)]
    )
    torch.testing.assert_close(h.grad, tangent(hd, eq1) / n, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ gs_infonce


def _xy(n=6, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, d, generator=g, dtype=D64)
    return z1, z1 + 0.7 * torch.randn(n, d, generator=g, dtype=D64)


@pytest.mark.parametrize("kwargs", [{"lam": 0.0}, {"num_noise": 0}])
def test_gs_infonce_without_noise_is_exactly_infonce(kwargs):
    z1, z2 = _xy()
    ref = build_loss("infonce", temperature=0.05)(z1, z2).loss
    got = build_loss("gs_infonce", temperature=0.05, **kwargs)(z1, z2).loss
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_gs_infonce_does_not_depend_on_noise_std_and_is_above_infonce():
    z1, z2 = _xy()
    values = []
    for std in (1.0, 0.5, 0.1):
        loss_fn = build_loss("gs_infonce", noise_std=std)
        loss_fn.generator = torch.Generator().manual_seed(0)
        values.append(loss_fn(z1, z2).loss)
    torch.testing.assert_close(values[0], values[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(values[0], values[2], rtol=1e-12, atol=1e-12)
    assert values[0] > build_loss("infonce")(z1, z2).loss + 1e-3


def test_gs_infonce_closed_form_and_no_gradient_to_noise(monkeypatch):
    n, d, tau, lam, m_noise = 5, 6, 0.05, 0.7, 9
    z1, z2 = (t.requires_grad_(True) for t in _xy(n, d))
    loss_fn = build_loss("gs_infonce", temperature=tau, lam=lam, num_noise=m_noise)
    noise = torch.randn(m_noise, d, dtype=D64, requires_grad=True)
    asked = []

    def fake_noise(num, dim, device, dtype):
        asked.append((num, dim, dtype))
        return noise

    monkeypatch.setattr(loss_fn, "sample_noise", fake_noise)
    out = loss_fn(z1, z2)
    out.loss.backward()
    assert asked == [(m_noise, d, D64)]
    assert noise.grad is None, "gradient must not reach the noise vectors"
    s = F.normalize(z1, dim=-1) @ F.normalize(z2, dim=-1).T
    c = F.normalize(z1, dim=-1) @ F.normalize(noise, dim=-1).T
    expected = (
        -s.diagonal() / tau + torch.log(torch.exp(s / tau).sum(1) + lam * torch.exp(c / tau).sum(1))
    ).mean()
    torch.testing.assert_close(out.loss, expected, rtol=1e-12, atol=1e-12)
    share = (
        lam * torch.exp(c / tau).sum(1) / (torch.exp(s / tau).sum(1) + lam * torch.exp(c / tau).sum(1))
    ).mean()
    assert out.metrics["noise_logit_share"] == pytest.approx(share.item(), rel=1e-9)


def test_gs_infonce_default_num_noise_is_three_times_batch_and_noise_is_fresh(monkeypatch):
    z1, z2 = _xy(n=4)
    loss_fn = build_loss("gs_infonce")
    a, b = loss_fn(z1, z2).loss, loss_fn(z1, z2).loss
    assert abs(a.item() - b.item()) > 1e-9, "noise must be redrawn at every call"
    sizes = []
    original = loss_fn.sample_noise

    def spy(num, dim, device, dtype):
        sizes.append(num)
        return original(num, dim, device, dtype)

    monkeypatch.setattr(loss_fn, "sample_noise", spy)
    loss_fn(z1, z2)
    assert sizes == [12]


# ------------------------------------------------------------------ focal_infonce


def test_gs_infonce_noise_too_large_for_memory_is_refused_naming_num_noise():
    from hf_cse.losses.errors import LossInputError

    z1, z2 = torch.randn(4, 8), torch.randn(4, 8)
    # 10**15 x 8 floats are 32 PB, past any machine's address space: the allocation fails at once, whatever the
    # kernel's overcommit policy
    with pytest.raises(LossInputError, match="num_noise 1000000000000000 noise vectors of dimension 8") as refused:
        build_loss("gs_infonce", num_noise=10**15)(z1, z2)
    assert refused.value.fields == ("num_noise",) and "\n" not in str(refused.value)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_focal_infonce_value_equals_eq2():
    z1, z2 = _xy(n=5)
    tau, m = 0.07, 0.3
    s = F.normalize(z1, dim=-1) @ F.normalize(z2, dim=-1).T
    expected = 0.0
    for i in range(5):
        num = math.exp(s[i, i].item() ** 2 / tau)
        den = num + sum(math.exp(s[i, j].item() * (s[i, j].item() + m) / tau) for j in range(5) if j != i)
        expected += -math.log(num / den) / 5
    assert build_loss("focal_infonce", temperature=tau, m=m)(z1, z2).loss.item() == pytest.approx(
        expected, rel=1e-10
    )


def test_focal_infonce_gradients_are_the_true_ones_not_printed_eq4():
    n, tau, m = 6, 0.07, 0.3
    z1, z2 = unit_leaf(n, 5, 4), unit_leaf(n, 5, 5)
    build_loss("focal_infonce", temperature=tau, m=m)(z1, z2).loss.backward()
    s = (z1 @ z2.T).detach()
    eye = torch.eye(n, dtype=torch.bool)
    p = torch.softmax(torch.where(eye, s * s, s * (s + m)) / tau, dim=1)
    # true: negatives p (2 s + m) / tau, positive (2 s_p / tau)(p_ii - 1)   (mean over anchors => / n)
    grad_s = torch.where(eye, 2 * s / tau * (p - 1), p * (2 * s + m) / tau) / n
    g1, g2 = grads_from_similarity(grad_s, z1.detach(), z2.detach())
    torch.testing.assert_close(z1.grad, g1, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(z2.grad, g2, rtol=1e-10, atol=1e-12)
    # the printed eq. 4, (2/tau) p (s + m), is not the gradient of eq. 2
    wrong = torch.where(eye, 2 * s / tau * (p - 1), 2 / tau * p * (s + m)) / n
    assert not torch.allclose(z1.grad, grads_from_similarity(wrong, z1.detach(), z2.detach())[0], atol=1e-6)


def test_focal_negative_logit_crossover_at_one_minus_m():
    m, tau = 0.3, 0.07
    loss_fn = build_loss("focal_infonce", temperature=tau, m=m)
    # two anchors whose negative cosine is exactly 1 - m = 0.7
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=D64)
    b = torch.tensor([[0.7, math.sqrt(1 - 0.49)], [math.sqrt(1 - 0.49), 0.7]], dtype=D64)
    b = torch.stack([b[1], b[0]])  # so that cos(a_0, b_1) = 0.7 is a negative
    logits = loss_fn.logits(a, b)
    s = F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T
    assert s[0, 1].item() == pytest.approx(0.7)
    assert logits[0, 1].item() == pytest.approx(s[0, 1].item() / tau, rel=1e-12)
    assert logits[0, 0].item() == pytest.approx(s[0, 0].item() ** 2 / tau, rel=1e-12)


# ------------------------------------------------------------------ off_dropout_infonce


def test_off_dropout_m1_without_dropout_is_simcse():
    z, _ = _xy(n=6)
    ref = build_loss("infonce")(z, z).loss
    for placement in ("positive_logit", "negative_sum"):
        got = build_loss("off_dropout_infonce", m=1.0, m_placement=placement)(z, z, z_nodropout=z).loss
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_off_dropout_code_and_paper_forms_equal_only_at_m1():
    z1, z2 = _xy(n=6)
    zbar = z1 + 0.05
    code = lambda m: build_loss("off_dropout_infonce", m=m)(z1, z2, z_nodropout=zbar).loss  # noqa: E731
    paper = lambda m: (
        build_loss("off_dropout_infonce", m=m, m_placement="negative_sum")(  # noqa: E731
            z1, z2, z_nodropout=zbar
        ).loss
    )
    torch.testing.assert_close(code(1.0), paper(1.0), rtol=1e-12, atol=1e-12)
    assert abs(code(0.9).item() - paper(0.9).item()) > 1e-3


@pytest.mark.parametrize("placement", ["positive_logit", "negative_sum"])
def test_off_dropout_closed_form_and_gradients(placement):
    n, tau, m = 5, 0.05, 0.9
    z1, z2, zbar = unit_leaf(n, 6, 6), unit_leaf(n, 6, 7), unit_leaf(n, 6, 8)
    out = build_loss("off_dropout_infonce", temperature=tau, m=m, m_placement=placement)(
        z1, z2, z_nodropout=zbar
    )
    out.loss.backward()
    pos = (z1 * z2).sum(-1).detach() / tau
    sbar = (zbar @ zbar.T).detach() / tau
    eye = torch.eye(n, dtype=torch.bool)
    negsum = torch.exp(sbar.masked_fill(eye, float("-inf"))).sum(1)
    if placement == "positive_logit":
        ell = -m * pos + torch.log(torch.exp(m * pos) + negsum)
        p_pos = torch.exp(m * pos) / (torch.exp(m * pos) + negsum)
        dpos = -m * (1 - p_pos)  # d l_i / d s+_i (s in logit units)
    else:
        ell = -pos + torch.log(torch.exp(pos) + m * negsum)
        p_pos = torch.exp(pos) / (torch.exp(pos) + m * negsum)
        dpos = -(1 - p_pos)
    torch.testing.assert_close(out.loss, ell.mean(), rtol=1e-12, atol=1e-12)
    # z1 only enters through the positive: grad = dpos / tau * P(z2_i) / N
    torch.testing.assert_close(
        z1.grad, tangent(z1.detach(), dpos[:, None] / tau * z2.detach()) / n, rtol=1e-9, atol=1e-12
    )
    assert zbar.grad is not None and zbar.grad.abs().sum() > 1e-6, "gradient must reach z_nodropout"


# ------------------------------------------------------------------ dcl


def _hadamard(k):
    h = torch.ones(1, 1, dtype=D64)
    for _ in range(k):
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


@pytest.mark.parametrize("tau", [5.0, 0.5])
def test_dcl_orthogonal_standardised_columns_closed_form(tau):
    z = _hadamard(3)[:, 1:]  # N = 8 rows, D = 7 columns with mean 0, biased var 1, mutually orthogonal
    n, d = z.shape
    code = build_loss("dcl", temperature=tau, eps=0.0)(z, z).loss.item()
    assert code == pytest.approx(math.log(1 + (d - 1) * math.exp(-1 / tau)), rel=1e-12)
    paper = build_loss("dcl", temperature=tau, normalization="paper", eps=0.0)(z, z).loss.item()
    assert paper == pytest.approx(d * math.log(1 + (d - 1) * math.exp(-(n - 1) / tau)), rel=1e-12)
    # BatchNorm eps (default) only perturbs slightly; an affine copy gives the same value
    default = build_loss("dcl", temperature=tau)(3 * z + 1, z).loss.item()
    assert default == pytest.approx(code, rel=1e-4)


def test_dcl_standardisation_has_unit_diagonal():
    z, _ = _xy(n=9, d=4)
    zt = build_loss("dcl", eps=0.0).standardize(z)
    torch.testing.assert_close((zt.T @ zt / 9).diagonal(), torch.ones(4, dtype=D64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("normalization", ["code", "paper"])
def test_dcl_affine_and_dimension_permutation_invariance(normalization):
    z1, z2 = _xy(n=10, d=6)
    g = torch.Generator().manual_seed(3)
    a1, a2 = torch.rand(6, generator=g, dtype=D64) * 4 + 0.2, torch.rand(6, generator=g, dtype=D64) * 4 + 0.2
    b1, b2 = torch.randn(6, generator=g, dtype=D64) * 5, torch.randn(6, generator=g, dtype=D64)
    exact = build_loss("dcl", normalization=normalization, eps=0.0)
    ref = exact(z1, z2).loss
    torch.testing.assert_close(exact(a1 * z1 + b1, a2 * z2 + b2).loss, ref, rtol=1e-12, atol=1e-12)
    perm = torch.tensor([2, 5, 0, 1, 4, 3])
    torch.testing.assert_close(exact(z1[:, perm], z2[:, perm]).loss, ref, rtol=1e-12, atol=1e-12)
    approx = build_loss("dcl", normalization=normalization)  # BatchNorm eps = 1e-5
    torch.testing.assert_close(approx(a1 * z1 + b1, a2 * z2 + b2).loss, ref, rtol=1e-4, atol=1e-6)
    # a negative scale flips the correlation sign: not invariant
    assert abs(exact(-z1, z2).loss.item() - ref.item()) > 1e-4


def test_dcl_code_vs_paper_normalisation_differ():
    z1, z2 = _xy(n=10, d=6)
    code = build_loss("dcl")(z1, z2).loss
    paper = build_loss("dcl", normalization="paper")(z1, z2).loss
    # manual code form: BatchNorm (biased), C = a^T b / N / tau, mean over dims
    a = (z1 - z1.mean(0)) / torch.sqrt(z1.var(0, unbiased=False) + 1e-5)
    b = (z2 - z2.mean(0)) / torch.sqrt(z2.var(0, unbiased=False) + 1e-5)
    c = a.T @ b / 10 / 5.0
    torch.testing.assert_close(code, (torch.logsumexp(c, 1) - c.diagonal()).mean(), rtol=1e-12, atol=1e-12)
    assert abs(code.item() - paper.item()) > 1e-2
