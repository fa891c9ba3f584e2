"""Poolers: how a sentence vector is read off an encoder's hidden states (SimCSE's names).

* ``cls`` / ``cls_before_pooler``: the last layer's first token (the first non-padding one, found from the attention
  mask as sentence-transformers' ``cls`` does, so a left-padded batch reads it too). They differ only in what the
  *model* does afterwards: with ``cls`` an hf_cse model applies its trained MLP at test time,
  ``cls_before_pooler`` returns the raw [CLS] vector (what the papers report for unsup models).
* ``avg``: mean of the last layer over non-padding tokens.
* ``avg_first_last``: mean of (first layer + last layer) / 2. "First layer" is ``hidden_states[1]``
  as in SimCSE's ``models.py``; the DiffCSE / ImSimCSE / GS forks use ``hidden_states[0]`` (the
  embedding output) -- pass ``first_layer=0`` for those.
* ``avg_top2``: mean of the last two layers.
* ``last``: the last layer at each row's last non-padding token (found from the attention mask, so left and right
  padding both work; an encoder whose learned positions count the padding, GPT-2, trains padded on the right:
  :func:`hf_cse.padding.pad_where_positions_allow`): the usual pooling of decoder (LLM) embedders, whose last token
  has seen the whole sentence.
* ``max``: element-wise maximum of the last layer over non-padding tokens (sentence-transformers' ``max``).

A sentence-transformers encoder brings its own pooling (its ``Pooling`` module: ``mean`` -> ``avg``, ``cls`` ->
``cls``, ``max`` -> ``max``, ``lasttoken`` -> ``last``); :func:`hf_cse.encoders.own_pooling` reads it and
:func:`choose_pooling` makes it the default, so training keeps the pooling the encoder was trained with.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..encoders import OwnPooling, own_pooling
from ..errors import CSEError

POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2", "max", "last")
#: hf_cse pooler -> sentence-transformers Pooling mode, for the poolers that have one (read both ways: the export
#: writes the test pooler's mode, and an encoder's own mode becomes the training pooler)
ST_POOLING_MODES = {"cls": "cls", "cls_before_pooler": "cls", "avg": "mean", "max": "max", "last": "lasttoken"}
#: sentence-transformers Pooling mode -> the hf_cse pooler that computes it without a head (its cls mode is the raw
#: [CLS] vector: cls_before_pooler)
POOLER_OF_ST_MODE = {mode: name for name, mode in ST_POOLING_MODES.items() if name != "cls"}
#: sentence-transformers Pooling mode -> the pooler an encoder with that pooling of its own trains with; unlike
#: :data:`POOLER_OF_ST_MODE`, its cls mode is ``cls``: the head trains on [CLS] (the test pooler drops a training-only
#: one, :func:`pooler_at_test`)
TRAINING_POOLER_OF_ST_MODE = {mode: name for name, mode in ST_POOLING_MODES.items() if name != "cls_before_pooler"}
#: the papers' pooler for a plain Hugging Face encoder (raw BERT/RoBERTa): [CLS] with the training-only MLP
PAPERS_POOLER = "cls"


def check_pooler(pooler: str) -> str:
    if pooler not in POOLERS:
        meant = POOLER_OF_ST_MODE.get(pooler)  # sentence-transformers' mode names: 'mean', 'lasttoken'
        said = f" (sentence-transformers' {pooler!r} is {meant!r} here)" if meant and meant != pooler else ""
        raise CSEError(f"Unknown pooler {pooler!r}{said}. Valid poolers: {', '.join(POOLERS)}.")
    return pooler


def applies_projector(pooler: str) -> bool:
    """What the test-time pooler ``"cls"`` means, decided here only: the pooled [CLS] vector goes through the
    model's trained head (an hf_cse projector; a plain encoder's own pooler layer, ``pooler_output``). Every other
    pooler (``cls_before_pooler`` included) returns the encoder's vector as it is."""
    return check_pooler(pooler) == "cls"


def pooler_at_test(pooler_type: str, mlp_only_train: bool, projector: str) -> str:
    """The pooler of a model's test (and exported) embedding: raw [CLS] for a ``cls`` model whose head is used in
    training only (``mlp_only_train``) or that has none; else its training pooler (:attr:`CSEConfig.test_pooler`)."""
    if applies_projector(pooler_type) and (mlp_only_train or projector == "none"):
        return "cls_before_pooler"
    return pooler_type


def exported_pooler(test_pooler: str, head_kept: bool) -> str | None:
    """The pooler name (``run_eval.py``'s ``pooler``) of the embedding an export ships: the test pooler, or ``cls``
    when the training-only head is kept after [CLS] (``keep_projector``); None when no pooler computes it (a head kept
    after another pooler)."""
    if not head_kept or applies_projector(test_pooler):
        return test_pooler
    return "cls" if test_pooler == "cls_before_pooler" else None


def needs_hidden_states(pooler: str) -> bool:
    """Whether the pooler reads layers other than the last (the encoder must output hidden states)."""
    return check_pooler(pooler) in ("avg_first_last", "avg_top2")


def _masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)


def pool(
    pooler: str,
    attention_mask: torch.Tensor,
    last_hidden_state: torch.Tensor,
    hidden_states: tuple[torch.Tensor, ...] | None = None,
    first_layer: int = 1,
) -> torch.Tensor:
    """Reduce ``(B, L, H)`` hidden states to ``(B, H)`` sentence vectors."""
    check_pooler(pooler)
    if pooler in ("cls", "cls_before_pooler"):  # the first real token: position 0 unless the batch is left-padded
        first = attention_mask.int().argmax(1)
        return last_hidden_state[torch.arange(last_hidden_state.shape[0], device=first.device), first]
    if pooler == "avg":
        return _masked_mean(last_hidden_state, attention_mask)
    if pooler == "max":
        padding = attention_mask.unsqueeze(-1) == 0
        return last_hidden_state.masked_fill(padding, torch.finfo(last_hidden_state.dtype).min).amax(1)
    if pooler == "last":  # position of the last 1 in each mask row: L - 1 - (index of the first 1 from the right)
        last = attention_mask.shape[1] - 1 - attention_mask.flip(1).int().argmax(1)
        return last_hidden_state[torch.arange(last_hidden_state.shape[0], device=last.device), last]
    if hidden_states is None:
        raise CSEError(f"pooler {pooler!r} needs the encoder's hidden_states (output_hidden_states=True).")
    if pooler == "avg_first_last":
        return _masked_mean((hidden_states[first_layer] + hidden_states[-1]) / 2.0, attention_mask)
    return _masked_mean((hidden_states[-2] + hidden_states[-1]) / 2.0, attention_mask)


@dataclass(frozen=True)
class PoolingChoice:
    """The pooling a run trains and tests with, and why (``source``: said in the log, recorded in the config and
    the model card)."""

    pooler_type: str
    normalize: bool
    source: str
    #: the sentence-transformers encoder's own pooler_type where a given one replaced it (its users measured the own
    #: one; the papers' [CLS] on all-MiniLM-L6-v2 took STS-B from 82.05 to 76.01): a warning where a preset chose it
    replaced_own: str | None = None

    def config_fields(self) -> dict:
        """The config fields that record this choice."""
        return {"pooler_type": self.pooler_type, "normalize": self.normalize, "pooler_source": self.source}


def _describe_own(own: OwnPooling) -> str:
    return own.mode + (" + Normalize" if own.normalize else "")


def choose_pooling(own: OwnPooling | None, pooler_type: str | None = None, normalize: bool | None = None,
                   given_by: str = "pooler_type", normalize_given_by: str | None = None) -> PoolingChoice:
    """The pooling of a run on an encoder whose own sentence-transformers pooling is ``own`` (None: a plain Hugging
    Face encoder). A ``pooler_type`` / ``normalize`` given (by ``given_by`` / ``normalize_given_by``: a flag, a
    preset, the caller; ``source`` names the second too where it is another and changed the encoder's default) wins,
    each on its own; otherwise a sentence-transformers encoder keeps its own pooling and Normalize -- what it was
    trained with, so that training starts from the model users measured -- and a plain encoder gets the papers'
    [CLS]."""
    # named where the value given is not the one the encoder would have had (its own Normalize; off for a plain one),
    # so that a run started again from its record, which gives every value, describes its pooling as it did
    normalize_by = normalize_given_by if normalize is not None and normalize != bool(own and own.normalize) else None
    if pooler_type is not None:
        check_pooler(pooler_type)
        source = f"set by {given_by}"
        if normalize_by and normalize_by != given_by:
            source += f"; normalize set by {normalize_by}"
        replaced = own is not None and ST_POOLING_MODES.get(pooler_type) != own.mode
        if replaced:
            source += f"; the encoder's own sentence-transformers pooling is {_describe_own(own)}"
        keep_normalize = (own is not None and own.normalize) if normalize is None else normalize
        # the own pooler's name, or its mode where hf_cse has none
        replaced_own = TRAINING_POOLER_OF_ST_MODE.get(own.mode, own.mode) if replaced else None
        return PoolingChoice(pooler_type, keep_normalize, source, replaced_own=replaced_own)
    if own is None:
        source = "the papers' [CLS] pooling (a plain Hugging Face encoder has no pooling of its own)"
        return PoolingChoice(PAPERS_POOLER, bool(normalize),
                             source + (f"; normalize set by {normalize_by}" if normalize_by else ""))
    if own.mode not in TRAINING_POOLER_OF_ST_MODE:
        raise CSEError(f"the encoder pools by {own.mode!r} (its sentence-transformers Pooling module), which hf_cse "
                       f"does not implement; choose one with pooler_type ({', '.join(POOLERS)}).")
    keep_normalize = own.normalize if normalize is None else normalize
    source = f"the encoder's own sentence-transformers pooling ({_describe_own(own)})"
    if normalize is not None and normalize != own.normalize:
        source += f", normalize set to {normalize}" + (f" by {normalize_by}" if normalize_by else "")
    if own.unsupported_modules:
        source += f"; its {', '.join(own.unsupported_modules)} module(s) after pooling are not trained or exported"
    return PoolingChoice(TRAINING_POOLER_OF_ST_MODE[own.mode], keep_normalize, source)


def describe_pooling(choice: PoolingChoice, representation: str = "") -> str:
    """The log line's words, e.g. ``avg + normalize (the encoder's own sentence-transformers pooling ...)``;
    ``representation``: what a method embeds instead of the pooler's output (its ``own_representation``)."""
    normalize = " + normalize" if choice.normalize else ""
    if representation:
        return (f"{representation}{normalize}; pooler_type {choice.pooler_type} decides only whether the projection "
                "head applies at test time")
    return f"{choice.pooler_type}{normalize} ({choice.source})"


def resolve_pooling(name_or_path: str, pooler_type: str | None = None, normalize: bool | None = None,
                    given_by: str = "pooler_type", revision: str | None = None,
                    normalize_given_by: str | None = None) -> PoolingChoice:
    """:func:`choose_pooling` for the encoder at ``name_or_path`` (a folder or Hub id; reads its ``modules.json``
    and Pooling config only, no weights)."""
    return choose_pooling(own_pooling(name_or_path, revision), pooler_type, normalize, given_by, normalize_given_by)
