"""Readers for the evaluation data: SentEval's ``data/downstream`` layout (``source="local"``) or the
Hugging Face Hub through ``datasets`` (``source="hub"``).

Every reader returns text the way SentEval hands it to a batcher: the line split on whitespace and the
tokens joined by one space (``' '.join(line.split())``). Orders follow SentEval too (transfer tasks are
sorted by ``(length in tokens, label)`` before the folds are drawn), so fold assignments match SentEval's.

Encodings follow SentEval's readers (STS/SST/MRPC/SICK: UTF-8, MR/CR/SUBJ/MPQA/TREC: Latin-1); a UTF-8
file that does not decode falls back to Latin-1 instead of failing.

Parsed data are cached per ``(data_dir, source, task, split)`` in a module-level ``lru_cache`` so the
trainer's repeated dev evaluations read the files once.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")
STS_TASKS = STS_YEARS + ("STSBenchmark", "SICKRelatedness")
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
ALL_TASKS = STS_TASKS + TRANSFER_TASKS

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
    "--senteval_data_dir, or read the tasks from the Hugging Face Hub with --senteval_source hub."
)

# Hub data sets used by source="hub" (repo id, config, {our split: hub split(s)}, column names).
# They were chosen to match SentEval's sets as closely as the Hub allows; the ones that differ are noted.
# Override an entry by assigning to HUB_DATASETS[task] before loading.
HUB_DATASETS: dict[str, dict] = {
    "STS12": {"repo": "mteb/sts12-sts", "splits": {"test": ["test"]}},
    "STS13": {"repo": "mteb/sts13-sts", "splits": {"test": ["test"]}},
    "STS14": {"repo": "mteb/sts14-sts", "splits": {"test": ["test"]}},
    "STS15": {"repo": "mteb/sts15-sts", "splits": {"test": ["test"]}},
    "STS16": {"repo": "mteb/sts16-sts", "splits": {"test": ["test"]}},
    "STSBenchmark": {
        "repo": "mteb/stsbenchmark-sts",
        "splits": {"train": ["train"], "dev": ["validation"], "test": ["test"]},
    },
    # SICK with SentEval's train / trial (= dev) / test split (mteb/sickr-sts is the whole of SICK).
    "SICKRelatedness": {
        "repo": "RobZamp/sick",
        "splits": {"train": ["train"], "dev": ["validation"], "test": ["test"]},
        "columns": ("sentence_A", "sentence_B", "relatedness_score"),
    },
    "MR": {
        "repo": "cornell-movie-review-data/rotten_tomatoes",
        "splits": {"all": ["train", "validation", "test"]},
    },
    "CR": {"repo": "SetFit/SentEval-CR", "splits": {"all": ["train", "test"]}},
    "SUBJ": {"repo": "SetFit/subj", "splits": {"all": ["train", "test"]}},
    "MPQA": {"repo": "SetFit/mpqa", "splits": {"all": ["train", "test"]}},
    # Sentence-level SST-2 (6,920 train sentences); SentEval trains on the 67,349 phrase-level set.
    "SST2": {"repo": "SetFit/sst2", "splits": {"train": ["train"], "dev": ["validation"], "test": ["test"]}},
    "TREC": {
        "repo": "CogComp/trec",
        "splits": {"train": ["train"], "test": ["test"]},
        "columns": ("text", "coarse_label"),
    },
    # SentEval's MRPC train (4,076 pairs) = GLUE train + validation.
    "MRPC": {
        "repo": "SetFit/mrpc",
        "splits": {"train": ["train", "validation"], "test": ["test"]},
        "columns": ("text1", "text2", "label"),
    },
}

TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")


class SentEvalDataError(FileNotFoundError):
    """A task's data file is missing (the message names the task, the path and where to get the data)."""


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
        raise SentEvalDataError(f"{task}: expected file {path} was not found. {_GET_DATA_HINT}")
    return path


def _check_dir(data_dir) -> Path:
    if data_dir is None:
        data_dir = default_senteval_dir()
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise SentEvalDataError(f"SentEval data folder {data_dir} does not exist. {_GET_DATA_HINT}")
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
        + f"). {_GET_DATA_HINT}"
    )


def _check_task(task: str, valid: tuple[str, ...]) -> None:
    if task not in valid:
        raise ValueError(f"Unknown task {task!r}. Valid tasks: {', '.join(valid)}.")


def _check_source(source: str) -> None:
    if source not in ("local", "hub"):
        raise ValueError(f"Unknown senteval source {source!r}: use 'local' or 'hub'.")


def _sentence_pairs(a, b, y) -> tuple[tuple[str, ...], tuple[str, ...], np.ndarray]:
    return tuple(_join(s) for s in a), tuple(_join(s) for s in b), np.asarray(y, dtype=np.float64)


# --------------------------------------------------------------------------------------------- STS
def _local_sts_year(task: str, data_dir: Path) -> dict[str, STSPairs]:
    folder = data_dir / "STS" / f"{task}-en-test"
    out: dict[str, STSPairs] = {}
    for subset in STS_SUBSETS[task]:
        inp = read_lines(_require(task, folder / f"STS.input.{subset}.txt"))
        gold = read_lines(_require(task, folder / f"STS.gs.{subset}.txt"))
        if len(inp) != len(gold):
            raise ValueError(f"{task}/{subset}: {len(inp)} sentence pairs but {len(gold)} gold lines.")
        a, b, y = [], [], []
        for line, score in zip(inp, gold):
            if score.strip() == "":  # pair not scored
                continue
            s1, s2 = line.split("\t")[:2]
            a.append(s1)
            b.append(s2)
            y.append(float(score))
        out[subset] = STSPairs(*_sentence_pairs(a, b, y))
    return out


def _local_stsb(data_dir: Path, split: str) -> STSPairs:
    path = _require("STSBenchmark", data_dir / "STS" / "STSBenchmark" / f"sts-{split}.csv")
    a, b, y = [], [], []
    # Tab-separated, no quoting (like csv.QUOTE_NONE): sentences contain unbalanced quote characters.
    for line in read_lines(path):
        if not line.strip():
            continue
        cols = line.strip().split("\t")
        y.append(float(cols[4]))
        a.append(cols[5])
        b.append(cols[6])
    return STSPairs(*_sentence_pairs(a, b, y))


_SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}


def _local_sick(data_dir: Path, split: str) -> STSPairs:
    path = _require("SICKRelatedness", data_dir / "SICK" / _SICK_FILES[split])
    a, b, y = [], [], []
    for line in read_lines(path)[1:]:  # header
        if not line.strip():
            continue
        cols = line.strip().split("\t")
        a.append(cols[1])
        b.append(cols[2])
        y.append(float(cols[3]))
    return STSPairs(*_sentence_pairs(a, b, y))


def _hub_load(task: str, split: str):
    """Rows of a Hub data set for one of our splits (several Hub splits are concatenated)."""
    try:
        import datasets
    except ImportError as err:  # pragma: no cover
        raise ImportError(
            "--senteval_source hub needs the `datasets` package (pip install datasets)."
        ) from err
    spec = HUB_DATASETS[task]
    if split not in spec["splits"]:
        raise ValueError(
            f"{task}: split {split!r} is not available from the Hub data set {spec['repo']} "
            f"(available: {', '.join(spec['splits'])})."
        )
    parts = [
        datasets.load_dataset(spec["repo"], spec.get("config"), split=hub_split)
        for hub_split in spec["splits"][split]
    ]
    return datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]


def _hub_sts(task: str, split: str) -> STSPairs:
    ds = _hub_load(task, split)
    c1, c2, cs = HUB_DATASETS[task].get("columns", ("sentence1", "sentence2", "score"))
    return STSPairs(*_sentence_pairs(ds[c1], ds[c2], [float(s) for s in ds[cs]]))


@functools.lru_cache(maxsize=64)
def load_sts(task: str, data_dir=None, split: str = "test", source: str = "local") -> dict[str, STSPairs]:
    """The pairs of an STS task as ``{subset: STSPairs}``.

    STS12-16 have only a test split and one entry per subset of SentEval (from the Hub: a single
    ``"all"`` subset, the Hub sets carry no subset names). STSBenchmark and SICKRelatedness have
    ``train`` / ``dev`` / ``test`` splits and one entry named after the split.
    """
    _check_task(task, STS_TASKS)
    _check_source(source)
    if task in STS_YEARS:
        if split != "test":
            raise ValueError(f"{task} has only a test split (asked for {split!r}).")
        if source == "hub":
            return {"all": _hub_sts(task, split)}
        return _local_sts_year(task, _check_dir(data_dir))
    if split not in ("train", "dev", "test"):
        raise ValueError(f"{task}: unknown split {split!r} (train, dev, test).")
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


def _sorted_by_length(sentences, labels) -> LabelledSentences:
    """SentEval's ``sorted(zip(samples, labels), key=lambda z: (len(z[0]), z[1]))`` (stable)."""
    toks = [s.split() for s in sentences]
    order = sorted(range(len(toks)), key=lambda i: (len(toks[i]), labels[i]))
    return LabelledSentences(
        tuple(" ".join(toks[i]) for i in order), np.asarray([labels[i] for i in order], dtype=np.int64)
    )


def _hub_labelled(task: str, split: str) -> tuple[list[str], list[int]]:
    ds = _hub_load(task, split)
    c_text, c_label = HUB_DATASETS[task].get("columns", ("text", "label"))
    return list(ds[c_text]), [int(v) for v in ds[c_label]]


@functools.lru_cache(maxsize=32)
def load_binary(task: str, data_dir=None, source: str = "local") -> LabelledSentences:
    """MR, CR, SUBJ, MPQA: all sentences with 0/1 labels (class 1 = SentEval's first file), SentEval order."""
    _check_task(task, tuple(_BINARY_FILES))
    _check_source(source)
    if source == "hub":
        return _sorted_by_length(*_hub_labelled(task, "all"))
    folder, pos_name, neg_name = _BINARY_FILES[task]
    root = _check_dir(data_dir) / folder
    pos = read_lines(_require(task, root / pos_name), "latin-1")
    neg = read_lines(_require(task, root / neg_name), "latin-1")
    return _sorted_by_length(pos + neg, [1] * len(pos) + [0] * len(neg))


@functools.lru_cache(maxsize=4)
def load_sst2(data_dir=None, source: str = "local") -> dict[str, LabelledSentences]:
    """SST-2 (SentEval's ``SST/binary``): ``{"train", "dev", "test"}``, each sorted like SentEval."""
    _check_source(source)
    out = {}
    for split in ("train", "dev", "test"):
        if source == "hub":
            out[split] = _sorted_by_length(*_hub_labelled("SST2", split))
            continue
        path = _require("SST2", _check_dir(data_dir) / "SST" / "binary" / f"sentiment-{split}")
        sents, labels = [], []
        for line in read_lines(path):
            if not line.strip():
                continue
            text, label = line.strip().split("\t")
            sents.append(text)
            labels.append(int(label))
        out[split] = _sorted_by_length(sents, labels)
    return out


@functools.lru_cache(maxsize=4)
def load_trec(data_dir=None, source: str = "local") -> dict[str, LabelledSentences]:
    """TREC coarse question types (6 classes, ``TREC_CLASSES`` order): ``{"train", "test"}``."""
    _check_source(source)
    out = {}
    for split, fname in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        if source == "hub":
            out[split] = _sorted_by_length(*_hub_labelled("TREC", split))
            continue
        path = _require("TREC", _check_dir(data_dir) / "TREC" / fname)
        sents, labels = [], []
        for line in read_lines(path, "latin-1"):
            if not line.strip():
                continue
            target, sample = line.strip().split(":", 1)
            sents.append(sample.split(" ", 1)[1])
            labels.append(TREC_CLASSES.index(target))
        out[split] = _sorted_by_length(sents, labels)
    return out


@functools.lru_cache(maxsize=4)
def load_mrpc(data_dir=None, source: str = "local") -> dict[str, LabelledPairs]:
    """MRPC paraphrase pairs: ``{"train", "test"}``, sorted like SentEval's mrpc.py."""
    _check_source(source)
    out = {}
    for split in ("train", "test"):
        if source == "hub":
            ds = _hub_load("MRPC", split)
            c1, c2, cl = HUB_DATASETS["MRPC"]["columns"]
            a, b, y = list(ds[c1]), list(ds[c2]), [int(v) for v in ds[cl]]
        else:
            path = _require("MRPC", _check_dir(data_dir) / "MRPC" / f"msr_paraphrase_{split}.txt")
            a, b, y = [], [], []
            for line in read_lines(path)[1:]:  # header
                if not line.strip():
                    continue
                cols = line.strip().split("\t")
                y.append(int(cols[0]))
                a.append(cols[3])
                b.append(cols[4])
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
