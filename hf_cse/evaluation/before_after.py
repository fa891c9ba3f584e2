"""Did training make the model better? The dev score before the first step and after the last one.

``run_unsup.py`` scores its dev data (STS-B/SICK-R dev with ``--senteval_data_dir`` or ``--eval_source hub``, or the
user's own pairs with ``eval_file``) once before training (the Trainer's ``eval_on_start``, logged at step 0 and kept
in every checkpoint's log history, so a resumed run still knows it) and once at the end. The untrained encoder is a
candidate like any checkpoint: when it scored better than the trained model, its weights are the ones saved. The
run's last line says ``dev: before X -> after Y`` and which was saved; ``training_info.json`` and the model card record
both scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

#: a drop larger than this (Spearman x 100) is called out as the model getting worse (seed noise is ~0.5 here)
NOISE_POINTS = 0.5


@dataclass(frozen=True)
class DevChange:
    """One dev metric before training and after it (Spearman x 100)."""

    metric: str
    before: float
    after: float  # the trained model's: the best checkpoint with load_best_model_at_end, else the last step's
    #: the step whose weights were saved: 0 = the untrained encoder (it scored better), None = not known
    kept_step: int | None = None
    #: the precision the embeddings were scored in ("fp32", "bf16 autocast"), None = not known
    precision: str | None = None
    #: False: lower is better, as the run chose its best checkpoint (greater_is_better=False with a metric of one's
    #: own evaluator, e.g. a loss; hf_cse's correlations refuse it: :func:`hf_cse.best_metric.higher_is_better`)
    greater_is_better: bool = True

    @classmethod
    def from_run(cls, log_history: Sequence[Mapping[str, Any]], final: Mapping[str, Any],
                 preferred: str | None = None, trained_step: int | None = None,
                 precision: str | None = None) -> DevChange | None:
        """:func:`dev_change`, with the step of the trained model that ``final`` scored and the precision of both
        scores."""
        change = dev_change(log_history, final, preferred)
        return change and replace(change, kept_step=trained_step, precision=precision)

    def better(self, score: float, than: float) -> bool:
        """Whether ``score`` beats ``than`` on this metric (an undefined score, NaN, beats nothing)."""
        return score > than if self.greater_is_better else score < than

    def beats_trained(self, score: float) -> bool:
        """Whether ``score`` (the untrained encoder's) beats the trained model's: it is better, or it is defined and
        the trained model's is not (NaN: e.g. training collapsed every embedding to one direction)."""
        return self.better(score, self.after) or (math.isfinite(score) and not math.isfinite(self.after))

    @property
    def trained_undefined(self) -> bool:
        """The trained model's score is undefined (NaN) where the untrained encoder's was not: the model, not the dev
        data, is at fault."""
        return math.isfinite(self.before) and not math.isfinite(self.after)

    def keeping_untrained(self) -> DevChange:
        return replace(self, kept_step=0)

    @property
    def kept(self) -> str | None:
        """Which weights were saved, in words."""
        if self.kept_step is None:
            return None
        if self.kept_step == 0:
            return "the untrained encoder (step 0)"
        return f"the trained model of step {self.kept_step}"

    @property
    def delta(self) -> float:
        return self.after - self.before

    @property
    def unit(self) -> float:
        """A point of the metric's scale: 1 for hf_cse's Spearman x 100, 0.01 for a score in [-1, 1] (a
        sentence-transformers evaluator's), whose changes two decimals would round away."""
        return 0.01 if max(abs(self.before), abs(self.after)) <= 1.0 else 1.0

    @property
    def noise(self) -> float:
        """:data:`NOISE_POINTS` on the metric's scale."""
        return NOISE_POINTS * self.unit

    @property
    def worse(self) -> bool:
        """Whether training lost more than the noise on the dev data (an undefined score, NaN, is not)."""
        return (self.delta if self.greater_is_better else -self.delta) < -self.noise

    def line(self) -> str:
        scored = f"{self.metric} in {self.precision}" if self.precision else self.metric
        d = 2 if self.unit == 1.0 else 4
        line = f"dev: before {self.before:.{d}f} -> after {self.after:.{d}f} ({scored}, {self.delta:+.{d}f})"
        return f"{line}; saved {self.kept}" if self.kept else line

    def as_dict(self) -> dict[str, Any]:
        out = {**asdict(self), "delta": self.delta}
        for key in ("kept_step", "precision"):
            if out[key] is None:
                del out[key]
        if self.greater_is_better:  # recorded where it is not the rule only
            del out["greater_is_better"]
        return out


class UntrainedCandidate:
    """The untrained encoder's weights, kept on the CPU until the end of training, when they are saved instead of
    the trained ones if those scored lower on the dev data. A model sharded over processes (FSDP, DeepSpeed) is not
    copied: its untrained encoder is then no candidate (:meth:`of` returns None). ``rescore``: the weights are those
    handed to a resumed run, whose step-0 score was another process's: they must be scored again before they are
    kept (they are the run's untrained encoder only if they were built the same way)."""

    def __init__(self, state: dict[str, torch.Tensor], rescore: bool = False):
        self.state = state
        self.rescore = rescore

    @classmethod
    def of(cls, model: torch.nn.Module, sharded: bool = False, rescore: bool = False) -> UntrainedCandidate | None:
        if sharded:
            return None
        return cls({name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()}, rescore)

    def restore(self, model: torch.nn.Module) -> None:
        model.load_state_dict(self.state)


def primary_metric(metrics: Mapping[str, Any], preferred: str | None = None) -> str | None:
    """The dev metric to judge a run by: ``preferred`` (``metric_for_best_model``) when it was scored, else STS-B
    dev, else the first Spearman score (a user's own ``eval_file``); names without the ``eval_`` prefix."""
    names = [k[len("eval_"):] for k, v in metrics.items() if k.startswith("eval_") and isinstance(v, (int, float))]
    for name in (preferred and preferred.removeprefix("eval_"), "stsb_spearman"):
        if name in names:
            return name
    return next((n for n in names if n.endswith("spearman")), None)


def dev_change(log_history: Sequence[Mapping[str, Any]], final: Mapping[str, Any],
               preferred: str | None = None) -> DevChange | None:
    """Before (the evaluation logged at step 0) and after (``final``, the evaluation of the saved model); None when
    there was no dev data or no evaluation before training."""
    metric = primary_metric(final, preferred)
    if metric is None:
        return None
    key = f"eval_{metric}"
    before = next((entry[key] for entry in log_history if entry.get("step") == 0 and key in entry), None)
    if before is None:
        return None
    return DevChange(metric, float(before), float(final[key]))


def logged_evaluation(log_history: Sequence[Mapping[str, Any]], step: int) -> dict[str, Any] | None:
    """The ``eval_*`` metrics logged at ``step`` (the last evaluation there), or None when that step was not
    evaluated."""
    for entry in reversed(log_history):
        if entry.get("step") == step and any(k.startswith("eval_") for k in entry):
            return {k: v for k, v in entry.items() if k.startswith("eval_")}
    return None


def log_dev_change(logger, dev: DevChange | None, scored: Sequence[str] = ()) -> None:
    """The run's last line: the dev score before and after training, a warning when the model lost more than the
    noise, or that nothing checked it: no dev data, or dev metrics (``scored``) without one to compare."""
    if dev is not None and dev.trained_undefined:
        logger.warning("%s: the trained model's dev score is undefined (every pair got the same cosine: training "
                       "collapsed its embeddings), where the untrained encoder's was not; try a lower learning_rate or "
                       "fewer steps", dev.line())
    elif dev is not None and not (math.isfinite(dev.before) and math.isfinite(dev.after)):
        logger.warning("%s: the dev score is undefined (every pair got the same cosine, e.g. sentences the tokenizer "
                       "reads as unknown tokens only); check the dev data (eval_file) and the encoder's language",
                       dev.line())
    elif dev is None and scored:
        logger.warning("dev: none of the dev metrics (%s) was compared before and after training, so nothing checked "
                       "that training made the model better; set metric_for_best_model to the one to compare",
                       ", ".join(scored[:5]))
    elif dev is None:
        logger.warning("dev: no dev data, so nothing checked that training made the model better; pass "
                       "senteval_data_dir (or eval_source hub) or eval_file to score it before and after "
                       "training")
    elif dev.kept_step == 0:
        logger.warning("%s: training did not beat it; try a lower learning_rate or fewer steps", dev.line())
    elif dev.worse:
        logger.warning("%s: WORSE than the untrained encoder by more than %g; try a lower learning_rate or "
                       "fewer steps, or keep the encoder as it was", dev.line(), dev.noise)
    else:
        logger.info(dev.line())
