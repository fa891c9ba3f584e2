"""A run that diverged (its weights NaN or inf: a learning rate far too high, fp16 overflow) is never resumed,
finished or saved as a trained model. Its loss stops it at a logging step (:mod:`hf_cse.metrics`), but
transformers may have saved a checkpoint of the diverged weights before (``save_steps`` below ``logging_steps``, or
the last step's save before the check after it), and the same command, or ``resume_from_checkpoint=True``, would
resume it and save its NaN weights as the model. So:

* a checkpoint to resume is refused when its saved weights are not finite (:func:`check_resumable`: read once per
  resume, :func:`hf_cse.finite_weights.saved_non_finite`), in one line naming the step at or before which the run
  diverged and the ways on: an earlier, finite checkpoint by name, or a new run with a lower learning rate; nothing
  is deleted. The refusal of a new run into the folder says so instead of offering to resume it
  (:func:`how_to_go_on`);
* the end of ``train()`` checks the weights held, not only the logged losses, and ``save_run()`` checks them before
  it writes anything (:func:`check_weights_held`: one pass over the parameters, summed over processes);
* a divergence error names the checkpoints of the folder that hold diverged weights, and the last finite one
  (:func:`with_diverged_checkpoints`).
"""

from __future__ import annotations

from pathlib import Path

from .checkpoints import (
    TRAINER_STATE_FILE,
    checkpoint_step,
    complete_checkpoints,
    is_checkpoint_name,
    read_json,
    training_run_files,
)
from .checks import InputError
from .errors import CSEError
from .finite_weights import LOOKED_BACK, NonFinite, first_finite, non_finite, saved_non_finite
from .output_folder import OutputFolderError, listing


class DivergedCheckpointError(OutputFolderError):
    """A checkpoint to resume holds weights that are NaN or inf: its run diverged."""


def diverged_at(checkpoint) -> int | None:
    """The step a checkpoint was saved at: its name's, else its ``trainer_state.json``'s."""
    step = checkpoint_step(Path(checkpoint))
    if step >= 0:
        return step
    state = read_json(Path(checkpoint) / TRAINER_STATE_FILE)[0]
    return state.get("global_step") if isinstance(state, dict) else None


def earlier_finite(checkpoint, output_dir) -> tuple[str | None, int]:
    """The last complete checkpoint of ``output_dir`` before the step of ``checkpoint`` whose weights are finite
    (None: none among the :data:`LOOKED_BACK` before it) and how many were read."""
    step = diverged_at(checkpoint)
    earlier = [p for p in complete_checkpoints(output_dir) if step is not None and checkpoint_step(p) < step]
    finite, diverged = first_finite(earlier, LOOKED_BACK)
    return finite, len(diverged) + (finite is not None)


class NonFiniteWeightsError(InputError):
    """A model loaded for export or evaluation holds weights that are NaN or inf."""


def check_finite_weights(model, source) -> None:
    """Raise :class:`NonFiniteWeightsError` when a parameter of ``model`` (an ``nn.Module``, loaded from ``source``)
    holds NaN or inf; naming the checkpoint to use instead where ``source`` is a run's folder or checkpoint (its
    earlier ones' weights are read then, on this failure alone)."""
    found = non_finite(model.named_parameters())
    if found:
        raise NonFiniteWeightsError(
            f"{source} holds {found.bad} of {found.total} weights that are not finite (NaN or inf), the first in "
            f"{found.first}: the training that saved it diverged. {earlier_instead(source)}")


def earlier_instead(source) -> str:
    """What to use instead of ``source``, a model whose weights are not finite: its run's last finite checkpoint
    before it (:func:`earlier_finite`) where ``source`` is a run's folder or checkpoint, or a lower learning rate."""
    folder = Path(str(source)).expanduser()
    run = (folder if training_run_files(folder) else folder.parent if is_checkpoint_name(folder.name) else None)
    if run is None or not folder.is_dir():
        return "Use an earlier checkpoint of that run, or train again with a lower learning_rate."
    earlier, read = earlier_finite(folder, run)
    if earlier:
        return (f"Use an earlier checkpoint of that run, e.g. {earlier} (the last finite one), or train again with a "
                "lower learning_rate.")
    none = none_earlier(read)
    return f"{none[0].upper()}{none[1:]}: train again with a lower learning_rate."


def goes_on_from(resume: str) -> str:
    """``resume`` (how to resume a run's last finite checkpoint, in the caller's terms) and what it brings back."""
    return (f"{resume} goes on from the last finite checkpoint at the run's learning rate (its optimizer state keeps "
            "it: it may diverge again)")


def ways_on(checkpoint, output_dir) -> str:
    """What to do instead of resuming the diverged ``checkpoint`` of ``output_dir`` (library terms)."""
    earlier, read = earlier_finite(checkpoint, output_dir)
    new_run = "start a new run with a lower learning_rate in another output_dir"
    if earlier:
        return f"{goes_on_from(f'resume_from_checkpoint={earlier!r}')}, or {new_run}"
    return f"{none_earlier(read)}: {new_run} (or overwrite_output_dir=True to start over there)"


def none_earlier(read: int) -> str:
    """Why no earlier checkpoint is named, ``read`` of them read (:func:`earlier_finite`)."""
    return (f"none of the {read} checkpoints before it is finite either" if read == LOOKED_BACK
            else "no earlier checkpoint of it is finite" if read else "no earlier checkpoint of it is kept")


def what_diverged(found: NonFinite, checkpoint) -> str:
    step = diverged_at(checkpoint)
    return (f"holds {found.bad} of {found.total} weights that are not finite (NaN or inf), the first in {found.first}:"
            f" its run diverged{f' at or before step {step}' if step is not None else ''}, and a diverged run is not "
            "resumed")


def check_resumable(checkpoint, output_dir, chosen: bool) -> None:
    """Refuse to resume ``checkpoint`` (``chosen``: the last complete one of ``output_dir``, for
    ``resume_from_checkpoint=True``; else named by its path) when its saved weights are not finite (module doc)."""
    found = saved_non_finite(checkpoint)
    if found is None:
        return
    folder = output_dir if chosen else Path(checkpoint).parent
    where = (f"resume_from_checkpoint=True: {Path(checkpoint).name}, the last checkpoint in output_dir {output_dir},"
             if chosen else f"resume_from_checkpoint {checkpoint}")
    raise DivergedCheckpointError(f"{where} {what_diverged(found, checkpoint)}; {ways_on(checkpoint, folder)}.",
                                  fields=("resume_from_checkpoint", "learning_rate", "output_dir"))


def how_to_go_on(output_dir, last: str | None) -> str:
    """How the refusal of a new run into ``output_dir``, which holds checkpoints (``last``: the last complete one),
    says to go on: resume it, or, where ``last`` diverged, why not and what instead (library terms)."""
    found = saved_non_finite(last) if last else None
    if found is None:
        return ("pass resume_from_checkpoint=True to continue it, or choose another output_dir (or "
                "overwrite_output_dir=True to start over)")
    return f"its last, {Path(last).name}, {what_diverged(found, last)}; {ways_on(last, output_dir)}"


def diverged_checkpoints(output_dir) -> tuple[list[str], str | None]:
    """The complete checkpoints of ``output_dir`` whose weights are not finite, newest first, up to the first finite
    one (at most :data:`LOOKED_BACK` + 1 read), and that one (None: none found)."""
    finite, diverged = first_finite(complete_checkpoints(output_dir), LOOKED_BACK + 1)
    return diverged, finite


def with_diverged_checkpoints(err: CSEError, trainer) -> CSEError:
    """``err``, a divergence (:class:`~hf_cse.metrics.DivergedError`) of ``trainer``'s run, with the checkpoints of
    its output folder that hold the diverged weights named (the rest of its line; read by the main process only);
    any other error as it is, and ``err`` where no checkpoint holds them."""
    from .metrics import DivergedError

    output_dir = trainer.args.output_dir
    if not isinstance(err, DivergedError) or not trainer.is_world_process_zero() or not Path(output_dir).is_dir():
        return err
    diverged, finite = diverged_checkpoints(output_dir)
    if not diverged:
        return err
    # the checkpoint to resume names the folder: the line (at most 600 characters on the command line) keeps it whole
    where = "output_dir" if finite else f"output_dir {output_dir}"
    instead = (f"{goes_on_from(f'resume_from_checkpoint={finite!r}')}; a lower learning rate is a new run in another "
               "output_dir" if finite else "no earlier checkpoint is finite")
    named = type(err)(f"{err} {listing(diverged)} in {where} {'hold' if len(diverged) > 1 else 'holds'} the diverged "
                      f"weights and will not be resumed; {instead}.",
                      fields=(*err.fields, "resume_from_checkpoint", "output_dir"))
    named.__dict__.update({k: v for k, v in err.__dict__.items() if k != "fields"})  # on_every_process
    return named


def finished_not_diverged(trainer, reduce_metrics) -> None:
    """The end of ``train()``: the loss terms of the steps after the last logging step (``reduce_metrics()``: a
    divergence there fails as at a logging step), then the weights held (:func:`check_weights_held`: a divergence
    no logged loss showed, or a checkpoint of diverged weights finished as it is); a divergence names the diverged
    checkpoints."""
    from .metrics import DivergedError

    try:
        reduce_metrics()
        check_weights_held(trainer)
    except DivergedError as err:
        raised = with_diverged_checkpoints(err, trainer)
        if raised is err:
            raise
        raise raised from err


def check_weights_held(trainer, saving: bool = False) -> None:
    """Raise :class:`~hf_cse.metrics.DivergedError` on every process when a weight of ``trainer``'s model is NaN or
    inf on any (one pass over the parameters on their device, one number read after summing it over processes);
    ``saving``: ``save_run()`` asks, before it writes anything."""
    import torch

    from .errors import raised_on_every_process
    from .finite_weights import local_part
    from .metrics import DivergedError

    model = trainer.accelerator.unwrap_model(trainer.model)
    params = [local_part(p) for p in model.parameters()]  # FSDP2: each process counts its shards
    params = [p for p in params if p.device.type != "meta" and p.numel() and p.dtype.is_floating_point]
    device = params[0].device if params else trainer.args.device
    count = torch.zeros((), dtype=torch.int64, device=device)
    for param in params:
        count += (~torch.isfinite(param.detach())).sum().to(device)
    if trainer.accelerator.num_processes > 1:
        count = trainer.accelerator.reduce(count, reduction="sum")
    if not int(count):
        return
    found = non_finite(model.named_parameters())
    held = (f"{found.bad} of {found.total} weights that are not finite (NaN or inf), the first in {found.first}"
            if found else "weights that are not finite (NaN or inf) in another process's part of it")
    what, instead = (("save_run: the model", "A diverged run's weights are not saved or exported as a model: train "
                      "again with a lower learning_rate in another output_dir.") if saving else
                     (f"the model after step {trainer.state.global_step}", "Lower the learning_rate (or train in "
                      "fp32/bf16 instead of fp16)."))
    raise raised_on_every_process(DivergedError(f"{what} holds {held}: the training diverged. {instead}",
                                                fields=("learning_rate", "output_dir")))
