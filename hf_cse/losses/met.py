"""MET: margin triplet loss with Euclidean distance (Nie et al., ICLR 2023; as in the gradient paradigm of
Li et al., ACL 2024: eq. 3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..references import GRADIENT_PARADIGM
from ._paradigm_common import DIST_EPS, unit_distance
from .base import ContrastiveLoss, cosine_matrix, eye_mask
from .registry import register_loss


@register_loss("met")
class METLoss(ContrastiveLoss):
    r"""Margin triplet loss on the Euclidean distance of unit vectors (gradient paradigm of Li et al., ACL 2024: §2.2).

    .. math::
        \ell_i = \max\big(0,\ d_{ii'} - \min_{j\ne i} d_{ij'} + m\big), \qquad
        d_{ij'} = \|h_i - h'_j\| = \sqrt{2 - 2 h_i^\top h'_j}, \qquad L = \frac1N\sum_i \ell_i

    Gradient (eq. 3): ``1[.] (h'_j*/d_ij* - h'_i/d_ii)``; exact w.r.t. unit vectors because ``d`` is
    computed as ``sqrt(2 - 2 cos)`` (as the paradigm paper's code, UnderstandingCSE); written as ``||h - h'||`` it
    carries an extra
    radial term ``h_i (1/d_ii - 1/d_ij*)`` that the tangent projection removes. Paradigm (Table 1):
    indicator GD, ``W = 1/d_ij*`` on the hardest negative, dynamic ratio ``R_i = d_ij*/d_ii`` (reported
    as ``metrics["ratio"]``).

    Numerics and code differences: ``2 - 2 cos`` is clamped at 1e-4 before the sqrt (UnderstandingCSE code;
    Nie et al.'s ICLR ``margin_e_loss`` has no clamp, so identical views give NaN gradients). Hardest
    negative row-wise with ``+inf`` masking (the ICLR code uses ``min(dim=0)`` with the diagonal set to 2).

    Args:
        margin: the hinge's margin m on the distance gap (0.44: Nie et al.'s ``run_unsup_example.sh``, which
            their README gives to replicate MET on BERT-base, the numbers the gradient paradigm paper's Table 3
            reports; both codes' argument default is 0.45).

    Example::

        out = build_loss("met", margin=0.44)(z1, z2)    # out.metrics["ratio"] = mean d_ij*/d_ii
    """

    references = (GRADIENT_PARADIGM,)

    hyperparameter_rules = {"margin": "gap_margin"}

    def __init__(self, margin: float = 0.44):
        super().__init__()
        self.margin = margin

    @staticmethod
    def _distances(z1, z2):
        d = unit_distance(cosine_matrix(z1, z2), DIST_EPS)
        nearest_neg = d.masked_fill(eye_mask(d.shape[0], d.device), float("inf")).amin(dim=1)
        return d.diagonal(), nearest_neg

    def compute(self, z1: torch.Tensor, z2: torch.Tensor):
        pos, neg = self._distances(z1, z2)
        per_anchor = F.relu(pos - neg + self.margin)
        return per_anchor.mean(), {"active_share": (per_anchor.detach() > 0).float().mean().detach()}

    @torch.no_grad()
    def paradigm_ratio(self, z1, z2):
        pos, neg = self._distances(z1, z2)
        return (neg / pos).mean().detach()
