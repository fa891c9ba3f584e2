"""Whether a tokenizer fits the run: the room a ``max_seq_length`` leaves for the text beside the special tokens and
the prompt (:func:`check_room_for_text`), sentences it cuts to the same tokens (:func:`warn_cut_alike`), and
whether it is the encoder's (:func:`check_training_tokenizer`): every token of the tokenizer saved with the encoder
keeps its id (tokens added beside them are fine). A tokenizer of another model whose ids still fit the embedding
matrix (a small vocabulary given to a large model) reads the wrong embedding rows and nothing fails: training and
scoring warn where it leaves many rows unread (:func:`warn_unread_embeddings`). Ids past the matrix are refused
elsewhere, in training by :mod:`hf_cse.data_checks`, in scoring by
:func:`hf_cse.data_checks.check_ids_in_vocabulary`."""

from __future__ import annotations

import logging

from transformers import PreTrainedTokenizerBase

from .checks import InputError, resolved_path
from .errors import CSEError
from .files import DataError

logger = logging.getLogger(__name__)


def vocabulary_difference(tokenizer, reference, reference_name: str, added: bool = True) -> str | None:
    """How ``tokenizer``'s vocabulary differs from ``reference``'s, said for a message: the tokens of ``reference``
    it lacks or maps to another id (the first in ``reference``'s id order as the example); None where every one keeps
    its id. ``added=False`` compares ``reference``'s own vocabulary only (``vocab_size``: not the tokens added to
    it). Each vocabulary is read once (a large one takes a tenth of a second)."""
    vocab, expected = tokenizer.get_vocab(), reference.get_vocab()
    compared = expected if added else {token: i for token, i in expected.items() if i < reference.vocab_size}
    moved = sorted((token for token, i in compared.items() if vocab.get(token) != i), key=compared.get)
    if not moved:
        return None
    return (f"its vocabulary differs from the tokenizer saved with {reference_name}: {len(moved)} of its "
            f"{len(expected)} tokens are missing or have another id (e.g. {moved[0]!r}: {vocab.get(moved[0])} "
            f"instead of {expected[moved[0]]})")


#: a tokenizer with more tokens than this beside its special and added ones spells text: its vocabulary is not read
#: to tell it from a stand-in (the stand-ins have none or one, T5's word-start mark)
STAND_IN_PLAIN_TOKENS = 64


def is_stand_in(tokenizer) -> bool:
    """Whether ``tokenizer`` is the stand-in transformers (5.x) builds where a folder or Hub repo holds no tokenizer
    files (weights and config.json only, or a tokenizer_config.json without a vocabulary): the class its config
    names, with no vocabulary beside its special tokens (BERT's 5, GPT-2's end of text, T5's sentinels and "▁").
    No tokenizer of a model is that: it could spell no word, so its ids are no encoder's. Anything that cannot be
    read as a transformers tokenizer is not judged (False)."""
    try:
        added = (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()
        # added tokens that are no special ones are words (a vocabulary built by add_tokens)
        reserved = set(tokenizer.all_special_tokens) | {str(t) for t in added if getattr(t, "special", False)}
        if len(tokenizer) > len(reserved) + STAND_IN_PLAIN_TOKENS:
            return False
        vocab = tokenizer.get_vocab()
    except (AttributeError, NotImplementedError, TypeError):
        return False
    return not any(token not in reserved and any(c.isalnum() for c in token) for token in vocab)


def no_tokenizer_in(place, tokenizer) -> str:
    """The problem of a stand-in (:func:`is_stand_in`) loaded from ``place``, for a message."""
    return (f"{place} holds no tokenizer (what transformers loads from it is a stand-in {type(tokenizer).__name__} "
            f"of only {len(tokenizer)} special token(s))")


def check_not_stand_in(tokenizer, place, fix: str, error: type[CSEError] = InputError) -> None:
    """Refuse, as ``error`` in one line ending in ``fix``, a ``tokenizer`` loaded from ``place`` that is a stand-in
    (:func:`is_stand_in`): what it tokenizes would read a few special tokens' embeddings."""
    if is_stand_in(tokenizer):
        raise error(f"{no_tokenizer_in(place, tokenizer)}: {fix}.")


def _saved_tokenizer(name: str):
    """The tokenizer saved in folder ``name`` or cached for Hub id ``name``; None where none can be read here, or
    where what loads is a stand-in (:func:`is_stand_in`: there is none to compare with)."""
    from transformers import AutoTokenizer

    try:  # no download: a check that cannot read its reference here is left out
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as err:  # no tokenizer there, custom code, an old format: nothing to compare with
        logger.debug("no saved tokenizer to compare with at %s (%s: %s)", name, type(err).__name__, err)
        return None
    if is_stand_in(tokenizer):
        logger.debug("no saved tokenizer to compare with: %s", no_tokenizer_in(name, tokenizer))
        return None
    return tokenizer


#: a tokenizer leaving more than this share of the embedding rows unread (and more than UNREAD_ROWS of them) is said
#: to be perhaps another model's: models pad their matrix for speed by far less (T5 32,128 rows for 32,100 tokens,
#: Qwen2.5 under 1%, ModernBERT 88 rows), while BERT's 30,522-token tokenizer on RoBERTa's 50,265 rows leaves 39% unread
UNREAD_SHARE = 0.1
UNREAD_ROWS = 1000


def warn_unread_embeddings(tokenizer, model, name: str) -> bool:
    """Warn, once per call, where ``tokenizer`` has far fewer tokens than ``model`` has embedding rows
    (:data:`UNREAD_SHARE`, :data:`UNREAD_ROWS`): the sign of another model's, smaller, tokenizer beside the weights,
    whose ids fit the matrix and so read the wrong rows without any error (a larger one is refused once its ids run
    past the rows). Only a warning: nothing here tells such a tokenizer from the model's own with an oversized matrix.
    ``name``: the model, for the message. Returns whether it warned."""
    from .encoders import embedding_rows

    rows = embedding_rows(model)
    try:
        tokens = len(tokenizer)
    except TypeError:  # not a transformers tokenizer: nothing to count
        return False
    if rows is None or rows - tokens <= max(UNREAD_ROWS, UNREAD_SHARE * rows):
        return False
    logger.warning("%s: its tokenizer has %d tokens but the model embeds %d, so %d rows are never read: the sign of "
                   "another model's tokenizer, whose ids would read the wrong rows without an error. If it is not the "
                   "model's own, save the model's tokenizer beside its weights.", name, tokens, rows, rows - tokens)
    return True


def check_training_tokenizer(tokenizer, model) -> None:
    """Refuse a ``tokenizer`` (``processing_class``) that is not the one saved with ``model``'s weights or with the
    encoder it started from (``config.base_encoder``), in one line naming both; the tokenizer loaded from the same
    folder or Hub id is not read again. Nothing is compared where no saved tokenizer can be read here (a folder of
    weights only: what transformers loads from it is a stand-in of a few special tokens, no reference)."""
    given = str(getattr(tokenizer, "name_or_path", "") or "")
    places = [str(p) for p in (getattr(model, "name_or_path", None), getattr(model.config, "base_encoder", None)) if p]
    same_place = any(given and resolved_path(given) == resolved_path(place) for place in places)
    warn_unread_embeddings(tokenizer, model, places[0] if places else type(model).__name__)
    if not places or not hasattr(tokenizer, "get_vocab") or same_place:
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


#: fewer sentence tokens than this left beside the prompt: warned (most of each sentence is cut off)
FEW_SENTENCE_TOKENS = 8


def check_room_for_text(tokenizer: PreTrainedTokenizerBase, max_seq_length: int, prompt: str | None = None,
                        prompt_fixed: bool = False, scoring: bool = False) -> None:
    """Refuse a ``max_seq_length`` that leaves no token of a sentence once the tokenizer's special tokens and the
    ``prompt`` are in (every training input would be the same: nothing of the text is trained on); warn when only a
    few are left. Needs the tokenizer only, so it runs before the model is loaded. ``prompt_fixed``: the prompt is a
    trained model's own (the export), so only the length is offered as the fix. ``scoring``: the length sentences
    are scored at (evaluation), where the papers cut nothing, so leaving it out is the fix offered."""
    special = tokenizer.num_special_tokens_to_add()
    taken = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) if prompt else 0
    room = max_seq_length - special - taken
    owner = "the model's " if prompt_fixed or scoring else ""
    what = f"{owner}prompt takes {taken} tokens and " if taken else ""
    shorter = " or a shorter prompt" if taken and not (prompt_fixed or scoring) else ""
    if room < 1:
        # the papers train at 32 tokens, special tokens included (SimCSE's max_seq_length), and score uncut text
        fix = (f"Leave max_seq_length out to score whole sentences (up to the model's limit), or give more than "
               f"{special + taken}" if scoring else
               f"Use max_seq_length {32 + taken}{shorter} (the papers' 32{', plus the prompt' if taken else ''})")
        raise DataError(f"max_seq_length {max_seq_length} leaves no token for the sentences: {what}the tokenizer "
                        f"adds {special} special token(s). {fix}.",
                        fields=() if prompt_fixed or scoring else ("prompt",))
    if taken and room < FEW_SENTENCE_TOKENS:
        logger.warning("%smax_seq_length %d leaves %d token(s) of each sentence; raise max_seq_length%s",
                       what[:1].upper() + what[1:], max_seq_length, room, "" if prompt_fixed else " or shorten prompt")


def check_tokenized_length(tokenizer: PreTrainedTokenizerBase, max_seq_length, prompt: str | None = None) -> None:
    """A ``max_seq_length`` to tokenize with: an integer of at least 2 that leaves room for text beside the special
    tokens and the prompt (:func:`check_room_for_text`); 0 would turn truncation off, a string fail in the tokenizer."""
    from .encoders import seq_length_problem

    if not isinstance(max_seq_length, int) or isinstance(max_seq_length, bool):
        raise DataError(f"max_seq_length must be an integer, got {max_seq_length!r}.", fields=("max_seq_length",))
    problem = seq_length_problem(max_seq_length, None)
    if problem:
        raise DataError(f"{problem}.", fields=("max_seq_length",))
    check_room_for_text(tokenizer, max_seq_length, prompt)


#: the share of the training sentences cut to another's tokens above which the run says so
CUT_ALIKE_SHARE = 0.01


def warn_cut_alike(tokenized, max_seq_length: int) -> int:
    """Sentences that differ but are cut to the same tokens by ``max_seq_length`` (a short length: "the cat sat" and
    "the cat ran" both become "[CLS] the [SEP]" at 3) are one input: each other's false negatives in a batch, which
    the no-duplicates sampler, comparing texts, does not keep apart. Said in one warning when more than
    :data:`CUT_ALIKE_SHARE` of the rows are; returns their count. Reads only the rows cut at the length."""
    texts_of: dict[int, set[int]] = {}
    for batch in tokenized.select_columns(["text", "input_ids"]).iter(batch_size=10_000):
        for text, ids in zip(batch["text"], batch["input_ids"]):
            if len(ids) >= max_seq_length:
                texts_of.setdefault(hash(tuple(ids)), set()).add(hash(text))
    alike = sum(len(texts) for texts in texts_of.values() if len(texts) > 1)
    if alike > CUT_ALIKE_SHARE * max(len(tokenized), 1):
        logger.warning("max_seq_length %d cuts %d of %d training sentences to the same tokens as another sentence: "
                       "each such pair is one input, a false negative of itself in a batch; raise max_seq_length "
                       "(the papers use 32)", max_seq_length, alike, len(tokenized))
    return alike
