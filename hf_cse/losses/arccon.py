"""ArcCon: InfoNCE with an additive angular margin on the positive (Zhang et al., 2022; as in the gradient
paradigm of Li et al., ACL 2024: eq. 2)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..references import GRADIENT_PARADIGM
from .base import ContrastiveLoss, cosine_matrix, eye_mask, unit
from .registry import register_loss

#: clamp of ``1 - cos^2`` before sqrt: keeps the gradient finite for identical views (cos -> 1).
_SIN2_EPS = 1e-6


def _cos_theta_plus_u(s: torch.Tensor, u_rad: float) -> torch.Tensor:
    """``cos(arccos(s) + u) = s cos u - sqrt(1 - s^2) sin u`` with the sqrt input clamped."""
    sin_theta = torch.sqrt((1 - s * s).clamp_min(_SIN2_EPS))
    return s * math.cos(u_rad) - sin_theta * math.sin(u_rad)


@register_loss("arccon")
class ArcConLoss(ContrastiveLoss):
    r"""ArcCon's pairwise loss: InfoNCE with an additive angular margin on the positive pair.

    As analysed in the gradient paradigm of Li et al., ACL 2024: §2.2 and eq. 2.

    .. math::
        \ell_i = -\log \frac{e^{\cos(\theta_{ii'}+u)/\tau}}
            {e^{\cos(\theta_{ii'}+u)/\tau} + \sum_{j\ne i} e^{h_i^\top h'_j/\tau}},
        \qquad \theta_{ii'} = \arccos(h_i^\top h'_i), \qquad L = \frac1N\sum_i \ell_i

    Paradigm components (the paradigm paper's Table 1): InfoNCE's W, a GD with the margin, and the dynamic ratio
    ``R_i = sin(theta_ii' + u) / sin(theta_ii')`` (> 1 while ``theta + u < pi/2``), reported as
    ``metrics["ratio"]``. ``u = 0`` gives InfoNCE exactly.

    Numerics: ``cos(theta + u)`` is computed as ``s cos u - sqrt(1 - s^2) sin u`` (an identity for
    ``theta`` in [0, pi]) with ``1 - s^2`` clamped at 1e-6, which is the same as clamping the acos input
    but exact at ``u = 0`` and never NaN for identical views (d acos/ds is infinite at +-1; the
    authors' code has no clamp). The original ArcCon also has a triplet term that the paradigm paper ignores (so
    does this loss).

    Args:
        temperature: tau. The paradigm paper's code (UnderstandingCSE) defaults to 1.0 when none is passed; 0.05
            (SimCSE's) is used here, ArcCon's own value is not in the inputs.
        u: angular margin in **degrees** (10, that code's default of 10 pi/180 rad).

    Example::

        loss_fn = build_loss("arccon", temperature=0.05, u=10)
        out = loss_fn(z1, z2)      # out.metrics["ratio"] = mean sin(theta+u)/sin(theta)
    """

    references = (GRADIENT_PARADIGM,)

    hyperparameter_rules = {"temperature": "temperature", "u": "degrees"}

    def __init__(self, temperature: float = 0.05, u: float = 10.0):
        super().__init__()
        self.temperature = temperature
        self.u = u

    def compute(self, z1: torch.Tensor, z2: torch.Tensor):
        s = cosine_matrix(z1, z2)
        eye = eye_mask(s.shape[0], s.device)
        pos = _cos_theta_plus_u(s.diagonal(), math.radians(self.u))
        logits = torch.where(eye, pos[:, None], s) / self.temperature
        labels = torch.arange(s.shape[0], device=s.device)
        return F.cross_entropy(logits, labels), {}

    @torch.no_grad()
    def paradigm_ratio(self, z1, z2):
        s = (unit(z1) * unit(z2)).sum(-1)
        u = math.radians(self.u)
        sin_theta = torch.sqrt((1 - s * s).clamp_min(_SIN2_EPS))
        # sin(theta + u) / sin(theta) = cos u + cos(theta) sin u / sin(theta)
        return (math.cos(u) + s * math.sin(u) / sin_theta).mean().detach()
