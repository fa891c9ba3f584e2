"""Checks of the training set :class:`~hf_cse.trainer.ContrastiveTrainer` is given, made when the trainer is built and
before any forward pass, each failing with one :class:`~hf_cse.files.DataError` line that names the problem and the
fix, instead of a traceback from inside torch at the first step:

* what hf_cse's collators read: a data set (not a list of sentences, a path or a dict of columns) whose rows hold
  token ids (``input_ids``: :func:`hf_cse.data.tokenize_dataset` was run);
* what the encoder can embed: no row longer than its position limit (:func:`hf_cse.encoders.encoder_max_length`)
  and no token id outside its vocabulary (the rows of its input embeddings).

Text columns none of this reads (``text_b`` beside ``text``) are said in one warning with how to use or drop them
(:func:`warn_unread_text_columns`): the run would train on the other columns alone.

The cost stays small for any size: an Arrow-backed ``datasets.Dataset`` is checked whole when the trainer is built,
by pyarrow reductions over its token columns (no row is turned into Python objects). Data that cannot be read ahead
(a stream, a torch data set, a list of rows) is checked batch by batch instead, as the loader hands the rows to the
collator, on the CPU and before the batch goes to the device (:class:`LimitCheckedCollator`): the step itself never
reads a device value on the host.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checks import InputError
from .data import PAIR_COLUMNS, PAIR_VIEWS, TwoViewCollator
from .encoders import embedding_rows, method_max_length
from .files import DataError
from .text_files import unread_text_columns_of

logger = logging.getLogger("hf_cse.trainer")

#: the token columns of the views a collator may read, in view order (anchor, positive, hard negative)
TOKEN_COLUMNS = tuple(f"{prefix}input_ids" for prefix in PAIR_VIEWS)
#: how to tokenize, named in the refusals (the library's own functions, as a Python caller writes them)
TOKENIZE = "hf_cse.data.tokenize_dataset"
TOKENIZE_PAIRS = "hf_cse.data.tokenize_pair_dataset"


@dataclass(frozen=True)
class EncoderLimits:
    """What the encoder can embed: rows of at most ``max_length`` tokens (its position limit) and token ids below
    ``vocab_size`` (its input embeddings' rows); None where unknown (nothing is checked against it)."""

    max_length: int | None
    vocab_size: int | None
    #: how messages name ``max_length`` (with it; "": the encoder's position limit): a method may take shorter rows
    #: than its encoder (DiffCSE's insert edits)
    length_limit: str = ""
    #: where the trainer cut the text it tokenized (the arguments' ``max_seq_length``); None: the caller's own tokens
    cut_at: int | None = None

    @classmethod
    def of_model(cls, model) -> EncoderLimits:
        max_length, length_limit = method_max_length(model), ""
        if hasattr(model, "training_row_limit"):
            max_length, length_limit = model.training_row_limit(max_length)
        return cls(max_length, embedding_rows(model), length_limit)

    def refusal(self, longest: int, lowest: int | None, highest: int | None, where: str) -> DataError | None:
        """The one-line refusal of data whose longest row has ``longest`` tokens and whose ids span ``lowest`` to
        ``highest`` (``where``: "the training set" or "a training batch"); None when the encoder takes it."""
        limit = f" and max_seq_length {self.max_length} or less" if self.max_length else ""
        if self.vocab_size is not None and highest is not None and (highest >= self.vocab_size or lowest < 0):
            bad = highest if highest >= self.vocab_size else lowest
            return DataError(f"{where} holds token id {bad}, outside the encoder's vocabulary of {self.vocab_size} "
                             f"ids (0-{self.vocab_size - 1}): it was tokenized with another tokenizer. Tokenize the "
                             f"sentences with {TOKENIZE}, the encoder's own tokenizer (AutoTokenizer.from_pretrained "
                             f"of the encoder){limit}.")
        if self.max_length is not None and longest > self.max_length:
            named = self.length_limit or f"the encoder's position limit of {self.max_length}"
            fix = (f"tokenize the sentences with {TOKENIZE}, the encoder's own tokenizer{limit}" if self.cut_at is None
                   else f"the trainer cut the text at max_seq_length {self.cut_at}: set max_seq_length="
                        f"{self.max_length} or less in the training arguments")
            return DataError(f"{where} has rows of up to {longest} tokens, more than {named}: {fix}.",
                             fields=("max_seq_length",))
        return None


def reads_token_rows(collator) -> bool:
    """Whether ``collator`` is one of hf_cse's (:class:`~hf_cse.data.TwoViewCollator` and its subclasses, maybe
    inside :class:`~hf_cse.masking.MaskedLMCollator`), which pad each row's ``input_ids``. A collator of one's own
    may tokenize text itself: its data is left as it is."""
    return isinstance(getattr(collator, "collator", collator), TwoViewCollator)


def check_own_collator(collator, dataset, model=None) -> bool:
    """Whether the trainer was given a ``data_collator`` of one's own (it gets the rows the trainer tokenized, text
    kept beside the tokens). One of transformers' (``DataCollatorWithPadding``) with a training set of text is
    refused: it fails on the kept text inside transformers at the first batch, and makes one view of each row. So is
    one of hf_cse's other than the collator ``model``'s method needs (its ``needs_collator``: DiffCSE's forward
    failed on another's batches at the first step, after the step-0 dev scoring); a collator that is not hf_cse's may
    make the method's batches in its own way, and is left to the step."""
    if collator is None:
        return False
    needed = getattr(type(model), "needs_collator", None)
    given = getattr(collator, "collator", collator)  # inside MaskedLMCollator
    if needed is not None and reads_token_rows(collator) and not isinstance(given, needed):
        method = type(model)
        raise DataError(f"data_collator is {type(given).__name__}, and {method.method_name()} trains on the batches "
                        f"of its own collator, {needed.__name__}: leave data_collator out (the trainer makes it), or "
                        f"pass {method.__name__}.collator(tokenizer, model.config).")
    columns = getattr(dataset, "column_names", None) or ()
    made_by = getattr(collator, "__module__", None) or type(collator).__module__
    if made_by.startswith("transformers.") and "text" in columns and "input_ids" not in columns:
        name = getattr(collator, "__name__", type(collator).__name__)
        raise DataError(f"data_collator {name} is transformers' and the training set holds text: leave "
                        "data_collator out (the trainer tokenizes the text column for the method's collator, which "
                        "makes the views each method trains on), or pass one of hf_cse's, e.g. "
                        "model.collator(tokenizer, model.config).")
    return True


#: the columns a tokenizer writes beside the token ids: a row with one of them but no input_ids was tokenized, and
#: its ids are under another name
TOKEN_COMPANIONS = ("attention_mask", "token_type_ids")


def _not_tokenized(columns) -> DataError:
    pairs = "positive" in columns
    companions = [c for c in TOKEN_COMPANIONS if c in columns]
    if companions and "text" not in columns:
        others = [c for c in columns if c not in TOKEN_COMPANIONS and not c.startswith(PAIR_VIEWS[1:])
                  and c not in PAIR_COLUMNS]
        rename = (f" (dataset.rename_column({others[0]!r}, 'input_ids'))" if len(others) == 1
                  else " (dataset.rename_column)")  # the one other column is the ids' (a label's, among several)
        return DataError(f"the training set looks tokenized ({' and '.join(companions)} present) but has no input_ids "
                         f"(its columns: {', '.join(map(str, columns))}): name its token ids' column input_ids"
                         f"{rename}.")
    if "text" in columns:  # a collator of one's own without processing_class: the trainer had no tokenizer
        return DataError(f"the training set's text column is not tokenized (no input_ids): pass processing_class="
                         f"tokenizer for the trainer to tokenize it, or tokenize it first with "
                         f"{TOKENIZE_PAIRS if pairs else TOKENIZE}(dataset, tokenizer).")
    return DataError(f"the training set has no input_ids (its columns: {', '.join(map(str, columns)) or 'none'}): it "
                     "is not tokenized. Name its sentence column 'text' (dataset.rename_column) for the trainer to "
                     f"tokenize it, or tokenize it first with {TOKENIZE_PAIRS if pairs else TOKENIZE}(dataset, "
                     "tokenizer).")


def _not_a_data_set(what: str) -> DataError:
    return DataError(f"train_dataset is {what}, not a data set: pass datasets.Dataset.from_dict({{'text': "
                     "sentences}) (the trainer tokenizes its text column), or read a file of sentences with "
                     "hf_cse.data.load_train_dataset(train_file).")


def check_train_rows(dataset) -> None:
    """``dataset`` is a data set whose rows hold ``input_ids``, as hf_cse's collators read them. Checked here as far
    as it costs nothing (the column names, a list's first row); rows of a stream are checked as they are collated
    (:class:`LimitCheckedCollator`)."""
    if isinstance(dataset, (str, bytes, os.PathLike)):
        raise _not_a_data_set(f"a path ({os.fsdecode(dataset)!r:.80})")
    columns = getattr(dataset, "column_names", None)
    if isinstance(columns, Mapping):  # a DatasetDict: {split: columns}
        split = next(iter(columns), "train")
        raise DataError(f"train_dataset is a DatasetDict (splits: {', '.join(columns)}), not one data set: pass one "
                        f"split, e.g. dataset[{split!r}], tokenized with {TOKENIZE}(dataset, tokenizer).")
    if isinstance(dataset, Mapping):  # a dict of columns: int indexing fails inside the data loader
        raise _not_a_data_set(f"a dict of the columns {', '.join(map(str, list(dataset)[:5]))}")
    if columns is not None:
        if "input_ids" not in columns:
            raise _not_tokenized(columns)
        return
    if isinstance(dataset, Sequence):
        first = dataset[0] if len(dataset) else None
        if isinstance(first, str):
            raise _not_a_data_set(f"a list of {len(dataset)} sentences")
        if isinstance(first, Mapping) and "input_ids" not in first and "text" in first:
            raise DataError(f"train_dataset is a list of {len(dataset)} rows of text, which the trainer does not "
                            "tokenize (it tokenizes the 'text' column of a datasets data set): pass "
                            "datasets.Dataset.from_list(rows), or tokenize them first with "
                            f"{TOKENIZE_PAIRS if 'positive' in first else TOKENIZE}(dataset, tokenizer).")
        if isinstance(first, Mapping) and "input_ids" not in first:
            raise _not_tokenized(list(first))
        if first is not None and not isinstance(first, Mapping):
            raise _not_a_data_set(f"a list of {type(first).__name__}")
        return
    if not _is_data_set(dataset):
        raise _not_a_data_set(f"of type {type(dataset).__name__}")


def _is_data_set(dataset) -> bool:
    import torch

    if isinstance(dataset, (torch.utils.data.Dataset, torch.utils.data.IterableDataset)):
        return True
    try:
        import datasets
    except ImportError:  # pragma: no cover - a requirement
        return False
    return isinstance(dataset, (datasets.Dataset, datasets.IterableDataset))


def token_extent(table, columns: list[str]) -> tuple[int, int | None, int | None] | None:
    """The longest row and the lowest and highest token id over the token ``columns`` of an Arrow ``table``, by
    pyarrow reductions; None where a column is not a list of integers (such data is checked batch by batch)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    longest, lowest, highest = 0, None, None
    for name in columns:
        column = table.column(name)
        kind = column.type
        if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_integer(kind.value_type):
            return None
        longest = max(longest, pc.max(pc.list_value_length(column)).as_py() or 0)
        extent = pc.min_max(pc.list_flatten(column)).as_py()
        if extent["min"] is not None:
            lowest = extent["min"] if lowest is None else min(lowest, extent["min"])
            highest = extent["max"] if highest is None else max(highest, extent["max"])
    return longest, lowest, highest


def check_token_limits(dataset, limits: EncoderLimits) -> bool:
    """Refuse an Arrow-backed ``datasets.Dataset`` with a row the encoder cannot embed (:meth:`EncoderLimits.refusal`);
    True when the whole set was checked, False for other data (check each batch instead).

    The table behind the data set is read first, in place (milliseconds for a million rows, README): when all
    its rows fit, so do those a ``select`` / ``filter`` / ``shuffle`` keeps. Only when one does not are the kept rows
    gathered and checked (seconds for a million shuffled rows), so that a long row filtered out is not refused."""
    import datasets

    if not isinstance(dataset, datasets.Dataset):
        return False
    columns, extent = table_token_extent(dataset)
    if extent is None:
        return False
    if limits.refusal(*extent, where="the training set") is None:
        return True
    kept = token_extent(dataset.select_columns(columns).with_format("arrow")[:], columns)
    refusal = limits.refusal(*kept, where="the training set")
    if refusal is not None:
        raise refusal
    return True


def table_token_extent(dataset) -> tuple[list[str], tuple[int, int | None, int | None] | None]:
    """A ``datasets.Dataset``'s token columns and their :func:`token_extent` over the table behind it, read in place
    (the rows a ``select`` / ``filter`` / ``shuffle`` keeps are among them); None: no token column, or one that is
    not a list of integers."""
    columns = [c for c in TOKEN_COLUMNS if c in dataset.column_names]
    return columns, token_extent(dataset.data, columns) if columns else None


def row_extent(rows) -> tuple[int, int | None, int | None]:
    """:func:`token_extent` of a batch's rows of token ids (lists, as a stream or a list of rows gives them)."""
    rows = [ids.tolist() if hasattr(ids, "tolist") else ids for ids in rows]  # a torch data set's CPU rows
    filled = [ids for ids in rows if len(ids)]
    if not filled:
        return 0, None, None
    return max(map(len, rows)), min(map(min, filled)), max(map(max, filled))


@dataclass
class LimitCheckedCollator:
    """``collator``, for data that cannot be checked ahead (a stream, a torch data set, a list of rows): each
    batch's rows are checked against the encoder's ``limits`` as the loader hands them over, on the CPU, before the
    collator pads them and the batch goes to the device. On Python lists of a few thousand ids this costs tens of
    microseconds, and no tensor is read. Other attributes are the wrapped collator's (its ``tokenizer``...)."""

    collator: Any
    limits: EncoderLimits
    pair_rows: bool | None = None  # whether the collator reads pair rows (None: a collator of one's own)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        first = features[0] if features else None
        if isinstance(first, str):
            raise _not_a_data_set("a stream of sentences")
        if isinstance(first, Mapping) and "input_ids" not in first:
            raise _not_tokenized(list(first))
        if self.pair_rows is False and isinstance(first, Mapping) and TOKEN_COLUMNS[1] in first:
            # columns the trainer could not see ahead (a stream after a map): the positives would go unread
            raise DataError(f"the training batches hold pair rows ({TOKEN_COLUMNS[1]}), which the trainer took for "
                            "sentences: their columns were not known when it was built. Give the stream its "
                            "features (e.g. datasets' map(..., features=...)) or a pair collator as data_collator "
                            "(the method's pair_collator(tokenizer, model.config)).")
        rows = [f[c] for f in features if isinstance(f, Mapping) for c in TOKEN_COLUMNS if c in f]
        refusal = self.limits.refusal(*row_extent(rows), where="a training batch")
        if refusal is not None:
            raise refusal
        return self.collator(features)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("collator", "limits"):  # unpickling (loader workers) looks these up
            raise AttributeError(name)
        return getattr(self.collator, name)


def check_training_data(dataset, collator, model, pair_rows: bool | None = None, cut_at: int | None = None):
    """The checks above for a trainer that trains ``model`` on ``dataset`` with ``collator`` (``pair_rows``: whether
    it reads pair rows; None: not known; ``cut_at``: the length the trainer tokenized the text at, None: the caller's
    tokens); returns the collator to train with (``collator``, wrapped in :class:`LimitCheckedCollator` where the data
    cannot be checked ahead)."""
    if dataset is None or not reads_token_rows(collator):
        return collator
    check_train_rows(dataset)
    limits = dataclasses.replace(EncoderLimits.of_model(model), cut_at=cut_at)
    if (limits.max_length is None and limits.vocab_size is None) or check_token_limits(dataset, limits):
        return collator
    return LimitCheckedCollator(collator, limits, pair_rows)


def unread_text_columns(dataset, views: tuple[str, ...]) -> list[str]:
    """The string columns of a ``datasets`` data set that no view reads (``views``: the text columns of pair /
    triplet rows, :func:`hf_cse.trainer_dataset.pair_rows`; ``()``: sentences, the ``text`` column), leaving out
    the columns named as identifiers or labels (:data:`~hf_cse.text_files.NOT_TEXT_WORDS`); [] where the columns'
    types are unknown."""
    return unread_text_columns_of(getattr(dataset, "features", None), views or PAIR_COLUMNS[:1])


def warn_unread_text_columns(dataset, model, views: tuple[str, ...] | None) -> None:
    """One warning where the training set has string columns the run does not read (``{"text", "text_b"}``: it would
    train on the ``text`` sentences alone), naming them and the fix: a second sentence goes in the ``positive``
    column (pairs; a third in ``negative``: hard negatives), for a method that trains on pair rows; else drop
    them. Not for columns of other types (ids, labels) nor where the columns are not known (``views`` None)."""
    columns = getattr(dataset, "column_names", None) or ()
    # no text (nor input_ids) column: refused next (check_train_rows), and the warning would name a text column
    unread = unread_text_columns(dataset, views) if views is not None and {"text", "input_ids"} & set(columns) else []
    if not unread:
        return
    method = type(model)
    them = "it" if len(unread) == 1 else "them"
    drop = f"drop {them}: dataset.remove_columns({unread!r})"
    first = unread[0]
    tokenized = "input_ids" in columns
    untokenized = (" and pass the rows untokenized (or tokenized with hf_cse.data.tokenize_pair_dataset)"
                   if tokenized else "")
    read = views or PAIR_COLUMNS[:1]
    trains_on = f"the {', '.join(read[:-1])}{' and ' * (len(read) > 1)}{read[-1]} column{'s' * (len(read) > 1)}"
    if not getattr(method, "takes_pair_rows", True):
        why, fix = f", and {method.__name__} takes no pair rows", drop[0].upper() + drop[1:]
    elif "negative" in views:
        why, fix = " (triplets)", drop[0].upper() + drop[1:]
    elif "positive" in views:
        why = " (pairs)"
        fix = (f"For hard negatives, name their column negative (dataset.rename_column({first!r}, 'negative'))"
               f"{untokenized}; else {drop}")
    else:
        why = " (sentences)"
        fix = (f"To train on (text, {first}) pairs, name the second sentence's column positive "
               f"(dataset.rename_column({first!r}, 'positive')){untokenized}; else {drop}")
    logger.warning("train_dataset's %s %s (strings) %s not read: the run trains on %s alone%s. %s.",
                   "column" if len(unread) == 1 else "columns", ", ".join(unread), "is" if len(unread) == 1 else "are",
                   trains_on, why, fix)


def check_ids_in_vocabulary(input_ids, model, name: str) -> None:
    """Refuse a batch of token ids (a CPU tensor, before it is encoded) that reaches past ``model``'s token
    embeddings: the tokenizer beside the weights is another model's, of a larger vocabulary (torch failed on it with
    an IndexError deep in the embedding layer). ``name``: the model, for the message."""
    rows = embedding_rows(model)
    if rows is None or not hasattr(input_ids, "max") or not getattr(input_ids, "numel", lambda: 0)():
        return
    top = int(input_ids.max())
    if top >= rows:
        raise InputError(f"{name}: its tokenizer gives token id {top}, past the model's {rows} token embeddings "
                         "(the rows of its embedding matrix): the tokenizer is another model's. Save the model's own "
                         "tokenizer beside its weights (or pass it as tokenizer).", fields=("model_name_or_path",))
