"""Shared pieces of every loss: the output type, the base class, batch diagnostics, small similarity helpers and
the validators of hyperparameters.

A loss is a small ``nn.Module`` whose ``forward(z1, z2, **extra)`` takes the projector outputs of the
two dropout views (``(N, D)``, not normalised) and returns a :class:`LossOutput`. Losses know nothing
about models, tokenizers or processes: the trainer gathers embeddings across processes before it
calls them. What the inputs must be, and the precision losses compute in (:func:`compute_dtype`), is
:mod:`hf_cse.losses.inputs`.
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import CSEError
from ..hyperparameter_rules import RULES, check_rules, plain_number
from ..references import Paper
from .errors import HardNegativesNotTakenError, MissingInputsError
from .inputs import (
    NORM_EPS,
    UNNORMALISABLE_ROWS,
    check_finite,
    check_nonzero_norm,
    check_pair,
    check_same_kind,
    check_tensor,
    checked_result,
    checks_deferred,
    compute_dtype,
    unnormalisable_rows,
)


@dataclass
class LossOutput:
    """What a loss returns: the scalar to minimise and metrics to log, detached 0-d tensors on the loss's device
    (read on the host only at logging steps: :mod:`hf_cse.metrics`) or Python floats for host values."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor | float] = field(default_factory=dict)


def unit(z: torch.Tensor) -> torch.Tensor:
    """Rows of ``z`` l2-normalised, in :func:`compute_dtype` (eps 1e-8 as ``nn.CosineSimilarity``)."""
    return F.normalize(z.to(compute_dtype(z)), dim=-1, eps=NORM_EPS)


def cosine_matrix(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """``S[i, j] = cos(z1_i, z2_j)`` in at least fp32 (low-precision logits lose too much otherwise)."""
    return unit(z1) @ unit(z2).T


def eye_mask(n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean identity, used to mask self-pairs."""
    return torch.eye(n, dtype=torch.bool, device=device)


def candidates(z2: torch.Tensor, z_neg: torch.Tensor | None = None,
               z_queue: torch.Tensor | None = None) -> torch.Tensor:
    """Every anchor's candidates in column order: the positives' view ``z2``, then the hard negatives, then the
    queue's rows (those given)."""
    given = [z for z in (z2, z_neg, z_queue) if z is not None]
    return given[0] if len(given) == 1 else torch.cat(given)


def weight_hard_negatives(logits: torch.Tensor, weight: float) -> torch.Tensor:
    """Supervised SimCSE's ``hard_negative_weight`` (the authors' ``cl_forward``, the ``weights`` matrix): ``weight``
    (a log-weight) added to the logit of each anchor's own hard negative, column ``N + i`` of row ``i`` of logits
    ``[z1 z2^T | z1 z_neg^T | ...] / tau``; the other hard negatives' columns are unchanged."""
    if weight == 0:
        return logits
    n = logits.shape[0]
    bias = torch.zeros(n, logits.shape[1], dtype=logits.dtype, device=logits.device)
    bias[:, n:2 * n].diagonal().fill_(weight)
    return logits + bias


def hardest_negative_gap(s: torch.Tensor, positive: torch.Tensor | None = None) -> torch.Tensor:
    """``positive_i - max_{j!=i} s_ij`` for each anchor row of the similarity matrix ``s``: by how much the anchor's
    positive (default: the diagonal of ``s``) beats its hardest in-batch negative. The one home of the
    margin-vs-hardest-negative rule: the gradient paradigm's GD indicator (Li et al., ACL 2024, eq. 5 and d_i of
    §4 / App. E) is ``gap < m``, MPT's hinge is ``relu(m - gap)``."""
    hardest = s.masked_fill(eye_mask(s.shape[0], s.device), float("-inf")).amax(dim=1)
    return (s.diagonal() if positive is None else positive) - hardest


@torch.no_grad()
def batch_diagnostics(
    z1: torch.Tensor, z2: torch.Tensor, m: float = 0.3, temperature: float = 0.05
) -> dict[str, torch.Tensor]:
    """Cosine statistics and the components of the gradient paradigm of Li et al. (ACL 2024), measured on a batch.

    * ``pos_cos`` / ``neg_cos``: mean cosine of positive pairs and of in-batch negative pairs.
    * ``gd_active``: share of anchors whose gradient dissipation is active, i.e.
      ``s_ii - max_{j!=i} s_ij < m`` (the paradigm paper's eq. 5 baseline GD with its default m = 0.3).
    * ``hardest_weight``: mean softmax weight (at ``temperature``) of each anchor's hardest
      negative among its negatives (the paradigm paper's §3.1.2 and Figs. 3 and 7: W concentrates on hard negatives
      as tau -> 0); losses pass their own temperature.
    The third paradigm component, the ratio R, depends on the loss; each loss reports it through
    :meth:`ContrastiveLoss.paradigm_ratio`. Values are 0-d tensors (no host synchronisation); no op has a
    data-dependent output shape (``masked_select`` would sync a GPU).
    """
    s = cosine_matrix(z1, z2)
    n = s.shape[0]
    eye = eye_mask(n, s.device)
    pos = s.diagonal()
    weights = torch.softmax(s.masked_fill(eye, float("-inf")) / temperature, dim=1)
    return {
        "pos_cos": pos.mean(),
        "neg_cos": (s.sum() - pos.sum()) / (n * (n - 1)),
        "gd_active": (hardest_negative_gap(s) < m).float().mean(),
        "hardest_weight": weights.amax(dim=1).mean(),
    }


# ---------------------------------------------------------------------------------------------------
# hyperparameter validation: the numeric ones are declared (ContrastiveLoss.hyperparameter_rules); constructors call
# these for the others, so a bad CLI value fails before training starts


def literal_choices(choices: object) -> tuple[str, ...]:
    """The values of a ``typing.Literal`` type: a loss types a choice argument with one (``Literal["code",
    "paper"]``), which is then the only place its valid values are written (argparse reads it too)."""
    if typing.get_origin(choices) is not typing.Literal:
        raise TypeError(f"expected a typing.Literal type of the valid values, got {choices!r}")
    return typing.get_args(choices)


def check_choice(loss_name: str, param: str, value: str, choices: object) -> None:
    """``value`` must be one of the values of the ``typing.Literal`` type ``choices``."""
    choices = literal_choices(choices)
    if value not in choices:
        raise CSEError(
            f"{loss_name}: unknown {param} {value!r}; valid choices: {', '.join(repr(c) for c in choices)}."
        )


def check_bool(loss_name: str, param: str, value: bool) -> None:
    if not isinstance(value, bool):
        raise CSEError(f"{loss_name}: {param} must be True or False, got {value!r}.")


#: the keyword of the hard-negative embeddings (one per anchor, shape of z1) for losses that take them
HARD_NEGATIVE_INPUT = "z_neg"
#: the keyword of embeddings of the first view made without dropout (ImSimCSE's off-dropout negatives; the model makes
#: them where the config's ``off_dropout`` is set)
NO_DROPOUT_INPUT = "z_nodropout"
#: the keyword of negatives kept from earlier batches (ESimCSE's momentum-contrast queue): any number of rows of z1's
#: width, the same on every process (the trainer does not gather them), without gradient
QUEUE_INPUT = "z_queue"


def _checking_rules(init):
    """``init`` (a loss's ``__init__``) preceded by the check of its arguments against the class's
    ``hyperparameter_rules`` (None passes where it is the default: not set); a NumPy scalar is taken as the Python
    number it holds (:func:`~hf_cse.hyperparameter_rules.plain_number`)."""
    signature = inspect.signature(init)
    optional = frozenset(name for name, p in signature.parameters.items() if p.default is None)

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        args = tuple(map(plain_number, args))
        kwargs = {name: plain_number(value) for name, value in kwargs.items()}
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # the call itself is wrong: the constructor says how
            return init(self, *args, **kwargs)
        bound.apply_defaults()
        check_rules(type(self).name, type(self).hyperparameter_rules, bound.arguments, optional)
        return init(self, *args, **kwargs)

    return checked


class ContrastiveLoss(nn.Module):
    """Base class: subclasses implement ``compute(z1, z2, **extra) -> (loss, extra_metrics)``."""

    name = "base"
    #: extra keyword tensors the loss requires besides z1, z2 (e.g. ``z_nodropout``); each must have
    #: the shape of ``z1`` and be finite (checked here).
    extra_inputs: tuple[str, ...] = ()
    #: whether the loss accepts ``z_neg``, one hard-negative embedding per anchor (supervised SimCSE's
    #: contradiction hypotheses; :data:`HARD_NEGATIVE_INPUT`), as extra candidates of every anchor.
    takes_hard_negatives: bool = False
    #: whether the loss accepts ``z_queue`` (:data:`QUEUE_INPUT`), negatives of every anchor beyond the batch's
    takes_queue: bool = False
    #: the papers that define the loss (:mod:`hf_cse.references`), the defining one first; model cards cite these
    references: tuple[Paper, ...] = ()
    #: hyperparameter -> the rule its value must keep (:data:`hf_cse.hyperparameter_rules.RULES`), checked before
    #: the loss's own ``__init__`` runs; a subclass's rules add to its parents'. The command line checks the values
    #: typed for the chosen loss against them before torch is imported.
    hyperparameter_rules: dict[str, str] = {}
    #: hyperparameter -> the settings of the loss it acts only with, each ``(other, test, value)``
    #: (:data:`hf_cse.hyperparameter_rules.NEED_TESTS`; e.g. vicreg's gamma only with ``("surrogate", "==", False)``):
    #: the command line refuses one a user gives while a need is unmet, as it would do nothing
    hyperparameter_needs: dict[str, list[tuple]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.hyperparameter_rules = {**getattr(super(cls, cls), "hyperparameter_rules", {}),
                                    **cls.__dict__.get("hyperparameter_rules", {})}
        unknown = set(cls.hyperparameter_rules.values()) - set(RULES)
        if unknown:
            raise TypeError(f"{cls.__name__}.hyperparameter_rules: unknown rules {sorted(unknown)}; "
                            f"rules: {sorted(RULES)}")
        if "__init__" in cls.__dict__:
            cls.__init__ = _checking_rules(cls.__dict__["__init__"])

    def forward(self, z1: torch.Tensor, z2: torch.Tensor, **extra: torch.Tensor) -> LossOutput:
        check_pair(z1, z2, self.name)
        missing = [k for k in self.extra_inputs if extra.get(k) is None]
        if missing:
            raise MissingInputsError(self.name, missing)
        takes = [*self.extra_inputs, *[HARD_NEGATIVE_INPUT] * self.takes_hard_negatives,
                 *[QUEUE_INPUT] * self.takes_queue]
        unknown = set(extra) - set(takes)
        if HARD_NEGATIVE_INPUT in unknown:
            raise HardNegativesNotTakenError(self.name)
        if unknown:
            raise CSEError(
                f"{self.name}: got unexpected inputs {sorted(unknown)}; besides z1 and z2 it takes {takes or 'none'}."
            )
        for k in [*self.extra_inputs, *([HARD_NEGATIVE_INPUT] if extra.get(HARD_NEGATIVE_INPUT) is not None else [])]:
            check_tensor(extra[k], k, self.name)
            if extra[k].shape != z1.shape:
                raise CSEError(
                    f"{self.name}: {k} must have the shape of z1 {tuple(z1.shape)}, "
                    f"got {tuple(extra[k].shape)}."
                )
            check_same_kind(extra[k], z1, k, self.name)
            check_finite(extra[k], k, self.name)
            check_nonzero_norm(extra[k], k, self.name)
        queue = extra.get(QUEUE_INPUT)
        if queue is not None:
            check_tensor(queue, QUEUE_INPUT, self.name)
            if queue.shape[1] != z1.shape[1]:
                raise CSEError(f"{self.name}: {QUEUE_INPUT} must have z1's width {z1.shape[1]}, got "
                               f"{tuple(queue.shape)}.")
            check_same_kind(queue, z1, QUEUE_INPUT, self.name)
            check_finite(queue, QUEUE_INPUT, self.name)
            check_nonzero_norm(queue, QUEUE_INPUT, self.name)
        loss, metrics = checked_result(self.name, self.compute(z1, z2, **extra),
                                        (z1, z2, *(v for v in extra.values() if isinstance(v, torch.Tensor))))
        # diagnostics at the loss's own temperature where it has one (SimCSE's 0.05 otherwise)
        out = batch_diagnostics(z1.detach(), z2.detach(), temperature=getattr(self, "temperature", 0.05))
        ratio = self.paradigm_ratio(z1.detach(), z2.detach())
        if ratio is not None:
            out["ratio"] = ratio.detach() if isinstance(ratio, torch.Tensor) else float(ratio)
        out.update(metrics)
        if checks_deferred():  # the trainer raises at its next logging step when this is > 0
            out[UNNORMALISABLE_ROWS] = unnormalisable_rows(z1, z2, *extra.values())
        return LossOutput(loss=loss, metrics=out)

    def compute(self, z1: torch.Tensor, z2: torch.Tensor, **extra: torch.Tensor):
        """Return ``(loss, metrics)``; ``loss`` is a scalar, the mean over anchors."""
        raise NotImplementedError

    def paradigm_ratio(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor | float | None:
        """The ratio R of the gradient paradigm of Li et al. (ACL 2024), Table 1, for this loss on the batch,
        averaged over anchors; None if undefined."""
        return None

    @classmethod
    def hyperparameters(cls) -> dict[str, inspect.Parameter]:
        """The constructor arguments (hyperparameters) of the loss."""
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return {k: p for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self" and p.kind in kinds}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)!r}" for k in self.hyperparameters() if hasattr(self, k))
