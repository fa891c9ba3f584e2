"""Alignment + MHS uniformity (maximum hyperspherical separation) as analysed in the gradient paradigm of
Li et al. (ACL 2024), §4."""

from __future__ import annotations

import torch

from ..references import GRADIENT_PARADIGM
from ._paradigm_common import Variant, code_distance, nearest_other, squared_pair_distance, unit_distance
from .base import ContrastiveLoss, check_choice, unit
from .registry import register_loss


@register_loss("align_uniform_mhs")
class AlignUniformMHSLoss(ContrastiveLoss):
    r"""Alignment plus MHS uniformity (maximum hyperspherical separation), ``L^a + nu * (1/N) sum_i L_i^{u,MHS}``.

    Gradient paradigm of Li et al., ACL 2024: §4, gradients eq. 7 and 9.

    .. math::
        L^a = \frac1N \sum_i \|h_i - h'_i\|^2, \qquad L_i^{u,MHS} = -\min_{j\ne i} \|h_i - h_j\|

    with unit ``h = z1/|z1|`` (nearest neighbour within view 1; gradient reaches both the anchor and
    its neighbour), ``h' = z2/|z2|``. Per anchor (eq. 9): ``dL_i^u/dh_i = h_j / ||h_i - h_j||``
    (tangentially). Paradigm (Table 2): GD = 1, ``W = nu/||h_i - h_j||`` on the nearest neighbour,
    ``R_i = 2 ||h_i - h_j|| / (nu N)`` (``metrics["ratio"]``). Distances are ``sqrt(2 - 2 cos)`` with
    ``2 - 2 cos`` clamped at 1e-4 (duplicate sentences give distance 0).

    ``variant="code"`` (default) is the authors' code (UnderstandingCSE ``mhs``, which produced the paper's "ori
    MHS" numbers, hence the default): nearest neighbours are taken in the *other*, detached view,
    ``d = sqrt(||h_i - sg(h'_j)||^2 + 1e-4)``, for both views:
    ``mean_i ||h_i - h'_i||^2 + nu (mean_i u0_i + mean_i u1_i)``. ``variant="paper"`` is the printed objective
    above (the default before 2026-11-30).

    Args:
        nu: uniformity weight nu^u (1, the authors' scripts).
        variant: the authors' code's objective or the printed one (``"code"``: the authors' code's, default,
            nearest neighbours in the other, detached view for both views, which made the paper's "ori MHS"
            numbers; ``"paper"``: the printed one).

    Example::

        out = build_loss("align_uniform_mhs", nu=1.0)(z1, z2)
    """

    references = (GRADIENT_PARADIGM,)

    hyperparameter_rules = {"nu": "non_negative"}

    def __init__(self, nu: float = 1.0, variant: Variant = "code"):
        super().__init__()
        check_choice(self.name, "variant", variant, Variant)
        self.nu = nu
        self.variant = variant

    def _nearest(self, h: torch.Tensor, hp: torch.Tensor) -> torch.Tensor:
        return nearest_other(unit_distance(h @ h.T) if self.variant == "paper" else code_distance(h, hp))

    def compute(self, z1: torch.Tensor, z2: torch.Tensor):
        h, hp = unit(z1), unit(z2)
        align = squared_pair_distance(h, hp).mean()
        uniform = -self._nearest(h, hp).mean()
        if self.variant == "code":
            uniform = uniform - nearest_other(code_distance(hp, h)).mean()
        loss = align + self.nu * uniform
        return loss, {"alignment": align.detach(), "uniformity": uniform.detach()}

    @torch.no_grad()
    def paradigm_ratio(self, z1, z2):
        if self.nu == 0:
            return None
        h, hp = unit(z1), unit(z2)
        return (2 * self._nearest(h, hp) / (self.nu * h.shape[0])).mean().detach()
