"""Which precision a run computes in: ``--precision auto|fp32|bf16|fp16`` for run_unsup.py and run_eval.py.

* ``bf16``: the encoder runs under ``torch.autocast(dtype=torch.bfloat16)`` on CPU and GPU; losses still compute
  in fp32 (:func:`hf_cse.losses.inputs.compute_dtype`). On a CPU with bf16 dot-product instructions (AVX-512 BF16 or
  AMX; ARM's BF16 extension) a training step takes about half the fp32 time (benchmarks/README.md).
* ``fp16``: GPUs only (with the Trainer's loss scaling). A CPU is refused: accelerate runs no fp16 autocast there
  (``fp16`` used to be ignored silently) and CPU fp16 matrix products are emulated (50x slower than fp32 on an
  AVX-512 BF16 CPU without AVX-512 FP16).
* ``auto``: bf16 where the device computes it natively (the CPU flags above, or ``torch.cuda.is_bf16_supported``
  without emulation), fp32 otherwise.

The Trainer's own ``bf16`` / ``fp16`` arguments mean the same as ``precision`` ``bf16`` / ``fp16``; on a CPU
``bf16`` no longer needs ``use_cpu`` (set here, as the Trainer requires).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
from pathlib import Path
from typing import Literal

import torch

from .errors import CSEError

Precision = Literal["auto", "fp32", "bf16", "fp16"]
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16", "fp16")
# Default of run_unsup.py and run_eval.py. Measured (benchmarks/README.md, section 5): the comparison table's SimCSE
# and Focal-InfoNCE cells trained in bf16 score within 0.006 of their fp32 twins (seed noise: 0.42), and bf16
# encoding keeps all 7 STS scores of the packaged MiniLM within 0.015 of fp32, at 2.7x the step speed.
DEFAULT_PRECISION: Precision = "auto"
DEFAULT_EVAL_PRECISION: Precision = "auto"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# measured on an AVX2-only AMD EPYC (benchmarks/README.md): a 2048^3 bf16 product ran ~500x slower than fp32
EMULATED_BF16 = ("this CPU has no native bf16 (AVX-512 BF16 / AMX): its bf16 matrix products are emulated and can run "
                 "hundreds of times slower than fp32")

logger = logging.getLogger(__name__)


class PrecisionError(CSEError):
    """A precision the device cannot run; the message names what to use instead."""


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of /proc/cpuinfo (Linux); empty where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86 / ARM
            return frozenset(value.split())
    return frozenset()


def cpu_has_native_bf16() -> bool:
    """True on a CPU with bf16 dot-product instructions: x86 AVX-512 BF16 or AMX-BF16, ARM BF16."""
    flags = cpu_flags()
    if {"avx512_bf16", "amx_bf16"} & flags:
        return True
    return platform.machine().lower() in ("aarch64", "arm64") and "bf16" in flags


def default_device_type(use_cpu: bool = False) -> str:
    """The device type the Trainer / the evaluation will use: cuda, xpu, mps or cpu."""
    if use_cpu:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def native_bf16(device_type: str) -> bool:
    """Whether ``device_type`` computes bf16 natively (not emulated)."""
    if device_type == "cpu":
        return cpu_has_native_bf16()
    if device_type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return device_type in ("xpu", "mps")


def resolve(requested: str, device_type: str, scoring: bool = False) -> tuple[str, str]:
    """The precision to run (``fp32`` / ``bf16`` / ``fp16``) for ``requested`` on ``device_type``, and why (for
    the log line). Raises :class:`PrecisionError` for a precision the device cannot run, in the terms of training or,
    ``scoring``, of an evaluation (no training flags there)."""
    if requested not in PRECISIONS:
        raise PrecisionError(f"unknown precision={requested!r}; choose one of {', '.join(PRECISIONS)}.")
    if requested == "auto":
        if native_bf16(device_type):
            return "bf16", f"auto: this {device_type.upper()} computes bf16 natively"
        return "fp32", f"auto: this {device_type.upper()} has no native bf16"
    if requested == "fp16" and device_type == "cpu" and scoring:
        raise PrecisionError("precision fp16 needs a GPU: on a CPU fp16 matrix products are emulated. Use precision "
                             "fp32, bf16 or auto on a CPU.")
    if requested == "fp16" and device_type == "cpu":
        raise PrecisionError(
            "precision fp16 (fp16=True in training) needs a GPU: on a CPU fp16 matrix products are emulated (and "
            "training runs no fp16 autocast there). Use precision bf16 or auto on a CPU (bf16=True in training)."
        )
    if requested == "bf16" and device_type == "cuda" and not native_bf16("cuda"):
        raise PrecisionError("bf16=True: this GPU has no bf16 support (before Ampere); use fp16=True on it.")
    if requested == "bf16" and device_type == "cpu" and not cpu_has_native_bf16():
        return "bf16", f"requested; {EMULATED_BF16}"
    return requested, "requested"


def emulated(precision: str, device_type: str) -> bool:
    """Whether a resolved precision runs emulated (bf16 asked for on a device without it): worth a warning."""
    return precision == "bf16" and not native_bf16(device_type)


def launched_precision() -> str | None:
    """The ``mixed_precision`` that ``accelerate launch``'s config asks for (``ACCELERATE_MIXED_PRECISION``), None
    where it asks for none (unset, empty or ``no``): accelerate then computes in it whatever the arguments say."""
    launched = os.environ.get("ACCELERATE_MIXED_PRECISION")
    return None if launched in (None, "", "no") else launched


def trains_plain_fp32(args) -> bool:
    """Whether ``args`` are plain ``TrainingArguments`` that train in fp32: no ``precision`` field, neither ``bf16``
    nor ``fp16`` set, and no ``mixed_precision`` from ``accelerate launch`` (:func:`launched_precision`)."""
    return not (hasattr(args, "precision") or args.bf16 or args.fp16 or launched_precision())


def say_training_precision(args, precision: str) -> None:
    """Log, once (the trainer, when built), the precision a training run computes in and why: INFO, or a WARNING
    where it is emulated on this machine, with the arguments that train in fp32 instead, named as a Python caller
    sets them (the command line prints them as flags, :func:`hf_cse.cli.flags.in_flag_terms`: so they are part of
    the message, not of its arguments). Plain ``TrainingArguments`` in fp32 are said already, with what
    ``precision='auto'`` would run here (:func:`hf_cse.trainer_arguments.say_plain_arguments`)."""
    if trains_plain_fp32(args):  # said by say_plain_arguments
        return
    launched = launched_precision()
    own = hasattr(args, "precision")  # ContrastiveTrainingArguments: resolved, with its reason
    device = args.device
    if own:
        why = args.precision_reason
    elif launched:
        why = f"accelerate launch's mixed_precision {launched}"
    else:
        why = resolve(precision, device.type)[1].replace("requested", f"{precision}=True", 1)
    if not emulated(precision, device.type):
        logger.info("precision: %s on %s (%s)", describe(precision), device, why)
        return
    if EMULATED_BF16 not in why:  # accelerate launch's mixed_precision: the reason names it, not the emulation
        why = f"{why}; {EMULATED_BF16}"
    fp32_instead = ("launch with mixed_precision no in accelerate's config" if launched
                    else "precision='auto' (without bf16=True) trains in fp32 here" if own
                    else "bf16=False trains in fp32")
    logger.warning(f"precision: %s on %s (%s); {fp32_instead}", describe(precision), device, why)


def say_scoring_precision(precision: str, device) -> None:
    """Log the precision an evaluation encodes in: INFO, or a WARNING where it is emulated on this machine (as a
    training run's, :func:`say_training_precision`)."""
    device = torch.device(device)
    if emulated(precision, device.type):
        logger.warning("precision: %s on %s (%s); precision fp32 scores faster here", describe_scoring(precision),
                       device, EMULATED_BF16 if device.type == "cpu" else "no native bf16 on this device")
    else:
        logger.info("precision: %s on %s", describe_scoring(precision), device)


def describe(precision: str) -> str:
    """How a resolved precision is recorded (training_info.json, results.json) and logged."""
    return {"fp32": "fp32", "bf16": "bf16 autocast (losses in fp32)", "fp16": "fp16 autocast (losses in fp32)"}[
        precision]


def describe_scoring(precision: str) -> str:
    """How a resolved precision is named where embeddings are only scored (no loss): ``fp32``, ``bf16 autocast``."""
    return "fp32" if precision == "fp32" else f"{precision} autocast"


def training_flags(requested: str | None, bf16: bool, fp16: bool, use_cpu: bool,
                   launched: str | None = None) -> tuple[dict[str, bool], str, str]:
    """Resolve ``precision`` (None = not given: :data:`DEFAULT_PRECISION`) together with the Trainer's
    ``bf16`` / ``fp16`` arguments (which win over the default and ``auto``, and must agree with an explicit
    ``fp32`` / ``bf16`` / ``fp16``) and ``launched``, the ``mixed_precision`` of ``accelerate launch``'s config
    (:func:`launched_precision`): accelerate computes in that precision whatever the arguments say (autocast,
    FSDP's policy, DeepSpeed's config), so ``auto`` follows it and an explicit other precision is refused.

    Returns the TrainingArguments values to set (``bf16``, ``fp16``, and ``use_cpu`` for bf16 on a CPU-only
    machine, without which the Trainer refuses bf16), the precision that will run and why.
    """
    if bf16 and fp16:
        raise PrecisionError("bf16=True and fp16=True exclude each other; pass one (or precision=...).")
    flag = "bf16" if bf16 else "fp16" if fp16 else None
    if flag and requested not in (None, "auto", flag):
        raise PrecisionError(f"{flag}=True contradicts precision={requested!r}; pass one of them.")
    device_type = default_device_type(use_cpu)
    chosen = flag or (requested if requested != "auto" else None)
    if launched not in (None, "", "no"):
        if launched not in DTYPES:
            raise PrecisionError(f"accelerate launch asks for mixed_precision {launched}; hf_cse trains in fp32, bf16 "
                                 "or fp16: launch with mixed_precision bf16 (or no) in accelerate's config.")
        if chosen not in (None, launched):
            raise PrecisionError(
                f"accelerate launch computes in mixed_precision {launched} (its config or command line), but "
                f"precision={chosen!r} was asked for: set precision={launched!r}, or launch with mixed_precision "
                f"{'no' if chosen == 'fp32' else chosen} in accelerate's config.")
        if launched == "fp16" and device_type == "cpu":  # resolve's refusal would name fp16=True, not the launch
            raise PrecisionError("accelerate launch asks for mixed_precision fp16 (its config or command line), which "
                                 "needs a GPU: on a CPU fp16 runs no autocast and its matrix products are emulated. "
                                 "Launch with mixed_precision bf16 or no in accelerate's config.")
        precision, _ = resolve(launched, device_type)
        return _flag_values(precision, device_type), precision, f"accelerate launch's mixed_precision {launched}"
    precision, why = resolve(flag or requested or DEFAULT_PRECISION, device_type)
    return _flag_values(precision, device_type), precision, why


def run_precision(args) -> str:
    """The precision a Trainer built with ``args`` computes in (``fp32``, ``bf16`` or ``fp16``): what ``bf16`` /
    ``fp16`` say (``ContrastiveTrainingArguments`` set them from ``precision``), else the ``mixed_precision`` of
    ``accelerate launch``, which transformers hands to the Trainer's accelerator where neither is set (plain
    ``TrainingArguments`` under a bf16 launch train in bf16 with ``bf16=False``), else fp32. Resolved by
    :func:`training_flags`, which refuses what cannot run here (e.g. a launch's fp16 on a CPU)."""
    flag = args.bf16 or args.fp16
    launched = None if flag else launched_precision()
    requested = None if flag or launched else "fp32"  # plain arguments default to fp32
    return training_flags(requested, args.bf16, args.fp16, args.use_cpu, launched)[1]


def _flag_values(precision: str, device_type: str) -> dict[str, bool]:
    values = {"bf16": precision == "bf16", "fp16": precision == "fp16"}
    if precision == "bf16" and device_type == "cpu":
        values["use_cpu"] = True
    return values


def autocast(precision: str, device_type: str):
    """The autocast context of a resolved precision (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=DTYPES[precision])


def check_training_args(args) -> None:
    """Refuse TrainingArguments whose precision would not run as written (``fp16`` on a CPU is silently fp32 in
    the Trainer; ``bf16`` on a GPU without bf16 fails later)."""
    check_no_full_eval(args)
    if args.fp16 or args.bf16:
        resolve("fp16" if args.fp16 else "bf16", args.device.type)


def check_no_full_eval(args) -> None:
    """``fp16_full_eval`` / ``bf16_full_eval`` set: they cast the model for transformers' evaluation loop, which
    no hf_cse run scores with (its dev scores run in the training precision), so they would do nothing."""
    for name in ("fp16_full_eval", "bf16_full_eval"):
        if getattr(args, name, False):
            raise PrecisionError(f"{name}=True does nothing here: the dev data is scored in the training precision "
                                 "(precision, bf16 or fp16), not by transformers' evaluation loop that it casts for. "
                                 f"Drop {name}.", fields=(name,))
