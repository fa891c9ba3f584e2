"""Training metrics without host synchronisation: summed where they are computed, read only at logging steps.

Every loss, objective and model reports its metrics as detached 0-d tensors on the training device (host values
such as ``off_dropout_seconds`` stay Python floats). Reading a device tensor on the host (``.item()``,
``float()``, ``bool()``) waits for the device to finish all queued work; doing it for a dozen metrics in every
step stalls a GPU's pipeline. :class:`MetricAccumulator` adds them up on their device and reads them once per
logging step, after one reduction over processes, so the logged numbers are the global means (all processes'
steps), not rank 0's.

Undefined values (NaN, e.g. DiffCSE's accuracy on replaced tokens in a batch where none were replaced) are left
out of the mean; a loss term that was NaN or Inf in any step of the window makes :meth:`MetricAccumulator.reduce`
raise, which replaces the per-step input check that losses skip inside the trainer
(:func:`hf_cse.losses.inputs.finite_checks_deferred`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch

from .errors import CSEError, raised_on_every_process
from .losses.inputs import UNNORMALISABLE_ROWS

Metrics = Mapping[str, "torch.Tensor | float"]


class DivergedError(CSEError):
    """A loss term became NaN or Inf during training."""


class MetricAccumulator:
    """Sums of metrics and of their finite values' counts between two logging steps (see the module docstring)."""

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor | float] = {}  # host values (e.g. off_dropout_seconds)
        self._counts: dict[str, torch.Tensor | float] = {}
        self._vectors: dict[tuple[str, ...], tuple[torch.Tensor, torch.Tensor]] = {}  # device values, stacked
        self._records: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self._records)

    def add(self, metrics: Metrics) -> None:
        """Add one step's metrics (no host synchronisation: device tensors are summed on their device). A step's
        tensors are stacked into one vector, summed per set of names: a step costs a handful of kernel launches, not a
        few per metric (on a GPU the step is bound by launches)."""
        tensors = {k: v for k, v in metrics.items() if isinstance(v, torch.Tensor)}
        if tensors:
            names = tuple(tensors)
            values = torch.stack([v.detach().float().reshape(()) for v in tensors.values()])
            finite = torch.isfinite(values)
            values, counts = torch.where(finite, values, 0.0), finite.float()
            if names in self._vectors:
                summed, counted = self._vectors[names]
                values, counts = summed + values, counted + counts
            self._vectors[names] = (values, counts)
            for key in names:
                self._records[key] = self._records.get(key, 0) + 1
        for key, value in metrics.items():
            if key not in tensors:
                value = float(value)
                count = 1.0 if math.isfinite(value) else 0.0
                self._sums[key] = self._sums.get(key, 0.0) + (value if count else 0.0)
                self._counts[key] = self._counts.get(key, 0.0) + count
                self._records[key] = self._records.get(key, 0) + 1

    def state(self) -> dict:
        """What has been added since the last :meth:`reduce`, on the CPU (a checkpoint keeps it: the resumed run's
        first logging step then averages the same steps; :mod:`hf_cse.log_window`)."""
        return {"sums": dict(self._sums), "counts": dict(self._counts), "records": dict(self._records),
                "vectors": [(list(names), values.cpu(), counts.cpu())
                            for names, (values, counts) in self._vectors.items()]}

    def load_state(self, state: dict, device: torch.device) -> None:
        """Go on from :meth:`state`: the device sums are put back as they were, so that the next steps add to them
        in the order the uninterrupted run did (the same float32 roundings)."""
        self._sums, self._counts, self._records = dict(state["sums"]), dict(state["counts"]), dict(state["records"])
        self._vectors = {tuple(names): (values.to(device), counts.to(device))
                         for names, values, counts in state["vectors"]}

    def _merged(self) -> tuple[dict, dict]:
        """Sums and counts per metric name: the per-step vectors split by name, plus the host values."""
        sums, counts = dict(self._sums), dict(self._counts)
        for names, (values, counted) in self._vectors.items():
            for i, key in enumerate(names):
                sums[key] = sums.get(key, 0.0) + values[i]
                counts[key] = counts.get(key, 0.0) + counted[i]
        return sums, counts

    def reduce(
        self, sum_over_processes: Callable[[torch.Tensor], torch.Tensor] = lambda t: t, processes: int = 1
    ) -> dict[str, float]:
        """The mean of every metric over the steps added since the last call and over all processes; resets.

        ``sum_over_processes`` sums a tensor over processes (e.g. ``accelerator.reduce(t, "sum")``); every process
        must call this at the same step with the same metric names (collective). One host read in all.
        """
        if not self._records:
            return {}
        keys = sorted(self._records)
        merged = self._merged()
        device = next((v.device for v in merged[0].values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
        stacked = torch.stack([torch.as_tensor(part[k], dtype=torch.float32, device=device)
                               for part in merged for k in keys])
        totals = sum_over_processes(stacked).tolist()
        sums, counts = totals[: len(keys)], totals[len(keys):]
        records = dict(self._records)
        self._sums.clear()
        self._counts.clear()
        self._vectors.clear()
        self._records.clear()
        # a loss term that went NaN first: its update makes the next steps' embeddings unnormalisable too
        diverged = [k for k, c in zip(keys, counts) if k.endswith("_loss") and c < records[k] * processes]
        if diverged:
            raise raised_on_every_process(DivergedError(
                f"training loss term(s) {', '.join(diverged)} became NaN or Inf: the encoder diverged (lower the "
                "learning rate; fp32 or bf16, not fp16), the input is broken, or the loss's own arithmetic overflows "
                "(clamp before log, exp or a division)."
            ))
        unnormalisable = sums[keys.index(UNNORMALISABLE_ROWS)] if UNNORMALISABLE_ROWS in keys else 0
        if unnormalisable > 0:
            raise raised_on_every_process(DivergedError(  # summed over every process: the same on each
                f"{int(unnormalisable)} embedding row(s) could not be normalised (norm 0 or overflowing) since the "
                "last logging step: they give a constant loss with zero gradient. Likely an all-zero encoder or "
                "projector output or values too large for the dtype: check the model and lower the learning rate."
            ))
        # unrounded: a term rounded to 6 places read 1.3e-05 beside a loss of 1.288e-05, and one below 5e-7 read 0
        return {k: s / c for k, s, c in zip(keys, sums, counts) if c > 0 and k != UNNORMALISABLE_ROWS}
