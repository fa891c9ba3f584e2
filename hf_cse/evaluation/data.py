"""Readers for the evaluation data: SentEval's ``data/downstream`` layout (``source="local"``) or the
Hugging Face Hub through ``datasets`` (``source="hub"``).

Every reader returns text the way SentEval hands it to a batcher: the line split on whitespace and the
tokens joined by one space (``' '.join(line.split())``). Orders follow SentEval too (transfer tasks are
sorted by ``(length in tokens, label)`` before the folds are drawn), so fold assignments match SentEval's.

Encodings follow SentEval's readers (STS/SST/MRPC/SICK: UTF-8, MR/CR/SUBJ/MPQA/TREC: Latin-1); a UTF-8
file that does not decode falls back to Latin-1 instead of failing.

Local files are checked row by row (:mod:`.rowcheck`): the column count of SentEval's format, gold scores that are
finite numbers in the task's range (``SCORE_RANGES``), labels, non-empty sentences; a bad row raises
``SentEvalDataError`` naming the file and the line. What SentEval itself does is kept: STS12-16 pairs with an
empty gold line are not scored, and empty lines of MR/CR/SUBJ/MPQA are samples (CR and MPQA have a few).

Parsed data are cached per ``(data_dir, source, task, split)`` in a module-level ``lru_cache`` so the
trainer's repeated dev evaluations read the files once.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from ..errors import CSEError
from ..task_names import ALL_TASKS, STS_DEV_TASKS, STS_TASKS, STS_YEARS, TRANSFER_TASKS  # noqa: F401 (re-exported)
from . import rowcheck as check
from .hub_data import HUB_DATASETS, hub_load
from .rowcheck import DATA_SETTINGS, SentEvalDataError

#: where SentEval's data is read from: a local ``data/downstream`` folder or the Hugging Face Hub
Source = Literal["local", "hub"]
SOURCES: tuple[str, ...] = get_args(Source)
#: SimCSE's evaluation modes: ``test`` (the papers' numbers), ``dev`` (dev splits), ``fast`` (a quicker classifier)
Mode = Literal["test", "dev", "fast"]
MODES: tuple[str, ...] = get_args(Mode)

# the tasks' names in result tables (SimCSE's)
TABLE_NAMES = {**{t: t for t in ALL_TASKS}, "STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "SST2": "SST"}

# SimCSE's modified SentEval (senteval/sts.py); STS13 without SMT (licence).
STS_SUBSETS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}

_GET_DATA_HINT = (
    "Get SentEval's data with its script data/downstream/get_transfer_data.bash "
    "(https://github.com/facebookresearch/SentEval) and pass that data/downstream folder as "
    "senteval_data_dir, or read the tasks from the Hugging Face Hub (senteval_source hub)."
)

TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
# Gold-score ranges: STS12-16 and STS-B are scored 0-5, SICK relatedness 1-5.
SCORE_RANGES = {**{t: (0.0, 5.0) for t in STS_YEARS}, "STSBenchmark": (0.0, 5.0), "SICKRelatedness": (1.0, 5.0)}


@dataclass(frozen=True)
class STSPairs:
    """Scored sentence pairs of one STS subset (pairs with an empty gold line are already dropped)."""

    sentences1: tuple[str, ...]
    sentences2: tuple[str, ...]
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)


@dataclass(frozen=True)
class LabelledSentences:
    sentences: tuple[str, ...]
    labels: np.ndarray


@dataclass(frozen=True)
class LabelledPairs:
    sentences1: tuple[str, ...]
    sentences2: tuple[str, ...]
    labels: np.ndarray


# --------------------------------------------------------------------------------------------- helpers
def _join(text: str) -> str:
    return " ".join(text.split())


def read_lines(path: Path, encoding: str = "utf-8") -> list[str]:
    """Lines of a text file (no line ends); UTF-8 files that fail to decode are read as Latin-1."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.splitlines()


def _require(task: str, path: Path) -> Path:
    if not path.is_file():
        raise SentEvalDataError(f"{task}: expected file {path} was not found. {_GET_DATA_HINT}", fields=DATA_SETTINGS)
    return path


def _check_dir(data_dir) -> Path:
    if data_dir is None:
        data_dir = default_senteval_dir()
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise SentEvalDataError(f"SentEval data folder {data_dir} does not exist. {_GET_DATA_HINT}",
                                fields=DATA_SETTINGS)
    return data_dir


def default_senteval_dir() -> Path:
    """Where local SentEval data is looked for when no folder is given: ``$HF_CSE_SENTEVAL_DATA``, else the
    first existing of ``SentEval/data/downstream`` (SimCSE's layout), ``data/senteval`` and
    ``../shared/data/senteval`` relative to the working directory."""
    env = os.environ.get("HF_CSE_SENTEVAL_DATA")
    if env:
        return Path(env)
    candidates = [Path("SentEval/data/downstream"), Path("data/senteval"), Path("../shared/data/senteval")]
    for cand in candidates:
        if cand.is_dir():
            return cand
    raise SentEvalDataError(
        "No SentEval data folder given and none found (looked at $HF_CSE_SENTEVAL_DATA, "
        + ", ".join(str(c) for c in candidates)
        + f"). {_GET_DATA_HINT}",
        fields=DATA_SETTINGS,
    )


def _check_task(task: str, valid: tuple[str, ...]) -> None:
    if task not in valid:
        raise CSEError(f"Unknown task {task!r}. Valid tasks: {', '.join(valid)}.")


def _check_source(source: Source) -> None:
    if source not in SOURCES:
        raise CSEError(f"Unknown senteval source {source!r}: use 'local' or 'hub'.")


def sentence_pairs(a, b, y) -> tuple[tuple[str, ...], tuple[str, ...], np.ndarray]:
    """The fields of :class:`STSPairs` from two columns of sentences and their scores: each sentence's whitespace
    collapsed to single spaces, the scores as float64."""
    return tuple(_join(s) for s in a), tuple(_join(s) for s in b), np.asarray(y, dtype=np.float64)


# --------------------------------------------------------------------------------------------- STS
def _local_sts_year(task: str, data_dir: Path) -> dict[str, STSPairs]:
    folder = data_dir / "STS" / f"{task}-en-test"
    out: dict[str, STSPairs] = {}
    low, high = SCORE_RANGES[task]
    for subset in STS_SUBSETS[task]:
        inp_path, gold_path = folder / f"STS.input.{subset}.txt", folder / f"STS.gs.{subset}.txt"
        inp = read_lines(_require(task, inp_path))
        gold = read_lines(_require(task, gold_path))
        if len(inp) != len(gold):
            raise SentEvalDataError(f"{task}/{subset}: {len(inp)} sentence pairs in {inp_path} but {len(gold)} gold "
                                    f"lines in {gold_path} (one per pair); get both files again.")
        a, b, y = [], [], []
        for lineno, (line, score) in enumerate(zip(inp, gold), 1):
            s1, s2 = check.columns(inp_path, lineno, line, ("sentence1", "sentence2"))
            if score.strip() == "":  # pair not scored; SentEval drops it
                continue
            a.append(check.sentence(inp_path, lineno, s1, "sentence1"))
            b.append(check.sentence(inp_path, lineno, s2, "sentence2"))
            y.append(check.score(gold_path, lineno, score, low, high))
        out[subset] = STSPairs(*sentence_pairs(a, b, y))
    return out


# SentEval's get_transfer_data.bash keeps the first 7 columns of the original STS-B files.
_STSB_COLUMNS = ("genre", "file", "year", "id", "score", "sentence1", "sentence2")
_SICK_COLUMNS = ("pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment")


def _scored_pairs(task: str, path: Path, names: tuple[str, ...], skip_header: bool) -> STSPairs:
    """Rows of a tab-separated file with a score and two sentences (STS-B, SICK), checked."""
    i_score, i_a, i_b = (4, 5, 6) if names == _STSB_COLUMNS else (3, 1, 2)
    low, high = SCORE_RANGES[task]
    a, b, y = [], [], []
    # Tab-separated, no quoting (like csv.QUOTE_NONE): sentences contain unbalanced quote characters.
    for lineno, line in enumerate(read_lines(path), 1):
        if (skip_header and lineno == 1) or not line.strip():
            continue
        cols = check.columns(path, lineno, line, names)
        y.append(check.score(path, lineno, cols[i_score], low, high))
        a.append(check.sentence(path, lineno, cols[i_a], names[i_a]))
        b.append(check.sentence(path, lineno, cols[i_b], names[i_b]))
    return STSPairs(*sentence_pairs(a, b, y))


def _local_stsb(data_dir: Path, split: str) -> STSPairs:
    path = _require("STSBenchmark", data_dir / "STS" / "STSBenchmark" / f"sts-{split}.csv")
    return _scored_pairs("STSBenchmark", path, _STSB_COLUMNS, skip_header=False)


_SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}


def _local_sick(data_dir: Path, split: str) -> STSPairs:
    path = _require("SICKRelatedness", data_dir / "SICK" / _SICK_FILES[split])
    return _scored_pairs("SICKRelatedness", path, _SICK_COLUMNS, skip_header=True)


def _hub_sts(task: str, split: str) -> STSPairs:
    ds = hub_load(task, split)
    c1, c2, cs = HUB_DATASETS[task].get("columns", ("sentence1", "sentence2", "score"))
    return STSPairs(*sentence_pairs(ds[c1], ds[c2], [float(s) for s in ds[cs]]))


@functools.lru_cache(maxsize=64)
def load_sts(task: str, data_dir=None, split: str = "test", source: Source = "local") -> dict[str, STSPairs]:
    """The pairs of an STS task as ``{subset: STSPairs}``.

    STS12-16 have only a test split and one entry per subset of SentEval (from the Hub: a single
    ``"all"`` subset, the Hub sets carry no subset names). STSBenchmark and SICKRelatedness have
    ``train`` / ``dev`` / ``test`` splits and one entry named after the split.
    """
    _check_task(task, STS_TASKS)
    _check_source(source)
    if task in STS_YEARS:
        if split != "test":
            raise CSEError(f"{task} has only a test split (asked for {split!r}).")
        if source == "hub":
            return {"all": _hub_sts(task, split)}
        return _local_sts_year(task, _check_dir(data_dir))
    if split not in ("train", "dev", "test"):
        raise CSEError(f"{task}: unknown split {split!r} (train, dev, test).")
    if source == "hub":
        return {split: _hub_sts(task, split)}
    reader = _local_stsb if task == "STSBenchmark" else _local_sick
    return {split: reader(_check_dir(data_dir), split)}


# --------------------------------------------------------------------------------------------- transfer
_BINARY_FILES = {
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),  # SentEval: objective = class 1
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}


#: the local file of each split of SST2, TREC and MRPC, under the SentEval folder
SPLIT_FILES = {
    "SST2": {split: f"SST/binary/sentiment-{split}" for split in ("train", "dev", "test")},
    "TREC": {"train": "TREC/train_5500.label", "test": "TREC/TREC_10.label"},
    "MRPC": {split: f"MRPC/msr_paraphrase_{split}.txt" for split in ("train", "test")},
}


def transfer_file(task: str, part, data_dir=None) -> Path:
    """The local file of a transfer task that holds ``part``: a class (1 or 0) of MR/CR/SUBJ/MPQA (class 1 = the
    first file), a split of SST2/TREC/MRPC."""
    if task in _BINARY_FILES:
        folder, pos_name, neg_name = _BINARY_FILES[task]
        return _check_dir(data_dir) / folder / (pos_name if part == 1 else neg_name)
    return _check_dir(data_dir) / SPLIT_FILES[task][part]


def _sorted_by_length(sentences, labels) -> LabelledSentences:
    """SentEval's ``sorted(zip(samples, labels), key=lambda z: (len(z[0]), z[1]))`` (stable)."""
    toks = [s.split() for s in sentences]
    order = sorted(range(len(toks)), key=lambda i: (len(toks[i]), labels[i]))
    return LabelledSentences(
        tuple(" ".join(toks[i]) for i in order), np.asarray([labels[i] for i in order], dtype=np.int64)
    )


def _hub_labelled(task: str, split: str) -> tuple[list[str], list[int]]:
    ds = hub_load(task, split)
    c_text, c_label = HUB_DATASETS[task].get("columns", ("text", "label"))
    return list(ds[c_text]), [int(v) for v in ds[c_label]]


@functools.lru_cache(maxsize=32)
def load_binary(task: str, data_dir=None, source: Source = "local") -> LabelledSentences:
    """MR, CR, SUBJ, MPQA: all sentences with 0/1 labels (class 1 = SentEval's first file), SentEval order."""
    _check_task(task, tuple(_BINARY_FILES))
    _check_source(source)
    if source == "hub":
        return _sorted_by_length(*_hub_labelled(task, "all"))
    folder, pos_name, neg_name = _BINARY_FILES[task]
    root = _check_dir(data_dir) / folder
    pos = read_lines(_require(task, root / pos_name), "latin-1")
    neg = read_lines(_require(task, root / neg_name), "latin-1")
    for name, lines in ((pos_name, pos), (neg_name, neg)):
        if not any(line.strip() for line in lines):  # empty lines are samples (SentEval), an empty file is not data
            raise SentEvalDataError(f"{task}: {root / name} holds no sentence; get the file again with SentEval's "
                                    "data/downstream/get_transfer_data.bash.")
    return _sorted_by_length(pos + neg, [1] * len(pos) + [0] * len(neg))


@functools.lru_cache(maxsize=4)
def load_sst2(data_dir=None, source: Source = "local") -> dict[str, LabelledSentences]:
    """SST-2 (SentEval's ``SST/binary``): ``{"train", "dev", "test"}``, each sorted like SentEval."""
    _check_source(source)
    out = {}
    for split in ("train", "dev", "test"):
        if source == "hub":
            out[split] = _sorted_by_length(*_hub_labelled("SST2", split))
            continue
        path = _require("SST2", transfer_file("SST2", split, data_dir))
        sents, labels = [], []
        for lineno, line in enumerate(read_lines(path), 1):
            if not line.strip():
                continue
            text, label = check.columns(path, lineno, line, ("sentence", "label"))
            sents.append(check.sentence(path, lineno, text))
            labels.append(check.label(path, lineno, label, ("0", "1")))
        out[split] = _sorted_by_length(sents, labels)
    return out


@functools.lru_cache(maxsize=4)
def load_trec(data_dir=None, source: Source = "local") -> dict[str, LabelledSentences]:
    """TREC coarse question types (6 classes, ``TREC_CLASSES`` order): ``{"train", "test"}``."""
    _check_source(source)
    out = {}
    for split in ("train", "test"):
        if source == "hub":
            out[split] = _sorted_by_length(*_hub_labelled("TREC", split))
            continue
        path = _require("TREC", transfer_file("TREC", split, data_dir))
        sents, labels = [], []
        for lineno, line in enumerate(read_lines(path, "latin-1"), 1):
            if not line.strip():
                continue
            head, _, question = line.strip().partition(" ")  # "CLASS:fine question words"
            target, colon, _ = head.partition(":")
            if not colon:
                raise check.row_error(path, lineno, f"expected 'CLASS:fine question', found no ':' in {head!r}")
            labels.append(check.label(path, lineno, target, TREC_CLASSES))
            sents.append(check.sentence(path, lineno, question, "question"))
        out[split] = _sorted_by_length(sents, labels)
    return out


@functools.lru_cache(maxsize=4)
def load_mrpc(data_dir=None, source: Source = "local") -> dict[str, LabelledPairs]:
    """MRPC paraphrase pairs: ``{"train", "test"}``, sorted like SentEval's mrpc.py."""
    _check_source(source)
    out = {}
    for split in ("train", "test"):
        if source == "hub":
            ds = hub_load("MRPC", split)
            c1, c2, cl = HUB_DATASETS["MRPC"]["columns"]
            a, b, y = list(ds[c1]), list(ds[c2]), [int(v) for v in ds[cl]]
        else:
            path = _require("MRPC", transfer_file("MRPC", split, data_dir))
            a, b, y = [], [], []
            for lineno, line in enumerate(read_lines(path), 1):
                if lineno == 1 or not line.strip():  # header
                    continue
                cols = check.columns(path, lineno, line, ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"))
                y.append(check.label(path, lineno, cols[0], ("0", "1")))
                a.append(check.sentence(path, lineno, cols[3], "#1 String"))
                b.append(check.sentence(path, lineno, cols[4], "#2 String"))
        ta, tb = [s.split() for s in a], [s.split() for s in b]
        order = sorted(range(len(y)), key=lambda i: (len(ta[i]), len(tb[i]), y[i]))
        out[split] = LabelledPairs(
            tuple(" ".join(ta[i]) for i in order),
            tuple(" ".join(tb[i]) for i in order),
            np.asarray([y[i] for i in order], dtype=np.int64),
        )
    return out


def clear_cache() -> None:
    """Forget parsed data (e.g. after the files changed on disk)."""
    for fn in (load_sts, load_binary, load_sst2, load_trec, load_mrpc):
        fn.cache_clear()
