"""Training text larger than memory, and several sources mixed by weight.

``streaming`` reads the training text as a ``datasets`` iterable data set (local files or a Hub data set) and
tokenizes it on the fly: nothing is read whole, nothing is written to the ``datasets`` cache, and memory does
not grow with the corpus (``benchmarks/bench_streaming.py``). An iterable data set has no length, so a streamed
run needs ``max_steps``; when the stream ends before, the training loader reads it again from the start (pass
after pass, :class:`hf_cse.trainer_batches.StreamPasses`). Pair / triplet rows
(``pair_column``) stream too (:func:`load_pair_stream`).

The trainer shuffles a stream through a buffer of ``stream_shuffle_buffer`` rows (a training argument; 0 / None:
file order, the same every pass), each pass in an order of its own, so the rows left out after a pass's last whole
batch differ from pass to pass (:func:`hf_cse.stream_order.shuffled_stream`).

``train_files=["a.txt", "b.txt"], train_weights=[0.7, 0.3]`` mixes several sources: each row comes from source ``i``
with probability ``w_i`` (``datasets.interleave_datasets``, seeded by ``seed``) until every source has been read
once (``all_exhausted``), so source ``i`` is read about ``(w_i/size_i) / (w_min/size_min)`` times in one pass
(:func:`hf_cse.stream_order.source_reads`): 0.95 / 0.05 on two files of the same size read the first about 19 times.
Without ``streaming`` the sources are read into memory, mixed the same way, and such repeats are said in a warning
(a stream's sizes are unknown up front: nothing is said).

Resuming a streamed run: the Trainer skips the batches already trained by reading (and tokenizing) them again
from the start of the stream and dropping them, over as many passes as they span, so the resumed run continues
with the batches the interrupted one would have trained next (the stream, its mixing and its shuffle are
deterministic); skipping costs the time to read those rows, not to train on them. Streamed data is not searched
for duplicate texts (:mod:`hf_cse.sampler` needs the whole data set): the run records ``no_duplicates_in_batch``
false. Sentences that tokenize to special tokens only are dropped as in memory, said in a warning (an example, then
the count of a pass), and a stream of nothing else is refused by that cause (:func:`tokenize_stream`).

A streamed file is checked up front on its first 64 KiB only (as a file read whole is checked whole); a line
further on that cannot be read (not UTF-8, a broken JSON line, a table row of too many fields) ends the run
when the stream gets there, in one line naming the file, the line and the fix
(:func:`hf_cse.stream_rows.read_checked`). A ``.json`` file holding one list is read whole by any reader, so it is
checked whole before training, as in memory.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from .data import (
    DEFAULT_MAX_SEQ_LENGTH,
    JSON_SUFFIXES,
    PAIR_COLUMNS,
    TABLE_SUFFIXES,
    DataError,
    check_layout,
    check_text_column_applies,
    load_train_dataset,
    read_named_dataset,
    sentences_of,
)
from .data_sources import folder_file_words, folder_text_columns, folder_train_files
from .files import (
    check_text_head,
    check_train_file,
    strip_column_names,
)
from .missing_markers import left_out_markers
from .pair_checks import check_pair_rows, check_pair_source, is_empty_cell, pair_columns
from .stream_order import warn_of_repeated_sources
from .stream_rows import (
    SentenceTexts,
    dataset_unreadable,
    described_as,
    file_unreadable,
    is_json_list,
    json_lines_stream,
    read_checked,
    rows_of,
    table_stream,
)
from .text_files import (
    check_json_head,
    check_not_numbers,
    check_table_head,
    column_fix,
    read_json_sentences,
    warn_unread_columns,
)

logger = logging.getLogger(__name__)

#: rows of a source whose text column is checked (types, numbers) before training
HEAD_ROWS = 100
#: the mixing rule of several sources: until every source was read once (those of more weight per row are read
#: again meanwhile, :func:`~hf_cse.stream_order.source_reads`)
STOPPING_STRATEGY = "all_exhausted"
#: how much of a streamed text or JSON-lines file datasets reads at a time (its own default, 10 MiB): a line it
#: cannot read fails the stream when its chunk is read (:func:`hf_cse.stream_rows.read_checked`)
STREAM_CHUNK = 10 << 20


def check_streaming_arguments(stream_args, data_args, max_steps: int, method: str) -> None:
    """The streaming and mixing settings, checked before any data or model is read (one line each).
    ``stream_args`` has ``streaming``, ``train_files`` and ``train_weights`` (the command line's
    ``StreamingArguments``), ``data_args`` ``train_file``, ``dataset_name``, ``pair_column`` and ``text_column``."""
    files, weights = stream_args.train_files, stream_args.train_weights
    if files and data_args.pair_column:
        raise DataError("train_files mixes plain text sources; for pair / triplet data give one train_file.")
    if files and (data_args.train_file or data_args.dataset_name):
        raise DataError("Give train_files or train_file / dataset_name, not both.")
    if weights is not None and not files:
        raise DataError("train_weights mixes train_files; give the files too (one weight per file).")
    if files and weights is not None and len(weights) != len(files):
        raise DataError(f"train_weights has {len(weights)} weight(s) for {len(files)} train_files; give one "
                        "weight per file, in the same order.")
    if weights is not None and any(not (w > 0 and w != float("inf")) for w in weights):
        raise DataError(f"train_weights must be finite numbers > 0, got {weights}.")
    for path in files or []:
        check_train_file(path, "train_files", wanted="")
        _check_start(Path(path), "train_files", data_args.text_column)  # read lazily by datasets when streamed
    if not stream_args.streaming:
        return
    if data_args.pair_column:  # before the file's start is checked as text (a .txt of pairs: no column names)
        check_pair_source(data_args.train_file, data_args.dataset_name)
    if data_args.train_file:  # read lazily too: a missing file or a folder would fail deep in datasets
        _check_start(check_train_file(data_args.train_file), "train_file", data_args.text_column,
                     sentences=not data_args.pair_column)
    if data_args.dataset_name and not data_args.pair_column:  # a local folder of train files: each read as one
        for path in folder_train_files(data_args.dataset_name, "train", data_args.dataset_config_name) or []:
            _check_start(path, folder_file_words(data_args.dataset_name, "train"), data_args.text_column)
    if max_steps is None or max_steps <= 0:
        raise DataError("streaming=True reads a data set of unknown length: give max_steps N (the number of "
                        "optimizer steps to train).")
    from .models import get_method

    check_method_streams(get_method(method))


def check_settings_for_data(args, streamed: bool, *, no_duplicates_asked: bool = False,
                            shuffle_asked: bool = False) -> None:
    """Training arguments that would do nothing for the run's data, refused before it is read, by the command line
    and by the trainer. A stream's run is one transformers epoch however many times the stream is read, so a
    checkpoint or dev score each epoch would come only as the run ends (a late failure would keep nothing).
    ``no_duplicates_asked``: the no-duplicates sampler asked for, which needs every row's text up front
    (:mod:`hf_cse.sampler`); ``shuffle_asked``: a ``stream_shuffle_buffer`` asked for, which only a stream reads."""
    from .training_values import strategy_name

    if not streamed:
        if shuffle_asked:
            raise DataError("stream_shuffle_buffer shuffles a stream, and the training set is not streamed (its "
                            "sampler shuffles it): drop stream_shuffle_buffer, or stream the data.",
                            fields=("stream_shuffle_buffer",))
        return
    for strategy, steps, does in (("save_strategy", "save_steps", "save a checkpoint"),
                                  ("eval_strategy", "eval_steps", "score the dev data")):
        if strategy_name(getattr(args, strategy, None)) == "epoch":
            raise DataError(f"{strategy}='epoch' would {does} only when the run ends: a run on a stream is one epoch "
                            f"however many times the stream is read. Use {strategy}='steps' with {steps} N.",
                            fields=(strategy,))
    if no_duplicates_asked:
        raise DataError("no_duplicates_in_batch true needs the whole data set, which a stream never holds: drop one "
                        "of them.", fields=("no_duplicates_in_batch",))


def check_method_streams(method_cls: type, streaming_asked: bool = True) -> None:
    """A method that cannot train from a stream (``streams`` False: DiffCSE's unigram generator counts the whole
    corpus), refused before any of the stream is read: by the command line's checks (``streaming_asked``: its
    ``streaming`` option) and by the trainer handed one (a stream it was given, which ``streaming`` did not make)."""
    if getattr(method_cls, "streams", True):
        return
    name, why = method_cls.method_name(), method_cls.why_no_streaming
    if streaming_asked:
        raise DataError(f"streaming=True does not work with method={name!r} ({why}); drop streaming=True.")
    raise DataError(f"train_dataset is a stream (IterableDataset), which method={name!r} does not train from ({why}): "
                    "pass a datasets.Dataset, e.g. hf_cse.data.load_train_dataset(path) or "
                    "datasets.Dataset.from_list(list(stream)).")


def _check_start(path: Path, flag: str, text_column: str | None, sentences: bool = True) -> None:
    """The checks of a file read whole, on the start of one read lazily: its bytes, its layout, a table's text column
    (``sentences``: not a file of pair rows, whose columns are named otherwise), its JSON records."""
    text = check_text_head(path, flag)
    check_layout(path, text)
    check_table_head(path, text, text_column, sentences)  # its rows' fields too, before training rather than mid-run
    check_json_head(path, text, text_column)


def _source(path: str | None, dataset_name: str | None, config_name: str | None, text_column: str | None,
            streaming: bool, split: str = "train"):
    """One source with one column ``text`` of stripped, non-blank lines: read whole (and checked whole) as
    :func:`hf_cse.data.load_train_dataset` reads it, or streamed, the start of it checked."""
    import datasets

    if not streaming:  # read whole, so checked whole, as one train_file or dataset_name is (hf_cse.data)
        return load_train_dataset(path, dataset_name, config_name, text_column, split).cast_column(
            "text", datasets.Value("string"))
    files = folder_train_files(dataset_name, split, config_name) if dataset_name else None
    if files is not None:  # a folder of train files, each streamed one after another as one is
        return datasets.concatenate_datasets([_source(str(path), None, None, column, True)
                                              for path, column in zip(files, folder_text_columns(files, text_column))])
    if dataset_name:
        ds = read_named_dataset(dataset_name, config_name, split, streaming=True)
        source = f"data set {dataset_name}"
        # read as training goes: a row it cannot read, or a dropped connection, fails as one line
        ds = read_checked(ds, partial(dataset_unreadable, dataset_name))
    else:
        p = Path(path)
        check_text_column_applies(p, text_column)
        suffix = p.suffix.lower()
        if suffix in TABLE_SUFFIXES:  # read as a file read whole is (a .tsv without quoting)
            ds = table_stream(p)
        elif suffix in JSON_SUFFIXES and not is_json_list(p):  # each line checked as a file read whole is
            ds = json_lines_stream(p, text_column or "text")
        elif suffix in JSON_SUFFIXES:  # one list: read whole by any reader, so checked whole, as in memory
            # (datasets' JSON reader turned a text column holding one number into JSON strings, quotes and all)
            ds = datasets.Dataset.from_dict({text_column or "text": read_json_sentences(p, text_column)}
                                            ).to_iterable_dataset()
        else:
            # utf-8-sig: a byte-order mark is no part of the first sentence (as for a file read whole)
            ds = datasets.load_dataset("text", data_files=str(p), split="train", streaming=True,
                                       chunksize=STREAM_CHUNK, encoding="utf-8-sig")
        ds = read_checked(ds, partial(file_unreadable, p))
        source = str(p)
    # a stream of a CSV file knows its columns only once read: those of its first row
    names = list(ds.column_names or next(iter(ds.take(1)), {}))
    if not dataset_name:
        ds = strip_column_names(ds, names)  # as table_records strips them (a header "id, text")
        names = [name.strip() for name in names]
    column = text_column or (names[0] if len(names) == 1 and not dataset_name else "text")
    if names and column not in names:
        raise DataError(f"{source}: no column {column!r}; columns are {names}. {column_fix(text_column)}")
    warn_unread_columns(ds, column, source)
    ds = ds.select_columns([column])
    head = [row[column] for row in ds.take(HEAD_ROWS)]
    odd = next((value for value in head if value is not None and not isinstance(value, str)), None)
    if odd is not None:
        raise DataError(f"{source}: column {column!r} holds {type(odd).__name__} values ({odd!r:.30}), not "
                        "sentences; pass text_column NAME of the text column.")
    lines = not dataset_name and Path(path).suffix.lower() not in TABLE_SUFFIXES + JSON_SUFFIXES  # no column
    markers = left_out_markers(head, source, None if lines else column, head=True)  # "NaN" cells: an export's
    head = [text for text in head if not (isinstance(text, str) and text.strip() in markers)]
    check_not_numbers(head, source, None if lines else column, None if lines else names, head=True)
    if column != "text":
        ds = ds.rename_column(column, "text")
    ds = ds.map(SentenceTexts(source, column, frozenset(markers)), batched=True)  # a row of no string refused
    if next(iter(ds.take(1)), None) is None:
        raise DataError(f"{source} yields no sentences (empty, or blank lines only): check the file / data set "
                        "and text_column.")
    return ds


def load_training_text(stream_args, data_args, seed: int):
    """The training text (column ``text``): a stream with ``streaming`` (else in memory), of one source or of
    ``train_files`` mixed by ``train_weights``. Call :func:`check_streaming_arguments` first."""
    import datasets

    streaming = stream_args.streaming
    column = data_args.text_column
    if not stream_args.train_files:
        from .data import DEMO_CORPUS

        return _source(data_args.train_file or (None if data_args.dataset_name else str(DEMO_CORPUS)),
                       data_args.dataset_name, data_args.dataset_config_name, column, streaming)
    sources = [_source(path, None, None, column, streaming) for path in stream_args.train_files]
    weights = stream_args.train_weights or [1.0] * len(sources)
    total = sum(weights)
    mixed = datasets.interleave_datasets(sources, probabilities=[w / total for w in weights], seed=seed,
                                         stopping_strategy=STOPPING_STRATEGY)
    if not streaming:  # a stream's size is unknown until read through: its repeats cannot be said up front
        warn_of_repeated_sources(stream_args.train_files, [len(s) for s in sources], weights, len(mixed))
    return mixed


def load_pair_stream(data_args):
    """Pair / triplet rows (columns ``text``, ``positive``[, ``negative``], as :func:`hf_cse.data.load_pair_dataset`
    reads them whole) streamed from ``data_args``' ``.csv`` / ``.tsv`` ``train_file`` or Hub ``dataset_name``: the
    columns and the first :data:`HEAD_ROWS` rows checked up front, a row with an empty cell further on refused (by
    its number) when the stream reaches it. Tokenize it with :func:`hf_cse.data.tokenize_pair_dataset`."""
    import datasets

    path = check_pair_source(data_args.train_file, data_args.dataset_name)  # None: a data set
    wanted = pair_columns(data_args.text_column, data_args.pair_column, data_args.negative_column)
    if path is None:
        ds = read_named_dataset(data_args.dataset_name, data_args.dataset_config_name, "train", streaming=True)
        source = f"data set {data_args.dataset_name}"
        ds = read_checked(ds, partial(dataset_unreadable, data_args.dataset_name))
    else:
        _check_start(path, "train_file", None, sentences=False)
        ds = table_stream(path)
        source = str(path)
        ds = read_checked(ds, partial(file_unreadable, path))
    names = list(ds.column_names or next(iter(ds.take(1)), {}))  # a CSV stream's: those of its first row
    if path is not None:  # as table_records strips a file's column names
        ds, names = strip_column_names(ds, names), [name.strip() for name in names]
    check_pair_rows([], names, wanted, source)  # a missing column, before any row is read
    ds = ds.select_columns(list(wanted.values()))  # each its own column (pair_columns)
    check_pair_rows(list(ds.take(HEAD_ROWS)), names, wanted, source, head=True)
    views = PAIR_COLUMNS[:len(wanted)]
    return ds.map(partial(_pair_texts, wanted, source), batched=True, with_indices=True,
                  remove_columns=list(wanted.values()),
                  features=datasets.Features({view: datasets.Value("string") for view in views}))


def _pair_texts(wanted: dict[str, str], source: str, batch: dict[str, list], indices: list[int]) -> dict[str, list]:
    """A batch of streamed pair rows as the views' stripped texts; a row with an empty cell refused by its number."""
    for flag, column in wanted.items():
        empty = next((i for i, cell in zip(indices, batch[column]) if is_empty_cell(cell)), None)
        if empty is not None:
            raise DataError(f"{source}: data row {empty + 1} has an empty {column!r} cell ({flag}), found as the "
                            f"stream was read (its first {HEAD_ROWS} rows are checked up front). Every row needs all "
                            "its texts: remove or fill those rows.")
    return {view: [str(cell).strip() for cell in batch[column]]
            for column, view in zip(wanted.values(), PAIR_COLUMNS, strict=False)}


def tokenize_stream(ds, tokenizer: PreTrainedTokenizerBase, max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
                    prompt: str | None = None):
    """Tokenized on the fly (truncation, no padding), rows of special tokens only dropped and said
    (:func:`_kept_rows`, as :func:`hf_cse.data.drop_special_only` does for in-memory data); ``prompt`` in front of
    each sentence."""
    import datasets

    def tok(batch):
        return tokenizer(sentences_of(batch, "text", prompt), truncation=True, max_length=max_seq_length)

    tokenized = ds.map(tok, batched=True)  # the text kept for the example of a dropped row
    return described_as(ds, datasets.IterableDataset.from_generator(_kept_rows, gen_kwargs={
        "stream": tokenized, "special": frozenset(tokenizer.all_special_ids), "said": _Said()}))


class _Said:
    """What :func:`_kept_rows` has said of a stream, across its passes (each pass reads the stream again)."""

    def __init__(self):
        self.example = self.count = False


def _kept_rows(stream, special: frozenset, said: _Said):
    """The tokenized rows of ``stream`` without its text, those of special tokens only dropped: the first dropped one
    is said with its text, their count once a whole pass was read, and a stream of such rows only is refused by its
    cause when it ends (the trainer's first global batch of it would be empty)."""
    kept = dropped = 0
    first = None
    for row in rows_of(stream):  # read whole by the one worker that reads the stream made
        text = row.pop("text", None)
        if any(i not in special for i in row["input_ids"]):
            kept += 1
            yield row
            continue
        if not dropped:
            first = text
            if not said.example:
                said.example = True
                logger.warning("dropping streamed training sentences that tokenize to special tokens only, e.g. "
                               "%.60r (control or zero-width characters, or characters outside the tokenizer's "
                               "vocabulary); their count follows once the stream was read through", text)
        dropped += 1
    if dropped and not kept:
        raise DataError(f"all {dropped} streamed sentences tokenize to special tokens only (e.g. {first!r:.60}): "
                        "the tokenizer cannot read this text. Check the text's encoding and that the tokenizer fits "
                        "the language.")
    if dropped and not said.count:
        said.count = True
        logger.warning("dropped %d of %d streamed training sentences that tokenize to special tokens only (in one "
                       "pass over the stream)", dropped, kept + dropped)
