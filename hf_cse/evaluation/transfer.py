"""SentEval transfer tasks: logistic regression on frozen sentence embeddings (SentEval's protocols).

Protocols (as SentEval's ``validation.py``):

* MR, CR, SUBJ, MPQA: ``InnerKFoldClassifier``: outer stratified k-fold over the whole set; inside each
  outer training part an inner k-fold picks the L2 penalty from {1e-5, 1e-4, 1e-3, 1e-2}; a classifier
  with that penalty is then trained on the outer training part (5% held out for early stopping) and
  tested on the outer fold. Reported: mean outer-fold accuracy.
* SST2: ``SplitClassifier``: L2 picked on the dev split, accuracy on the test split.
* TREC, MRPC: ``KFoldClassifier``: k-fold on the train split picks L2, then train on all of it (5% held
  out) and test on the test split.
* MRPC features: ``mrpc_features="senteval"`` (default) = ``[|u - v|, u * v]``, what SentEval's ``mrpc.py``
  and therefore the five papers use; ``"full"`` = ``[u, v, |u - v|, u * v]`` (InferSent / SBERT style).

The classifier (:mod:`hf_cse.evaluation.logreg`) is SentEval's logistic regression, the hundreds of fits of a
task trained together. Modes (SimCSE's ``evaluation.py``):

* ``test``: kfold 10, Adam (lr 1e-3), batch 64, tenacity 5, epoch_size 4  -> test accuracy;
* ``fast``: kfold 5, RMSprop (lr 1e-2), batch 128, tenacity 3, epoch_size 2 -> test accuracy
  (SimCSE's ``fasttest``);
* ``dev``: the ``fast`` classifier, reports SentEval's dev accuracy (the accuracy used to pick L2).

Each task's sentences are embedded once; classifiers train on the cached features.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable, Literal, Sequence, get_args

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold

from ..errors import CSEError
from .data import (
    TABLE_NAMES,
    TRANSFER_TASKS,
    TREC_CLASSES,
    Mode,
    Source,
    load_binary,
    load_mrpc,
    load_sst2,
    load_trec,
    transfer_file,
)
from .hub_data import HUB_DATASETS
from .logreg import FAST_CONFIG, MODE_CONFIGS, TEST_CONFIG, BatchedLogReg, ClassifierConfig, Fit, accuracy
from .results import average_label, text_table
from .rowcheck import SentEvalDataError
from .sts import encode_function

logger = logging.getLogger(__name__)

L2_GRID = (1e-5, 1e-4, 1e-3, 1e-2)
#: the share of its training rows a final fit holds out to stop early (SentEval's validation_split)
VALIDATION_SPLIT = 0.05
#: the fewest training rows that hold out one row at VALIDATION_SPLIT (fewer: the classifier is never trained)
MIN_FIT_ROWS = math.ceil(1 / VALIDATION_SPLIT)
BINARY_TASKS = ("MR", "CR", "SUBJ", "MPQA")
#: MRPC's pair features (see the module docstring)
MrpcFeatures = Literal["senteval", "full"]
MRPC_FEATURES: tuple[str, ...] = get_args(MrpcFeatures)
#: how a model card says which MRPC pair features the classifier saw
MRPC_FEATURE_WORDS = {"senteval": "`[|u - v|, u * v]`, as SentEval and the papers",
                      "full": "`[u, v, |u - v|, u * v]` (InferSent / SBERT style), not the papers' `[|u - v|, u * v]`"}

__all__ = [  # the classifier (hf_cse.evaluation.logreg) is part of this module's interface too
    "FAST_CONFIG", "L2_GRID", "MODE_CONFIGS", "MRPC_FEATURES", "MRPC_FEATURE_WORDS", "TEST_CONFIG",
    "BatchedLogReg", "ClassifierConfig", "Fit",
    "check_transfer_sizes", "evaluate_transfer", "format_transfer_table", "inner_kfold_classifier",
    "inner_kfold_plan", "kfold_classifier", "load_transfer_task", "mrpc_features", "resolve_transfer_tasks",
    "run_transfer_task", "split_classifier",
]


# --------------------------------------------------------------------------------------------- protocols
#: how a transfer table says the classifier and split it was scored with (the modes above)
TRANSFER_MODE_WORDS = {"test": "test accuracy, the papers' 10-fold classifier",
                       "fast": "test accuracy, the fast 5-fold classifier (SimCSE's fasttest), not the papers'",
                       "dev": "dev accuracy, the fast 5-fold classifier"}


def _folds(y: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return list(skf.split(np.zeros(len(y)), y))


def inner_kfold_plan(y: np.ndarray, k: int, regs=L2_GRID, seed: int = 1111):
    """The fits of SentEval's ``InnerKFoldClassifier``: outer stratified k folds over all samples; for
    each outer fold, an inner stratified k-fold of its *training part only* for every L2 value.

    Returns ``(outer, fits, slots)``: ``outer`` = list of (train, test) index arrays, ``fits`` the inner
    fits and ``slots[i] = (outer fold, L2 index, inner fold)`` of ``fits[i]``.
    """
    y = np.asarray(y)
    outer = _folds(y, k, seed)
    fits, slots = [], []
    for o, (tr, _) in enumerate(outer):
        inner = _folds(y[tr], k, seed)
        for r, reg in enumerate(regs):
            for j, (itr, ite) in enumerate(inner):
                fits.append(Fit(tr[itr], reg, dev_idx=tr[ite]))
                slots.append((o, r, j))
    return outer, fits, slots


def inner_kfold_classifier(X, y, nclasses, config: ClassifierConfig, regs=L2_GRID, max_parallel=None) -> dict:
    """SentEval's ``InnerKFoldClassifier`` (MR, CR, SUBJ, MPQA). Returns devacc, testacc and per-fold info.

    The L2 penalty of outer fold o is chosen by the mean inner-fold held-out accuracy (rounded to 0.01 as
    SentEval, first best on ties); the outer test fold is never seen before the final scoring."""
    y = np.asarray(y)
    engine = BatchedLogReg(X, y, nclasses, config, max_parallel)
    outer, fits, slots = inner_kfold_plan(y, config.kfold, regs, 1111)
    _, _, acc = engine.fit(fits)
    inner_acc = np.zeros((len(outer), len(regs), config.kfold))
    for (o, r, j), a in zip(slots, acc):
        inner_acc[o, r, j] = a
    scores = np.round(100 * inner_acc.mean(-1), 2)  # (outer, reg)
    best = scores.argmax(1)
    final = [Fit(tr, regs[best[o]], validation_split=VALIDATION_SPLIT) for o, (tr, _) in enumerate(outer)]
    W, b, _ = engine.fit(final)
    test = accuracy(engine.X, engine.y, W, b, [te for _, te in outer])
    test_scores = np.round(100 * test, 2)
    return {
        "devacc": float(round(scores.max(1).mean(), 2)),
        "testacc": float(round(test_scores.mean(), 2)),
        "l2": [float(regs[i]) for i in best],
        "fold_testacc": test_scores.tolist(),
        "n": int(len(y)),
    }


def kfold_classifier(Xtr, ytr, Xte, yte, nclasses, config: ClassifierConfig, regs=L2_GRID, max_parallel=None):
    """SentEval's ``KFoldClassifier`` (TREC, MRPC): k-fold on train picks L2, then train/test. Also returns
    the test predictions (for MRPC's F1)."""
    X = np.concatenate([Xtr, Xte])
    y = np.concatenate([ytr, yte])
    ntr = len(ytr)
    engine = BatchedLogReg(X, y, nclasses, config, max_parallel)
    folds = _folds(np.asarray(ytr), config.kfold, config.seed)
    fits = [Fit(tr, reg, dev_idx=te) for reg in regs for tr, te in folds]
    _, _, acc = engine.fit(fits)
    scores = np.round(100 * acc.reshape(len(regs), len(folds)).mean(1), 2)
    best = int(scores.argmax())
    W, b, _ = engine.fit([Fit(np.arange(ntr), regs[best], validation_split=VALIDATION_SPLIT)])
    with torch.no_grad():
        logits = engine.X[ntr:] @ W[0] + b[0]
    yhat = logits.argmax(-1).numpy()
    return {
        "devacc": float(scores.max()),
        "testacc": float(round(100 * np.mean(yhat == np.asarray(yte)), 2)),
        "l2": float(regs[best]),
        "cv_scores": scores.tolist(),
        "ntrain": int(ntr),
        "ntest": int(len(yte)),
    }, yhat


def split_classifier(Xtr, ytr, Xdev, ydev, Xte, yte, nclasses, config: ClassifierConfig, regs=L2_GRID):
    """SentEval's ``SplitClassifier`` (SST2): dev picks L2; the final refit of SentEval is the same
    deterministic fit, so its weights are reused."""
    X = np.concatenate([Xtr, Xdev, Xte])
    y = np.concatenate([ytr, ydev, yte])
    n1, n2 = len(ytr), len(ytr) + len(ydev)
    engine = BatchedLogReg(X, y, nclasses, config)
    fits = [Fit(np.arange(n1), reg, dev_idx=np.arange(n1, n2)) for reg in regs]
    W, b, acc = engine.fit(fits)
    scores = np.round(100 * acc, 2)
    best = int(scores.argmax())
    test = accuracy(engine.X, engine.y, W[best : best + 1], b[best : best + 1], [np.arange(n2, len(y))])[0]
    return {
        "devacc": float(scores.max()),
        "testacc": float(round(100 * test, 2)),
        "l2": float(regs[best]),
        "dev_scores": scores.tolist(),
        "ntrain": int(n1),
        "ntest": int(len(yte)),
    }


def mrpc_features(u: np.ndarray, v: np.ndarray, kind: MrpcFeatures = "senteval") -> np.ndarray:
    """MRPC pair features: ``"senteval"`` = ``[|u - v|, u * v]`` (SentEval's mrpc.py, the papers);
    ``"full"`` = ``[u, v, |u - v|, u * v]``."""
    if kind == "senteval":
        return np.concatenate([np.abs(u - v), u * v], axis=1)
    if kind == "full":
        return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)
    raise CSEError(f"Unknown MRPC features {kind!r}. Valid: {', '.join(MRPC_FEATURES)}.")


# --------------------------------------------------------------------------------------------- tasks
def resolve_transfer_tasks(tasks: Sequence[str] | None) -> list[str]:
    tasks = list(TRANSFER_TASKS if tasks is None else tasks)
    for t in tasks:
        if t not in TRANSFER_TASKS:
            raise CSEError(
                f"Unknown transfer task {t!r}. Valid transfer tasks: {', '.join(TRANSFER_TASKS)}."
            )
    return tasks


def _embed(encode, *sentence_lists):
    """Embed several lists with one encoder call (shared de-duplication); returns one array per list."""
    index: dict[str, int] = {}
    for sents in sentence_lists:
        for s in sents:
            index.setdefault(s, len(index))
    emb = encode(list(index))
    return [emb[[index[s] for s in sents]] for sents in sentence_lists]


def load_transfer_task(task: str, data_dir=None, source: str = "local", mode: Mode = "test"):
    """The parsed (and checked) data of one transfer task, big enough for its protocol in ``mode``
    (:func:`check_transfer_sizes`); cached by the readers, so reading them up front costs nothing later."""
    if mode not in MODE_CONFIGS:
        raise CSEError(f"Unknown mode {mode!r}. Valid modes: {', '.join(MODE_CONFIGS)}.")
    if task in BINARY_TASKS:
        data = load_binary(task, data_dir, source)
    else:
        loaders = {"SST2": load_sst2, "TREC": load_trec, "MRPC": load_mrpc}
        if task not in loaders:
            raise CSEError(f"Unknown transfer task {task!r}. Valid transfer tasks: {', '.join(TRANSFER_TASKS)}.")
        data = loaders[task](data_dir, source)
    check_transfer_sizes(task, data, mode, data_dir, source)
    return data


def _fewest(enough: Callable[[int], bool]) -> int:
    """The smallest n >= 1 that is ``enough``."""
    n = 1
    while not enough(n):
        n += 1
    return n


def check_transfer_sizes(task: str, data, mode: Mode = "test", data_dir=None, source: str = "local") -> None:
    """Refuse a task's data too small for its protocol in ``mode`` (a ``SentEvalDataError`` naming the file, the
    sizes and what the protocol needs), before anything is encoded: scikit-learn's folds would fail, or a fit would
    hold out no row and never train. SentEval's own files are far larger; a toy copy of them is what this catches.

    * MR, CR, SUBJ, MPQA (k-fold, a k-fold inside each training part): each class needs a k-fold of the fewest
      rows a test fold leaves it (n - ceil(n / k) >= k), and each training part ``MIN_FIT_ROWS`` rows;
    * TREC, MRPC (k-fold on train): each class of train needs k rows, train ``MIN_FIT_ROWS``; test one row;
    * SST2 (train / dev / test): one row in each split."""
    k = MODE_CONFIGS[mode].kfold

    def where(part) -> str:
        if source == "hub":
            return f"the Hub data set {HUB_DATASETS[task]['repo']}" + ("" if task in BINARY_TASKS else f" ({part})")
        return str(transfer_file(task, part, data_dir))

    fix = f"add rows, or use SentEval's own {task} files (data/downstream/get_transfer_data.bash)."
    if task in BINARY_TASKS:
        counts = np.bincount(data.labels, minlength=2)
        small = int(counts.argmin())
        per_class = _fewest(lambda n: n - math.ceil(n / k) >= k)
        in_all = _fewest(lambda n: n - math.ceil(n / k) >= MIN_FIT_ROWS)
        if counts[small] < per_class or counts.sum() < in_all:
            raise SentEvalDataError(
                f"{task}: {counts[small]} rows in the smallest class, of {where(small)}, {counts.sum()} in all; "
                f"mode={mode!r} ({k}-fold, a {k}-fold inside each training part) needs {per_class} of each class "
                f"and {in_all} in all: {fix}")
        return
    splits = ("train", "dev", "test") if task == "SST2" else ("train", "test")
    for split in splits:
        if len(data[split].labels) == 0:
            raise SentEvalDataError(f"{task}: {where(split)} (its {split} split) holds no row: {fix}")
    if task == "SST2":
        return
    train = data["train"].labels
    smallest = int(np.unique(train, return_counts=True)[1].min())
    if smallest < k or len(train) < MIN_FIT_ROWS:
        raise SentEvalDataError(
            f"{task}: {smallest} rows in the smallest class of {where('train')}, {len(train)} in all; "
            f"mode={mode!r} ({k}-fold cross-validation on this train split) needs {k} of each class and "
            f"{MIN_FIT_ROWS} in all: {fix}")


def run_transfer_task(
    encode, task: str, data_dir=None, source: Source = "local", mode: Mode = "test",
    mrpc_feature_set: MrpcFeatures = "senteval",
) -> dict:
    """Embed one task's sentences once and run its SentEval protocol; returns a details dict with
    ``devacc``, ``testacc`` and ``score`` (testacc, or devacc in ``mode="dev"``)."""
    if mode not in MODE_CONFIGS:
        raise CSEError(f"Unknown mode {mode!r}. Valid modes: {', '.join(MODE_CONFIGS)}.")
    config = MODE_CONFIGS[mode]
    t0 = time.perf_counter()
    data = load_transfer_task(task, data_dir, source, mode)
    if task in BINARY_TASKS:
        (X,) = _embed(encode, data.sentences)
        t1 = time.perf_counter()
        out = inner_kfold_classifier(X, data.labels, 2, config)
    elif task == "SST2":
        Xtr, Xdev, Xte = _embed(
            encode, data["train"].sentences, data["dev"].sentences, data["test"].sentences
        )
        t1 = time.perf_counter()
        out = split_classifier(
            Xtr, data["train"].labels, Xdev, data["dev"].labels, Xte, data["test"].labels, 2, config
        )
    elif task == "TREC":
        Xtr, Xte = _embed(encode, data["train"].sentences, data["test"].sentences)
        t1 = time.perf_counter()
        out, _ = kfold_classifier(
            Xtr, data["train"].labels, Xte, data["test"].labels, len(TREC_CLASSES), config
        )
    elif task == "MRPC":
        tr, te = data["train"], data["test"]
        ua, ub, va, vb = _embed(encode, tr.sentences1, tr.sentences2, te.sentences1, te.sentences2)
        t1 = time.perf_counter()
        Ftr, Fte = mrpc_features(ua, ub, mrpc_feature_set), mrpc_features(va, vb, mrpc_feature_set)
        out, yhat = kfold_classifier(Ftr, tr.labels, Fte, te.labels, 2, config)
        from sklearn.metrics import f1_score

        out["f1"] = float(round(100 * f1_score(te.labels, yhat), 2))
        out["features"] = mrpc_feature_set
    out["score"] = out["devacc"] if mode == "dev" else out["testacc"]
    out["encode_seconds"] = round(t1 - t0, 2)
    out["classifier_seconds"] = round(time.perf_counter() - t1, 2)
    logger.info("%s: %s = %.2f", task, "devacc" if mode == "dev" else "testacc", out["score"])
    return out


def evaluate_transfer(
    encoder,
    tasks: Sequence[str] | None = None,
    data_dir=None,
    source: Source = "local",
    mode: Mode = "test",
    mrpc_feature_set: MrpcFeatures = "senteval",
    after_task: Callable[[str, dict], None] | None = None,
) -> dict:
    """Accuracy x 100 of each transfer task and their mean: ``{"MR": ..., ..., "transfer_avg": ...,
    "details": {task: {...}}}`` (test accuracy; dev accuracy in ``mode="dev"``). ``after_task(task, details)`` is
    called as each task finishes (e.g. to save it)."""
    tasks = resolve_transfer_tasks(tasks)
    if mrpc_feature_set not in MRPC_FEATURES:
        raise CSEError(f"Unknown MRPC features {mrpc_feature_set!r}. Valid: {', '.join(MRPC_FEATURES)}.")
    for task in tasks:  # every task's data read and checked before the first is encoded (cached: read once)
        load_transfer_task(task, data_dir, source, mode)
    encode = encode_function(encoder)
    results: dict = {}
    details: dict = {}
    for number, task in enumerate(tasks, 1):
        logger.info("transfer %s (%d of %d): encoding its sentences, then the classifier", task, number, len(tasks))
        details[task] = run_transfer_task(encode, task, data_dir, source, mode, mrpc_feature_set)
        results[task] = details[task]["score"]
        if after_task is not None:
            after_task(task, details[task])
    if tasks:
        results["transfer_avg"] = float(np.mean([results[t] for t in tasks]))
    results["details"] = details
    return results


def format_transfer_table(results: dict, name: str | None = None) -> str:
    """``MR CR SUBJ MPQA SST TREC MRPC`` and the average (the papers' transfer table), labelled with the tasks it
    is over ("Transfer Avg." for all seven; :func:`.results.average_label`). Missing tasks show '-'."""
    cols = [TABLE_NAMES[t] for t in TRANSFER_TASKS] + [average_label([t for t in TRANSFER_TASKS if t in results])]
    return text_table(cols, [results.get(t) for t in TRANSFER_TASKS] + [results.get("transfer_avg")], name)
