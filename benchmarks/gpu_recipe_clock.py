"""The recipe's clock (``gpu_recipe.py``): a ``TrainerCallback`` and a wrapper around the trainer's ``evaluate`` that
time the run's parts -- the steps (and each window of steps between two evaluations or saves), each dev evaluation,
each checkpoint save, the end of training -- CUDA synchronised only at those boundaries, and profile a few steps."""

from __future__ import annotations

import contextlib
import time

from bench_limit_common import synchronize
from gpu_profile import profile_window


def now_synced(cuda: bool) -> float:
    synchronize("cuda" if cuda else "cpu")
    return time.perf_counter()


class RecipeClock:
    """Timestamps of the run's parts: a ``TrainerCallback`` (``callback``) for the steps and saves, and a wrapper
    around each trainer's ``evaluate`` (``watch``) for the dev evaluations. Stops training once ``stop_after_s``
    have passed since ``start`` (the budget), recording where."""

    def __init__(self, cuda: bool, start: float, stop_after_s: float | None):
        from transformers import TrainerCallback

        self.cuda, self.start, self.stop_after_s = cuda, start, stop_after_s
        self.train_begin = self.train_end = self.boundary = None
        self.mark = None  # the end of the last timed thing (a step, an evaluation, a save)
        self.steps = 0
        self.stopped_at = None
        self.windows: list[dict] = []  # the steps between two boundaries: how many, and their time
        self.window_start = 0
        self.trainer = None
        self.startup_marks: dict[str, float] = {}  # perf_counter times of the startup's stages
        self.profile_steps: tuple[int, int] | None = None
        self.profiled: dict = {}
        self.evaluations: list[dict] = []
        self.saves: list[dict] = []
        self.prepared_ids: list[int | None] = []
        clock = self

        class _Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                clock.train_begin = clock.mark = now_synced(clock.cuda)

            def on_step_end(self, args, state, control, **kwargs):
                clock.steps = state.global_step
                over = clock.stop_after_s is not None and time.perf_counter() - clock.start > clock.stop_after_s
                if over and not control.should_training_stop:
                    control.should_training_stop = True
                    clock.stopped_at = state.global_step
                # synchronised only where something else starts (an evaluation, a save, the end): the steps between
                # run asynchronously as they would untimed
                if control.should_evaluate or control.should_save or control.should_training_stop or (
                        state.global_step >= state.max_steps):
                    now = now_synced(clock.cuda)
                    n = state.global_step - clock.window_start
                    clock.windows.append({"to_step": state.global_step, "steps": n, "s": now - clock.mark,
                                          "ms_per_step": 1e3 * (now - clock.mark) / max(1, n)})
                    clock.window_start, clock.mark = state.global_step, now
                    if clock.boundary is None:
                        clock.boundary = (state.global_step, clock.mark, len(clock.evaluations))

            def on_save(self, args, state, control, **kwargs):
                end = now_synced(clock.cuda)
                clock.saves.append({"step": state.global_step, "s": end - clock.mark})
                clock.mark = end

            def on_train_end(self, args, state, control, **kwargs):
                clock.train_end = now_synced(clock.cuda)

        self.callback = _Callback()

    def watch(self, trainer) -> None:
        """Time every ``trainer.evaluate`` call, and note which prepared dev sentences it used."""
        evaluate = trainer.evaluate

        def timed_evaluate(*args, **kwargs):
            begin = now_synced(self.cuda)
            out = evaluate(*args, **kwargs)
            end = now_synced(self.cuda)
            phase = "after training" if self.train_end else "start" if trainer.state.global_step == 0 else "training"
            self.evaluations.append({"step": trainer.state.global_step, "phase": phase, "s": end - begin,
                                     "stsb_spearman": out.get("eval_stsb_spearman")})
            self.prepared_ids.append(next((id(e._prepared) for e in trainer.evaluator or []
                                           if getattr(e, "_prepared", None) is not None), None))
            if phase != "after training":
                self.mark = end
            return out

        trainer.evaluate = timed_evaluate
        trainer.add_callback(self.callback)
        if self.profile_steps:  # a few steps in the middle of a window, profiled (the device's busy fraction)
            trainer.add_callback(profile_window(*self.profile_steps, "cuda" if self.cuda else "cpu", self.profiled))
        self.trainer = trainer

    def startup_parts(self) -> dict:
        """The startup's stages in seconds: to the trainer's construction (loading the model, reading and tokenizing
        the data), the construction, and from it to the first step's start (train(): the output folder, the
        optimizer, the step-0 setup)."""
        marks = self.startup_marks
        if not {"trainer_init_begins", "trainer_init_ends"} <= set(marks) or self.train_begin is None:
            return {}
        return {"to_the_trainer_s": marks["trainer_init_begins"] - self.start,
                "trainer_construction_s": marks["trainer_init_ends"] - marks["trainer_init_begins"],
                "to_the_first_step_s": self.train_begin - marks["trainer_init_ends"]}


@contextlib.contextmanager
def clocked_trainers(clock: RecipeClock):
    """Every ``ContrastiveTrainer`` built inside (the one ``train_from_args`` builds) is timed by ``clock``."""
    from hf_cse.trainer import ContrastiveTrainer

    init = ContrastiveTrainer.__init__

    def timed_init(self, *args, **kwargs):
        clock.startup_marks["trainer_init_begins"] = time.perf_counter()  # data loaded and tokenized by then
        init(self, *args, **kwargs)
        clock.startup_marks["trainer_init_ends"] = time.perf_counter()
        clock.watch(self)

    ContrastiveTrainer.__init__ = timed_init
    try:
        yield
    finally:
        ContrastiveTrainer.__init__ = init
