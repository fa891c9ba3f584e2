"""The baseline loss of the gradient paradigm of Li et al. (ACL 2024): GD x W x R (eq. 5)."""

from __future__ import annotations

from typing import Literal

import torch

from ..references import GRADIENT_PARADIGM
from ._paradigm_common import (
    hardest_negative_weights,
    paradigm_surrogate,
    softmax_negative_weights,
)
from .base import (
    ContrastiveLoss,
    check_bool,
    check_choice,
    eye_mask,
    hardest_negative_gap,
    unit,
)
from .registry import register_loss

GradientDissipation = Literal["indicator", "none"]
NegativeWeight = Literal["softmax", "hardest"]


@register_loss("paradigm")
class ParadigmLoss(ContrastiveLoss):
    r"""The baseline loss built from gradient dissipation, weight and ratio: GD x W x R.

    Gradient paradigm of Li et al., ACL 2024, eq. 5.

    With unit ``h = z1/|z1|``, ``h' = z2/|z2|``:

    .. math::
        L_i = \mathrm{GD}_i \sum_{j\ne i} W_{ij} \left(h_i^\top h'_j - R\, h_i^\top h'_i\right),
        \qquad L = \frac1N \sum_i L_i

    where GD, W, R carry no gradient, so ``dL_i/dh_i = GD_i sum_{j!=i} W_ij (h'_j - R h'_i)`` (eq. 4).

    * ``gd="indicator"``: ``GD_i = 1[h_i.h'_i - max_{k!=i} h_i.h'_k < m]``; ``"none"``: GD = 1.
    * ``weight="softmax"``: ``W_ij = e^{h_i.h'_j/tau} / sum_{k!=i} e^{h_i.h'_k/tau}`` (no 1/tau factor,
      the weights of each anchor sum to 1); ``"hardest"``: one-hot on ``argmax_{k!=i} h_i.h'_k`` (the
      tau -> 0 limit, MPT's weight).
    * ``R = r`` (static ratio).

    Baseline: ``m = 0.3, tau = 0.05, r = 1``. The paper's Fig. 6: larger m (weaker GD) and larger tau (less
    weight on the hardest negative) hurt, larger r helps (0.25 -> 2).

    ``symmetric=False`` (default) is the paper's one-directional L_i with view-1 anchors; gradient also
    flows into ``h'`` through every similarity. ``symmetric=True`` reproduces the authors' code
    (``UnderstandingCSE isotropy/models.py``, ``sg.w_gd.w_w.w_r``): both views are anchors, the negative
    similarities use the detached other view, the positive ``h_i.h'_i`` carries gradient into both
    views, so an anchor is pulled to its positive from both directions (effective paper ratio ~ 2r).
    In both modes the batch reduction is the mean over the N anchors (sum / N). The authors' code,
    ``(W * target)[mask].mean()``, averages each direction over the *active* anchors only (sum / (k N), k the
    number of anchors whose GD gate is open), so its gradient scale changes from batch to batch (larger when
    few anchors are active); here it does not: this loss and its gradient are the code's times k.

    Args:
        temperature: tau of the softmax weights (0.05).
        m: GD margin (0.3).
        r: static ratio R (1.0).
        gd: ``"indicator"`` or ``"none"``.
        weight: ``"softmax"`` or ``"hardest"``.
        symmetric: see above.

    Example::

        loss_fn = build_loss("paradigm", m=0.3, temperature=0.05, r=1.0)
        out = loss_fn(z1, z2)     # out.metrics["active_share"]: share of anchors with GD = 1
    """

    references = (GRADIENT_PARADIGM,)

    hyperparameter_rules = {"temperature": "positive", "m": "finite", "r": "finite"}

    def __init__(
        self,
        temperature: float = 0.05,
        m: float = 0.3,
        r: float = 1.0,
        gd: GradientDissipation = "indicator",
        weight: NegativeWeight = "softmax",
        symmetric: bool = False,
    ):
        super().__init__()
        check_choice(self.name, "gd", gd, GradientDissipation)
        check_choice(self.name, "weight", weight, NegativeWeight)
        check_bool(self.name, "symmetric", symmetric)
        self.temperature = temperature
        self.m = m
        self.r = r
        self.gd = gd
        self.weight = weight
        self.symmetric = symmetric

    def _components(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GD (N,) and W (N, N) of the anchors of the rows of the similarity matrix ``s`` (no grad)."""
        s = s.detach()
        if self.gd == "indicator":
            gd = hardest_negative_gap(s) < self.m
        else:
            gd = torch.ones(s.shape[0], dtype=torch.bool, device=s.device)
        w = (
            softmax_negative_weights(s, self.temperature)
            if self.weight == "softmax"
            else hardest_negative_weights(s)
        )
        return gd, w

    def _code_direction(self, rows: torch.Tensor, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = rows @ cols.detach().T
        align = (rows * cols).sum(-1)  # positive: gradient into both views
        s = torch.where(eye_mask(s.shape[0], s.device), align[:, None], s)
        gd, w = self._components(s)
        target = s - self.r * s.diagonal()[:, None]
        return (gd.to(s.dtype)[:, None] * w * target).sum(dim=1).mean(), gd

    def compute(self, z1: torch.Tensor, z2: torch.Tensor):
        h, hp = unit(z1), unit(z2)
        if self.symmetric:
            l1, gd1 = self._code_direction(h, hp)
            l2, gd2 = self._code_direction(hp, h)
            return l1 + l2, {"active_share": 0.5 * (gd1.float().mean() + gd2.float().mean()).detach()}
        gd, w = self._components(h @ hp.T)
        loss = paradigm_surrogate(h, hp, gd, w, self.r)
        return loss, {"active_share": gd.float().mean().detach()}

    def paradigm_ratio(self, z1, z2):
        return self.r
