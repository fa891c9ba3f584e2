"""Alignment + MHE uniformity (Wang & Isola 2020) as analysed in the gradient paradigm of Li et al. (ACL 2024), §4
(the "ineffective" original)."""

from __future__ import annotations

import math

import torch

from ..references import GRADIENT_PARADIGM
from ._paradigm_common import Variant, squared_pair_distance, strict_lower
from .base import ContrastiveLoss, check_choice, eye_mask, unit
from .registry import register_loss


@register_loss("align_uniform_mhe")
class AlignUniformMHELoss(ContrastiveLoss):
    r"""Alignment plus MHE uniformity (minimum hyperspherical energy), ``L^a + nu * L^{u,MHE}``.

    Gradient paradigm of Li et al., ACL 2024: §4, gradients eq. 7-8, Table 2 upper.

    .. math::
        L^a = \frac1N \sum_i \|h_i - h'_i\|^2, \qquad
        L^{u,MHE} = \log \frac{2}{N(N-1)} \sum_{1\le k<l\le N} e^{-\|h_k - h_l\|^2}

    with unit ``h = z1/|z1|`` (uniformity within view 1 only), ``h' = z2/|z2|``. Tangential gradient:
    ``-(2/N) h'_i + nu sum_{j!=i} 2 e^{2 h_i.h_j} h_j / sum_{k<l} e^{2 h_k.h_l}``; paradigm (Table 2):
    GD = 1, ``W_ij = 2 nu e^{2 h_i.h_j}/sum_{k<l} e^{2 h_k.h_l}``,
    ``R_i = sum_{k<l} e^{2 h_k.h_l} / (nu N sum_{k!=i} e^{2 h_i.h_k})`` (``metrics["ratio"]``, mean over i).

    ``variant="code"`` (default) is the authors' code (UnderstandingCSE ``mhe``): uniformity of *both* views with
    ``e^{h_k.h_l}`` (Wang & Isola t = 1/2 instead of t = 1, no constant):
    ``mean_i ||h_i - h'_i||^2 + nu (lse_{k<l} h_k.h_l + lse_{k<l} h'_k.h'_l)``;
    the paradigm paper's "ori MHE" numbers (Figure 1; the gains in Table 3) were produced by that code, hence the
    default. ``variant="paper"`` is the printed objective above (the default before 2026-11-30).

    Args:
        nu: uniformity weight nu^u (10, the authors' scripts).
        variant: the authors' code's objective or the printed one (``"code"``: the authors' code's, default,
            uniformity of both views with ``e^{h_k.h_l}``, which made the paper's "ori MHE" numbers;
            ``"paper"``: the printed one).

    Example::

        out = build_loss("align_uniform_mhe", nu=10.0)(z1, z2)   # metrics: alignment, uniformity
    """

    references = (GRADIENT_PARADIGM,)

    hyperparameter_rules = {"nu": "non_negative"}

    def __init__(self, nu: float = 10.0, variant: Variant = "code"):
        super().__init__()
        check_choice(self.name, "variant", variant, Variant)
        self.nu = nu
        self.variant = variant

    def compute(self, z1: torch.Tensor, z2: torch.Tensor):
        h, hp = unit(z1), unit(z2)
        n = h.shape[0]
        low = strict_lower(n, h.device)
        align = squared_pair_distance(h, hp).mean()
        if self.variant == "paper":
            # -||h_k - h_l||^2 = 2 h_k.h_l - 2 for unit vectors
            uniform = torch.logsumexp((2 * (h @ h.T) - 2)[low], dim=0) + math.log(2 / (n * (n - 1)))
        else:
            uniform = torch.logsumexp((h @ h.T)[low], dim=0) + torch.logsumexp((hp @ hp.T)[low], dim=0)
        loss = align + self.nu * uniform
        return loss, {"alignment": align.detach(), "uniformity": uniform.detach()}

    @torch.no_grad()
    def paradigm_ratio(self, z1, z2):
        if self.nu == 0:
            return None
        h = unit(z1)
        n = h.shape[0]
        t = 2.0 if self.variant == "paper" else 1.0
        s = t * (h @ h.T)
        lse_pairs = torch.logsumexp(s[strict_lower(n, h.device)], dim=0)
        lse_rows = torch.logsumexp(s.masked_fill(eye_mask(n, h.device), float("-inf")), dim=1)
        # paper: sum_{k<l} / (nu N sum_{k!=i});
        # code (W = nu e^{s} / sum_{k<l}, positive pull 2/N): 2 sum_{k<l} / (nu N sum_{k!=i})
        scale = 1.0 if self.variant == "paper" else 2.0
        return (scale * torch.exp(lse_pairs - lse_rows) / (self.nu * n)).mean().detach()
