"""mB: Barlow Twins made effective with GD, exponential weights and a static ratio (gradient paradigm of
Li et al., ACL 2024: eq. 6 and 18)."""

from __future__ import annotations

import torch

from ._paradigm_common import GDReference, ModifiedObjective, off_diagonal_log_weights
from .registry import register_loss


@register_loss("m_barlow")
class ModifiedBarlowTwinsLoss(ModifiedObjective):
    r"""Modified Barlow Twins (gradient paradigm of Li et al., ACL 2024: §4 eq. 6, gradient eq. 18, Table 2 lower).

    With unit ``h = z1/|z1|`` (anchors), ``h' = z2/|z2|``, GD indicator ``d_i`` (applied by stopping the
    gradient of inactive anchors) and detached weights from the *other* view, normalised globally:

    .. math::
        w_{ij} = \frac{e^{h_i'^\top h'_j/\tau}}{\sum_{k\ne l} e^{h_k'^\top h'_l/\tau}}, \qquad
        L_i = d_i\Big(-r \big(\textstyle\sum_{j\ne i} w_{ij}\big) h_i^\top h'_i
              + \sum_{j\ne i} w_{ij}\, h_i^\top \mathrm{sg}(h_j)\Big), \qquad L = \sum_i L_i

    so ``dL/dh_i = d_i sum_{j!=i} w_ij (h_j - r h'_i)`` (the weights sum to 1 over the batch, so the loss
    sums over anchors as the authors' code). The weights follow eq. 6 and the code; the printed eq. 18
    (``e^{h_i.h'_j/tau} / sum_{k!=i} e^{h_k.h'_i/tau}``, per-anchor and mixed views) is inconsistent with
    both. ``h_j`` in the negative term is detached and the self-pair is excluded (the code keeps it in
    the sum, which only adds a radial, gradient-free term after normalisation); ``h'_i`` in the positive
    term receives gradient. ``symmetric=True`` (default) = authors' code (both views anchors, summed); the code's
    value is higher than this class's by the kept self-pairs, ``sum_i w_ii`` per direction.

    Defaults are the authors' code form (``bt.w_gd.w_w.w_r``, ``_bt_loss``: ``symmetric=True``,
    ``gd_reference="self"``), with which the paper's Table 3 numbers were made and its r tuned (see
    :class:`ModifiedObjective`); the printed eq. 6 is ``symmetric=False, gd_reference="cross"``.

    Args: ``m``, ``temperature``, ``r``, ``symmetric``, ``gd_reference`` as in :class:`ModifiedObjective`;
    defaults = the paper's Table 4, BERT-base: m = 0.30, tau = 0.05, r = 1.50 (RoBERTa-base: m = 0.37,
    r = 1.25 with batch 512), symmetric, ``"self"``.

    Example::

        out = build_loss("m_barlow", m=0.3, temperature=0.05, r=1.5)(z1, z2)
    """

    def __init__(self, m: float = 0.30, temperature: float = 0.05, r: float = 1.50, symmetric: bool = True,
                 gd_reference: GDReference = "self"):
        super().__init__(m, r, symmetric, gd_reference, temperature=temperature)

    def direction(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        w = off_diagonal_log_weights(b @ b.T, self.temperature, "global").exp()
        return self.weighted_terms(a, b, w).sum()
