"""Whether a tokenizer is the encoder's: every token of the tokenizer saved with the encoder keeps its id (tokens
added beside them are fine). A tokenizer of another model whose ids still fit the embedding matrix (a small
vocabulary given to a large model) reads the wrong embedding rows, and training, scoring and export go on silently
on nonsense; ids past the matrix are refused elsewhere (:mod:`hf_cse.data_checks`)."""

from __future__ import annotations

import logging
from pathlib import Path

from .files import DataError

logger = logging.getLogger(__name__)


def moved_tokens(tokenizer, reference, added: bool = True) -> list[str]:
    """The tokens of ``reference`` that ``tokenizer`` lacks or maps to another id, in ``reference``'s id order;
    ``added=False`` compares ``reference``'s own vocabulary only (``vocab_size``: not the tokens added to it)."""
    vocab, expected = tokenizer.get_vocab(), reference.get_vocab()
    if not added:
        expected = {token: i for token, i in expected.items() if i < reference.vocab_size}
    return sorted((token for token, i in expected.items() if vocab.get(token) != i), key=expected.get)


def vocabulary_difference(tokenizer, reference, reference_name: str, added: bool = True) -> str | None:
    """How ``tokenizer``'s vocabulary differs from ``reference``'s (:func:`moved_tokens`), said for a message; None
    where every token of ``reference`` keeps its id."""
    moved = moved_tokens(tokenizer, reference, added)
    if not moved:
        return None
    expected = reference.get_vocab()
    return (f"its vocabulary differs from the tokenizer saved with {reference_name}: {len(moved)} of its "
            f"{len(expected)} tokens are missing or have another id (e.g. {moved[0]!r}: "
            f"{tokenizer.get_vocab().get(moved[0])} instead of {expected[moved[0]]})")


def _same_place(a: str, b: str) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return a == b


def _saved_tokenizer(name: str):
    """The tokenizer saved in folder ``name`` or cached for Hub id ``name``; None where none can be read here."""
    from transformers import AutoTokenizer

    try:  # no download: a check that cannot read its reference here is left out
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as err:  # no tokenizer there, custom code, an old format: nothing to compare with
        logger.debug("no saved tokenizer to compare with at %s (%s: %s)", name, type(err).__name__, err)
        return None


def check_training_tokenizer(tokenizer, model) -> None:
    """Refuse a ``tokenizer`` (``processing_class``) that is not the one saved with ``model``'s weights or with the
    encoder it started from (``config.base_encoder``), in one line naming both; the tokenizer loaded from the same
    folder or Hub id is not read again. Nothing is compared where no saved tokenizer can be read here."""
    given = str(getattr(tokenizer, "name_or_path", "") or "")
    places = [str(p) for p in (getattr(model, "name_or_path", None), getattr(model.config, "base_encoder", None)) if p]
    if not places or not hasattr(tokenizer, "get_vocab") or any(given and _same_place(given, p) for p in places):
        return
    for place in dict.fromkeys(places):
        reference = _saved_tokenizer(place)
        if reference is None:
            continue
        difference = vocabulary_difference(tokenizer, reference, place, added=False)
        if difference:
            raise DataError(f"processing_class is not the encoder's tokenizer: {difference}, so the encoder would "
                            f"read other tokens' embeddings. Pass AutoTokenizer.from_pretrained({place!r}).")
        return
