"""Training-time projectors applied on top of the pooled vector (dropped at test time for unsup models).

A projector is a :class:`Projector` subclass registered under the name a model's config gives
(:func:`register_projector`; ``projector="none"`` is no head). It declares what it needs the way a method does
(:class:`hf_cse.models.CSEPreTrainedModel`): ``splits_into_minibatches`` (False for a head that mixes the rows of a
batch, as BatchNorm does) with its reason, which the cached mode (:mod:`hf_cse.cached`) reads. Each projector also
knows its sentence-transformers form (``to_sentence_transformers()``: ``Dense`` modules computing the same function
as the head in eval mode), which the export uses when it keeps the head.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import CSEError


def dense_module(weight: torch.Tensor, bias: torch.Tensor, activation: nn.Module) -> nn.Module:
    """A sentence-transformers ``Dense`` computing ``activation(weight @ x + bias)`` (float32, CPU copies)."""
    from sentence_transformers.sentence_transformer.modules import Dense

    return Dense(weight.shape[1], weight.shape[0], bias=True, activation_function=activation,
                 init_weight=weight.detach().float().cpu().clone(), init_bias=bias.detach().float().cpu().clone())


def fold_batchnorm(linear: nn.Linear, bn: nn.BatchNorm1d) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight and bias of ``bn(linear(x))`` with ``bn`` in eval mode, as one affine map (exact up to float32
    rounding: folded in float64). A BatchNorm without running statistics has no fixed eval-mode map: ValueError."""
    if bn.running_mean is None or bn.running_var is None:
        raise CSEError("the BatchNorm projector has no running statistics (track_running_stats=False); "
                       "it cannot be exported as fixed Dense layers. Export without keep_projector.")
    w = linear.weight.detach().double()
    b = linear.bias.detach().double() if linear.bias is not None else torch.zeros(w.shape[0], dtype=torch.float64)
    scale = 1.0 / torch.sqrt(bn.running_var.detach().double() + bn.eps)
    shift = -bn.running_mean.detach().double() * scale
    if bn.affine:
        gamma, beta = bn.weight.detach().double(), bn.bias.detach().double()
        scale, shift = scale * gamma, shift * gamma + beta
    return (w * scale[:, None]).float().cpu(), (b * scale + shift).float().cpu()

NO_PROJECTOR = "none"


class Projector(nn.Module):
    """A training-time head ``(N, H) -> (N, D)``, built as ``cls(hidden_size)``. The class attributes declare what
    the head needs; a "no" comes with its reason (:func:`register_projector` checks)."""

    #: whether a batch's rows can go through the head in mini-batches with the same result (the cached mode):
    #: false when the head mixes rows, e.g. normalises with the batch's statistics
    splits_into_minibatches: bool = True
    #: why not, when ``splits_into_minibatches`` is False: a clause of the one-line refusal
    why_no_minibatch_split: str = ""


#: the projectors by name, in the order ``--projector`` offers them; ``"none"`` (no head) is always last
PROJECTORS: dict[str, type[Projector] | None] = {NO_PROJECTOR: None}


def register_projector(name: str):
    """Class decorator: make a :class:`Projector` subclass known as ``projector=name`` (a model's config,
    :func:`build_projector`). Refuses a name another class holds and a declared "no" without its reason."""

    def register(cls: type[Projector]) -> type[Projector]:
        if not issubclass(cls, Projector):
            raise TypeError(f"{cls.__name__}: a projector is a hf_cse.models.heads.Projector subclass.")
        if PROJECTORS.get(name, cls) is not cls:
            holder = PROJECTORS[name]
            raise CSEError(f"projector {name!r} is already registered ({getattr(holder, '__name__', holder)}); "
                             "choose another name.")
        if not cls.splits_into_minibatches and not cls.why_no_minibatch_split:
            raise CSEError(f"{cls.__name__} sets splits_into_minibatches = False: give the reason in "
                             "why_no_minibatch_split (users read it in the refusal).")
        PROJECTORS.pop(NO_PROJECTOR)
        PROJECTORS[name] = cls
        PROJECTORS[NO_PROJECTOR] = None
        return cls

    return register


def projector_class(name: str) -> type[Projector] | None:
    """The registered projector class of ``name`` (None for ``"none"``)."""
    if name not in PROJECTORS:
        raise CSEError(f"Unknown projector {name!r}. Valid projectors: {', '.join(PROJECTORS)}.")
    return PROJECTORS[name]


@register_projector("mlp")
class MLPProjector(Projector):
    """SimCSE's ``MLPLayer``: Linear(H, H) + tanh, randomly initialised (not BERT's pooler)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))

    def to_sentence_transformers(self) -> list[nn.Module]:
        """``tanh(W x + b)`` as one Dense module."""
        return [dense_module(self.dense.weight, self.dense.bias, nn.Tanh())]


class SmallInitLinear(nn.Linear):
    """A Linear whose weight and bias are drawn from N(0, 6e-3) (the unified gradient paradigm
    code's ``custom_param_init``)."""

    init_std = 6e-3


class TorchInitLinear(nn.Linear):
    """A Linear that keeps PyTorch's own initialisation (weight and bias uniform in +-1/sqrt(fan_in)), not the
    encoder's N(0, initializer_range): a head its authors created after loading the encoder (DiffCSE's
    ``electra_head``, ``train.py``)."""


def initialise(module: nn.Module, std: float) -> None:
    """A new module's weights: Linear and Embedding from N(0, ``std``) (the encoder's ``initializer_range``; biases
    and the padding row 0), LayerNorm at identity; :class:`SmallInitLinear` from its own N(0, 6e-3),
    :class:`TorchInitLinear` and BatchNorm by PyTorch's own initialisation."""
    if isinstance(module, SmallInitLinear):
        nn.init.normal_(module.weight, std=module.init_std)
        nn.init.normal_(module.bias, std=module.init_std)
    elif isinstance(module, (TorchInitLinear, nn.BatchNorm1d)):
        module.reset_parameters()
    elif isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=std)
        if module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


@register_projector("linear")
class LinearProjector(Projector):
    """The unified gradient paradigm paper's head: a single Linear(H, H), no activation, weight and bias drawn
    from N(0, 6e-3)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = SmallInitLinear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(x)

    def to_sentence_transformers(self) -> list[nn.Module]:
        """``W x + b`` as one Dense module (identity activation)."""
        return [dense_module(self.dense.weight, self.dense.bias, nn.Identity())]


@register_projector("batchnorm")
class BatchNormProjector(Projector):
    """DiffCSE's ``ProjectionMLP`` (DiffCSE, App. A), selectable by every method:
    Linear(H, 2H, no bias) -> BatchNorm1d(2H) -> ReLU -> Linear(2H, H, no bias) -> BatchNorm1d(H, affine=False).

    Batch statistics are taken over all 2N rows of the flattened two-view batch, as in the authors' code.
    """

    splits_into_minibatches = False
    why_no_minibatch_split = "its batch statistics would come from each mini-batch, not the full batch"

    def __init__(self, hidden_size: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden_size, 2 * hidden_size, bias=False),
            nn.BatchNorm1d(2 * hidden_size),
            nn.ReLU(inplace=True),
            nn.Linear(2 * hidden_size, hidden_size, bias=False),
            nn.BatchNorm1d(hidden_size, affine=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def to_sentence_transformers(self) -> list[nn.Module]:
        """Two Dense modules (ReLU, identity) with the eval-mode BatchNorm statistics folded into the Linears."""
        lin1, bn1, _, lin2, bn2 = self.net
        w1, b1 = fold_batchnorm(lin1, bn1)
        w2, b2 = fold_batchnorm(lin2, bn2)
        return [dense_module(w1, b1, nn.ReLU()), dense_module(w2, b2, nn.Identity())]


def build_projector(kind: str, hidden_size: int) -> Projector | None:
    """The head named ``kind`` for vectors of ``hidden_size`` (None for ``"none"``)."""
    cls = projector_class(kind)
    return None if cls is None else cls(hidden_size)
