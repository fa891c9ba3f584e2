"""Focal-InfoNCE: InfoNCE with self-paced modulation of positive and negative logits (Hou and Li, Findings of
EMNLP 2023)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..references import FOCAL_INFONCE
from .base import (
    ContrastiveLoss,
    candidates,
    cosine_matrix,
    eye_mask,
    weight_hard_negatives,
)
from .registry import register_loss


@register_loss("focal_infonce")
class FocalInfoNCELoss(ContrastiveLoss):
    r"""Focal-InfoNCE: InfoNCE with similarity-modulated logits, so that hard negatives weigh more.

    Hou and Li, Findings of EMNLP 2023, eq. 2.

    .. math::
        \ell_i = -\log \frac{e^{(s_p^i)^2/\tau}}
            {e^{(s_p^i)^2/\tau} + \sum_{j\ne i} e^{s_n^{ij}(s_n^{ij}+m)/\tau}},
        \qquad L = \frac1N \sum_i \ell_i

    ``s_p^i = cos(z1_i, z2_i)``, ``s_n^{ij} = cos(z1_i, z2_j)``. The modulation terms are differentiated
    (no stop-gradient), as in the authors' code (``focalNCE/models.py``), which equals eq. 2; the mean over
    anchors replaces eq. 3's sum (as every official code).

    Gradients (with ``p = softmax`` of the modulated logits): negatives
    ``dl_i/ds_n^{ij} = p_ij (2 s_n^{ij} + m) / tau``; positive ``dl_i/ds_p^i = (2 s_p^i / tau)(p_ii - 1)``
    (eq. 5). The paper's eq. 4 (``(2/tau) p (s_n + m)``) is misprinted; the implementation is the loss of
    eq. 2, whose true gradient is the one above. A negative's logit exceeds InfoNCE's ``s/tau`` iff
    ``s_n > 1 - m`` (for ``s_n > 0``); no ``m`` turns Focal into InfoNCE (the positive is squared).

    Hard negatives (``z_neg``, one per anchor, as supervised SimCSE): they join every anchor's negatives
    with the negative modulation, logit ``s(s + m)/tau`` for ``s = cos(z1_i, zneg_j)``; the paper's
    argument (hard negatives, large ``s_n``, weigh more) applies to them as to in-batch negatives. So do the rows of
    a queue of earlier batches (``z_queue``, ESimCSE's momentum contrast), after the hard negatives.

    Args:
        temperature: tau. Default 0.07, the BERT setting (paper Table 4 best for BERT-base/large);
            use 0.05 for RoBERTa (Table 4 and the authors' RoBERTa script). The paper text's
            "{0.7, 0.7, 0.5, 0.5}" is a typo.
        m: hardness margin on negatives (paper 0.3; Table 5 finds 0.2-0.3 best).
        hard_negative_weight: log-weight added to each anchor's own hard-negative logit (supervised SimCSE's
            ``hard_negative_weight``; 0 = none, the authors' default; only with hard negatives).

    Example::

        loss_fn = build_loss("focal_infonce", temperature=0.07, m=0.3)
        out = loss_fn(z1, z2)
    """

    references = (FOCAL_INFONCE,)

    takes_hard_negatives = True
    takes_queue = True

    hyperparameter_rules = {"temperature": "temperature", "m": "finite", "hard_negative_weight": "log_weight"}

    def __init__(self, temperature: float = 0.07, m: float = 0.3, hard_negative_weight: float = 0.0):
        super().__init__()
        self.temperature = temperature
        self.m = m
        self.hard_negative_weight = hard_negative_weight

    def logits(self, z1: torch.Tensor, z2: torch.Tensor, z_neg: torch.Tensor | None = None,
               z_queue: torch.Tensor | None = None) -> torch.Tensor:
        """The modulated logits ``[s_p^2 ; s_n (s_n + m)] / tau`` (positive on the diagonal), then the hard
        negatives' and the queue's columns ``s (s + m) / tau`` when ``z_neg`` / ``z_queue`` are given."""
        s = cosine_matrix(z1, candidates(z2, z_neg, z_queue))
        n = s.shape[0]
        eye = torch.zeros_like(s, dtype=torch.bool)
        eye[:, :n] = eye_mask(n, s.device)
        logits = torch.where(eye, s * s, s * (s + self.m)) / self.temperature
        return weight_hard_negatives(logits, self.hard_negative_weight) if z_neg is not None else logits

    def compute(self, z1: torch.Tensor, z2: torch.Tensor, z_neg: torch.Tensor | None = None,
                z_queue: torch.Tensor | None = None):
        logits = self.logits(z1, z2, z_neg, z_queue)
        labels = torch.arange(logits.shape[0], device=logits.device)
        return F.cross_entropy(logits, labels), {}
