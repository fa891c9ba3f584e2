"""The unified gradient paradigm (Li et al., ACL 2024) family: paradigm, ArcCon, MPT, MET, the original objectives and
their modified versions, checked against the paper's gradient formulas (with the corrections each loss documents)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hf_cse.losses import build_loss
from hf_cse.losses._paradigm_common import paradigm_surrogate, unit_distance

D64 = torch.float64
TOL = dict(rtol=1e-9, atol=1e-12)


def unit_leaf(n, d, seed, near=None, noise=0.6):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=g, dtype=D64)
    if near is not None:
        z = near.detach() + noise * z
    return F.normalize(z, dim=-1).requires_grad_(True)


def pair(n=6, d=5, seed=0, noise=0.6):
    h = unit_leaf(n, d, seed)
    return h, unit_leaf(n, d, seed + 100, near=h, noise=noise)


def tangent(h, g):
    return g - (g * h).sum(-1, keepdim=True) * h


def grad_of(loss_name, h, hp, **kw):
    h = h.detach().clone().requires_grad_(True)
    hp = hp.detach().clone().requires_grad_(True)
    build_loss(loss_name, **kw)(h, hp).loss.backward()
    return h.grad, hp.grad


#: the paper's one-directional eq. 5 averaged over the N anchors (the defaults are the authors' code form)
PAPER = dict(symmetric=False, reduction="anchor_mean")


def eye(n):
    return torch.eye(n, dtype=torch.bool)


def hardest(s):
    return s.masked_fill(eye(s.shape[0]), float("-inf")).argmax(1)


# ------------------------------------------------------------------ paradigm (eq. 4 / 5)


def baseline_components(s, m, tau):
    n = s.shape[0]
    gd = (s.diagonal() - s.masked_fill(eye(n), float("-inf")).amax(1) < m).to(D64)
    w = torch.exp(s / tau).masked_fill(eye(n), 0)
    return gd, w / w.sum(1, keepdim=True)


def eq4(hp, gd, w, ratio):
    """GD_i sum_{j!=i} W_ij (h'_j - R_i h'_i) for every anchor."""
    ratio = torch.as_tensor(ratio, dtype=D64).expand(hp.shape[0])
    return gd[:, None] * (w @ hp - (w.sum(1) * ratio)[:, None] * hp)


def test_paradigm_surrogate_autograd_is_eq4_on_unit_leaves():
    h, hp = pair(7, 5, seed=1)
    s = (h @ hp.T).detach()
    gd, w = baseline_components(s, m=0.3, tau=0.05)
    ratio = torch.linspace(0.5, 2.0, 7, dtype=D64)
    paradigm_surrogate(h, hp, gd, w, ratio).backward()
    torch.testing.assert_close(h.grad, eq4(hp.detach(), gd, w, ratio) / 7, **TOL)


@pytest.mark.parametrize("m", [0.3, 0.05])
def test_paradigm_loss_gradient_is_eq4(m):
    h, hp = pair(8, 6, seed=2)
    s = (h @ hp.T).detach()
    gd, w = baseline_components(s, m=m, tau=0.05)
    assert 0 < gd.sum() < 8 or m == 0.3
    g1, g2 = grad_of("paradigm", h, hp, m=m, temperature=0.05, r=1.25, **PAPER)
    torch.testing.assert_close(g1, tangent(h.detach(), eq4(hp.detach(), gd, w, 1.25)) / 8, **TOL)
    # one-directional: h' gets gradient through every similarity, sum_i GD_i W_ij h_i - r GD_j h_j
    exp2 = (gd[:, None] * w).T @ h.detach() - 1.25 * gd[:, None] * h.detach()
    torch.testing.assert_close(g2, tangent(hp.detach(), exp2) / 8, **TOL)


@pytest.mark.parametrize("form", [PAPER, {}], ids=["paper", "code_defaults"])
def test_paradigm_gd_thresholds(form):
    h, hp = pair(6, 5, seed=3)
    none = grad_of("paradigm", h, hp, gd="none", **form)[0]
    torch.testing.assert_close(grad_of("paradigm", h, hp, m=10.0, **form)[0], none, rtol=0, atol=0)
    z1, z2 = h.detach().clone().requires_grad_(True), hp.detach().clone().requires_grad_(True)
    out = build_loss("paradigm", m=-1.999, **form)(z1, z2)  # below every gap (>= -2): no anchor active
    out.loss.backward()
    assert out.loss.item() == 0.0 and out.metrics["active_share"] == 0.0
    assert z1.grad.abs().max() == 0 and z2.grad.abs().max() == 0


def test_paradigm_without_gd_moves_anchors_like_infonce():
    h, hp = pair(8, 6, seed=4)
    g_par = grad_of("paradigm", h, hp, gd="none", weight="softmax", r=1.0, temperature=0.05, **PAPER)[0]
    g_info = grad_of("infonce", h, hp, temperature=0.05)[0]
    cos = F.cosine_similarity(g_par, g_info, dim=-1)
    assert (cos > 0.999999).all(), cos  # per anchor the two gradients are positive multiples
    # with GD on, anchors past the margin stop moving while InfoNCE keeps pushing them
    g_gd = grad_of("paradigm", h, hp, m=0.2, **PAPER)[0]
    assert (g_gd.norm(dim=-1) == 0).any() and (g_info.norm(dim=-1) > 0).all()


def test_paradigm_hardest_weight_equals_mpt_gradient():
    h, hp = pair(7, 5, seed=5)
    a1, a2 = grad_of("paradigm", h, hp, weight="hardest", m=0.23, r=1.0, **PAPER)
    b1, b2 = grad_of("mpt", h, hp, margin=0.23)
    torch.testing.assert_close(a1, b1, **TOL)
    torch.testing.assert_close(a2, b2, **TOL)


def test_paradigm_small_temperature_weights_tend_to_hardest():
    h, hp = pair(7, 5, seed=6)
    soft = grad_of("paradigm", h, hp, temperature=1e-4, **PAPER)[0]
    hard = grad_of("paradigm", h, hp, weight="hardest", **PAPER)[0]
    torch.testing.assert_close(soft, hard, rtol=1e-6, atol=1e-8)


def test_paradigm_symmetric_with_the_anchor_mean_reduction():
    n, m, tau, r = 8, 0.25, 0.05, 1.5
    h, hp = pair(n, 6, seed=7)
    g1, g2 = grad_of("paradigm", h, hp, m=m, temperature=tau, r=r, symmetric=True, reduction="anchor_mean")
    hd, hpd = h.detach(), hp.detach()
    s = hd @ hpd.T
    gd0, w0 = baseline_components(s, m, tau)
    gd1, w1 = baseline_components(s.T, m, tau)
    # the anchor_mean reduction (mean over N instead of the code's 1/(k N), test_losses_paradigm_code.py):
    # d/dh_i = gd0_i (sum_j W0_ij h'_j - r h'_i) - gd1_i r h'_i
    exp1 = gd0[:, None] * (w0 @ hpd - r * hpd) - r * gd1[:, None] * hpd
    exp2 = gd1[:, None] * (w1 @ hd - r * hd) - r * gd0[:, None] * hd
    torch.testing.assert_close(g1, tangent(hd, exp1) / n, **TOL)
    torch.testing.assert_close(g2, tangent(hpd, exp2) / n, **TOL)


# ------------------------------------------------------------------ Table 1 plug-ins


def test_table1_infonce_components_reproduce_infonce_gradient():
    n, tau = 7, 0.05
    h, hp = pair(n, 5, seed=8)
    s = (h @ hp.T).detach()
    e = torch.exp(s / tau)
    neg = e.masked_fill(eye(n), 0).sum(1)
    gd = 1 / (1 + e.diagonal() / neg)
    w = e.masked_fill(eye(n), 0) / (tau * neg[:, None])
    h2 = h.detach().clone().requires_grad_(True)
    paradigm_surrogate(h2, hp.detach(), gd, w, 1.0).backward()
    torch.testing.assert_close(
        grad_of("infonce", h, hp, temperature=tau)[0], tangent(h.detach(), h2.grad), **TOL
    )


@pytest.mark.parametrize("u_deg", [10.0, 30.0])
def test_table1_arccon_components_reproduce_eq2(u_deg):
    n, tau, u = 7, 0.05, math.radians(u_deg)
    h, hp = pair(n, 5, seed=9)
    s = (h @ hp.T).detach()
    theta = torch.acos(s.diagonal())
    e = torch.exp(s / tau)
    neg = e.masked_fill(eye(n), 0).sum(1)
    gd = 1 / (1 + torch.exp(torch.cos(theta + u) / tau) / neg)
    w = e.masked_fill(eye(n), 0) / (tau * neg[:, None])
    ratio = torch.sin(theta + u) / torch.sin(theta)
    h2 = h.detach().clone().requires_grad_(True)
    paradigm_surrogate(h2, hp.detach(), gd, w, ratio).backward()
    got = grad_of("arccon", h, hp, temperature=tau, u=u_deg)[0]
    torch.testing.assert_close(got, tangent(h.detach(), h2.grad), **TOL)
    loss_fn = build_loss("arccon", temperature=tau, u=u_deg)
    assert loss_fn.paradigm_ratio(h.detach(), hp.detach()) == pytest.approx(ratio.mean().item(), rel=1e-9)


def test_table1_mpt_components_reproduce_eq3():
    n, m = 8, 0.23
    h, hp = pair(n, 5, seed=10)
    s = (h @ hp.T).detach()
    j = hardest(s)
    gd = (s.diagonal() - s[torch.arange(n), j] < m).to(D64)
    assert 0 < gd.sum() < n
    w = F.one_hot(j, n).to(D64)
    h2 = h.detach().clone().requires_grad_(True)
    paradigm_surrogate(h2, hp.detach(), gd, w, 1.0).backward()
    torch.testing.assert_close(grad_of("mpt", h, hp, margin=m)[0], tangent(h.detach(), h2.grad), **TOL)


def test_table1_met_components_reproduce_eq3_tangentially():
    n, m = 8, 0.45
    h, hp = pair(n, 5, seed=11)
    s = (h @ hp.T).detach()
    dist = torch.sqrt(2 - 2 * s)
    j = dist.masked_fill(eye(n), float("inf")).argmin(1)
    d_neg, d_pos = dist[torch.arange(n), j], dist.diagonal()
    gd = (d_neg - d_pos < m).to(D64)
    assert 0 < gd.sum() < n
    w = F.one_hot(j, n).to(D64) / d_neg[:, None]
    ratio = torch.sqrt((1 - s[torch.arange(n), j]) / (1 - s.diagonal()))
    h2 = h.detach().clone().requires_grad_(True)
    paradigm_surrogate(h2, hp.detach(), gd, w, ratio).backward()
    torch.testing.assert_close(grad_of("met", h, hp, margin=m)[0], tangent(h.detach(), h2.grad), **TOL)
    assert build_loss("met").paradigm_ratio(h.detach(), hp.detach()) == pytest.approx(
        (d_neg / d_pos).mean().item()
    )


# ------------------------------------------------------------------ ArcCon, MPT, MET


def test_arccon_u0_is_infonce_and_value_matches_acos_form():
    h, hp = pair(6, 5, seed=12)
    torch.testing.assert_close(
        build_loss("arccon", u=0.0)(h, hp).loss, build_loss("infonce")(h, hp).loss, rtol=1e-14, atol=1e-14
    )
    assert build_loss("arccon", u=0.0).paradigm_ratio(h, hp) == pytest.approx(1.0)
    s = (h @ hp.T).detach()
    logits = s.clone()
    logits.diagonal().copy_(torch.cos(torch.acos(s.diagonal()) + math.radians(10)))
    expected = F.cross_entropy(logits / 0.05, torch.arange(6))
    torch.testing.assert_close(build_loss("arccon")(h, hp).loss.detach(), expected, rtol=1e-12, atol=1e-12)
    assert build_loss("arccon").paradigm_ratio(h, hp) > 1  # theta + u < pi/2 here


@pytest.mark.parametrize("name,margin", [("mpt", 0.23), ("met", 0.44)])
def test_triplets_zero_loss_and_gradient_when_margin_is_satisfied(name, margin):
    z1 = torch.eye(5, dtype=D64).requires_grad_(True)  # s_ii = 1, s_ij = 0
    z2 = (torch.eye(5, dtype=D64) + 0.01).requires_grad_(True)
    out = build_loss(name, margin=margin)(z1, z2)
    out.loss.backward()
    assert out.loss.item() == 0.0 and z1.grad.abs().max() == 0 and z2.grad.abs().max() == 0
    out = build_loss(name, margin=5.0)(z1, z2)  # impossible margin: every anchor active
    assert out.loss.item() > 0 and out.metrics["active_share"] == 1.0


@pytest.mark.parametrize("name", ["mpt", "met"])
def test_triplets_use_row_wise_hardest_negative(name):
    h, hp = pair(7, 4, seed=13)
    s = (h @ hp.T).detach()
    margin = 0.5
    expected = 0.0
    for i in range(7):
        if name == "mpt":
            neg = max(s[i, j].item() for j in range(7) if j != i)
            expected += max(0.0, neg - s[i, i].item() + margin) / 7
        else:
            dist = lambda a, b: math.sqrt(2 - 2 * s[a, b].item())  # noqa: E731
            neg = min(dist(i, j) for j in range(7) if j != i)
            expected += max(0.0, dist(i, i) - neg + margin) / 7
    assert build_loss(name, margin=margin)(h, hp).loss.item() == pytest.approx(expected, rel=1e-10)


def test_met_euclidean_form_differs_only_by_radial_term():
    n, m = 6, 0.45
    h, hp = pair(n, 5, seed=14)
    lib = grad_of("met", h, hp, margin=m)[0]
    # the same loss written with ||h - h'|| on unit leaves (no normalisation)
    hl = h.detach().clone().requires_grad_(True)
    dist = torch.cdist(hl, hp.detach())
    neg = dist.masked_fill(eye(n), float("inf")).amin(1)
    F.relu(dist.diagonal() - neg + m).mean().backward()
    s = (h @ hp.T).detach()
    j = hardest(s)
    d_pos, d_neg = torch.sqrt(2 - 2 * s.diagonal()), torch.sqrt(2 - 2 * s[torch.arange(n), j])
    active = (d_pos - d_neg + m > 0).to(D64)
    eq3 = active[:, None] * (hp.detach()[j] / d_neg[:, None] - hp.detach() / d_pos[:, None]) / n
    radial = active[:, None] * h.detach() * (1 / d_pos - 1 / d_neg)[:, None] / n
    torch.testing.assert_close(hl.grad - eq3, radial, **TOL)
    torch.testing.assert_close(lib, tangent(h.detach(), eq3), **TOL)


def test_unit_distance_equals_cdist_on_unit_vectors():
    h, hp = pair(6, 5, seed=15)
    torch.testing.assert_close(
        unit_distance((h @ hp.T).detach()), torch.cdist(h.detach(), hp.detach()), **TOL
    )


# ------------------------------------------------------------------ original objectives (eq. 7-11)


def test_align_uniform_mhe_value_and_eq7_eq8():
    n, nu = 6, 3.0
    h, hp = pair(n, 5, seed=16)
    hd, hpd = h.detach(), hp.detach()
    align = sum((hd[i] - hpd[i]).pow(2).sum() for i in range(n)) / n
    pairs = sum(torch.exp(-(hd[k] - hd[q]).pow(2).sum()) for k in range(n) for q in range(k + 1, n))
    expected = align + nu * torch.log(2 / (n * (n - 1)) * pairs)
    assert build_loss("align_uniform_mhe", nu=nu, variant="paper")(h, hp).loss.item() == pytest.approx(
        expected.item(), rel=1e-12
    )
    e2 = torch.exp(2 * hd @ hd.T).masked_fill(eye(n), 0)
    denom = torch.exp(2 * hd @ hd.T)[torch.ones(n, n, dtype=torch.bool).tril(-1)].sum()
    eq = -2 / n * hpd + nu * 2 * (e2 @ hd) / denom
    torch.testing.assert_close(grad_of("align_uniform_mhe", h, hp, nu=nu, variant="paper")[0], tangent(hd, eq), **TOL)
    ratio = (denom / (nu * n * e2.sum(1))).mean().item()
    assert build_loss("align_uniform_mhe", nu=nu, variant="paper").paradigm_ratio(h, hp) == pytest.approx(ratio,
                                                                                                      rel=1e-9)


def test_align_uniform_mhe_code_variant_value():
    n, nu = 5, 10.0
    h, hp = pair(n, 4, seed=17)
    hd, hpd = h.detach(), hp.detach()
    low = torch.ones(n, n, dtype=torch.bool).tril(-1)
    expected = (2 - 2 * (hd * hpd).sum(-1)).mean() + nu * (
        torch.logsumexp((hd @ hd.T)[low], 0) + torch.logsumexp((hpd @ hpd.T)[low], 0)
    )
    got = build_loss("align_uniform_mhe", nu=nu, variant="code")(h, hp).loss
    torch.testing.assert_close(got.detach(), expected, rtol=1e-12, atol=1e-12)


def test_align_uniform_mhs_value_and_eq7_eq9():
    n, nu = 7, 1.5
    h, hp = pair(n, 4, seed=18)
    hd, hpd = h.detach(), hp.detach()
    dist = torch.cdist(hd, hd).masked_fill(eye(n), float("inf"))
    nn_idx, nn_d = dist.argmin(1), dist.amin(1)
    expected = (hd - hpd).pow(2).sum(-1).mean() - nu * nn_d.mean()
    out = build_loss("align_uniform_mhs", nu=nu, variant="paper")(h, hp)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-12)
    # eq. 9 for each anchor plus the push every anchor k gives to its nearest neighbour
    eq = -2 / n * hpd + nu / n * hd[nn_idx] / nn_d[:, None]
    for k in range(n):
        eq[nn_idx[k]] += nu / n * hd[k] / nn_d[k]
    torch.testing.assert_close(grad_of("align_uniform_mhs", h, hp, nu=nu, variant="paper")[0], tangent(hd, eq), **TOL)
    assert build_loss("align_uniform_mhs", nu=nu, variant="paper").paradigm_ratio(h, hp) == pytest.approx(
        (2 * nn_d / (nu * n)).mean().item(), rel=1e-9
    )


def test_align_uniform_mhs_code_variant_uses_detached_other_view():
    n, nu = 6, 1.0
    h, hp = pair(n, 4, seed=19)
    hd, hpd = h.detach(), hp.detach()
    d01 = torch.sqrt(torch.cdist(hd, hpd).pow(2) + 1e-4).masked_fill(eye(n), float("inf"))
    expected = (hd - hpd).pow(2).sum(-1).mean() - nu * (d01.amin(1).mean() + d01.amin(0).mean())
    out = build_loss("align_uniform_mhs", nu=nu, variant="code")(h, hp)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-10)
    j = d01.argmin(1)
    eq = -2 / n * hpd + nu / n * hpd[j] / d01.amin(1)[:, None]  # neighbours detached: only the anchor term
    torch.testing.assert_close(
        grad_of("align_uniform_mhs", h, hp, nu=nu, variant="code")[0], tangent(hd, eq), **TOL
    )


@pytest.mark.parametrize("name, printed", [
    ("align_uniform_mhe", {"variant": "paper"}), ("align_uniform_mhs", {"variant": "paper"}),
    ("barlow_twins", {"surrogate": False}), ("vicreg", {"surrogate": False}),
])
def test_original_objectives_default_to_the_authors_code_form_that_made_the_ori_numbers(name, printed):
    """The paradigm paper's "ori" rows come from the authors' code forms: the defaults; the printed forms are
    options and give another loss."""
    h, hp = pair(6, 5, seed=24)
    code = {k: "code" if k == "variant" else True for k in printed}
    default = build_loss(name)
    assert {k: getattr(default, k) for k in printed} == code
    torch.testing.assert_close(default(h, hp).loss, build_loss(name, **code)(h, hp).loss, rtol=0, atol=0)
    assert not torch.allclose(default(h, hp).loss, build_loss(name, **printed)(h, hp).loss)


def _bt_eq10(anchor, other, nu, n):
    """(2/N)(-A h'_i + nu sum_j (h'_i.h'_j / N) h_j) with Table 2's weight h'_i.h'_j."""
    c_diag = (anchor * other).sum(0) / n
    a_h = (1 - (1 - nu) * c_diag) * other
    return 2 / n * (-a_h + nu * (other @ other.T / n) @ anchor)


@pytest.mark.parametrize("surrogate", [False, True])
def test_barlow_twins_gradient_is_eq10_with_table2_weight(surrogate):
    n, nu = 7, 0.3
    h, hp = pair(n, 5, seed=20)
    hd, hpd = h.detach(), hp.detach()
    g1, g2 = grad_of("barlow_twins", h, hp, nu=nu, surrogate=surrogate)
    torch.testing.assert_close(g1, tangent(hd, _bt_eq10(hd, hpd, nu, n)), **TOL)
    torch.testing.assert_close(g2, tangent(hpd, _bt_eq10(hpd, hd, nu, n)), **TOL)
    # eq. 10 as printed (weight h_i.h'_j) is not the gradient
    c_diag = (hd * hpd).sum(0) / n
    printed = 2 / n * (-(1 - (1 - nu) * c_diag) * hpd + nu * ((hd @ hpd.T) / n).masked_fill(eye(n), 0) @ hd)
    assert not torch.allclose(g1, tangent(hd, printed), atol=1e-6)


def test_barlow_twins_true_loss_value():
    n, nu = 6, 30.0
    h, hp = pair(n, 4, seed=21)
    c = sum(torch.outer(h.detach()[i], hp.detach()[i]) for i in range(n)) / n
    expected = sum((c[k, k] - 1) ** 2 for k in range(4)) + nu * sum(
        c[k, q] ** 2 for k in range(4) for q in range(4) if k != q
    )
    assert build_loss("barlow_twins", nu=nu, surrogate=False)(h, hp).loss.item() == pytest.approx(expected.item(),
                                                                                                  rel=1e-12)


def test_vicreg_surrogate_gradient_is_eq11():
    n, nu = 7, 30.0
    h, hp = pair(n, 5, seed=22)
    hd, hpd = h.detach(), hp.detach()
    g1, g2 = grad_of("vicreg", h, hp, nu=nu, surrogate=True)
    eq11 = lambda a, b: 2 / n * (-b + nu * ((a @ a.T / n).masked_fill(eye(n), 0) @ a))  # noqa: E731
    torch.testing.assert_close(g1, tangent(hd, eq11(hd, hpd)), **TOL)
    torch.testing.assert_close(g2, tangent(hpd, eq11(hpd, hd)), **TOL)


@pytest.mark.parametrize("variance_weight", [0.0, 1.0, 2.5])
def test_vicreg_true_loss_value_and_gradient(variance_weight):
    n, d, nu, gamma = 7, 5, 30.0, 1.0
    h, hp = pair(n, d, seed=23)
    hd, hpd = h.detach(), hp.detach()
    nu1 = nu * d * (n - 1) ** 2 / (2 * n**2)
    nu_var = variance_weight * d  # nu^{V,2}

    def cov(x):
        xc = x - x.mean(0)
        return xc.T @ xc / (n - 1)

    def v(x):
        c = cov(x)
        return (c.pow(2).sum() - c.diagonal().pow(2).sum()) / d

    def c_term(x):
        return torch.relu(gamma - torch.sqrt(x.var(0) + 1e-4)).mean()

    expected = (hd - hpd).pow(2).sum(-1).mean() + nu1 * (v(hd) + v(hpd)) + nu_var * (c_term(hd) + c_term(hpd))
    true_loss = dict(nu=nu, variance_weight=variance_weight, gamma=gamma, surrogate=False)
    g1, _ = grad_of("vicreg", h, hp, **true_loss)
    out = build_loss("vicreg", **true_loss)(h, hp)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-12)
    xc = hd - hd.mean(0)
    c = cov(hd)
    c_off = c - torch.diag(c.diagonal())
    sigma = torch.sqrt(hd.var(0) + 1e-4)
    grad = 2 / n * (hd - hpd) + 4 * nu1 / (d * (n - 1)) * xc @ c_off
    grad = grad - nu_var / d * (sigma < gamma).to(D64) * xc / ((n - 1) * sigma)
    torch.testing.assert_close(g1, tangent(hd, grad), **TOL)


# ------------------------------------------------------------------ modified objectives (eq. 14-19)


#: the paper's one-directional modified objectives with its cross-view GD (the defaults are the authors' code form)
PAPER_MOD = dict(symmetric=False, gd_reference="cross")


def gd_cross(h, hp, m):
    s = h @ hp.T
    return (s.diagonal() - s.masked_fill(eye(s.shape[0]), float("-inf")).amax(1) < m).to(D64)


def gd_self(h, m):
    s = h @ h.T
    return (1 - s.masked_fill(eye(s.shape[0]), float("-inf")).amax(1) < m).to(D64)


def mixed_margin(h, hp):
    """A GD margin with roughly half of the anchors active (so gating is actually exercised)."""
    s = (h @ hp.T).detach()
    gaps = s.diagonal() - s.masked_fill(eye(s.shape[0]), float("-inf")).amax(1)
    return gaps.median().item() + 1e-9


def test_m_mhe_gradient_is_eq16_and_inactive_anchors_do_not_move():
    n, tau, r = 8, 0.1, 1.75
    h, hp = pair(n, 5, seed=30)
    m = mixed_margin(h, hp)
    hd, hpd = h.detach(), hp.detach()
    d = gd_cross(hd, hpd, m)
    assert 0 < d.sum() < n
    e = torch.exp(hd @ hd.T / tau).masked_fill(eye(n), 0)
    denom = torch.exp(hd @ hd.T / tau)[torch.ones(n, n, dtype=torch.bool).tril(-1)].sum()
    eq16 = d[:, None] * (e @ hd - r * e.sum(1, keepdim=True) * hpd) / (tau * denom)
    g1, g2 = grad_of("m_mhe", h, hp, m=m, temperature=tau, r=r, **PAPER_MOD)
    torch.testing.assert_close(g1, tangent(hd, eq16), **TOL)
    assert (g1[d == 0] == 0).all()
    assert (g2.norm(dim=-1) > 0).all()  # h' is pulled by every alignment term


def test_m_mhe_all_inactive_only_moves_the_positives():
    h, hp = pair(6, 5, seed=31)
    g1, g2 = grad_of("m_mhe", h, hp, m=-1.999, **PAPER_MOD)  # below every gap (>= -2)
    assert g1.abs().max() == 0 and g2.abs().max() > 0


def test_m_mhe_uniformity_closed_form():
    n, tau = 6, 0.05
    h, _ = pair(n, 5, seed=32)
    hd = h.detach()
    low = torch.ones(n, n, dtype=torch.bool).tril(-1)
    expected = torch.logsumexp((hd @ hd.T / tau)[low], 0) - 1 / tau + math.log(2 / (n * (n - 1)))
    # identical views: the alignment term vanishes and the loss is L^{u,mMHE}
    got = build_loss("m_mhe", temperature=tau, **PAPER_MOD)(hd, hd).loss
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    pairs = sum(
        math.exp(-(hd[k] - hd[q]).pow(2).sum().item() / (2 * tau)) for k in range(n) for q in range(k)
    )
    assert got.item() == pytest.approx(math.log(2 * pairs / (n * (n - 1))), rel=1e-10)


def test_m_mhe_symmetric_doubles_the_positive_pull():
    n, tau, r = 7, 0.1, 1.5
    h, hp = pair(n, 5, seed=33)
    hd, hpd = h.detach(), hp.detach()
    g1, _ = grad_of("m_mhe", h, hp, m=10.0, temperature=tau, r=r, symmetric=True, gd_reference="cross")

    def w(x):
        e = torch.exp(x @ x.T / tau).masked_fill(eye(n), 0)
        return e, e.sum(1) / (
            tau * torch.exp(x @ x.T / tau)[torch.ones(n, n, dtype=torch.bool).tril(-1)].sum()
        )

    e0, w0 = w(hd)
    _, w1 = w(hpd)
    denom0 = e0.sum() / 2
    expected = e0 @ hd / (tau * denom0) - r * (w0 + w1)[:, None] * hpd
    torch.testing.assert_close(g1, tangent(hd, expected), **TOL)


@pytest.mark.parametrize("reference", ["cross", "self"])
def test_m_mhs_gradient_is_eq17(reference):
    n, r = 8, 1.75
    h, hp = pair(n, 5, seed=34)
    hd, hpd = h.detach(), hp.detach()
    if reference == "cross":
        m = mixed_margin(h, hp)
        d = gd_cross(hd, hpd, m)
    else:
        gaps = 1 - (hd @ hd.T).masked_fill(eye(n), float("-inf")).amax(1)
        m = gaps.median().item() + 1e-9
        d = gd_self(hd, m)
    assert 0 < d.sum() < n
    dist = torch.cdist(hd, hd).masked_fill(eye(n), float("inf"))
    j, nn_d = dist.argmin(1), dist.amin(1)
    eq17 = d[:, None] * (hd[j] - r * hpd) / nn_d[:, None]
    g1, _ = grad_of("m_mhs", h, hp, m=m, r=r, gd_reference=reference, symmetric=False, neighbor_view="same")
    torch.testing.assert_close(g1, tangent(hd, eq17) / n, **TOL)


def test_m_mhs_other_view_neighbours_option():
    n, r = 6, 1.0
    h, hp = pair(n, 5, seed=35)
    hd, hpd = h.detach(), hp.detach()
    dist = torch.sqrt(torch.cdist(hd, hpd).pow(2) + 1e-4).masked_fill(eye(n), float("inf"))
    j, nn_d = dist.argmin(1), dist.amin(1)
    expected = (hpd[j] - r * hpd) / nn_d[:, None] / n
    g1, _ = grad_of("m_mhs", h, hp, m=10.0, r=r, neighbor_view="other", **PAPER_MOD)
    torch.testing.assert_close(g1, tangent(hd, expected), **TOL)


def _global_weights(x, tau):
    e = torch.exp(x @ x.T / tau).masked_fill(eye(x.shape[0]), 0)
    return e / e.sum()


def test_m_barlow_gradient_is_eq6_form():
    n, tau, r = 8, 0.1, 1.5
    h, hp = pair(n, 5, seed=36)
    m = mixed_margin(h, hp)
    hd, hpd = h.detach(), hp.detach()
    d = gd_cross(hd, hpd, m)
    w = _global_weights(hpd, tau)  # weights from the other view, normalised over all k != l
    expected = d[:, None] * (w @ hd - r * w.sum(1, keepdim=True) * hpd)
    g1, g2 = grad_of("m_barlow", h, hp, m=m, temperature=tau, r=r, **PAPER_MOD)
    torch.testing.assert_close(g1, tangent(hd, expected), **TOL)
    # one-directional: h' is not an anchor, its positive term pulls it towards every h_i (no GD gate)
    torch.testing.assert_close(g2, tangent(hpd, -r * w.sum(1, keepdim=True) * hd), **TOL)


def test_m_barlow_symmetric_is_the_sum_of_both_gated_directions():
    n, tau, r = 8, 0.1, 1.5
    h, hp = pair(n, 5, seed=37)
    m = mixed_margin(h, hp)
    hd, hpd = h.detach(), hp.detach()
    d1 = gd_cross(hd, hpd, m)
    assert 0 < gd_cross(hpd, hd, m).sum() < n  # reverse-direction gating is exercised too
    w, w_rev = _global_weights(hpd, tau), _global_weights(hd, tau)
    # own direction, plus the positive of the reverse direction (gradient into h gated by h's own GD)
    expected = d1[:, None] * (
        w @ hd - r * w.sum(1, keepdim=True) * hpd - r * w_rev.sum(1, keepdim=True) * hpd
    )
    g1, _ = grad_of("m_barlow", h, hp, m=m, temperature=tau, r=r, symmetric=True, gd_reference="cross")
    torch.testing.assert_close(g1, tangent(hd, expected), **TOL)


@pytest.mark.parametrize("weight_norm", ["global", "per_anchor"])
def test_m_vicreg_gradient_is_eq19(weight_norm):
    n, tau, r = 8, 0.1, 1.5
    h, hp = pair(n, 5, seed=38)
    m = mixed_margin(h, hp)
    hd, hpd = h.detach(), hp.detach()
    d = gd_cross(hd, hpd, m)
    e = torch.exp(hd @ hd.T / tau).masked_fill(eye(n), 0)
    if weight_norm == "global":
        w, scale = e / e.sum(), 1.0
    else:  # App. E: e^{h_i.h_j/tau} / sum_{k!=i} e^{h_k.h_i/tau}, batch mean
        w, scale = e / e.sum(0)[:, None], 1.0 / n
    expected = d[:, None] * (w @ hd - r * w.sum(1, keepdim=True) * hpd) * scale
    g1, _ = grad_of("m_vicreg", h, hp, m=m, temperature=tau, r=r, weight_norm=weight_norm, **PAPER_MOD)
    torch.testing.assert_close(g1, tangent(hd, expected), **TOL)


def test_m_vicreg_self_gd_reference():
    n = 8
    h, hp = pair(n, 5, seed=39)
    hd = h.detach()
    gaps = 1 - (hd @ hd.T).masked_fill(eye(n), float("-inf")).amax(1)
    m = gaps.median().item() + 1e-9
    d = gd_self(hd, m)
    g1, _ = grad_of("m_vicreg", h, hp, m=m, gd_reference="self", symmetric=False)
    assert torch.equal(g1.norm(dim=-1) > 0, d.bool())


@pytest.mark.parametrize("name", ["m_mhe", "m_mhs", "m_barlow", "m_vicreg", "paradigm"])
def test_modified_losses_report_static_ratio(name):
    h, hp = pair(5, 4, seed=40)
    out = build_loss(name, r=1.3)(h, hp)
    assert out.metrics["ratio"] == pytest.approx(1.3)
    assert 0.0 <= out.metrics["active_share"] <= 1.0


def test_margin_vs_hardest_negative_rule_is_the_same_in_gd_mask_paradigm_mpt_and_diagnostics():
    """GD indicator, MPT's active hinge and the gd_active diagnostic are one rule: positive - hardest negative < m."""
    from hf_cse.losses._paradigm_common import gd_mask
    from hf_cse.losses.base import batch_diagnostics

    h, hp = pair(n=8, d=5, seed=3)
    h, hp = h.detach(), hp.detach()
    s = (h @ hp.T).tolist()
    gaps = [s[i][i] - max(s[i][j] for j in range(8) if j != i) for i in range(8)]
    m = sum(sorted(gaps)[3:5]) / 2  # half of the anchors on each side of the margin
    by_hand = [gap < m for gap in gaps]
    assert 0 < sum(by_hand) < 8  # the batch has both active and inactive anchors, so the check can fail
    share = sum(by_hand) / 8
    assert gd_mask(h, hp, m).tolist() == by_hand
    assert build_loss("paradigm", m=m, **PAPER)(h, hp).metrics["active_share"].item() == pytest.approx(share)
    assert build_loss("mpt", margin=m)(h, hp).metrics["active_share"].item() == pytest.approx(share)
    assert batch_diagnostics(h, hp, m=m)["gd_active"].item() == pytest.approx(share)
