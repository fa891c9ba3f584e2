"""DCL: dimension-wise contrastive learning (ImSimCSE / SimCSE++, Xu et al., EMNLP 2023, §4.3)."""

from __future__ import annotations

from typing import Literal

import torch

from ..references import IMSIMCSE
from .base import ContrastiveLoss, check_choice
from .inputs import compute_dtype
from .registry import register_loss

Normalization = Literal["code", "paper"]


@register_loss("dcl")
class DCLLoss(ContrastiveLoss):
    r"""Dimension-wise contrastive loss: InfoNCE over the D feature dimensions (SimCSE++, Xu et al., EMNLP 2023, eq. 5).

    Each dimension is standardised over the batch, ``zt_{ic} = (z_{ic} - mean_c) / sigma_c``, and
    dimension c of view 1 must be most similar to dimension c of view 2 among all D dimensions:

    .. math::
        C_{cd} = \frac{1}{\kappa\,\tau_{DCL}} \sum_i \tilde z^1_{ic} \tilde z^2_{id}, \qquad
        \ell_{DCL} = \operatorname{agg}_c \Big[ -C_{cc} + \log \sum_{d=1}^{D} e^{C_{cd}} \Big]

    * ``normalization="code"`` (default; commit 35361a5 ``models_re_vicreg.py``, the only live DCL in the
      authors' repository): ``sigma`` is BatchNorm's biased std ``sqrt(var_biased + eps)`` (eps 1e-5,
      ``nn.BatchNorm1d(affine=False)`` in train mode), ``kappa = N`` (entries are correlation
      coefficients in [-1, 1]) and ``agg`` is the mean over dimensions.
    * ``normalization="paper"`` (printed eq. 5): unbiased std, ``kappa = 1`` and ``agg`` a sum over dims.

    The default follows the code because the paper's tuned values (tau_DCL = 5, lambda = 0.1) only make
    sense with it (with eq. 5's scale the logits would be N times and the loss D times larger).
    Everything is computed in at least fp32. There is no stop-gradient anywhere. The loss is invariant to
    per-dimension positive affine maps ``z -> a * z + b`` (exactly with ``eps = 0``) and to joint
    permutations of samples or of dimensions; it is *not* invariant to rescaling a row.
    For orthogonal standardised columns (needs N >= D) and identical views it equals
    ``log(1 + (D - 1) exp(-1 / tau))`` (code normalisation).

    ImSimCSE trains ``off_dropout_infonce + lambda * dcl`` with lambda = 0.1 on the MLP outputs of the
    two dropout views; the combination is the trainer's job. (The authors' "+DCL only" file uses tau = 10.)

    Args:
        temperature: tau_DCL (paper 5; Table 5: 5 > 10 > 20 > 50).
        normalization: how the dimensions are standardised and the loss scaled (``"code"``: BatchNorm's
            biased std, correlations divided by N, a mean over dimensions, the authors' code, default;
            ``"paper"``: the unbiased std, no division, a sum over dimensions, the printed eq. 5).
        eps: added to the per-dimension variance (BatchNorm1d's 1e-5); 0 gives exact affine invariance
            but divides by zero on a constant dimension.

    Example::

        off_info, dcl = build_loss("off_dropout_infonce"), build_loss("dcl", temperature=5.0)
        loss = off_info(z1, z2, z_nodropout=zbar).loss + 0.1 * dcl(z1, z2).loss
    """

    references = (IMSIMCSE,)

    hyperparameter_rules = {"temperature": "temperature", "eps": "non_negative"}

    def __init__(self, temperature: float = 5.0, normalization: Normalization = "code", eps: float = 1e-5):
        super().__init__()
        check_choice(self.name, "normalization", normalization, Normalization)
        self.temperature = temperature
        self.normalization = normalization
        self.eps = eps

    def standardize(self, z: torch.Tensor) -> torch.Tensor:
        """Per-dimension standardisation over the batch (biased std for "code", unbiased for "paper")."""
        z = z.to(compute_dtype(z))
        var = z.var(dim=0, unbiased=self.normalization == "paper", keepdim=True)
        return (z - z.mean(dim=0, keepdim=True)) / torch.sqrt(var + self.eps)

    def compute(self, z1: torch.Tensor, z2: torch.Tensor):
        a, b = self.standardize(z1), self.standardize(z2)
        c = a.T @ b / self.temperature  # (D, D)
        if self.normalization == "code":
            c = c / a.shape[0]
        per_dim = torch.logsumexp(c, dim=1) - c.diagonal()
        loss = per_dim.mean() if self.normalization == "code" else per_dim.sum()
        return loss, {}
