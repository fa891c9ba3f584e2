"""Helpers shared by the losses of the gradient paradigm of Li et al. (ACL 2024): paradigm, ArcCon, MPT/MET,
the original and the modified objectives.

Notation of that paper: ``h = normalize(z1)`` are the anchors, ``h' = normalize(z2)`` the
other view; ``S = h h'^T``; the unified gradient paradigm (eq. 4) is

    dL_i/dh_i = GD_i * sum_{j != i} W_ij (h'_j - R_i h'_i)

and eq. 5 is a surrogate loss whose gradient w.r.t. h_i is eq. 4 when GD, W, R carry no gradient.
"""

from __future__ import annotations

from typing import Literal

import torch

from ..errors import CSEError
from ..references import GRADIENT_PARADIGM
from .base import (
    ContrastiveLoss,
    check_bool,
    check_choice,
    eye_mask,
    hardest_negative_gap,
    unit,
)

#: which similarity the GD rule compares with the hardest negative (see :func:`gd_mask`)
GDReference = Literal["cross", "self"]
#: the printed objective or the authors' code (UnderstandingCSE) of an "ineffective" original
Variant = Literal["paper", "code"]
#: how the exponential weights of a modified objective are normalised (see :func:`off_diagonal_log_weights`)
WeightNorm = Literal["global", "per_anchor"]
#: clamp of squared unit-vector distances before sqrt (UnderstandingCSE code uses 1e-4): d >= 0.01, so
#: d/dx sqrt stays finite for identical views or duplicate sentences.
DIST_EPS = 1e-4


def as_ratio(ratio: float | torch.Tensor) -> float | torch.Tensor:
    """Broadcast a per-anchor ratio (N,) against (N, N) matrices; scalars and (N, N) pass through."""
    if isinstance(ratio, torch.Tensor) and ratio.dim() == 1:
        return ratio[:, None]
    return ratio


@torch.no_grad()
def gd_mask(h: torch.Tensor, hp: torch.Tensor, m: float, reference: GDReference = "cross") -> torch.Tensor:
    """The paradigm paper's gradient dissipation indicator ``d_i`` (bool, no gradient).

    * ``"cross"`` (paper eq. 5 / App. E): ``h_i.h'_i - max_{k!=i} h_i.h'_k < m``.
    * ``"self"`` (authors' code for mMHE/mMHS/mB/mV): ``1 - max_{k!=i} h_i.h_k < m`` (the anchor's own
      view, positive similarity replaced by 1).
    """
    if reference == "cross":
        return hardest_negative_gap(h @ hp.T) < m
    if reference == "self":
        return hardest_negative_gap(h @ h.T, positive=torch.ones(h.shape[0], dtype=h.dtype, device=h.device)) < m
    raise CSEError(f"unknown gd_reference {reference!r}")  # pragma: no cover - constructors validate


def gate_rows(h: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """Stop the gradient of the rows whose anchor is inactive (how the paradigm paper applies d_i: §4, App. E)."""
    return torch.where(active[:, None], h, h.detach())


@torch.no_grad()
def softmax_negative_weights(s: torch.Tensor, temperature: float) -> torch.Tensor:
    """``W_ij = e^{s_ij/tau} / sum_{k!=i} e^{s_ik/tau}`` for j != i, ``W_ii = 0`` (no gradient)."""
    eye = eye_mask(s.shape[0], s.device)
    return torch.softmax(s.masked_fill(eye, float("-inf")) / temperature, dim=1)


@torch.no_grad()
def hardest_negative_weights(s: torch.Tensor) -> torch.Tensor:
    """One-hot weights on each row's hardest negative ``argmax_{k!=i} s_ik`` (no gradient)."""
    eye = eye_mask(s.shape[0], s.device)
    j = s.masked_fill(eye, float("-inf")).argmax(dim=1)
    return torch.nn.functional.one_hot(j, s.shape[1]).to(s.dtype)


def paradigm_rows(s: torch.Tensor, gd: torch.Tensor, weights: torch.Tensor,
                  ratio: float | torch.Tensor) -> torch.Tensor:
    """The paradigm paper's eq. 5 per anchor, ``L_i = GD_i sum_{j!=i} W_ij (s_ij - R_i s_ii)`` (N,), for the
    similarity matrix ``s`` (anchors in rows); ``gd``, ``weights`` and ``ratio`` carry no gradient."""
    target = s - as_ratio(ratio) * s.diagonal()[:, None]
    return (gd.to(s.dtype)[:, None] * weights * target).sum(dim=1)


def paradigm_surrogate(
    h: torch.Tensor,
    hp: torch.Tensor,
    gd: torch.Tensor,
    weights: torch.Tensor,
    ratio: float | torch.Tensor,
) -> torch.Tensor:
    """The paradigm paper's eq. 5 averaged over anchors: ``mean_i GD_i sum_{j!=i} W_ij (h_i.h'_j - R_i h_i.h'_i)``.

    ``gd`` (N,), ``weights`` (N, N) with a zero diagonal and ``ratio`` (scalar, (N,) or (N, N)) must not
    require gradient; ``h``/``hp`` are unit vectors. Its gradient w.r.t. ``h_i`` is eq. 4 divided by N.
    Any GD/W/R of its Table 1 can be plugged in (see the tests).
    """
    return paradigm_rows(h @ hp.T, gd, weights, ratio).mean()


def unit_distance(s: torch.Tensor, eps: float = DIST_EPS) -> torch.Tensor:
    """``||a - b|| = sqrt(2 - 2 a.b)`` for unit vectors, clamped at ``sqrt(eps)`` (no NaN/inf gradient)."""
    return torch.sqrt((2 - 2 * s).clamp_min(eps))


def code_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The authors' code's distances from each row of ``a`` to each row of the detached ``b`` (unit vectors):
    ``sqrt(max(2 - 2 a_i.b_j, 0) + eps)``, eps added inside the root (UnderstandingCSE ``mhs``), unlike
    :func:`unit_distance`'s clamp."""
    return torch.sqrt((2 - 2 * (a @ b.detach().T)).clamp_min(0) + DIST_EPS)


def nearest_other(d: torch.Tensor) -> torch.Tensor:
    """Each row's smallest distance in the (N, N) distances ``d`` to another row (the diagonal excluded)."""
    return d.masked_fill(eye_mask(d.shape[0], d.device), float("inf")).amin(dim=1)


def squared_pair_distance(h: torch.Tensor, hp: torch.Tensor) -> torch.Tensor:
    """``||h_i - h'_i||^2 = 2 - 2 h_i.h'_i`` of each row pair of unit vectors (the alignment term's)."""
    return 2 - 2 * (h * hp).sum(-1)


def strict_lower(n: int, device) -> torch.Tensor:
    """The (n, n) mask of the pairs k > l (each unordered pair of different rows once)."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(-1)


class ModifiedObjective(ContrastiveLoss):
    """Shared driver of the paradigm paper's modified objectives (mMHE, mMHS, mB, mV; App. E, Table 2 lower).

    Subclasses implement ``direction(a, b)``: the batch loss with the rows of ``a`` as anchors (already
    GD-gated: inactive rows detached) and ``b`` as the other view. ``symmetric=False`` is the paper's
    one-directional form (anchors = view 1, ``b`` = view 2 as is); ``symmetric=True`` is the authors'
    code (UnderstandingCSE ``isotropy/models.py``, ``*.w_gd.w_w.w_r``): both views are anchors, each view gated
    by its own GD (inactive rows of each view detached), loss = direction(h, h') + direction(h', h).

    **Defaults: the authors' code form** (``symmetric=True``, ``gd_reference="self"``), because the paper's
    numbers (Table 3) were made with that code and its m / tau / r (Tables 4-5) were tuned with it; with the
    paper's one-directional form the same r is about half the pull (the code's r acts like an effective paper
    R of about 2r). The paper's printed form (App. E) is ``symmetric=False, gd_reference="cross"``. The code
    has no masked-mean reduction here (unlike the ``paradigm`` baseline): GD detaches rows and each direction
    is summed (mMHE, mB, mV) or averaged over all N anchors (mMHS), as ``direction`` does.

    The hyperparameters every modified objective shares (each states its defaults, the paper's Table 4):

    Args:
        m: GD margin; anchor i is active (``d_i = 1``) while its positive beats its hardest negative by
            less than m (:func:`gd_mask`).
        temperature: tau of the exponential weights (mMHS has none: None).
        r: static ratio R (Table 2 lower); with ``symmetric=True`` the effective pull is ~2r.
        symmetric: both views serve as anchors and the two directions' losses are added (True: the authors'
            code, default; the effective pull is ~2r); False = the paper's one-directional form (view 1 anchors).
        gd_reference: the view the GD test takes the hardest negative from (``"self"``: the anchor's own view,
            positive similarity 1, the authors' code, default; ``"cross"``: the other view, the paper), see
            :func:`gd_mask`.
    """

    references = (GRADIENT_PARADIGM,)

    hyperparameter_rules = {"m": "gap_margin", "r": "finite", "temperature": "temperature"}

    def __init__(self, m: float, r: float, symmetric: bool, gd_reference: GDReference,
                 temperature: float | None = None):
        super().__init__()
        check_bool(self.name, "symmetric", symmetric)
        check_choice(self.name, "gd_reference", gd_reference, GDReference)
        if gd_reference == "self" and m <= 0:  # the self gap 1 - max_k h_i.h_k is never below 0
            raise CSEError(f"{self.name}: m must be > 0 with gd_reference 'self', got {m!r}: the gap it gates, "
                           "1 - max_k h_i.h_k, is never below 0, so no anchor would be active and nothing would "
                           "train. Give m > 0 (the paper's 0.3), or gd_reference 'cross'.",
                           fields=("m", "gd_reference"))
        self.m = m
        self.r = r
        self.symmetric = symmetric
        self.gd_reference = gd_reference
        if temperature is not None:  # no attribute otherwise: diagnostics then use SimCSE's 0.05
            self.temperature = temperature

    def direction(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def compute(self, z1: torch.Tensor, z2: torch.Tensor):
        h, hp = unit(z1), unit(z2)
        d1 = gd_mask(h, hp, self.m, self.gd_reference)
        if not self.symmetric:
            loss = self.direction(gate_rows(h, d1), hp)
            return loss, {"active_share": d1.float().mean().detach()}
        d2 = gd_mask(hp, h, self.m, self.gd_reference)
        hg, hpg = gate_rows(h, d1), gate_rows(hp, d2)
        loss = self.direction(hg, hpg) + self.direction(hpg, hg)
        return loss, {"active_share": 0.5 * (d1.float().mean() + d2.float().mean()).detach()}

    def paradigm_ratio(self, z1, z2):
        return self.r  # static ratio (Table 2 lower); with symmetric=True the effective pull is ~2r

    def weighted_terms(self, a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Per anchor, ``-r (sum_{j!=i} w_ij) a_i.b_i + sum_{j!=i} w_ij a_i.sg(a_j)`` for detached weights ``w``
        with a zero diagonal: the body of mB (eq. 6) and mV (eq. 13), whose weights differ."""
        neg = (w * (a @ a.detach().T)).sum(-1)
        pos = self.r * w.sum(-1) * (a * b).sum(-1)
        return neg - pos


def off_diagonal_log_weights(s: torch.Tensor, temperature: float, norm: WeightNorm) -> torch.Tensor:
    """log of ``e^{s_ij/tau}`` normalised over all off-diagonal pairs (``"global"``) or per row
    (``"per_anchor"``), ``-inf`` on the diagonal; no gradient."""
    s = s.detach() / temperature
    s = s.masked_fill(eye_mask(s.shape[0], s.device), float("-inf"))
    if norm == "global":
        return s - torch.logsumexp(s.flatten(), dim=0)
    return s - torch.logsumexp(s, dim=1, keepdim=True)
