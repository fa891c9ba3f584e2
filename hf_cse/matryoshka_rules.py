"""Matryoshka's rules, with no torch: the dimensions and weights (:func:`check_matryoshka`), and which embedding
training may cut (:class:`hf_cse.models.config.CSEConfig` refuses a config whose loss would train prefixes users
never get). The command line's early checks (:mod:`hf_cse.cli.entry_points`) apply both to the flags before the
model is loaded."""

from __future__ import annotations

import math
from typing import Any

from .errors import CSEError
from .number_lists import DIMS_FIELD, WEIGHTS_FIELD, parse_float_list, parse_int_list


def check_matryoshka(dims: Any, weights: Any = None, hidden_size: int = 0) -> tuple[list[int] | None,
                                                                                     list[float] | None]:
    """The checked dimensions, largest first, and their weights (in the same order; default 1 each, as
    sentence-transformers' ``MatryoshkaLoss``). ``hidden_size`` (0 = unknown) bounds the dimensions."""
    dims, weights = parse_int_list(dims), parse_float_list(weights)
    if dims is None:
        if weights is not None:
            raise CSEError(f"{WEIGHTS_FIELD} is set without {DIMS_FIELD}: give the dimensions too, e.g. "
                           "matryoshka_dims 384,256,128,64.")
        return None, None
    if not dims:
        raise CSEError(f"{DIMS_FIELD} is empty; give one or more dimensions, e.g. 384,256,128,64.")
    bad = [d for d in dims if d < 1 or (hidden_size and d > hidden_size)]
    if bad:
        bound = f"be in 1..{hidden_size} (the embedding's size)" if hidden_size else "be at least 1"
        raise CSEError(f"{DIMS_FIELD}: {bad} out of range; each dimension must {bound}.")
    if len(set(dims)) != len(dims):
        raise CSEError(f"{DIMS_FIELD}: {dims} repeats a dimension; give each once.")
    weights = [1.0] * len(dims) if weights is None else weights
    if len(weights) != len(dims):
        raise CSEError(f"{WEIGHTS_FIELD} has {len(weights)} values for {len(dims)} dimensions ({dims}); give one "
                       "weight per dimension, in the same order.")
    if any(not math.isfinite(w) or w <= 0 for w in weights):
        raise CSEError(f"{WEIGHTS_FIELD}: {weights}; each weight must be a finite number > 0.")
    order = sorted(range(len(dims)), key=lambda i: -dims[i])
    return [dims[i] for i in order], [weights[i] for i in order]


def head_error(projector: str) -> CSEError:
    """The one line for Matryoshka dimensions trained through a projection head the exported embedding skips."""
    return CSEError(
        f"{DIMS_FIELD} trains prefixes of the training embedding, which goes through the {projector} projection "
        "head; the test-time (exported) embedding is the pooled vector before that head, whose prefixes the loss "
        "never sees. Add projector='none' (or, with pooler_type cls, mlp_only_train=False to keep the head at test "
        "time).")


def check_head_flags(dims, projector: str, pooler_type: str | None, mlp_only_train) -> None:
    """The command line's values, before the encoder is known: ``pooler_type`` None follows the encoder (``cls``
    for BERT), and ``mlp_only_train`` may be text (``"False"``). Refused where no encoder's pooling can keep the
    head at test time: the head is kept only by pooler ``cls`` without ``mlp_only_train``
    (:func:`hf_cse.models.pooling.pooler_at_test`)."""
    if not dims or projector == "none":
        return
    head_only_in_training = mlp_only_train is True or str(mlp_only_train).lower() in ("true", "yes", "t", "y", "1")
    if head_only_in_training or (pooler_type is not None and pooler_type != "cls"):
        raise head_error(projector)
