"""The training set as :class:`hf_cse.trainer.ContrastiveTrainer` takes it: its views (:func:`pair_rows`), the checks
of its rows against the method and one global batch, its columns made known, the sentences the trainer tokenizes
itself (:func:`tokenized_here`) and the facts recorded of it (:func:`data_facts`)."""

from __future__ import annotations

import logging
from typing import Any

from .errors import CSEError
from .files import DataError
from .models.encoder_dropout import check_views_differ
from .training_args import global_batch_size

logger = logging.getLogger("hf_cse.trainer")


def pair_rows(train_dataset) -> tuple[str, ...] | None:
    """The views of a training set's rows by their text columns (tokenized: :func:`hf_cse.data.tokenize_pair_dataset`'s
    prefixed ones): ``("text", "positive"[, "negative"])`` for pair / triplet rows, ``()`` for sentences, ``("text",
    "negative")`` for hard negatives without positives (refused: :func:`check_rows_for_model`); None where the columns
    are not known (a stream after a ``map``: its batches say it, :class:`hf_cse.data_checks.LimitCheckedCollator`)."""
    from .data import PAIR_COLUMNS, PAIR_VIEWS

    columns = getattr(train_dataset, "column_names", None)
    if train_dataset is None or columns is None:
        return None
    tokenized = "input_ids" in columns  # then only the views with tokens are read (text may be kept beside them)
    views = tuple(column for prefix, column in zip(PAIR_VIEWS, PAIR_COLUMNS, strict=True)
                  if (f"{prefix}input_ids" if tokenized else column) in columns)
    return views if len(views) > 1 else ()


def check_views_tokenized(train_dataset) -> None:
    """A tokenized training set whose ``positive`` / ``negative`` text was left untokenized: its views' tokens
    (``positive_input_ids``) are what the collators read, so the positives would go unread."""
    from .data import PAIR_COLUMNS, PAIR_VIEWS

    columns = getattr(train_dataset, "column_names", None) or ()
    untokenized = {column: f"{prefix}input_ids" for prefix, column in zip(PAIR_VIEWS[1:], PAIR_COLUMNS[1:], strict=True)
                   if "input_ids" in columns and column in columns and f"{prefix}input_ids" not in columns}
    if untokenized:
        raise DataError(f"train_dataset is tokenized (input_ids) but its {' and '.join(untokenized)} text is not (no "
                        f"{' or '.join(untokenized.values())}): tokenize every view with "
                        "hf_cse.data.tokenize_pair_dataset(dataset, tokenizer), or pass the rows untokenized for the "
                        "trainer to tokenize.")


def check_rows_for_model(model, views: tuple[str, ...] | None) -> None:
    """Rows the model would train on as something else, refused when the trainer is built, as ``hf-cse-train``
    refuses their flags: pair rows for a method whose second view is made from the sentence itself (ESimCSE trained
    on them as supervised SimCSE does; DiffCSE failed at its first step), hard negatives without positives (left
    unread), hard negatives for a main loss that takes none (it failed at the first step, after the step-0 dev
    scoring) and an objective's ``hard_negative_weight`` without hard negatives (it would weigh nothing)."""
    if views is None:
        return
    if not views:  # sentences: views that differ by dropout only need an encoder with dropout
        check_views_differ(model)
    method = type(model)
    if "negative" in views and "positive" not in views:
        raise DataError("train_dataset has a negative column but no positive one: triplets are text (the anchor), "
                        "positive and negative. Add the positive column, or drop the negative one.")
    if views and not getattr(method, "takes_pair_rows", True):
        raise DataError(f"train_dataset holds pair rows (a positive column), and {method.method_name()} does not "
                        f"train on them: {method.why_no_pair_rows}. Train {method.method_name()} on sentences (a text "
                        "column), or pair rows with SimCSEModel (supervised SimCSE).")
    if "negative" in views:
        check_loss_takes_hard_negatives(model)
    weighted = [o["loss"] for o in getattr(model.config, "objectives", None) or ()
                if (o.get("hyperparameters") or {}).get("hard_negative_weight")]
    if weighted and "negative" not in views:
        raise DataError(f"the {weighted[0]} objective's hard_negative_weight weighs hard negatives, but train_dataset "
                        "has none: give triplets (text, positive and negative columns), or drop hard_negative_weight.")


def check_loss_takes_hard_negatives(model) -> None:
    """Hard negatives (a ``negative`` column) for a model whose main loss takes none (``takes_hard_negatives``), in
    the words of the loss's own refusal, with the fix the command line gives its ``negative_column``."""
    from .losses import available_losses, get_loss_class
    from .losses.errors import HardNegativesNotTakenError

    objectives = getattr(model.config, "objectives", None) or ()
    loss = objectives[0]["loss"] if objectives else None  # the main objective's: the only one given them
    if loss in available_losses() and not get_loss_class(loss).takes_hard_negatives:
        refused = HardNegativesNotTakenError(loss, "train_dataset's negative column")
        raise DataError(f"{refused} Drop the column (dataset.remove_columns('negative')), or give the model one of "
                        "those losses (from_encoder(..., objectives=[...])).")


def data_facts(train_dataset, max_seq_length: int | None, views: tuple[str, ...]) -> dict[str, Any]:
    """``training_info.json``'s ``data`` (the card's "Training data") of a run whose ``save_run`` is given none, in the
    keys ``hf-cse-train`` records: what the trainer knows of its tokenized training set -- the Hub data set's name
    (not a packaged builder's such as ``text``: the files are not known), its sentences (pair / triplet data, of the
    ``views`` of :func:`pair_rows`: rows, with the views' columns), whether it was streamed, and ``max_seq_length``,
    the length the trainer cut it at."""
    import datasets
    from datasets import packaged_modules

    packaged = getattr(packaged_modules, "_PACKAGED_DATASETS_MODULES", {})  # datasets' own: no public name

    facts: dict[str, Any] = {"max_seq_length": max_seq_length}
    if not isinstance(train_dataset, (datasets.Dataset, datasets.IterableDataset)):
        return {k: v for k, v in facts.items() if v is not None}
    name = train_dataset.info.dataset_name
    if name and name not in packaged:
        facts["dataset_name"] = name
    streamed = isinstance(train_dataset, datasets.IterableDataset)
    facts["streamed"] = streamed or None
    if views:
        hard_negative = "negative" in views
        facts["pair_data"] = {"kind": "triplets" if hard_negative else "pairs", "anchor": "text",
                              "positive": "positive", "hard_negative": "negative" if hard_negative else None}
    facts["num_rows" if views else "num_sentences"] = None if streamed else len(train_dataset)
    return {k: v for k, v in facts.items() if v is not None}


def with_known_columns(train_dataset):
    """A ``datasets`` stream whose columns are not known (made from a generator, or mapped without ``features``) with
    them read from its first rows, by datasets' own inference: the trainer tells sentences, pair rows and tokens
    apart by the columns. Other data is returned as it is."""
    import datasets

    from .seams import with_resolved_features

    if isinstance(train_dataset, datasets.IterableDataset) and train_dataset.column_names is None:
        return with_resolved_features(train_dataset)
    return train_dataset


def untokenized_sentences(train_dataset) -> bool:
    """Whether ``train_dataset`` is a ``datasets`` data set of sentences not yet tokenized: a ``text`` column (pairs:
    ``positive``[, ``negative``] beside it), no ``input_ids``."""
    import datasets

    columns = getattr(train_dataset, "column_names", None)
    return (isinstance(train_dataset, (datasets.Dataset, datasets.IterableDataset)) and isinstance(columns, list)
            and "text" in columns and "input_ids" not in columns)


def tokenized_here(train_dataset, tokenizer, model, args, pairs: bool):
    """A data set of sentences (``pairs``: pair / triplet rows, :func:`pair_rows`) tokenized for the trainer
    (:func:`hf_cse.data.tokenize_dataset`, pairs :func:`~hf_cse.data.tokenize_pair_dataset`, a stream
    :func:`hf_cse.streaming.tokenize_stream`), cut at the arguments' ``max_seq_length`` (plain ``TrainingArguments``:
    SimCSE's 32 tokens), and that length; said in one log line: as sentence-transformers' trainer, this one takes
    text. The main process tokenizes first; the others read its cache."""
    import datasets

    from .data import DEFAULT_MAX_SEQ_LENGTH, tokenize_dataset, tokenize_pair_dataset
    from .distributed import main_process_first
    from .streaming import tokenize_stream

    prompt = model.config.prompt
    length = getattr(args, "max_seq_length", DEFAULT_MAX_SEQ_LENGTH)
    check_length_for_encoder(length, model)
    if isinstance(train_dataset, datasets.IterableDataset):
        tokenized = (tokenize_pair_dataset(train_dataset, tokenizer, length, prompt=prompt) if pairs
                     else tokenize_stream(train_dataset, tokenizer, length, prompt))
        rows = f"streamed {'rows' if pairs else 'sentences'}"
    else:
        tokenize = tokenize_pair_dataset if pairs else tokenize_dataset
        tokenized = main_process_first(args, lambda: tokenize(train_dataset, tokenizer, length, prompt=prompt,
                                                              keep_text=True))  # the sampler reads it
        rows = f"{len(tokenized):,} {'rows' if pairs else 'sentences'}"
    if hasattr(args, "max_seq_length"):
        logger.info("train_dataset: %s tokenized by the trainer, at most %d tokens each (max_seq_length)", rows, length)
    else:  # plain TrainingArguments: the length was not chosen
        logger.warning("train_dataset: %s tokenized by the trainer, at most %d tokens each (SimCSE's length); "
                       "ContrastiveTrainingArguments(max_seq_length=N) chooses another", rows, length)
    return tokenized, length


def check_length_for_encoder(length: int, model) -> None:
    """The length the trainer cuts text at is within the encoder's positions (the rule ``hf-cse-train`` applies to
    its flag, :func:`hf_cse.encoders.seq_length_problem`): else the tokenized rows were refused as too long, with a
    fix for data one tokenized oneself."""
    from .encoders import method_max_length, seq_length_problem

    problem = seq_length_problem(length, method_max_length(model))
    if problem:
        raise DataError(f"{problem} (ContrastiveTrainingArguments' max_seq_length: where the trainer cuts the "
                        "sentences it tokenizes).", fields=("max_seq_length",))


def is_stream(train_dataset) -> bool:
    """Whether a training set is a stream (a torch ``IterableDataset``, ``datasets``' streamed ones included)."""
    from torch.utils.data import IterableDataset

    return isinstance(train_dataset, IterableDataset)


def check_rows_for_a_batch(train_dataset, args, read_stream: bool = False) -> None:
    """A training set smaller than one global batch: every batch would be incomplete, and the trainer drops
    incomplete batches, so the run would train 0 steps and save an untrained encoder as trained. A stream's length is
    unknown: with ``read_stream``, one global batch of it is read (as the command line counts one); else it is
    passed over (:func:`prepare_run` reads it once, before anything else does)."""
    from itertools import islice

    from .data import check_enough_rows

    size = global_batch_size(args.per_device_train_batch_size, args.world_size)
    if is_stream(train_dataset):
        if read_stream:
            first = list(islice(train_dataset, size))
            check_enough_rows(len(first), size, "the training set", unit="rows")
            check_stream_repeats(first)
    elif hasattr(train_dataset, "__len__"):
        check_enough_rows(len(train_dataset), size, "the training set", unit="rows")


def check_method_against_run(model, train_dataset, args) -> None:
    """A method's settings against the run's global batch and rows (None: a stream): its ``check_run_batches``."""
    rows = None if is_stream(train_dataset) or not hasattr(train_dataset, "__len__") else len(train_dataset)
    model.check_run_batches(model.config, global_batch_size(args.per_device_train_batch_size, args.world_size), rows)


def check_stream_repeats(batch: list) -> None:
    """A stream's first global batch, as a sample of it: the no-duplicates sampler does not apply to a stream, so a
    text repeated in a batch is its own negative. All one text is refused (there is nothing to contrast); repeats
    are said."""
    def key(row):
        value = row.get("text", row.get("input_ids")) if isinstance(row, dict) else None
        return tuple(value) if isinstance(value, list) else value

    keys = [key(row) for row in batch]
    if None in keys:
        return
    distinct = len(set(keys))
    if distinct == 1 and len(keys) > 1:
        raise CSEError(f"the training stream's first {len(keys)} rows are all one text: each would be the others' "
                       "negative, and nothing is learnt. Streams are not de-duplicated: use varied data.")
    if distinct < len(keys):
        logger.warning("the training stream repeats texts (%d distinct in its first %d rows): streams are not "
                       "de-duplicated, so a repeated text is its own negative in a batch; de-duplicate the data, or "
                       "train without streaming (the no-duplicates sampler applies)", distinct, len(keys))
