"""GS-InfoNCE: InfoNCE with Gaussian-noise negatives (Wu et al., COLING 2022)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..memory_errors import is_out_of_memory
from ..references import GS_INFONCE
from .base import (
    ContrastiveLoss,
    candidates,
    cosine_matrix,
    unit,
    weight_hard_negatives,
)
from .errors import LossInputError
from .inputs import compute_dtype
from .registry import register_loss


@register_loss("gs_infonce")
class GSInfoNCELoss(ContrastiveLoss):
    r"""InfoNCE whose denominator also holds M random Gaussian vectors (GS-InfoNCE, Wu et al., COLING 2022, eq. 5).

    .. math::
        \ell_i = -\log \frac{e^{s_{ii}/\tau}}
            {\sum_{j=1}^{N} e^{s_{ij}/\tau} + \lambda \sum_{k=1}^{M} e^{\cos(z^1_i, g_k)/\tau}},
        \qquad g_k \sim \mathcal N(0, \sigma^2 I_D), \qquad L = \frac1N\sum_i \ell_i

    with ``s_ij = cos(z1_i, z2_j)``. Implemented as extra logit columns ``cos(z1_i, g_k)/tau + log(lam)``
    appended to the InfoNCE logits (the paper's listing 1 = the authors' code).

    * The noise is drawn fresh at every call (every step and every gradient-accumulation micro-step), is
      shared by all anchors, is compared with ``z1`` (view 1) only and never receives gradient.
    * ``lam = 0`` or ``num_noise = 0`` drop the noise columns: the loss is then exactly ``infonce``.
    * With mean 0 the loss does not depend on ``noise_std`` (``cos(z, c g) = cos(z, g)``); the per-model
      ``random_std`` of the authors' scripts (0.5/0.1) only changes the RNG stream. Default 1 = the paper.

    Where the authors' code differs from the paper: the code has no lambda (= 1, the paper's value),
    uses ``M = 192`` fixed (= 3 x 64, the paper's 3 x batch size) and ``N(0, 0.5^2)`` / ``N(0, 0.1^2)``
    (irrelevant: the loss does not depend on sigma). Paper eq. 5 writes the in-batch term as
    ``sim(h_j, h_i)``; the code (followed here) uses ``cos(z1_i, z2_j)`` exactly as SimCSE. (Eq. 2 of the paper
    has a typo ``sim * tau``.)

    Hard negatives (``z_neg``, one per anchor, as supervised SimCSE): their columns
    ``cos(z1_i, zneg_j)/tau`` join the in-batch ones before the noise columns; the noise is unchanged. So do the rows
    of a queue of earlier batches (``z_queue``, ESimCSE's momentum contrast), after the hard negatives.

    Args:
        temperature: tau (0.05 as SimCSE).
        num_noise: M, the number of noise vectors; ``None`` = 3 x the number of rows the loss receives
            (3 x batch size, the paper's setting; in multi-process training the gathered batch).
        lam: lambda, weight of the noise terms in the denominator (paper 1).
        noise_std: sigma of the Gaussian (paper 1); no effect on the loss value (the cosine of a zero-mean
            Gaussian vector does not depend on its scale), only on the random stream.
        hard_negative_weight: log-weight added to each anchor's own hard-negative logit (supervised SimCSE's
            ``hard_negative_weight``; 0 = none, the authors' default; only with hard negatives).

    The noise is drawn with ``self.generator`` (a ``torch.Generator``, default ``None`` = torch's global
    RNG of the embedding's device), so seeding torch seeds the noise.

    Metrics: ``noise_logit_share`` = mean softmax mass the anchors put on the noise columns.

    Example::

        loss_fn = build_loss("gs_infonce", temperature=0.05)       # M = 3 x batch size, lambda = 1
        out = loss_fn(z1, z2)
    """

    references = (GS_INFONCE,)

    takes_hard_negatives = True
    takes_queue = True

    hyperparameter_rules = {"temperature": "temperature", "lam": "non_negative", "noise_std": "positive",
                            "hard_negative_weight": "log_weight", "num_noise": "count"}
    # lam = 0 (or no noise vectors) is plain InfoNCE: no noise is drawn
    hyperparameter_needs = {"num_noise": [("lam", ">", 0)], "noise_std": [("lam", ">", 0), ("num_noise", "!=", 0)]}

    def __init__(
        self,
        temperature: float = 0.05,
        num_noise: int | None = None,
        lam: float = 1.0,
        noise_std: float = 1.0,
        hard_negative_weight: float = 0.0,
    ):
        super().__init__()
        self.hard_negative_weight = hard_negative_weight
        self.temperature = temperature
        self.num_noise = num_noise
        self.lam = lam
        self.noise_std = noise_std
        self.generator: torch.Generator | None = None

    def sample_noise(self, num: int, dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """``num`` vectors from N(0, noise_std^2 I_dim) (override or monkeypatch to control the noise)."""
        gen_device = self.generator.device if self.generator is not None else device
        g = torch.randn(num, dim, generator=self.generator, device=gen_device, dtype=dtype)
        return (g * self.noise_std).to(device)

    def _noise_logits(self, z1: torch.Tensor, num: int) -> torch.Tensor:
        """The anchors' logits against ``num`` fresh noise vectors (no gradient to the noise); a ``num`` too large for
        the device's memory is refused naming it, not the batch."""
        try:
            g = self.sample_noise(num, z1.shape[1], z1.device, compute_dtype(z1)).detach()
            return unit(z1) @ unit(g).T / self.temperature + math.log(self.lam)
        except RuntimeError as err:  # torch.OutOfMemoryError is one
            if not is_out_of_memory(err):
                raise
            raise LossInputError(f"gs_infonce: num_noise {num} noise vectors of dimension {z1.shape[1]} (and their "
                                 f"{z1.shape[0]} x {num} logits) do not fit in {z1.device.type} memory; choose a "
                                 "smaller num_noise, or leave it unset (3 x the rows the loss receives, the paper's "
                                 "setting).",
                                 fields=("num_noise",)) from None

    def compute(self, z1: torch.Tensor, z2: torch.Tensor, z_neg: torch.Tensor | None = None,
                z_queue: torch.Tensor | None = None):
        n, d = z1.shape
        logits = cosine_matrix(z1, candidates(z2, z_neg, z_queue)) / self.temperature
        if z_neg is not None:  # before the noise columns are appended
            logits = weight_hard_negatives(logits, self.hard_negative_weight)
        num = 3 * n if self.num_noise is None else self.num_noise
        metrics: dict[str, float] = {}
        if num > 0 and self.lam > 0:
            noise = self._noise_logits(z1, num)
            logits = torch.cat([logits, noise], dim=1)
            with torch.no_grad():
                start = logits.shape[1] - noise.shape[1]
                metrics["noise_logit_share"] = torch.softmax(logits, dim=1)[:, start:].sum(1).mean().detach()
        labels = torch.arange(n, device=logits.device)
        return F.cross_entropy(logits, labels), metrics
