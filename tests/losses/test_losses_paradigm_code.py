"""The gradient-paradigm losses' defaults against the authors' code (UnderstandingCSE ``isotropy/models.py``), as the
project's spec transcribes it (methods_spec §8.2, §12.2, §13.3, §14.3): ``paradigm`` (``sg.w_gd.w_w.w_r``), its
``reduction`` option, and the modified objectives mMHE, mMHS, mB, mV (``*.w_gd.w_w.w_r``). Float64, small random
unit vectors; the paper forms are checked in ``test_losses_paradigm.py``."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hf_cse.losses import build_loss

D64 = torch.float64
TOL = dict(rtol=1e-9, atol=1e-12)


def pair(n, d, seed, noise=0.6):
    g = torch.Generator().manual_seed(seed)
    h = F.normalize(torch.randn(n, d, generator=g, dtype=D64), dim=-1)
    hp = F.normalize(h + noise * torch.randn(n, d, generator=g, dtype=D64), dim=-1)
    return h, hp


def leaves(*xs):
    return [x.detach().clone().requires_grad_(True) for x in xs]


def value_and_grads(fn, h, hp):
    """Value and gradients at the unit vectors h, h' of ``fn`` applied, as in the code (``_organize_embedding``),
    to ``F.normalize`` of its inputs (so a radial term has no gradient in either implementation)."""
    a, b = leaves(h, hp)
    loss = fn(F.normalize(a, dim=-1), F.normalize(b, dim=-1))
    loss.backward()
    return loss.detach(), a.grad, b.grad


def ours(name, **kw):
    return lambda a, b: build_loss(name, **kw)(a, b).loss


def tangent(h, g):
    return g - (g * h).sum(-1, keepdim=True) * h


def eye(n):
    return torch.eye(n, dtype=D64)


def gap_median(s, positive=None):
    """A margin with about half of the anchors active (the gating is exercised, k strictly between 0 and N)."""
    pos = s.diagonal() if positive is None else positive
    gaps = pos - (s - 1e8 * eye(s.shape[0])).amax(1)
    return gaps.median().item() + 1e-9


# ------------------------------------------------------------------ paradigm: the code's sg.w_gd.w_w.w_r (§8.2)


def code_sg(e0, e1, m, tau, r):
    """Transcription of the spec's §8.2 pseudo-code of ``isotropy/models.py:271-300``."""
    n = e0.shape[0]
    big = 1e8 * eye(n)
    M = e0.detach() @ e1.detach().T
    mask0 = M.diagonal() - (M - big).max(dim=1).values < m   # view-0 anchors, row-wise
    mask1 = M.diagonal() - (M - big).max(dim=0).values < m   # view-1 anchors, column-wise
    align = (e0 * e1).sum(-1)                                # not detached on either side

    def half(rows, cols_det, mask):
        S = rows @ cols_det.T
        S = torch.diagonal_scatter(S, align)
        target = S - r * torch.diag(S)[:, None]
        W = torch.softmax((S - big).detach() / tau, dim=-1)
        return (W * target)[mask].mean()

    return half(e0, e1.detach(), mask0) + half(e1, e0.detach(), mask1)


@pytest.mark.parametrize("seed,tau,r", [(0, 0.05, 1.0), (1, 0.1, 1.5), (2, 0.5, 0.75)])
def test_paradigm_defaults_are_the_authors_code(seed, tau, r):
    h, hp = pair(8, 6, seed)
    m = gap_median(h @ hp.T)
    code = value_and_grads(lambda a, b: code_sg(a, b, m, tau, r), h, hp)
    got = value_and_grads(ours("paradigm", m=m, temperature=tau, r=r), h, hp)
    s = h @ hp.T
    k0 = (s.diagonal() - (s - 1e8 * eye(8)).amax(1) < m).sum()
    k1 = (s.diagonal() - (s - 1e8 * eye(8)).amax(0) < m).sum()
    assert 0 < k0 < 8 and 0 < k1 < 8  # both directions have active and inactive anchors
    for c, g in zip(code, got):
        torch.testing.assert_close(g, c, **TOL)


def test_paradigm_defaults_are_symmetric_with_the_code_reduction():
    from hf_cse.losses import get_loss_class

    loss_fn = get_loss_class("paradigm")()
    assert loss_fn.symmetric is True and loss_fn.reduction == "active_entry_mean"


def test_paradigm_code_gradient_closed_form():
    """§8.2: d/dh_i = mask0_i/(k0 N) (sum_j W_ij h'_j - r h'_i) - mask1_i r h'_i / (k1 N)."""
    n, tau, r = 8, 0.1, 1.25
    h, hp = pair(n, 5, 3)
    m = gap_median(h @ hp.T)
    s = h @ hp.T
    off = eye(n).bool()
    mask0 = (s.diagonal() - s.masked_fill(off, -math.inf).amax(1) < m).to(D64)
    mask1 = (s.diagonal() - s.masked_fill(off, -math.inf).amax(0) < m).to(D64)
    w0 = torch.softmax(s.masked_fill(off, -math.inf) / tau, dim=1)
    k0, k1 = mask0.sum(), mask1.sum()
    expected = mask0[:, None] / (k0 * n) * (w0 @ hp - r * hp) - (r * mask1 / (k1 * n))[:, None] * hp
    _, g1, _ = value_and_grads(ours("paradigm", m=m, temperature=tau, r=r), h, hp)
    torch.testing.assert_close(g1, tangent(h, expected), **TOL)


def test_paradigm_active_entry_mean_is_sum_over_k_n_by_hand():
    """One direction (the paper's L_i) reduced as the code reduces: sum over the active anchors / (k N)."""
    n, tau, r = 7, 0.2, 1.5
    h, hp = pair(n, 5, 4)
    m = gap_median(h @ hp.T)
    s = (h @ hp.T).tolist()
    active = [s[i][i] - max(s[i][j] for j in range(n) if j != i) < m for i in range(n)]
    k = sum(active)
    assert 0 < k < n
    total, grad = 0.0, torch.zeros_like(h)
    for i in range(n):
        if not active[i]:
            continue
        e = {j: math.exp(s[i][j] / tau) for j in range(n) if j != i}
        z = sum(e.values())
        for j, ej in e.items():
            total += ej / z * (s[i][j] - r * s[i][i])
            grad[i] += ej / z * (hp[j] - r * hp[i])
    loss, g1, _ = value_and_grads(
        ours("paradigm", m=m, temperature=tau, r=r, symmetric=False, reduction="active_entry_mean"), h, hp
    )
    assert math.isfinite(loss.item())
    assert loss.item() == pytest.approx(total / (k * n), rel=1e-12, abs=1e-14)
    torch.testing.assert_close(g1, tangent(h, grad / (k * n)), **TOL)
    # the paper's anchor_mean is the same sum over N: k times the code's value
    paper = build_loss("paradigm", m=m, temperature=tau, r=r, symmetric=False, reduction="anchor_mean")(h, hp).loss
    assert paper.item() == pytest.approx(total / n, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("symmetric", [True, False])
def test_paradigm_active_entry_mean_with_no_active_anchor_is_zero_not_nan(symmetric):
    h, hp = pair(6, 5, 5)
    assert torch.isnan(code_sg(h, hp, -10.0, 0.05, 1.0))  # the code's mean of an empty tensor
    a, b = leaves(h, hp)
    out = build_loss("paradigm", m=-1.999, symmetric=symmetric, reduction="active_entry_mean")(a, b)  # < every gap
    out.loss.backward()
    assert out.loss.item() == 0.0 and out.metrics["active_share"].item() == 0.0
    assert a.grad.abs().max() == 0 and b.grad.abs().max() == 0


# ------------------------------------------------------------------ modified objectives: the code's *.w_gd.w_w.w_r


def code_gate(e, m):
    """§12.2 (1): self-view GD, positive replaced by 1; inactive rows replaced by their detached copy."""
    M = (e @ e.T).detach()
    active = 1 - (M - 1e8 * eye(e.shape[0])).max(dim=1).values < m
    return torch.where(active[:, None], e, e.detach()), active


def code_weighted_alignment(u1, u2, weights_from, tau, r):
    """§13.3 ``_bt_loss`` (``w_w`` and ``w_r``, lam = 1; weights from the other view, ``weights_from=u2``) and §14.3
    ``_vicreg_loss`` (the same skeleton, weights from the anchor's own view, ``weights_from=u1``)."""
    off = 1 - eye(u1.shape[0])
    Wt = (weights_from.detach() @ weights_from.detach().T / tau).exp()
    Wt = Wt / (Wt * off).sum()
    neg = (Wt * (u1 @ u1.detach().T)).sum(-1)
    pos = r * (Wt * off).sum(-1) * -(u1 * u2).sum(-1)
    return (pos + neg).sum()


def code_mhe(e0, e1, tau, r):
    """§12.2: u_0 + u_1 and the alignment 2 - 2 e0.e1 weighted by r (w0_i + w1_i) / 2, weights detached."""
    n = e0.shape[0]
    low = torch.ones(n, n, dtype=torch.bool).tril(-1)

    def u_and_w(e):
        s = e @ e.T / tau
        lse = torch.logsumexp(s[low], 0)
        w = (torch.logsumexp(s.detach().masked_fill(eye(n).bool(), -math.inf), 1) - lse.detach()).exp() / tau
        return lse, w

    u0, w0 = u_and_w(e0)
    u1, w1 = u_and_w(e1)
    return u0 + u1 + (r * (w0 + w1) / 2 * (2 - 2 * (e0 * e1).sum(-1))).sum()


def code_mhs(e0, e1, r):
    """§12.1-12.2: nearest neighbour among the detached other view, sqrt(. + 1e-4); both directions, batch means."""
    n = e0.shape[0]
    align = 2 - 2 * (e0 * e1).sum(-1)

    def half(a, b):
        D = ((a[:, None] - b.detach()[None]) ** 2).sum(-1).add(1e-4).sqrt()
        nearest = (D + 1e8 * eye(n)).amin(1)
        return (r / (2 * nearest.detach()) * align - nearest).mean()

    return half(e0, e1) + half(e1, e0)


def mixed_self_margin(h, hp):
    """A margin of the self-view rule with both views' gates mixed."""
    def gaps(e):
        return 1 - ((e @ e.T) - 1e8 * eye(e.shape[0])).amax(1)
    g = torch.cat([gaps(h), gaps(hp)])
    return g.median().item() + 1e-9


def code_form(name, tau, r, m):
    def fn(a, b):
        g0, _ = code_gate(a, m)
        g1, _ = code_gate(b, m)
        if name == "m_barlow":
            return code_weighted_alignment(g0, g1, g1, tau, r) + code_weighted_alignment(g1, g0, g0, tau, r)
        if name == "m_vicreg":
            return code_weighted_alignment(g0, g1, g0, tau, r) + code_weighted_alignment(g1, g0, g1, tau, r)
        if name == "m_mhe":
            return code_mhe(g0, g1, tau, r)
        return code_mhs(g0, g1, r)
    return fn


def code_extra_value(name, h, hp, tau):
    """What the code's value has beyond ours: the kept self-pair sum_i w_ii (mB, mV), the constants of L^u (mMHE)."""
    n = h.shape[0]
    if name in ("m_barlow", "m_vicreg"):
        def diag_sum(e):
            x = (e @ e.T / tau).exp()
            return (x.diagonal().sum() / (x * (1 - eye(n))).sum()).item()
        return diag_sum(h) + diag_sum(hp)
    if name == "m_mhe":
        return 2 * (1 / tau - math.log(2 / (n * (n - 1))))
    return 0.0


@pytest.mark.parametrize("name", ["m_mhe", "m_mhs", "m_barlow", "m_vicreg"])
def test_modified_defaults_are_the_authors_code(name):
    n, tau, r = 8, 0.1, 1.5
    h, hp = pair(n, 5, 10)
    m = mixed_self_margin(h, hp)
    _, a0 = code_gate(h, m)
    _, a1 = code_gate(hp, m)
    assert 0 < a0.sum() < n and 0 < a1.sum() < n  # both views' gates are exercised
    kw = {"m": m, "r": r} if name == "m_mhs" else {"m": m, "r": r, "temperature": tau}
    code = value_and_grads(code_form(name, tau, r, m), h, hp)
    got = value_and_grads(ours(name, **kw), h, hp)
    # the code's extra terms are radial (w_ii h_i.sg(h_i), no gradient through the normalisation) or constant
    torch.testing.assert_close(got[1], code[1], **TOL)
    torch.testing.assert_close(got[2], code[2], **TOL)
    assert code[0].item() == pytest.approx(got[0].item() + code_extra_value(name, h, hp, tau), rel=1e-10)


@pytest.mark.parametrize("name", ["m_mhe", "m_mhs", "m_barlow", "m_vicreg"])
def test_modified_defaults_are_symmetric_with_the_self_view_gd(name):
    from hf_cse.losses import get_loss_class

    loss_fn = get_loss_class(name)()
    assert loss_fn.symmetric is True and loss_fn.gd_reference == "self"
    if name == "m_mhs":
        assert loss_fn.neighbor_view == "other"


@pytest.mark.parametrize("name", ["m_mhe", "m_mhs", "m_barlow", "m_vicreg"])
def test_modified_code_form_with_every_gate_closed_moves_nothing(name):
    """Both views gated (the code detaches inactive rows of each view): no gradient reaches either view."""
    h, hp = pair(6, 5, 11)
    _, g1, g2 = value_and_grads(ours(name, m=1e-9), h, hp)  # the self gap 1 - max_k h_i.h_k is above it
    assert g1.abs().max() == 0 and g2.abs().max() == 0
