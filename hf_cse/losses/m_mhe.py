"""mMHE: alignment + MHE uniformity made effective with GD, W, R (gradient paradigm of Li et al., ACL 2024:
App. E, eq. 14 and 16)."""

from __future__ import annotations

import math

import torch

from ._paradigm_common import GDReference, ModifiedObjective, squared_pair_distance, strict_lower
from .base import eye_mask
from .registry import register_loss


@register_loss("m_mhe")
class ModifiedMHELoss(ModifiedObjective):
    r"""Modified alignment + MHE uniformity (gradient paradigm of Li et al., ACL 2024: eq. 14, gradient eq. 16,
    Table 2 lower).

    With unit ``h = z1/|z1|`` (anchors), ``h' = z2/|z2|`` and ``d_i`` the GD indicator:

    .. math::
        L^{u} = \log \frac{2 \sum_{k<l} e^{-\|h_k - h_l\|^2/(2\tau)}}{N(N-1)}, \qquad
        L^{a}_i = \frac{r \sum_{j\ne i} e^{h_i^\top h_j/\tau}}
                       {2\tau\, \mathrm{sg}(\sum_{k<l} e^{h_k^\top h_l/\tau})} \|h_i - h'_i\|^2, \qquad
        L = L^{u} + \sum_i L^{a}_i

    where ``d_i`` is applied by stopping the gradient of inactive anchors (not by multiplying, which
    would count the shared L^u once per active anchor). Then
    ``dL/dh_i = d_i sum_{j!=i} e^{h_i.h_j/tau} (h_j - r h'_i) / (tau sum_{k<l} e^{h_k.h_l/tau})`` (eq. 16,
    tangentially; the weights already carry the 1/N scale, so the batch loss sums the alignment terms).
    ``L^u - lse_{k<l} h_k.h_l/tau = -1/tau + log(2/(N(N-1)))``.

    GD: ``gd_reference="self"`` (default, authors' code): ``1 - max_{k!=i} h_i.h_k < m``; ``"cross"``
    (paper): ``h_i.h'_i - max_{k!=i} h_i.h'_k < m``. The alignment coefficient is detached as a whole
    (authors' code; the paper marks only its denominator "no gradient", but eq. 16 needs the whole
    coefficient constant). The alignment is computed as ``2 - 2 h_i.h'_i`` (= ``||h_i - h'_i||^2``).
    ``symmetric=True`` (default) follows the authors' code: both views anchors (each GD-gated),
    ``L^u(h) + L^u(h') + sum_i r (w_i + w'_i)/2 ||h_i - h'_i||^2``: positive pull ~2x eq. 16's;
    ``symmetric=False`` is the paper's L above. The code's value lacks the constants of L^u
    (``-1/tau + log(2/(N(N-1)))`` per direction), which carry no gradient.

    Defaults are the authors' code form (``mhe.w_gd.w_w.w_r``: ``symmetric=True, gd_reference="self"``), with
    which the paper's Table 3 numbers were made and its r tuned (see :class:`ModifiedObjective`); the printed
    eq. 14 is ``symmetric=False, gd_reference="cross"``.

    Args: ``m``, ``temperature``, ``r``, ``symmetric``, ``gd_reference`` as in :class:`ModifiedObjective`;
    defaults = the paper's Table 4, BERT-base: m = 0.30, tau = 0.05, r = 1.75 (RoBERTa-base: r = 1.25 with
    batch 512), symmetric, ``"self"``.

    Example::

        out = build_loss("m_mhe", m=0.3, temperature=0.05, r=1.75)(z1, z2)
    """

    def __init__(self, m: float = 0.30, temperature: float = 0.05, r: float = 1.75, symmetric: bool = True,
                 gd_reference: GDReference = "self"):
        super().__init__(m, r, symmetric, gd_reference, temperature=temperature)

    def direction(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        n = a.shape[0]
        s = a @ a.T / self.temperature
        low = strict_lower(n, a.device)
        lse_pairs = torch.logsumexp(s[low], dim=0)
        # -||h_k - h_l||^2 / (2 tau) = (h_k.h_l - 1) / tau
        uniform = lse_pairs - 1.0 / self.temperature + math.log(2.0 / (n * (n - 1)))
        with torch.no_grad():
            lse_rows = torch.logsumexp(s.masked_fill(eye_mask(n, a.device), float("-inf")), dim=1)
            # w_i = sum_{j!=i} e^{s_ij/tau} / (tau sum_{k<l} e^{s_kl/tau})
            w = torch.exp(lse_rows - lse_pairs) / self.temperature
        align = squared_pair_distance(a, b)
        return uniform + (self.r * w / 2 * align).sum()
