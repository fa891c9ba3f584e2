"""InfoNCE over two dropout views: the unsupervised SimCSE objective."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..references import SIMCSE
from .base import ContrastiveLoss, candidates, cosine_matrix, weight_hard_negatives
from .registry import register_loss


@register_loss("infonce")
class InfoNCELoss(ContrastiveLoss):
    r"""InfoNCE with in-batch negatives (SimCSE, Gao et al., EMNLP 2021; as written in GS-InfoNCE, eq. 2, and
    Focal-InfoNCE, eq. 1).

    .. math::
        \ell_i = -\log \frac{e^{\cos(z^1_i, z^2_i)/\tau}}{\sum_{j=1}^{N} e^{\cos(z^1_i, z^2_j)/\tau}},
        \qquad L = \frac1N \sum_i \ell_i

    Only rows of ``z1`` are anchors; the negatives of anchor i are the other rows of ``z2``.

    Hard negatives (supervised SimCSE, Gao et al. 2021 §5, eq. 5): with ``z_neg`` (one hard negative per
    anchor, e.g. the contradiction hypothesis) every anchor's candidates are all of ``z2`` and all of
    ``z_neg``: logits ``[z1 z2^T, z1 z_neg^T] / tau``, the target still the diagonal of the first block.
    A queue of earlier batches' embeddings (``z_queue``, ESimCSE's momentum contrast, Wu et al., COLING 2022, §3.2)
    joins every anchor's candidates after them: logits ``[z1 z2^T, z1 z_neg^T, z1 z_queue^T] / tau``.
    The papers write a sum over anchors, every official code uses the mean (as here).
    Gradient: ``dL/dlogits = (softmax(logits) - I) / N``; in the gradient paradigm of Li et al. (ACL 2024),
    Table 1, GD is the soft 1 - p_ii, W the softmax over negatives and R = 1 (:meth:`paradigm_ratio`).

    Args:
        temperature: tau, 0.05 in SimCSE and all five papers' SimCSE baselines.
        hard_negative_weight: log-weight added to each anchor's own hard-negative logit (supervised SimCSE's
            ``hard_negative_weight``; 0 = none, the authors' default; only with hard negatives).

    Example::

        loss_fn = build_loss("infonce", temperature=0.05)
        out = loss_fn(z1, z2)   # out.loss, out.metrics["pos_cos"], ...
    """

    references = (SIMCSE,)

    takes_hard_negatives = True
    takes_queue = True

    hyperparameter_rules = {"temperature": "temperature", "hard_negative_weight": "log_weight"}

    def __init__(self, temperature: float = 0.05, hard_negative_weight: float = 0.0):
        super().__init__()
        self.temperature = temperature
        self.hard_negative_weight = hard_negative_weight

    def compute(self, z1: torch.Tensor, z2: torch.Tensor, z_neg: torch.Tensor | None = None,
                z_queue: torch.Tensor | None = None):
        logits = cosine_matrix(z1, candidates(z2, z_neg, z_queue)) / self.temperature
        if z_neg is not None:
            logits = weight_hard_negatives(logits, self.hard_negative_weight)
        labels = torch.arange(logits.shape[0], device=logits.device)
        return F.cross_entropy(logits, labels), {}

    def paradigm_ratio(self, z1, z2):
        return 1.0  # gradient paradigm of Li et al., ACL 2024, Table 1: R = 1 for InfoNCE
