"""In-training evaluation for the trainer: STS-B and SICK-R **dev** Spearman, as SimCSE's ``CLTrainer``.

The scale is Spearman x 100 like every other STS number of hf_cse (SimCSE's trainer logs fractions in
[0, 1]; multiply theirs by 100 to compare).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

from .data import STS_DEV_TASKS, Source
from .encoder import SentenceEncoder
from .evaluators import STSDevEvaluator


def dev_metrics(
    model,
    tokenizer=None,
    senteval_data_dir=None,
    source: Source = "local",
    batch_size: int = 128,
    pooler: str | None = None,
    tasks: Sequence[str] = STS_DEV_TASKS,
    max_length: int | None = None,
    show_progress_bar: bool = False,
    precision: str = "fp32",
) -> dict[str, float]:
    """Dev-split Spearman x 100 of a live model: ``{"stsb_spearman", "sickr_spearman", "avg_sts"}``.

    ``model`` is an hf_cse model (its test pooler unless ``pooler`` is given), a plain HF encoder or a
    SentenceTransformer; ``tokenizer`` its tokenizer. An hf_cse model embeds as the trainer scores it
    (:func:`scoring_dev`). The model's train/eval state (of every sub-module)
    is restored afterwards. Parsed dev data are cached across calls (module-level ``lru_cache``), so
    only the encoding is repeated. STS12-16 (no dev split) are not allowed here. ``precision`` (``fp32``, ``bf16``,
    ``fp16``): the autocast to encode under; the trainer's dev scores are those of its run's precision.
    """
    evaluator = STSDevEvaluator(senteval_data_dir, source, tasks)
    encoder = SentenceEncoder(model, tokenizer, pooler=pooler, batch_size=batch_size, max_length=max_length,
                              show_progress_bar=show_progress_bar, precision=precision)
    with scoring_dev(model):
        return evaluator(encoder)


@contextmanager
def scoring_dev(model):
    """The in-training dev scoring of ``model``: an hf_cse model embeds as its method's authors did for their dev
    score (``CSEPreTrainedModel.scoring_dev``; PromptBERT denoises its template there, not at test time); any other
    model is left as it is."""
    held = getattr(model, "scoring_dev", None)
    if isinstance(held, bool):
        model.scoring_dev = True
    try:
        yield model
    finally:
        if isinstance(held, bool):
            model.scoring_dev = held
