"""The baseline loss of the gradient paradigm of Li et al. (ACL 2024): GD x W x R (eq. 5)."""

from __future__ import annotations

from typing import Literal

import torch

from ..references import GRADIENT_PARADIGM
from ._paradigm_common import (
    hardest_negative_weights,
    paradigm_rows,
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
#: how each direction's per-anchor terms become one number: the authors' code's masked mean over the active
#: anchors' rows, sum / (k N), or the mean over all N anchors, sum / N
Reduction = Literal["active_entry_mean", "anchor_mean"]


@register_loss("paradigm")
class ParadigmLoss(ContrastiveLoss):
    r"""The baseline loss built from gradient dissipation, weight and ratio: GD x W x R.

    Gradient paradigm of Li et al., ACL 2024, eq. 5.

    With unit ``h = z1/|z1|``, ``h' = z2/|z2|``, the paper's one-directional loss of anchor ``h_i``:

    .. math::
        L_i = \mathrm{GD}_i \sum_{j\ne i} W_{ij} \left(h_i^\top h'_j - R\, h_i^\top h'_i\right)

    where GD, W, R carry no gradient, so ``dL_i/dh_i = GD_i sum_{j!=i} W_ij (h'_j - R h'_i)`` (eq. 4).

    * ``gd="indicator"``: ``GD_i = 1[h_i.h'_i - max_{k!=i} h_i.h'_k < m]``; ``"none"``: GD = 1.
    * ``weight="softmax"``: ``W_ij = e^{h_i.h'_j/tau} / sum_{k!=i} e^{h_i.h'_k/tau}`` (no 1/tau factor,
      the weights of each anchor sum to 1); ``"hardest"``: one-hot on ``argmax_{k!=i} h_i.h'_k`` (the
      tau -> 0 limit, MPT's weight).
    * ``R = r`` (static ratio).

    Baseline: ``m = 0.3, tau = 0.05, r = 1``. The paper's Fig. 6: larger m (weaker GD) and larger tau (less
    weight on the hardest negative) hurt, larger r helps (0.25 -> 2).

    **Paper form vs the authors' code; the default is the code's.** The paper's numbers (Fig. 6 sweeps,
    Table 3) were made with the authors' code (``UnderstandingCSE isotropy/models.py``, settings
    ``sg.w_gd.w_w.w_r``), which differs from the printed L_i in two ways, each behind an option:

    * ``symmetric=True`` (default, code): both views are anchors, loss = direction(h, h') + direction(h', h);
      each direction's negative similarities use the detached other view and its positive ``h_i.h'_i``
      carries gradient into both views, so an anchor is pulled to its positive from both directions (the
      code's r acts like an effective paper R of about 2r). ``symmetric=False`` (paper): view-1 anchors
      only, gradient also flows into ``h'`` through every similarity.
    * ``reduction="active_entry_mean"`` (default, code's ``(W * target)[mask].mean()``): each direction is
      ``sum_i L_i / (k N)``, k the number of anchors of that direction whose GD gate is open (a mean over the
      k x N entries of the active rows), so the gradient scale changes from batch to batch (larger when
      few anchors are active). With k = 0 the code takes the mean of an empty tensor (NaN); here the loss
      and its gradient are 0. ``reduction="anchor_mean"`` (paper; it states no reduction): ``sum_i L_i / N``.

    With both defaults the gradient is (GD, k of the view-1 anchors; GD', k' of the view-2 anchors)
    ``dL/dh_i = GD_i/(k N) (sum_{j!=i} W_ij h'_j - r h'_i) - GD'_i r h'_i / (k' N)``: an anchor whose own gate
    is closed is still pulled to its positive by the other direction.
    The paper's one-directional form is ``symmetric=False, reduction="anchor_mean"``. The defaults are the
    code's because the r (and m, tau) values the paper reports were tuned with it.

    Args:
        temperature: tau of the softmax weights (0.05).
        m: GD margin (0.3).
        r: static ratio R (1.0).
        gd: the gradient-dissipation gate (``"indicator"``: an anchor learns while its positive beats its hardest
            negative by less than m; ``"none"``: every anchor learns).
        weight: the weights of an anchor's negatives (``"softmax"`` at temperature tau; ``"hardest"``: one-hot
            on the hardest negative, MPT's).
        symmetric: both views serve as anchors and the two directions' losses are added (True: the authors'
            code, default); False = the paper's one-directional eq. 5.
        reduction: how the anchors' losses are averaged (``"active_entry_mean"``: over the entries of the anchors
            whose gate is open, the authors' code, default; ``"anchor_mean"``: over all N anchors, the paper).

    Example::

        loss_fn = build_loss("paradigm", m=0.3, temperature=0.05, r=1.0)          # the authors' code
        paper = build_loss("paradigm", symmetric=False, reduction="anchor_mean")  # the printed eq. 5
        out = loss_fn(z1, z2)     # out.metrics["active_share"]: share of anchors with GD = 1
    """

    references = (GRADIENT_PARADIGM,)

    hyperparameter_rules = {"temperature": "temperature", "m": "gap_margin", "r": "finite"}
    # the margin is the GD indicator's; the temperature the softmax weights' (the hardest weight has none)
    hyperparameter_needs = {"m": [("gd", "==", "indicator")], "temperature": [("weight", "==", "softmax")]}

    def __init__(
        self,
        temperature: float = 0.05,
        m: float = 0.3,
        r: float = 1.0,
        gd: GradientDissipation = "indicator",
        weight: NegativeWeight = "softmax",
        symmetric: bool = True,
        reduction: Reduction = "active_entry_mean",
    ):
        super().__init__()
        check_choice(self.name, "gd", gd, GradientDissipation)
        check_choice(self.name, "weight", weight, NegativeWeight)
        check_bool(self.name, "symmetric", symmetric)
        check_choice(self.name, "reduction", reduction, Reduction)
        self.temperature = temperature
        self.m = m
        self.r = r
        self.gd = gd
        self.weight = weight
        self.symmetric = symmetric
        self.reduction = reduction

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

    def _direction(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One direction's loss for the similarity matrix ``s`` (anchors in rows), reduced; and its GD."""
        gd, w = self._components(s)
        total = paradigm_rows(s, gd, w, self.r).sum()
        n = s.shape[0]
        if self.reduction == "anchor_mean":
            return total / n, gd
        # the code's (W * target)[mask].mean() = total / (k N); k = 0 leaves total = 0 (every row gated), so
        # clamping k at 1 gives 0 where the code's empty mean is NaN (and no data-dependent shape, no host sync)
        k = gd.sum().clamp_min(1).to(s.dtype)
        return total / (k * n), gd

    @staticmethod
    def _code_similarities(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """The code's matrix: negatives against the detached other view, positive with gradient into both views."""
        s = rows @ cols.detach().T
        align = (rows * cols).sum(-1)
        return torch.where(eye_mask(s.shape[0], s.device), align[:, None], s)

    def compute(self, z1: torch.Tensor, z2: torch.Tensor):
        h, hp = unit(z1), unit(z2)
        if self.symmetric:
            l1, gd1 = self._direction(self._code_similarities(h, hp))
            l2, gd2 = self._direction(self._code_similarities(hp, h))
            return l1 + l2, {"active_share": 0.5 * (gd1.float().mean() + gd2.float().mean()).detach()}
        loss, gd = self._direction(h @ hp.T)
        return loss, {"active_share": gd.float().mean().detach()}

    def paradigm_ratio(self, z1, z2):
        return self.r
