"""Evaluators for :class:`hf_cse.trainer.ContrastiveTrainer` (``evaluator=``): what is scored at each evaluation.

Two kinds are accepted, both applied to the model's **test-time** embedding (``sentence_embedding`` with the
model's test pooler, through :class:`SentenceEncoder`: de-duplicated, length-sorted batches, inference mode):

* hf_cse evaluators: callables ``evaluator(encoder: SentenceEncoder) -> dict[str, float]``, e.g.
  :class:`STSDevEvaluator` (STS-B / SICK-R dev, the default with ``senteval_data_dir``) and
  :class:`PairsEvaluator` (your own scored pairs, ``eval_file``). Scores are Spearman x 100.
* any sentence-transformers evaluator (``SentenceEvaluator`` / ``BaseEvaluator``: ``EmbeddingSimilarityEvaluator``,
  ``InformationRetrievalEvaluator``, ...). It is handed :class:`STModelAdapter`, which gives it the
  ``SentenceTransformer`` surface it uses (``encode``, ``similarity_fn_name``, ``similarity``...). Its metrics
  keep sentence-transformers' scale (fractions: 0.85, not 85).

A list of evaluators runs each and merges their metrics. The trainer prefixes every key with ``eval_``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ..best_metric import STS_DEV_METRICS
from ..embedding_shape import truncated_and_normalized
from ..errors import CSEError
from .data import STS_DEV_TASKS, TABLE_NAMES, Source, STSPairs, load_sts
from .encoder import SentenceEncoder
from .encoding_batches import PreparedSentences
from .sts import score_sts


class _TokenizedOnce:
    """An evaluator that scores the same sentences at every evaluation keeps them tokenized and padded
    (:meth:`SentenceEncoder.prepare`, one set per task: :func:`.sts.score_sts` encodes each task on its own): the
    trainer builds a new encoder each time around the same tokenizer, so from the second evaluation on only the
    forward passes run. Prepared again when the encoder's tokenization changes."""

    _prepared: dict[tuple[str, ...], PreparedSentences] | None = None

    def _encode(self, encoder: SentenceEncoder):
        if not hasattr(encoder, "prepare"):  # any object with encode(list[str]) -> array
            return encoder.encode

        def encode(sentences: list[str]):
            key = tuple(sentences)
            if self._prepared is None:
                self._prepared = {}
            kept = self._prepared.get(key)
            if kept is None or not kept.fits(encoder, key):
                kept = self._prepared[key] = encoder.prepare(sentences)
            return encoder.encode_prepared(kept)

        return encode


class STSDevEvaluator(_TokenizedOnce):
    """STS-B and SICK-R **dev** Spearman x 100 (SimCSE's checkpoint selection): ``stsb_spearman``,
    ``sickr_spearman``, ``avg_sts``. Data from a SentEval folder (``source="local"``) or the Hub."""

    def __init__(self, senteval_data_dir=None, source: Source = "local",
                 tasks: Sequence[str] = STS_DEV_TASKS):
        for task in tasks:
            if task not in STS_DEV_METRICS:
                raise CSEError(f"STS dev task {task!r} has no dev split; use {', '.join(STS_DEV_METRICS)}.")
        self.data_dir = None if senteval_data_dir is None else str(senteval_data_dir)
        self.source = source
        self.tasks = list(tasks)

    def __call__(self, encoder: SentenceEncoder) -> dict[str, float]:
        data = {t: load_sts(t, self.data_dir, "dev", self.source) for t in self.tasks}  # parsed once (lru_cache)
        res = score_sts(self._encode(encoder), data)
        out = {STS_DEV_METRICS[t]: float(res[t]) for t in self.tasks}
        out["avg_sts"] = float(np.mean([res[t] for t in self.tasks]))
        return out


class PairsEvaluator(_TokenizedOnce):
    """Spearman x 100 of cosine on your own scored pairs (:mod:`hf_cse.evaluation.custom_dev`), as
    ``<name>_spearman``."""

    def __init__(self, pairs: STSPairs, name: str = "custom"):
        self.pairs = pairs
        self.name = name

    def __call__(self, encoder: SentenceEncoder) -> dict[str, float]:
        res = score_sts(self._encode(encoder), {self.name: {self.name: self.pairs}})
        return {f"{self.name}_spearman": float(res[self.name])}


class _NoModelCard:
    """sentence-transformers evaluators record their metrics in ``model.model_card_data``; hf_cse writes its
    own model card, so the record is dropped."""

    def set_evaluation_metrics(self, *args, **kwargs) -> None:
        pass


class STModelAdapter:
    """The part of ``SentenceTransformer`` that sentence-transformers evaluators call, backed by a
    :class:`SentenceEncoder` (so by the hf_cse model's test-time embedding). Cosine similarity."""

    similarity_fn_name = "cosine"

    def __init__(self, encoder: SentenceEncoder):
        self.encoder = encoder
        self.model_card_data = _NoModelCard()

    @property
    def device(self) -> torch.device:
        return self.encoder.device

    def eval(self) -> "STModelAdapter":
        return self  # SentenceEncoder encodes in eval mode and restores the training state afterwards

    def encode(self, sentences, batch_size: int | None = None, show_progress_bar: bool | None = None,
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, normalize_embeddings: bool = False,
               precision: str | None = None, truncate_dim: int | None = None, **_ignored: Any):
        """Embeddings of ``sentences`` (a string gives one vector); prompts are ignored (hf_cse models take none)."""
        single = isinstance(sentences, str)
        emb = self.encoder.encode([sentences] if single else list(sentences), batch_size=batch_size,
                                  show_progress_bar=False if show_progress_bar is None else show_progress_bar)
        emb = truncated_and_normalized(emb, truncate_dim, normalize_embeddings)
        if precision not in (None, "float32"):
            from sentence_transformers.util import quantize_embeddings

            emb = quantize_embeddings(emb, precision=precision)
        if single:
            emb = emb[0]
        return torch.from_numpy(emb) if convert_to_tensor else emb

    encode_query = encode
    encode_document = encode

    def similarity(self, a, b) -> torch.Tensor:
        from sentence_transformers.util import cos_sim

        return cos_sim(a, b)

    def similarity_pairwise(self, a, b) -> torch.Tensor:
        from sentence_transformers.util import pairwise_cos_sim

        return pairwise_cos_sim(a, b)


def is_sentence_transformers_evaluator(evaluator: Any) -> bool:
    try:
        from sentence_transformers.base.evaluation.evaluator import BaseEvaluator
    except ImportError:  # sentence-transformers < 5.3
        from sentence_transformers.evaluation import SentenceEvaluator as BaseEvaluator
    return isinstance(evaluator, BaseEvaluator)


Evaluator = Callable[[SentenceEncoder], dict[str, float]]


def run_evaluator(evaluator, encoder: SentenceEncoder, epoch: float = -1, steps: int = -1,
                  output_path: str | None = None) -> dict[str, float]:
    """Metrics of ``evaluator`` (an hf_cse evaluator, a sentence-transformers evaluator or a list of them)."""
    if isinstance(evaluator, (list, tuple)):
        merged: dict[str, float] = {}
        for one in evaluator:
            merged.update(run_evaluator(one, encoder, epoch, steps, output_path))
        return merged
    if is_sentence_transformers_evaluator(evaluator):
        out = evaluator(STModelAdapter(encoder), output_path=output_path, epoch=epoch, steps=steps)
        if not isinstance(out, dict):
            out = {getattr(evaluator, "name", "") or type(evaluator).__name__: out}
        return {k: float(v) for k, v in out.items()}
    check_evaluator(evaluator)
    return {k: float(v) for k, v in evaluator(encoder).items()}


class EvaluatorError(CSEError, TypeError):
    """An evaluator that is none (a ``TypeError`` too, as before it was checked early)."""


def check_evaluator(evaluator) -> None:
    """``evaluator`` can be run: a sentence-transformers evaluator or a callable taking a :class:`SentenceEncoder`
    (checked when a trainer is built, not at its first evaluation, after the untrained encoder's scoring)."""
    if not (is_sentence_transformers_evaluator(evaluator) or callable(evaluator)):
        raise EvaluatorError(
            f"evaluator {evaluator!r:.60} is neither a sentence-transformers evaluator nor a callable taking a "
            "SentenceEncoder: pass e.g. sentence_transformers.evaluation.EmbeddingSimilarityEvaluator(...), or "
            "senteval_data_dir= for STS-B and SICK-R dev.")


def primary_metric_name(evaluator) -> str | None:
    """The metric a sentence-transformers evaluator calls its primary one (known, with its name prefix, once it has
    run), the first of a list's; None for hf_cse's own evaluators (their Spearman scores are found by name)."""
    for one in evaluator if isinstance(evaluator, (list, tuple)) else [evaluator]:
        if is_sentence_transformers_evaluator(one) and getattr(one, "primary_metric", None):
            return one.primary_metric
    return None


def known_dev_scores(evaluators) -> tuple[dict[str, bool], bool]:
    """The dev scores ``evaluators`` (a list, or None) log, in order, as far as they are known before they run, each
    with whether it is higher the better; and whether that is all of them. STS dev's and your own pairs' by name; a
    sentence-transformers evaluator's primary metric where it names one already (prefixed with the evaluator's name,
    as it logs it; ``EmbeddingSimilarityEvaluator`` names it only once it has run); any other evaluator's names are
    known only from its first scores."""
    scores: dict[str, bool] = {}
    complete = True
    for one in evaluators or []:
        if isinstance(one, STSDevEvaluator):
            scores.update(dict.fromkeys([*(STS_DEV_METRICS[t] for t in one.tasks), "avg_sts"], True))
        elif isinstance(one, PairsEvaluator):
            scores[f"{one.name}_spearman"] = True
        else:
            complete = False
            primary, name = getattr(one, "primary_metric", None), getattr(one, "name", "")
            if primary and is_sentence_transformers_evaluator(one):
                named = primary if not name or primary.startswith(f"{name}_") else f"{name}_{primary}"
                scores[named] = getattr(one, "greater_is_better", True) is not False
    return scores, complete


def describe_evaluator(evaluator) -> str:
    """What ``evaluator`` scores, in a few words for a log line ("STS-B, SICK-R dev; 120 custom pairs")."""
    if isinstance(evaluator, (list, tuple)):
        return "; ".join(describe_evaluator(one) for one in evaluator)
    if isinstance(evaluator, STSDevEvaluator):
        return ", ".join(TABLE_NAMES[t] for t in evaluator.tasks) + " dev"
    if isinstance(evaluator, PairsEvaluator):
        return f"{len(evaluator.pairs)} {evaluator.name} pairs"
    return getattr(evaluator, "name", "") or type(evaluator).__name__


#: the attributes of a sentence-transformers evaluator that hold its data (those it has are fingerprinted)
EVALUATOR_DATA = ("sentences1", "sentences2", "scores", "sentences", "labels", "queries", "corpus", "relevant_docs",
                  "anchors", "positives", "negatives")


def dev_data_fingerprint(evaluator) -> str | None:
    """What ``evaluator`` (one or a list) scores, in words (:func:`describe_evaluator`), and a hash of its data: the
    sentences and gold scores of each STS dev task and of your own pairs (not their file: the same pairs read from
    another path are the same data, an edited file is other data), a sentence-transformers evaluator's
    :data:`EVALUATOR_DATA` (one without them by its kind and name only). None without an evaluator. A run records
    it in each checkpoint, so that a resume on other dev data is told (:mod:`hf_cse.trainer_resume`)."""
    if evaluator is None:
        return None
    digest = hashlib.sha256()
    for one in evaluator if isinstance(evaluator, (list, tuple)) else [evaluator]:
        for part in _dev_data(one):
            digest.update(json.dumps(part, sort_keys=True, default=str).encode("utf-8") + b"\0")
    return f"{describe_evaluator(evaluator)}, sha256 {digest.hexdigest()[:12]}"


def _pairs_data(pairs: STSPairs) -> list:
    return [list(pairs.sentences1), list(pairs.sentences2), np.asarray(pairs.scores, dtype=float).tolist()]


def _dev_data(evaluator) -> Iterator[list]:
    if isinstance(evaluator, STSDevEvaluator):
        for task in evaluator.tasks:  # parsed once (lru_cache): the evaluator reads the same
            for subset, pairs in sorted(load_sts(task, evaluator.data_dir, "dev", evaluator.source).items()):
                yield [task, subset, *_pairs_data(pairs)]
    elif isinstance(evaluator, PairsEvaluator):
        yield _pairs_data(evaluator.pairs)
    else:
        yield [type(evaluator).__name__, str(getattr(evaluator, "name", "") or "")]
        for name in EVALUATOR_DATA:
            value = getattr(evaluator, name, None)
            if value is not None:
                yield [name, value.tolist() if hasattr(value, "tolist") else value]


def training_evaluator(senteval_data_dir=None, source: Source = "local", pairs: STSPairs | None = None,
                       pairs_name: str = "custom", extra=None) -> list | None:
    """What ``run_unsup.py`` scores during training: STS dev (with ``senteval_data_dir`` or ``source="hub"``),
    your own pairs (``eval_file``) and ``extra`` evaluators; None when nothing is given."""
    evaluators = []
    if senteval_data_dir is not None or source == "hub":
        evaluators.append(STSDevEvaluator(senteval_data_dir, source))
    if pairs is not None:
        evaluators.append(PairsEvaluator(pairs, pairs_name))
    if extra is not None:
        evaluators += list(extra) if isinstance(extra, (list, tuple)) else [extra]
    return evaluators or None
