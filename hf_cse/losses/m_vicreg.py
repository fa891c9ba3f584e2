"""mV: VICReg made effective with GD, exponential weights and a static ratio (gradient paradigm of
Li et al., ACL 2024: eq. 13 and 19)."""

from __future__ import annotations

import torch

from ._paradigm_common import GDReference, ModifiedObjective, WeightNorm, off_diagonal_log_weights
from .base import check_choice
from .registry import register_loss


@register_loss("m_vicreg")
class ModifiedVICRegLoss(ModifiedObjective):
    r"""Modified VICReg (gradient paradigm of Li et al., ACL 2024: App. E eq. 13, gradient eq. 19, Table 2 lower).

    With unit ``h = z1/|z1|`` (anchors), ``h' = z2/|z2|``, GD indicator ``d_i`` (applied by stopping the
    gradient of inactive anchors) and detached weights from the anchor's *own* view:

    .. math::
        L_i = d_i\Big(-r \big(\textstyle\sum_{j\ne i} w_{ij}\big) h_i^\top h'_i
              + \sum_{j\ne i} w_{ij}\, h_i^\top \mathrm{sg}(h_j)\Big),
        \qquad \frac{\partial L_i}{\partial h_i} = d_i \sum_{j\ne i} w_{ij} (h_j - r h'_i)

    * ``weight_norm="global"`` (default; Table 2 and the authors' code):
      ``w_ij = e^{h_i.h_j/tau} / sum_{k!=l} e^{h_k.h_l/tau}``; batch loss ``L = sum_i L_i`` (as the code).
    * ``weight_norm="per_anchor"`` (App. E and eq. 19):
      ``w_ij = e^{h_i.h_j/tau} / sum_{k!=i} e^{h_k.h_i/tau}``; batch loss ``L = mean_i L_i`` (each
      anchor's weights sum to 1, so the mean keeps the scale comparable to the global form).

    ``symmetric=True`` = authors' code (both views anchors, summed); ``gd_reference="self"`` = the
    code's GD rule. ``h_j`` in the negative term is detached, ``h'_i`` in the positive receives gradient.

    Defaults are the authors' code form (``vicreg.w_gd.w_w.w_r``, ``_vicreg_loss``: ``symmetric=True``,
    ``gd_reference="self"``, ``weight_norm="global"``), with which the paper's Table 3 numbers were made and its
    r tuned (see :class:`ModifiedObjective`); the App. E form is ``symmetric=False, gd_reference="cross",
    weight_norm="per_anchor"``.

    Logged value vs the authors' code: the code (global weights) keeps the self-pair ``j = i`` in the negative
    sum, i.e. it adds ``w_ii h_i.sg(h_i) = w_ii`` per anchor (and per direction with ``symmetric=True``), with
    ``w_ii = e^{1/tau} / sum_{k!=l} e^{h_k.h_l/tau}``. That term's gradient is radial and vanishes through the
    l2 normalisation, so the gradients agree with the code's, but the loss this class reports is lower than
    the code's by ``sum_i w_ii``; compare training curves with the code's accordingly.

    Args:
        weight_norm: how the exponential weights are normalised (``"global"``: over all pairs, the batch loss a
            sum, Table 2 and the authors' code, default; ``"per_anchor"``: over each anchor's negatives, the batch
            loss a mean, App. E eq. 19).

    ``m``, ``temperature``, ``r``, ``symmetric``, ``gd_reference`` as in :class:`ModifiedObjective`; defaults =
    the paper's Table 4, BERT-base: m = 0.30, tau = 0.05, r = 1.50 (RoBERTa-base: m = 0.37, r = 1.25 with batch
    512), symmetric, ``"self"``.

    Example::

        out = build_loss("m_vicreg", m=0.3, temperature=0.05, r=1.5)(z1, z2)
    """

    def __init__(self, m: float = 0.30, temperature: float = 0.05, r: float = 1.50, symmetric: bool = True,
                 gd_reference: GDReference = "self", weight_norm: WeightNorm = "global"):
        super().__init__(m, r, symmetric, gd_reference, temperature=temperature)
        check_choice(self.name, "weight_norm", weight_norm, WeightNorm)
        self.weight_norm = weight_norm

    def direction(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        w = off_diagonal_log_weights(a @ a.T, self.temperature, self.weight_norm).exp()
        per_anchor = self.weighted_terms(a, b, w)
        return per_anchor.sum() if self.weight_norm == "global" else per_anchor.mean()
