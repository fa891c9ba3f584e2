"""Which embedding Matryoshka training may cut, with no torch: :class:`hf_cse.models.config.CSEConfig` refuses a
config whose loss would train prefixes users never get, and the command line's early checks
(:mod:`hf_cse.cli.entry_points`) refuse the flags that must lead there before the model is loaded."""

from __future__ import annotations

from .errors import CSEError
from .number_lists import DIMS_FIELD


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
