"""The rest of the training step in the CUDA graph: gradient clipping and the optimizer step, captured once and
replayed after the forward-and-backward graph (:mod:`hf_cse.cuda_graphs`).

Why: once forward, loss and backward replay as one graph, what the host still does per step is a few milliseconds
of Python -- transformers' clipping (grouping ~200 gradients, a norm per group) and the optimizer's own loop over
its parameters -- and on an H100 that became the limit of a BERT-base step at batch 64 (benchmarks/README.md
section 15: 13.6 ms a step around a 9.5-ms replay). Replayed, they are one launch.

How: :class:`GraphedOptimizer` stands in for the run's optimizer (its parameter groups, state and ``state_dict`` are
the optimizer's own, so schedulers, checkpoints and resumes see no difference). When the step's gradients are the
static buffers of a replayed graph (:meth:`arm`), ``step`` replays a graph of ``clip_grad_norm_`` (when the run
clips) and the optimizer's ``step`` over exactly those buffers, captured at the first such step; else it steps
eagerly as the optimizer always did. The learning rate changes every step (the scheduler writes floats into the
parameter groups): the graph reads it from a one-element tensor per group, filled from the group before each
replay. Weight decay, betas and eps are read at capture (they do not change during a run).

Only an optimizer whose step is graph-safe is captured: torch's fused ``AdamW`` / ``Adam`` (transformers' default
``adamw_torch_fused`` on a GPU), whose state (the step count too) lives on the device. Any other optimizer steps
eagerly; :func:`why_not_captured` says why, and the run logs it.
"""

from __future__ import annotations

import torch

from .cuda_graphs import capture_failed, record_graph


def why_not_captured(optimizer) -> str | None:
    """None where ``optimizer``'s step can be captured in a CUDA graph, else the reason."""
    if not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return f"{type(optimizer).__name__} is not torch's fused AdamW (optim=adamw_torch_fused)"
    if not all(group.get("fused") for group in optimizer.param_groups):
        return "the AdamW is not the fused one (optim=adamw_torch_fused)"
    if any(group.get("differentiable") for group in optimizer.param_groups):
        return "a differentiable optimizer"
    return None


class _CapturedUpdate:
    """One graph of clip + step over one set of gradient buffers: the learning-rate tensors it reads and the
    gradient norm it writes (None where the run does not clip)."""

    def __init__(self, graph, lrs: list[torch.Tensor], norm: torch.Tensor | None):
        self.graph, self.lrs, self.norm = graph, lrs, norm


def _wrapped_attribute(name: str) -> property:
    """An attribute read from, and written to, the wrapped optimizer (``self.optimizer``)."""
    return property(lambda self: getattr(self.optimizer, name),
                    lambda self, value: setattr(self.optimizer, name, value))


class GraphedOptimizer(torch.optim.Optimizer):
    """``optimizer``, with its clip and step replayed as a CUDA graph when :meth:`arm` names the step's gradient
    buffers (see the module docstring). ``max_grad_norm``: the run's clipping (0: none). Everything else (parameter
    groups, state, ``state_dict``, ``zero_grad``, hooks) is ``optimizer``'s own."""

    def __init__(self, optimizer: torch.optim.Optimizer, max_grad_norm: float):
        # no Optimizer.__init__: the parameter groups and the state stay the wrapped optimizer's objects
        self.optimizer = optimizer
        self.max_grad_norm = float(max_grad_norm or 0.0)
        self.updates: dict[object, _CapturedUpdate] = {}
        self.replays = 0
        self.failed: str | None = None
        self._armed: tuple[object, list[torch.Tensor]] | None = None

    # ------------------------------------------------------------------ the wrapped optimizer's own
    param_groups = _wrapped_attribute("param_groups")
    state = _wrapped_attribute("state")

    @property
    def defaults(self):
        return self.optimizer.defaults

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict) -> None:
        if self.updates:
            # a graph reads the state tensors it was captured with; new ones would not be read
            raise RuntimeError("GraphedOptimizer: loading a state after its step was captured")
        self.optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group) -> None:
        self.optimizer.add_param_group(param_group)

    def __getattr__(self, name):  # hooks and anything else an optimizer offers
        if name == "optimizer":
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"GraphedOptimizer({self.optimizer!r})"

    # ------------------------------------------------------------------ the captured step
    def arm(self, key, grads: list[torch.Tensor]) -> None:
        """This step's gradients are ``grads``, the static buffers of the replayed graph ``key``: clip and step
        replay their own graph. The arming holds for the next :meth:`step` only."""
        self._armed = None if self.failed else (key, grads)

    @property
    def armed(self) -> bool:
        return self._armed is not None

    def captured_norm(self) -> torch.Tensor | None:
        """The gradient norm the armed step's replay writes (the run clips, and the step is armed): what
        ``Trainer._clip_grad_norm`` returns for it, read only after :meth:`step`."""
        if self._armed is None or not self.max_grad_norm:
            return None
        update = self._update(*self._armed)
        return None if update is None else update.norm

    def step(self, closure=None):
        armed, self._armed = self._armed, None
        if armed is None or closure is not None:
            return self.optimizer.step(closure)
        update = self._update(*armed)
        if update is None:  # the capture failed: clip and step eagerly, as the trainer would have
            if self.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(self._params(armed[1]), self.max_grad_norm)
            return self.optimizer.step()
        for group, lr in zip(self.optimizer.param_groups, update.lrs):
            lr.fill_(group["lr"])
        update.graph.replay()
        self.replays += 1
        return None

    def _params(self, grads: list[torch.Tensor]) -> list[torch.nn.Parameter]:
        """The parameters whose gradients are ``grads``, in the order of ``grads`` (the model's, as the Trainer
        clips them: the total norm sums the same terms in the same order)."""
        by_grad = {id(p.grad): p for group in self.optimizer.param_groups for p in group["params"]
                   if p.grad is not None}
        return [by_grad[id(g)] for g in grads if id(g) in by_grad]

    def _update(self, key, grads: list[torch.Tensor]) -> _CapturedUpdate | None:
        if key in self.updates:
            return self.updates[key]
        if self.failed:
            return None
        params = self._params(grads)
        groups = self.optimizer.param_groups
        lrs = [torch.tensor(float(group["lr"]), dtype=torch.float32, device=grads[0].device) for group in groups]

        def clip_and_step():
            # what the graph holds: the learning rates read from ``lrs`` (a capture records the tensors' memory);
            # the parameter groups get their floats back at once, for the scheduler and the checkpoints
            saved = [(group["lr"], group.get("capturable", False)) for group in groups]
            for group, lr in zip(groups, lrs):
                group["lr"], group["capturable"] = lr, True
            try:
                norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm) if self.max_grad_norm else None
                self.optimizer.step()
            finally:
                for group, (lr, capturable) in zip(groups, saved):
                    group["lr"], group["capturable"] = lr, capturable
            return norm

        try:
            graph, norm = self._record(clip_and_step)
        except Exception as exc:  # e.g. an optimizer that reads a device value on the host
            self.failed = capture_failed(exc, "the optimizer step")
            return None
        self.updates[key] = _CapturedUpdate(graph, lrs, norm if self.max_grad_norm else None)
        return self.updates[key]

    def _record(self, fn):
        """:func:`record_graph` in a pool of its own, once the step's queued work has run."""
        torch.cuda.synchronize()
        return record_graph(fn)
