"""Your own similarity data for checkpoint selection and evaluation: scored sentence pairs from a CSV/TSV file
(``eval_file``) or a Hub data set (``eval_dataset_name``), scored like STS-B dev (Spearman x 100 of cosine).

A file holds one pair per row: two sentences and a similarity score (any scale, any language; only the ranking
matters). Columns are named by the ``eval_*_column`` fields. With column names the first row is the header, and a
row with another number of fields is refused (an unquoted comma would shift its cells: a wrong pair scored);
with 0-based column numbers (``eval_sentence1_column 5 eval_sentence2_column 6 eval_score_column 4``,
e.g. SentEval's ``sts-dev.csv``, whose rows have extra fields) the file has no header and a row needs only
those columns. ``.tsv`` / ``.txt`` files and files whose first line
holds a tab are tab-separated and read without quote handling (sentences keep their quote characters);
other files are comma-separated CSV with standard quoting.
"""

from __future__ import annotations

import logging
import math
import weakref
from dataclasses import dataclass, field, fields

import numpy as np

from ..checks import InputError
from ..hub_reach import is_offline, offline_fix, offline_if_unreachable
from ..scored_pairs import check_rankable, read_scored_rows
from .data import STSPairs, sentence_pairs

logger = logging.getLogger(__name__)

#: below this many pairs a dev set is warned about: a Spearman's sampling noise is about 1 / sqrt(n - 1)
FEW_DEV_PAIRS = 100


@dataclass
class EvalDataArguments:
    """Flags naming the user's scored sentence pairs (shared by run_unsup.py and run_eval.py)."""

    eval_file: str | None = field(
        default=None,
        metadata={"help": "CSV/TSV of scored sentence pairs (two sentences + a similarity score, any language), "
                          "scored like STS-B dev: logged as eval_<eval_name>_spearman for metric_for_best_model."},
    )
    eval_dataset_name: str | None = field(
        default=None, metadata={"help": "Hub data set of scored sentence pairs (instead of eval_file)."}
    )
    eval_dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration."})
    eval_dataset_split: str = field(default="validation", metadata={"help": "Its split."})
    eval_sentence1_column: str = field(
        default="sentence1", metadata={"help": "Column of the first sentences (a name, or a 0-based number for a "
                                               "file without header)."}
    )
    eval_sentence2_column: str = field(default="sentence2", metadata={"help": "Column of the second sentences."})
    eval_score_column: str = field(default="score", metadata={"help": "Column of the similarity scores."})
    eval_name: str = field(
        default="custom", metadata={"help": "Name of the metric: eval_<eval_name>_spearman (run_eval: its row)."}
    )


def check_pairs_settings_used(args, pairs=None) -> None:
    """The scored pairs' columns, split or name set (other than their defaults) without pairs to describe: nothing
    would read them. Checked by the trainer, as the command lines check the ones typed; ``pairs``: the trainer's
    ``eval_pairs``, which ``eval_name`` names. Beside ``eval_file`` / ``eval_dataset_name`` they are refused (the
    file would go unread) unless :func:`pairs_from_args` read them from those very arguments: the command line
    reads the pairs once and passes them on as ``eval_pairs``."""
    source = _pairs_source(args)
    if source is not None:  # pairs to describe
        if pairs is not None and not _read_from(pairs, source):
            name = "eval_file" if args.eval_file else "eval_dataset_name"
            raise InputError(f"eval_pairs and {name} {getattr(args, name)} both give the dev pairs, and only "
                             f"eval_pairs would be scored: drop one of them.", fields=(name,))
        return
    unread = ("eval_file", "eval_dataset_name", *(("eval_name",) if pairs is not None else ()))
    for spec in fields(EvalDataArguments):
        value = getattr(args, spec.name, spec.default)
        if spec.name in unread or value == spec.default:
            continue
        if pairs is not None:
            raise InputError(f"{spec.name} {value} does nothing: the trainer's eval_pairs are rows (sentence1, "
                             f"sentence2, score) with no columns or split to name; drop {spec.name}.",
                             fields=(spec.name,))
        raise InputError(f"{spec.name} {value} does nothing without eval_file or eval_dataset_name (the scored "
                         f"pairs it describes): add one, or drop {spec.name}.", fields=(spec.name,))


def read_pair_file(path, sentence1_column: str = "sentence1", sentence2_column: str = "sentence2",
                   score_column: str = "score") -> STSPairs:
    """Scored pairs of a CSV/TSV file (see the module docstring); a malformed row is an :class:`InputError`
    naming the file and line (:func:`~hf_cse.scored_pairs.read_scored_rows`). Blank lines are skipped."""
    return check_pairs(STSPairs(*sentence_pairs(*read_scored_rows(
        path, sentence1_column, sentence2_column, score_column))), str(path))


def load_hub_pairs(name: str, config: str | None = None, split: str = "validation",
                   sentence1_column: str = "sentence1", sentence2_column: str = "sentence2",
                   score_column: str = "score") -> STSPairs:
    """Scored pairs of a Hub data set split (e.g. ``mteb/stsbenchmark-sts``, split ``validation``)."""
    import datasets

    offline_if_unreachable()
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except (ConnectionError, FileNotFoundError) as err:
        fix = offline_fix()
        offline = f" {fix[0].upper()}{fix[1:]}, or use eval_file." if is_offline() else ""
        raise InputError(f"eval_dataset_name {name}: cannot load it ({' '.join(str(err).split())}).{offline}") \
            from err
    except ValueError as err:  # unknown split or config
        raise InputError(f"eval_dataset_name {name}: {' '.join(str(err).split())}") from err
    missing = [c for c in (sentence1_column, sentence2_column, score_column) if c not in ds.column_names]
    if missing:
        raise InputError(f"eval_dataset_name {name} has no column {', '.join(map(repr, missing))}; its columns: "
                         f"{', '.join(ds.column_names)}. Set eval_sentence1_column / eval_sentence2_column / "
                         "eval_score_column.")
    try:
        scores = [float(s) for s in ds[score_column]]
    except (TypeError, ValueError) as err:
        raise InputError(f"eval_dataset_name {name}: column {score_column!r} is not numeric.") from err
    return check_pairs(STSPairs(*sentence_pairs(ds[sentence1_column], ds[sentence2_column], scores)), name)


def check_pairs(pairs: STSPairs, source: str) -> STSPairs:
    """Pairs a Spearman correlation can rank models by (:func:`~hf_cse.scored_pairs.check_rankable`), a warning below
    :data:`FEW_DEV_PAIRS`."""
    check_rankable(pairs.sentences1, pairs.sentences2, pairs.scores.tolist(), source)
    if len(pairs) < FEW_DEV_PAIRS:
        logger.warning("%s: %d scored pairs; a Spearman correlation over so few moves by about %.0f points (x 100) "
                       "from one sample of pairs to another, so the checkpoints and the before/after comparison "
                       "chosen on it are that coarse: add pairs (STS-B dev has 1,500)", source, len(pairs),
                       100 / math.sqrt(len(pairs) - 1))
    return pairs


#: pairs :func:`pairs_from_args` read, by id: (a weak reference to them, the arguments' source they came from)
_READ_FROM: dict[int, tuple[weakref.ref, tuple]] = {}


def _pairs_source(args) -> tuple | None:
    """What names the arguments' scored pairs: file, data set and how they are read; None where nothing does."""
    if not (getattr(args, "eval_file", None) or getattr(args, "eval_dataset_name", None)):
        return None
    return tuple(getattr(args, spec.name, spec.default) for spec in fields(EvalDataArguments)
                 if spec.name != "eval_name")


def _read_from(pairs, source: tuple) -> bool:
    """Whether :func:`pairs_from_args` read these very ``pairs`` from arguments naming ``source``."""
    ref, read_source = _READ_FROM.get(id(pairs), (None, None))
    return ref is not None and ref() is pairs and read_source == source


def pairs_from_args(args: EvalDataArguments) -> STSPairs | None:
    """The pairs the flags name (None when neither eval_file nor eval_dataset_name is given)."""
    if args.eval_file and args.eval_dataset_name:
        raise InputError("Give eval_file or eval_dataset_name, not both.")
    columns = (args.eval_sentence1_column, args.eval_sentence2_column, args.eval_score_column)
    if args.eval_file:
        pairs = read_pair_file(args.eval_file, *columns)
    elif args.eval_dataset_name:
        pairs = load_hub_pairs(args.eval_dataset_name, args.eval_dataset_config_name, args.eval_dataset_split, *columns)
    else:
        return None
    key = id(pairs)
    _READ_FROM[key] = (weakref.ref(pairs, lambda _ref: _READ_FROM.pop(key, None)), _pairs_source(args))
    return pairs


#: what the trainer's ``eval_pairs`` takes, said where it is given something else
EVAL_PAIRS_FORMS = ("pass hf_cse.evaluation.data.STSPairs (e.g. hf_cse.evaluation.custom_dev.read_pair_file(path)) or "
                    "a list of (sentence1, sentence2, score) tuples; or give the pairs as eval_file= (a CSV/TSV file) "
                    "or an evaluator=")


def _pair_row_fault(row) -> str | None:
    """What is wrong with one ``eval_pairs`` row, naming the element at fault (a long sentence cut), or None."""
    if not isinstance(row, (list, tuple)) or len(row) != 3:
        return f"{type(row).__name__} {row!r:.80}" + (f" of {len(row)} items" if isinstance(row, (list, tuple)) else "")
    for name, sentence in (("sentence1", row[0]), ("sentence2", row[1])):
        if not (isinstance(sentence, str) and sentence.strip()):
            return f"its {name} is {type(sentence).__name__} {sentence!r:.60}"
    score = row[2]
    if not isinstance(score, (int, float, np.number)) or isinstance(score, bool) or not math.isfinite(score):
        return f"its score is {type(score).__name__} {score!r:.40}"
    return None


def given_pairs(pairs) -> STSPairs | None:
    """:class:`~hf_cse.trainer.ContrastiveTrainer`'s ``eval_pairs``: :class:`STSPairs` as they are, or a list (tuple)
    of ``(sentence1, sentence2, score)`` rows as :class:`STSPairs` (scored like ``eval_file``'s, :func:`check_pairs`);
    anything else refused in one line naming the forms taken (a ``dict``, a data set, a path, rows of two)."""
    if pairs is None or isinstance(pairs, STSPairs):
        return pairs
    if not isinstance(pairs, (list, tuple)):
        raise InputError(f"eval_pairs is {type(pairs).__name__} {pairs!r:.60}, not scored sentence pairs: "
                         f"{EVAL_PAIRS_FORMS}.", fields=("eval_pairs",))
    for number, row in enumerate(pairs):
        fault = _pair_row_fault(row)
        if fault:
            raise InputError(f"eval_pairs row {number}: {fault}, not (sentence1, sentence2, score) with two sentences "
                             f"and a finite number: {EVAL_PAIRS_FORMS}.", fields=("eval_pairs",))
    a, b, y = zip(*pairs, strict=True) if pairs else ((), (), ())
    return check_pairs(STSPairs(*sentence_pairs(a, b, [float(s) for s in y])), "eval_pairs")
