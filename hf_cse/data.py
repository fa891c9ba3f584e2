"""Training text: reading sentences (local files or Hub data sets), tokenizing, and the two-view collator."""

from __future__ import annotations

import io
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from .data_sources import folder_file_words, folder_text_columns, folder_train_files, load_named_dataset
from .files import (  # noqa: F401 - check_enough_rows: read from here too
    DataError,
    check_enough_rows,
    check_train_file,
    read_text,
    strip_column_names,
    table_loader_args,
    table_records,
)
from .hub_reach import is_offline, offline_fix, offline_if_unreachable
from .missing_markers import left_out_markers
from .padding import ensure_pad_token, pad_token_rows  # noqa: F401 - ensure_pad_token: read from here too
from .pair_checks import check_pair_rows, check_pair_source, is_empty_cell, pair_columns
from .sentence_files import sentences_in
from .text_files import (  # noqa: F401 - JSON_SUFFIXES: read from here too
    JSON_SUFFIXES,
    TABLE_SUFFIXES,
    check_layout,
    check_not_numbers,
    check_text_column_applies,
    column_fix,
    table_text_column,
    warn_unread_columns,
)
from .tokenizer_match import check_tokenized_length, warn_cut_alike

logger = logging.getLogger(__name__)

DEMO_CORPUS = Path(__file__).parent / "resources" / "demo_corpus.txt"
#: the tokens a training sentence is cut to unless told otherwise: the papers' 32 (SimCSE, DiffCSE, PromptBERT, ...)
DEFAULT_MAX_SEQ_LENGTH = 32


def read_sentences(train_file: str | Path, text_column: str | None = None, field: str = "train_file") -> list[str]:
    """Non-blank sentences of a ``.txt`` file (one per line), or a column of a ``.csv``/``.tsv``/``.json``/``.jsonl``
    file (``text_column``); ``field``: the setting that named the file (a ``dataset_name`` folder's files too)."""
    return _read_file(train_file, text_column, field)[0]


def _read_file(train_file: str | Path, text_column: str | None, field: str) -> tuple[list[str], Counter[str]]:
    """:func:`read_sentences`' sentences, and the missing-value markers left out of them with a warning
    (:func:`~hf_cse.missing_markers.left_out_markers`: a column exported with ``NaN`` for its empty cells)."""
    path = check_train_file(train_file, field)
    text = read_text(path, field)  # refuses compressed, binary and non-UTF-8 files; drops a BOM
    check_text_column_applies(path, text_column)
    check_layout(path, text)
    return sentences_in(path, text, text_column)


def _only_text_column(ds, column: str, source: str):
    """Keep one column, named ``text``; the other string columns of ``source`` said first (the pair / triplet columns
    of a file read for sentences: :func:`~hf_cse.text_files.warn_unread_columns`)."""
    warn_unread_columns(ds, column, source)
    ds = ds.select_columns([column])
    return ds.rename_column(column, "text") if column != "text" else ds


def read_named_dataset(dataset_name: str, config_name: str | None, split: str, streaming: bool = False):
    """The ``dataset_name`` data set's ``split`` (:func:`~hf_cse.data_sources.load_named_dataset`), read in memory or
    streamed, the Hub switched off first where it cannot be reached (no minute of retries); a Hub data set that
    cannot be read for that, or offline and not cached, refused in one line naming the fix."""
    offline_if_unreachable()
    try:
        return load_named_dataset(dataset_name, config_name, split, streaming)
    except ConnectionError as err:  # offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and not cached, or no network
        raise DataError(f"dataset_name {dataset_name}: cannot read it from the Hugging Face Hub ({err}); "
                        f"{offline_fix() if is_offline() else 'check the network'}, or give a local train_file."
                        ) from err


def load_train_dataset(
    train_file: str | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    text_column: str | None = None,
    split: str = "train",
):
    """A ``datasets.Dataset`` with one column ``text``; the embedded demo corpus when nothing is given. A local folder
    ``dataset_name`` of text, table or JSON files is read as a list of train files: each file of ``split`` checked and
    read as ``train_file`` is, whatever its kind (:func:`hf_cse.data_sources.folder_train_files`)."""
    import datasets

    if train_file and dataset_name:
        raise DataError("Give either train_file or dataset_name, not both.")
    files = folder_train_files(dataset_name, split, dataset_config_name) if dataset_name else None
    if files is not None:  # one text type for every file (json reads large_string), so that they can be joined
        named = folder_file_words(dataset_name, split)
        parts = [_file_dataset(path, column, named).cast_column("text", datasets.Value("string"))
                 for path, column in zip(files, folder_text_columns(files, text_column))]
        return datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]
    if dataset_name:
        ds = read_named_dataset(dataset_name, dataset_config_name, split)
        column = text_column or "text"
        if column not in ds.column_names:
            raise DataError(f"data set {dataset_name} has no column {column!r}; columns: {ds.column_names}. "
                            f"{column_fix(text_column)}")
        kind = getattr(ds.features[column], "dtype", type(ds.features[column]).__name__)
        if kind not in ("string", "large_string"):  # the filter below would fail on its first value, in datasets
            raise DataError(f"data set {dataset_name}: column {column!r} holds {kind} values, not sentences; pass "
                            f"text_column NAME of the text column (columns: {ds.column_names}).")
        columns = ds.column_names
        ds = _only_text_column(ds, column, f"data set {dataset_name}")
        rows = len(ds)
        ds = ds.filter(lambda ex: bool(ex["text"] and ex["text"].strip()))
        _say_dropped(f"data set {dataset_name}", rows - len(ds), rows)
        if len(ds) == 0:
            raise DataError(f"data set {dataset_name} has no non-empty {column!r} rows in split {split!r}.")
        markers = left_out_markers(_texts_of(ds), f"data set {dataset_name}", column)
        if markers:  # "NaN" cells: an export's missing values, said
            ds = ds.filter(lambda ex: ex["text"].strip() not in markers)
        check_not_numbers(_texts_of(ds), f"data set {dataset_name}", column, columns)
        return ds
    return _file_dataset(Path(train_file or DEMO_CORPUS), text_column)


def _texts_of(ds):
    """The ``text`` column of the data set ``ds``, read a batch at a time."""
    return (text for batch in ds.iter(batch_size=10_000) for text in batch["text"])


def _file_dataset(path: Path, text_column: str | None, field: str = "train_file"):
    """One file's sentences (:func:`read_sentences`' checks, then read through ``datasets``); ``field`` as there."""
    import datasets

    # validates (exists, UTF-8, column, not empty) with clear messages; the markers are left out below too
    markers = _read_file(path, text_column, field)[1]
    # load through `datasets` so that the data set and its tokenization are cached on disk (fingerprints)
    if path.suffix.lower() in (".csv", ".tsv"):  # read as read_sentences does (hf_cse.files)
        ds = strip_column_names(datasets.load_dataset("csv", data_files=str(path), split="train",
                                                      **table_loader_args(path)))
        ds = _only_text_column(ds, table_text_column(path, ds.column_names, text_column), str(path))
    elif path.suffix.lower() in JSON_SUFFIXES:
        ds = _only_text_column(datasets.load_dataset("json", data_files=str(path), split="train",
                                                     encoding="utf-8-sig"), text_column or "text", str(path))
    else:
        ds = datasets.load_dataset("text", data_files=str(path), split="train", encoding="utf-8-sig")
    # one batched pass drops blank lines and strips the rest (a batched map may return fewer rows)
    kept = ds.map(lambda batch: {"text": [t.strip() for t in batch["text"] if t and t.strip()
                                          and t.strip() not in markers]}, batched=True, desc="Dropping blank lines")
    _say_dropped(path.name, len(ds) - len(kept) - sum(markers.values()), len(ds))  # markers: said already
    return kept


def _say_dropped(source: str, dropped: int, rows: int) -> None:
    """One line for the rows left out as empty (blank lines, empty or null cells): the count trained on is fewer."""
    if dropped:
        logger.info("%s: left out %d of %d rows as empty (blank lines, empty or null cells)", source, dropped, rows)


def with_prompt(texts: list[str], prompt: str | None) -> list[str]:
    """``texts`` with the model's instruction / prefix (``CSEConfig.prompt``) in front of each."""
    return texts if not prompt else [prompt + t for t in texts]


def sentences_of(batch: dict[str, list], column: str, prompt: str | None, pair_view: bool = False) -> list[str]:
    """The ``column`` texts of a batch of rows to tokenize, the prompt in front (:func:`with_prompt`). A value that
    is no string -- an empty cell (None), a number -- is refused in one line here rather than by the tokenizer's own
    ``TypeError`` (the loaders of files refuse them as they read; a data set made in Python is checked here); so is a
    blank text of a ``pair_view`` (a view of a pair / triplet row: every such row would be the same input, where a
    blank sentence is dropped, :func:`drop_special_only`)."""
    texts = batch[column]
    if pair_view and any(isinstance(text, str) and is_empty_cell(text) for text in texts):
        raise DataError(f"the training set's {column!r} column has an empty cell where a sentence should be: every "
                        "pair / triplet row needs all its texts; remove those rows first, e.g. "
                        f"dataset.filter(lambda row: row[{column!r}].strip()).")
    odd = next((text for text in texts if not isinstance(text, str)), texts)  # texts: none found
    if odd is None:
        raise DataError(f"the training set's {column!r} column has an empty cell (None) where a sentence should be: "
                        f"remove or fill those rows first, e.g. dataset.filter(lambda row: row[{column!r}] is not "
                        "None).")
    if odd is not texts:
        raise DataError(f"the training set's {column!r} column holds {type(odd).__name__} values (e.g. {odd!r:.30}), "
                        f"not sentences: the trainer tokenizes the {column!r} column; rename the column of sentences "
                        "to it (dataset.rename_column).")
    return with_prompt(texts, prompt)


def tokenize_dataset(ds, tokenizer: PreTrainedTokenizerBase, max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
                     num_proc: int | None = None, prompt: str | None = None, keep_text: bool = False):
    """Tokenize once (truncation, no padding: the collator pads each batch dynamically); sentences that become
    special tokens only are dropped with one warning (:func:`drop_special_only`). ``prompt``: prepended to each
    sentence (its tokens count toward ``max_seq_length``). ``keep_text``: keep the ``text`` column (the
    no-duplicates batch sampler compares rows by it; the collators ignore it)."""

    check_tokenized_length(tokenizer, max_seq_length, prompt)

    def tok(batch):
        return tokenizer(sentences_of(batch, "text", prompt), truncation=True, max_length=max_seq_length)

    tokenized = drop_special_only(ds.map(tok, batched=True, num_proc=num_proc, desc="Tokenizing"), tokenizer,
                                  num_proc)
    warn_cut_alike(tokenized, max_seq_length)
    return tokenized.remove_columns(
        [c for c in ds.column_names if not (keep_text and c == "text")])


def drop_special_only(tokenized, tokenizer: PreTrainedTokenizerBase, num_proc: int | None = None):
    """Drop rows whose ``input_ids`` are all special tokens ([CLS], [SEP], [UNK]...): lines of control or zero-width
    characters, or of characters the tokenizer does not know. Such rows carry no text, so every one of them is the
    same input and a false negative for the others. One warning gives the count and an example."""
    special = set(tokenizer.all_special_ids)
    kept = tokenized.filter(
        lambda batch: [any(i not in special for i in ids) for ids in batch["input_ids"]],
        batched=True, num_proc=num_proc, desc="Dropping special-token-only lines",
    )
    dropped = len(tokenized) - len(kept)
    if dropped and dropped == len(tokenized):  # none at all: refused by the row count (check_enough_rows)
        raise DataError(f"all {dropped} sentences tokenize to special tokens only (e.g. "
                        f"{tokenized[0]['text']!r:.60}): the tokenizer cannot read this text. Check the text's "
                        "encoding and that the tokenizer fits the language.")
    if dropped:
        example = next(text for batch in tokenized.iter(batch_size=1000)
                       for text, ids in zip(batch["text"], batch["input_ids"]) if all(i in special for i in ids))
        logger.warning("dropped %d of %d training sentences that tokenize to special tokens only, e.g. %.60r "
                       "(control or zero-width characters, or characters outside the tokenizer's vocabulary)",
                       dropped, len(tokenized), example)
    return kept


@dataclass
class TwoViewCollator:
    """Pads a batch and repeats every sentence ``num_views`` times: ``input_ids (B, views, L)``.

    The model flattens this to ``(B * views, L)`` for ONE encoder forward, so the views differ only by
    their independent dropout masks (SimCSE's ``[[s_i, s_i]]`` layout).
    """

    tokenizer: PreTrainedTokenizerBase
    num_views: int = 2

    def __post_init__(self):
        ensure_pad_token(self.tokenizer)

    def pad(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        keep = ("input_ids", "attention_mask", "token_type_ids")
        feats = [{k: f[k] for k in keep if k in f} for f in features]
        return pad_token_rows(self.tokenizer, feats)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.pad(features)
        return {k: v.unsqueeze(1).repeat(1, self.num_views, 1) for k, v in batch.items()}


# ---------------------------------------------------------------------------------------------------
# Pair and triplet data: (anchor, positive[, hard negative]) per row, as supervised SimCSE's NLI triplets; their
# checks: hf_cse.pair_checks.

#: the text columns of pair / triplet rows, in view order: anchor, positive, hard negative
PAIR_COLUMNS = ("text", "positive", "negative")
#: column-name prefixes of the tokenized views, in the same order
PAIR_VIEWS = ("", "positive_", "negative_")


def load_pair_dataset(
    pair_column: str,
    train_file: str | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    text_column: str | None = None,
    negative_column: str | None = None,
    split: str = "train",
):
    """A ``datasets.Dataset`` with columns ``text``, ``positive`` (and ``negative`` with ``negative_column``)
    from a ``.csv``/``.tsv`` file or a Hub data set; missing columns and empty cells raise :class:`DataError`."""
    import datasets

    path = check_pair_source(train_file, dataset_name)
    wanted = pair_columns(text_column, pair_column, negative_column)
    if dataset_name:
        ds = read_named_dataset(dataset_name, dataset_config_name, split)
        source = f"data set {dataset_name}"
        columns = list(ds.column_names)
        check_pair_rows([], columns, wanted, source)  # a missing column fails before the rows are read
        rows = ds.select_columns(list(dict.fromkeys(wanted.values()))).to_list()
    else:
        source = str(path)
        text = read_text(path, "train_file")
        check_layout(path, text)  # a .csv separated by semicolons: one column
        columns, records = table_records(io.StringIO(text, newline=""), path)  # .tsv: tabs only, no quoting
        check_pair_rows([], columns, wanted, source)  # a missing column fails before the rows are read
        rows = [record for _, record in records]
    check_pair_rows(rows, columns, wanted, source)
    return datasets.Dataset.from_dict(
        {name: [str(row[column]).strip() for row in rows] for name, column in zip(PAIR_COLUMNS, wanted.values())}
    )


def tokenize_pair_dataset(ds, tokenizer: PreTrainedTokenizerBase, max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
                          num_proc: int | None = None, prompt: str | None = None, keep_text: bool = False):
    """Tokenize every view column (``text``, ``positive``[, ``negative``]) into ``input_ids``, ``positive_input_ids``,
    ``negative_input_ids``, ... (truncation, no padding); ``prompt`` and ``keep_text`` as in
    :func:`tokenize_dataset`. A stream (``datasets.IterableDataset``) is tokenized as it is read."""
    import datasets

    check_tokenized_length(tokenizer, max_seq_length, prompt)
    views = [(prefix, column) for prefix, column in zip(PAIR_VIEWS, PAIR_COLUMNS, strict=True)
             if column in ds.column_names]

    def tok(batch):
        out = {}
        for prefix, column in views:
            texts = sentences_of(batch, column, prompt, pair_view=True)
            for key, value in tokenizer(texts, truncation=True, max_length=max_seq_length).items():
                out[prefix + key] = value
        return out

    remove = [] if keep_text else ds.column_names
    if not hasattr(ds, "__len__"):  # a stream: mapped lazily, with neither workers nor a progress bar
        # its columns declared: a mapped stream's are unknown otherwise, and the trainer finds pair rows by them
        keys = tokenizer("a", truncation=True, max_length=max_seq_length).keys()
        ids = {prefix + key: datasets.List(datasets.Value("int64")) for prefix, _ in views for key in keys}
        kept = dict(ds.features or {}) if keep_text else {}
        features = datasets.Features({**kept, **ids}) if ds.features is not None or not keep_text else None
        return ds.map(tok, batched=True, remove_columns=remove, features=features)
    return ds.map(tok, batched=True, remove_columns=remove, num_proc=num_proc, desc="Tokenizing pairs")


@dataclass
class PairCollator(TwoViewCollator):
    """Pads anchor, positive (and hard negative) of each row together: ``input_ids (B, views, L)`` with views in
    the order anchor, positive[, negative]. The model encodes the ``B * views`` rows in one forward, so the
    views differ by their text (and their own dropout masks), as supervised SimCSE."""

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        views = [p for p in PAIR_VIEWS if f"{p}input_ids" in features[0]]
        keep = ("input_ids", "attention_mask", "token_type_ids")
        batch = self.pad([{k: f[p + k] for k in keep if p + k in f} for f in features for p in views])
        return {k: v.view(len(features), len(views), -1) for k, v in batch.items()}
