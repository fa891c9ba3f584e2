"""Every hf_cse registry loss as a sentence-transformers loss, for ``SentenceTransformerTrainer``.

    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from hf_cse.integrations.sentence_transformers import CSELoss

    model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
    loss = CSELoss(model, "focal_infonce", temperature=0.07, m=0.3)
    SentenceTransformerTrainer(model=model, train_dataset=train, loss=loss).train()

The data set's text columns are the views, in order:

* ``(sentence,)`` -- one column: each sentence is encoded twice, as the same text in two columns below
  (unsupervised SimCSE on a data set of single sentences, as hf_cse's trainer takes them).
* ``(sentence, sentence)`` -- the same text twice: unsupervised SimCSE. Each column gets its own forward in
  train mode, so the two embeddings differ by their dropout masks (sentence-transformers' own unsupervised
  SimCSE recipe).
* ``(anchor, positive)`` -- pairs, e.g. an NLI premise and an entailed hypothesis; every loss works on them.
* ``(anchor, positive, negative)`` -- triplets: the third column's embeddings join every anchor's candidates
  (supervised SimCSE) for the losses that take hard negatives (``takes_hard_negatives``); the others refuse.

Losses that need no-dropout embeddings (``off_dropout_infonce``, ImSimCSE) get them from one more forward of
the first column with every module of the model in eval mode (gradients flow through it, as in
:meth:`hf_cse.models.base.CSEPreTrainedModel.no_dropout_embeddings`).

Across processes the embeddings are all-gathered with gradients before the loss (hf_cse's
:func:`~hf_cse.distributed.gather_with_grad`, as its trainer does): each process computes the loss of the
global batch and receives the single-process gradient. The losses see the model's ``sentence_embedding``:
the pooled output (plus any Dense / Normalize modules of the model), not hf_cse's training-only projector.

sentence-transformers' wrapping losses take them: ``MatryoshkaLoss(model, CSELoss(...), dims)`` (or
``CSELoss(..., matryoshka_dims=dims)``, hf_cse's own: one forward, each loss normalising as it defines) and
``AdaptiveLayerLoss``. ``MatryoshkaLoss`` around :class:`CachedCSELoss` decorates its ``calculate_loss``, as for
sentence-transformers' own Cached losses; with several objectives the terms stay apart through the wrappers'
weighting (:class:`LossTerms`). An epoch's last batch of one sentence (no in-batch negatives) is skipped with a
warning: sentence-transformers' trainer keeps incomplete batches unless ``dataloader_drop_last=True``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..cached import RandState, split_batch
from ..distributed import gather_with_grad
from ..errors import CSEError
from ..losses import loss_hyperparameters
from ..losses.base import HARD_NEGATIVE_INPUT
from ..losses.errors import HardNegativesNotTakenError
from ..matryoshka import say_reordered, warn_untrained_width
from ..matryoshka_rules import check_matryoshka
from ..models.modes import eval_mode
from ..objectives import (
    DCL,
    NO_DROPOUT_INPUT,
    Objective,
    check_dcl_weight,
    check_objectives,
    compute_objectives,
    dcl_defaults,
    normalise_objectives,
    objective,
    objective_names,
    takes_no_dropout,
    with_matryoshka,
)
from ..references import SIMCSE

logger = logging.getLogger(__name__)


class LossTerms(dict):
    """The weighted terms of several objectives (``{"contrastive_loss": ..., "dcl_loss": ...}``), the dict
    ``SentenceTransformerTrainer`` sums for the backward and logs term by term. Weighting by a number (or 0-d tensor)
    weights every term, and terms add name by name (a plain number or tensor joins the first term), so that
    sentence-transformers' wrapping losses, which weight and add their inner loss's outputs (``MatryoshkaLoss``,
    ``AdaptiveLayerLoss``, ``Matryoshka2dLoss``), return terms again."""

    def __add__(self, other):
        if isinstance(other, Mapping):
            return LossTerms({k: self.get(k, 0.0) + other.get(k, 0.0) for k in dict.fromkeys([*self, *other])})
        first = next(iter(self))
        return LossTerms({**self, first: self[first] + other})

    __radd__ = __add__

    def __mul__(self, weight):
        return LossTerms({k: v * weight for k, v in self.items()})

    __rmul__ = __mul__

    def __truediv__(self, divisor):
        return LossTerms({k: v / divisor for k, v in self.items()})


class CSELoss(nn.Module):
    """An hf_cse registry loss (``hf_cse.losses.available_losses()``) as a sentence-transformers loss.

    Args:
        model: the ``SentenceTransformer`` being trained.
        loss: registry name, e.g. ``"infonce"``, ``"focal_infonce"``, ``"gs_infonce"``, ``"m_mhs"``.
        gather_across_devices: all-gather the embeddings (with gradients) across processes so every process
            uses the global batch as negatives, as hf_cse's trainer does (default True; a no-op on one process).
        dcl_weight: weight of ImSimCSE's dimension-wise contrastive objective added to the loss (``dcl``, with its
            default hyperparameters; 0 = none). For other settings pass ``objectives``.
        objectives: the full objectives list, as an hf_cse config's (:mod:`hf_cse.objectives`), e.g.
            ``[objective("infonce", temperature=0.05), objective("dcl", 0.1, temperature=5.0)]``; replaces
            ``loss``, ``dcl_weight`` and the hyperparameters.
        matryoshka_dims, matryoshka_weights: Matryoshka training (:mod:`hf_cse.matryoshka`): every objective is
            also applied to these leading prefixes of the embedding (e.g. ``[384, 256, 128, 64]``), each weighted
            (default 1); one forward, as in hf_cse's trainer.
        **hyperparameters: the loss's own hyperparameters (``temperature=0.07, m=0.3``...); unknown names raise.

    ``forward(sentence_features, labels)`` takes 1, 2 or 3 text columns (labels are not used). With one objective it
    returns the loss; with several, a dict of their weighted terms (``contrastive_loss``, ``dcl_loss``), which
    ``SentenceTransformerTrainer`` sums for the backward and logs one by one beside ``loss``. The loss carries
    ``citation`` (the BibTeX of the loss's ``references`` and SimCSE's) and ``get_config_dict()`` (objectives and
    every hyperparameter), which sentence-transformers writes into the model card. ``last_metrics`` holds the
    hf_cse diagnostics (``pos_cos``, ``neg_cos``, ...) and the unweighted terms of the latest batch.
    """

    def __init__(self, model: nn.Module, loss: str = "infonce", gather_across_devices: bool = True,
                 dcl_weight: float = 0.0, objectives: list[dict] | None = None,
                 matryoshka_dims: list[int] | None = None, matryoshka_weights: list[float] | None = None,
                 **hyperparameters: Any) -> None:
        super().__init__()
        self.model = model
        if objectives is None:
            check_dcl_weight(dcl_weight, "CSELoss: ")
            objectives = [objective(loss, **hyperparameters)]
            if dcl_weight > 0:
                objectives.append(objective(DCL, dcl_weight, **dcl_defaults({})))
        elif hyperparameters or dcl_weight:
            raise CSEError("CSELoss: give the hyperparameters and the DCL weight inside objectives=, not beside it.")
        entries = normalise_objectives(objectives)
        takes_nodropout = any(takes_no_dropout(e["loss"]) for e in entries)
        losses = check_objectives(entries, off_dropout=takes_nodropout)
        # bounded by the model's embedding size where it says it (a SentenceTransformer's get_embedding_dimension)
        size = getattr(model, "get_embedding_dimension", lambda: None)() if matryoshka_dims else None
        self.matryoshka_dims, self.matryoshka_weights = check_matryoshka(matryoshka_dims, matryoshka_weights,
                                                                         size if isinstance(size, int) else 0)
        say_reordered(matryoshka_dims, matryoshka_weights, self.matryoshka_dims, self.matryoshka_weights)
        warn_untrained_width(self.matryoshka_dims, size if isinstance(size, int) else 0)
        self.objectives = with_matryoshka([Objective(name, e["weight"], fn) for name, e, fn in
                                           zip(objective_names(entries), entries, losses, strict=True)],
                                          self.matryoshka_dims, self.matryoshka_weights)
        self.objective_entries = entries
        self.loss_fn = losses[0]
        self.loss_name = entries[0]["loss"]
        self.gather_across_devices = gather_across_devices
        unsupported = {k for fn in losses for k in fn.extra_inputs} - {NO_DROPOUT_INPUT}
        if unsupported:  # pragma: no cover - no registry loss needs other inputs today
            raise CSEError(f"CSELoss: loss {self.loss_name!r} needs inputs {sorted(unsupported)} that a "
                           "SentenceTransformer does not provide.")
        self.last_metrics: dict[str, Tensor] = {}
        self.last_terms: dict[str, Tensor] = {}
        self.largest_batch = 0  # rows of the largest batch seen: a batch of 1 after larger ones is an epoch's rest
        self.warned_batch_of_one = False

    @property
    def needs_no_dropout(self) -> bool:
        return any(NO_DROPOUT_INPUT in obj.loss.extra_inputs for obj in self.objectives)

    def check_columns(self, features: list) -> list:
        """The views of a batch: its 2 or 3 columns, or its one column twice (each its own forward and dropout)."""
        if len(features) not in (1, 2, 3):
            raise CSEError(f"CSELoss({self.loss_name!r}) takes 1 text column (each sentence, encoded twice), 2 "
                           f"(sentence twice, or anchor and positive) or 3 (anchor, positive, hard negative); the data "
                           f"set has {len(features)}.")
        if len(features) == 3 and not self.loss_fn.takes_hard_negatives:
            raise HardNegativesNotTakenError(self.loss_name, "a third column")
        return [features[0], dict(features[0])] if len(features) == 1 else features

    # ------------------------------------------------------------------ sentence-transformers' loss API
    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None):
        features = self.check_columns(list(sentence_features))
        embeddings = [self.model(f)["sentence_embedding"] for f in features]  # one forward each: own dropout masks
        no_dropout = None
        if self.needs_no_dropout:
            with eval_mode(self.model):
                no_dropout = self.model(dict(features[0]))["sentence_embedding"]
        return self.loss_terms(self.compute_loss_from_embeddings(embeddings, labels, no_dropout))

    def loss_terms(self, total: Tensor, terms: Mapping[str, Tensor] | None = None):
        """``total`` itself for one objective; else the weighted terms (``terms``, default: the latest batch's) as a
        dict whose values add up to ``total`` (the first carries the gradient of all, the others are detached):
        :class:`LossTerms`."""
        if len(self.objectives) == 1:
            return total
        terms = self.last_terms if terms is None else terms
        rest = {name: term.detach() for name, term in list(terms.items())[1:]}
        first = next(iter(terms))
        return LossTerms({first: total - sum(rest.values()), **rest})

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None,
                                     no_dropout: Tensor | None = None) -> Tensor:
        """The loss on given embeddings ``[z1, z2(, z_neg)]`` (gathered across processes first)."""
        gather = gather_with_grad if self.gather_across_devices else (lambda t: t)
        names = ("z1", "z2", HARD_NEGATIVE_INPUT)
        z = {name: gather(e) for name, e in zip(names, embeddings)}
        if no_dropout is not None:
            z[NO_DROPOUT_INPUT] = gather(no_dropout)
        rows = z["z1"].shape[0]
        if rows == 1 and self.largest_batch > 1:
            return self.skip_batch_of_one(z)
        self.largest_batch = max(self.largest_batch, rows)
        total, metrics = compute_objectives(self.objectives, z)
        self.last_metrics = metrics
        self.last_terms = {f"{obj.name}_loss": obj.weight * metrics[f"{obj.name}_loss"] for obj in self.objectives}
        return total

    def skip_batch_of_one(self, z: dict[str, Tensor]) -> Tensor:
        """A zero loss (joined to the embeddings' graph, so the backward runs) for a batch of one sentence after
        larger ones: the last batch of an epoch whose size leaves one over, which has no in-batch negatives (a
        first batch of one is refused by the loss: the batch size is 1)."""
        if not self.warned_batch_of_one:
            logger.warning("CSELoss: skipped a batch of 1 sentence, which has no in-batch negatives (the last batch of "
                           "an epoch whose size leaves one sentence over); set dataloader_drop_last=True in the "
                           "training arguments to drop incomplete batches, as hf_cse's trainer does.")
            self.warned_batch_of_one = True
        zero = sum(t.sum() for t in z.values()) * 0.0
        self.last_metrics = {}
        self.last_terms = {f"{obj.name}_loss": zero for obj in self.objectives}
        return zero

    def get_config_dict(self) -> dict[str, Any]:
        params = {k: getattr(self.loss_fn, k) for k in loss_hyperparameters(self.loss_name) if hasattr(self.loss_fn, k)}
        config = {"loss": self.loss_name, **params, "gather_across_devices": self.gather_across_devices}
        if len(self.objectives) > 1:
            config["objectives"] = self.objective_entries
        if self.matryoshka_dims:
            config.update(matryoshka_dims=self.matryoshka_dims, matryoshka_weights=self.matryoshka_weights)
        return config

    @property
    def citation(self) -> str:
        """BibTeX of the papers behind the losses (their ``references``, the main loss's defining paper first, then
        SimCSE's, whose dropout-view training this is)."""
        papers = dict.fromkeys([p for obj in self.objectives for p in obj.loss.references] + [SIMCSE])
        return "\n\n".join(paper.bibtex for paper in papers)


class CachedCSELoss(CSELoss):
    """:class:`CSELoss` in the gradient-cache mode (GradCache, Gao et al., 2021; hf_cse's :mod:`hf_cse.cached` and
    sentence-transformers' ``CachedMultipleNegativesRankingLoss`` work the same way): large batches in the memory of
    ``mini_batch_size`` sentences, with the gradient of the plain loss.

    ``forward`` embeds every column in mini-batches without a graph (recording the RNG state before each, so the
    replay draws the same dropout masks), computes the loss and its gradient with respect to the embeddings, and
    returns the loss with a hook: when the trainer backpropagates it, each mini-batch is embedded again with a
    graph and receives its share of the cached gradient. Same arguments as :class:`CSELoss`, plus
    ``mini_batch_size`` (sentences per encoder pass, default 32).
    """

    #: read by sentence-transformers' MatryoshkaLoss (and AdaptiveLayerLoss): the backward re-embeds the mini-batches
    #: from a hook, after a wrapper's patched forward is gone, so MatryoshkaLoss decorates :meth:`calculate_loss`
    uses_gradient_cache = True

    def __init__(self, model: nn.Module, loss: str = "infonce", mini_batch_size: int = 32, **kwargs: Any) -> None:
        if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, int) or mini_batch_size < 1:
            raise CSEError(f"CachedCSELoss: mini_batch_size must be a positive integer, got {mini_batch_size!r}.")
        super().__init__(model, loss, **kwargs)
        self.mini_batch_size = mini_batch_size

    def _views(self, features: list[dict[str, Tensor]]) -> list[tuple[list[dict[str, Tensor]], bool]]:
        """The encoder passes: each column in train mode, then the first again in eval mode (no-dropout losses)."""
        views = [(split_batch(f, self.mini_batch_size), False) for f in features]
        if self.needs_no_dropout:
            views.append((split_batch(features[0], self.mini_batch_size), True))
        return views

    def _embed(self, chunk: dict[str, Tensor], no_dropout: bool) -> Tensor:
        if no_dropout:
            with eval_mode(self.model):
                return self.model(dict(chunk))["sentence_embedding"]
        return self.model(dict(chunk))["sentence_embedding"]

    def calculate_loss(self, reps: list[list[Tensor]], labels: Tensor | None = None, *,
                       with_backward: bool = False) -> Tensor:
        """The loss on the cached embeddings, sentence-transformers' gradient-cache contract (``CachedLossMixin``;
        ``MatryoshkaLoss`` wraps this method, not the model's forward, for a loss that says ``uses_gradient_cache``):
        ``reps`` holds each view's mini-batch embeddings (the columns, then the no-dropout pass); ``with_backward``
        backpropagates the loss to them (their ``.grad``) and returns it detached, as :meth:`CSELoss.loss_terms`
        (several objectives: their terms, which a wrapper's weighting keeps apart, :class:`LossTerms`)."""
        embeddings = [torch.cat(parts) for parts in reps]
        columns = len(embeddings) - int(self.needs_no_dropout)
        total = self.compute_loss_from_embeddings(embeddings[:columns], labels,
                                                  embeddings[columns] if self.needs_no_dropout else None)
        if not with_backward:
            return total
        total.backward()
        return self.loss_terms(total.detach())

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None):
        features = self.check_columns(list(sentence_features))
        views = self._views(features)
        states: list[list[RandState]] = []
        reps: list[list[Tensor]] = []
        with torch.no_grad():
            for chunks, no_dropout in views:
                states.append([])
                reps.append([])
                for chunk in chunks:
                    states[-1].append(RandState.capture(*[v for v in chunk.values() if isinstance(v, Tensor)]))
                    reps[-1].append(self._embed(chunk, no_dropout).detach().requires_grad_(True))
        with torch.enable_grad():
            out = self.calculate_loss(reps, labels, with_backward=True)  # MatryoshkaLoss: summed over its dims
        total = sum(out.values()) if isinstance(out, Mapping) else out
        grads = [None if all(r.grad is None for r in parts) else
                 torch.cat([torch.zeros_like(r) if r.grad is None else r.grad for r in parts]) for parts in reps]
        after = RandState.capture(*[v for f in features for v in f.values() if isinstance(v, Tensor)])
        carrier = total.detach().requires_grad_(True)
        carrier.register_hook(lambda grad_output: self._replay(views, states, grads, grad_output, after))
        return self.loss_terms(carrier, out if isinstance(out, Mapping) else None)

    def _replay(self, views, states, grads, grad_output: Tensor, after: RandState) -> None:
        """Each mini-batch again, with a graph and its recorded RNG state; backward of (z * cached grad)."""
        with torch.enable_grad():
            for (chunks, no_dropout), chunk_states, grad in zip(views, states, grads, strict=True):
                if grad is None:
                    continue
                start = 0
                for chunk, state in zip(chunks, chunk_states, strict=True):
                    state.restore()
                    z = self._embed(chunk, no_dropout)
                    g = grad[start:start + z.shape[0]].to(z.dtype)
                    (z * g).sum().mul(grad_output.to(z.dtype)).backward()
                    start += z.shape[0]
        after.restore()  # continue the RNG where the first pass left it (the replay rewound it)

    def get_config_dict(self) -> dict[str, Any]:
        return {**super().get_config_dict(), "mini_batch_size": self.mini_batch_size}
