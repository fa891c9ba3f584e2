"""FSDP and DeepSpeed as the single-process run: what hf_cse sets so that a sharded run computes the plain run's
function and leaves a model its export can read, and which methods train under which engine.

Each part answers a failure seen on an H100 (``benchmarks/gpu_engines.py``, benchmarks/README.md section 15) or
found running every method under every engine on a CPU, where the tests check it
(``tests/trainer/test_sharded_engines.py``, through ``tests/sharded_on_cpu.py``):

* :func:`shard_units` -- FSDP2 exited at ``accelerator.prepare``: accelerate shards the input embeddings as a unit
  of their own after the encoder's layers, and BERT lists ``BertEmbeddings`` (which holds them) among its layers, so
  the word embeddings were sharded twice.
* :func:`deepspeed_autocast`, :func:`load_in_fp32_under_deepspeed` -- ZeRO-2 trained a slower curve than the plain
  run (step 4: 3.37 against 2.01) and ZeRO-3 failed at start: DeepSpeed's ``bf16`` casts the whole model to bf16,
  where the plain run keeps fp32 weights under ``torch.autocast`` (hf_cse's ``precision bf16``).
* :func:`fsdp_autocast` -- the same for FSDP, whose bf16 policy moved PromptBERT's curve and stopped DiffCSE.
* :func:`full_models_while_loading` -- ZeRO-3's export failed: transformers partitions every model loaded while a
  ZeRO-3 run lives in the process, the export's reload included (empty tensors).
* :func:`check_method_shards` -- a method's ``shards_under``: ESimCSE and DiffCSE do not train under every engine.
"""

from __future__ import annotations

import copy
import os
import types
from contextlib import contextmanager

import torch
from torch import nn

from .errors import CSEError
from .precision import autocast
from .seams import no_split_modules

#: the sharding engines a method can declare (``shards_under``): FSDP (parameters, gradients and optimizer states),
#: DeepSpeed ZeRO stages 1-2 (optimizer states and gradients; the parameters stay whole) and ZeRO-3 (parameters too)
ENGINES = ("FSDP", "ZeRO-2", "ZeRO-3")


def engine_of(fsdp: bool, deepspeed_stage: int | None) -> str | None:
    """The :data:`ENGINES` name of a run's engine (None: neither)."""
    if fsdp:
        return "FSDP"
    if deepspeed_stage is None:
        return None
    return "ZeRO-3" if int(deepspeed_stage) >= 3 else "ZeRO-2"


def launched_engine(training_args) -> str | None:
    """:func:`engine_of` before the Trainer exists, from the training arguments and ``accelerate launch``'s settings;
    None where the DeepSpeed stage is not known yet (a DeepSpeed JSON file: the Trainer checks again)."""
    from .distributed import sharding_engine

    engine = sharding_engine(training_args)
    stage = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") if engine == "DeepSpeed" else None
    return engine_of(engine == "FSDP", int(stage) if stage and stage.isdigit() else None)


def check_method_shards(method_cls, engine: str | None) -> None:
    """Refuse, in one line, a method that does not train under ``engine`` (an :data:`ENGINES` name; None: no
    sharding engine, or one not known yet) -- its ``shards_under`` declaration, with its reason."""
    if engine and engine not in method_cls.shards_under:
        raise CSEError(f"method={method_cls.method_name()!r} does not train under {engine}: "
                       f"{method_cls.why_no_sharding}. Train it under {' or '.join(method_cls.shards_under)}, or "
                       "without FSDP / DeepSpeed.")


def shard_units(model: nn.Module) -> set[str]:
    """The module classes FSDP makes one shard unit each (accelerate's ``TRANSFORMER_BASED_WRAP`` reads a model's
    ``_no_split_modules``): the encoders' own list less any class that holds the input embeddings, which accelerate
    shards alone (a parameter in two units fails with ``Invariant encountered: value was None``)."""
    declared = no_split_modules(model)
    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return declared
    holders = {type(m).__name__ for m in model.modules()
               if m is not embeddings and any(child is embeddings for child in m.modules())}
    return declared - holders


def deepspeed_autocast(ds_config: dict, precision: str, model: nn.Module | None = None) -> bool:
    """Make DeepSpeed compute bf16 as the plain run does: ``torch.autocast`` over fp32 weights (DeepSpeed's
    ``torch_autocast``) in place of its ``bf16`` mode, which holds the model itself in bf16 (LayerNorm, embeddings
    and the residual stream rounded to 8 bits) and trains another curve. Changes ``ds_config`` in place and returns
    whether it did: only for ``precision`` bf16 with DeepSpeed's bf16 on and no ``torch_autocast`` section of the
    user's (a config with ``"torch_autocast": {"enabled": false}`` keeps DeepSpeed's bf16 weights, half the memory
    of the parameters), and so does a ``model`` whose trainable weights are not all fp32 (loaded in bf16). Under
    several processes DeepSpeed then reduces the gradients of linear layers in bf16."""
    bf16 = ds_config.get("bf16") or {}
    if precision != "bf16" or "torch_autocast" in ds_config or str(bf16.get("enabled")).lower() != "true":
        return False
    if model is not None and any(p.dtype != torch.float32 for p in model.parameters() if p.requires_grad):
        return False
    ds_config["bf16"] = {**bf16, "enabled": False}
    ds_config["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
    return True


def load_in_fp32_under_deepspeed(deepspeed_plugin, precision: str) -> None:
    """Register DeepSpeed's config for model loading as :func:`deepspeed_autocast` will run it: the
    ``TrainingArguments`` register it as soon as they exist, and under ZeRO-3 transformers builds every model loaded
    from then on in the config's dtype (bf16 parameters, which DeepSpeed's autocast and its ZeRO-3 partitions of one
    dtype cannot take). The plugin's own config is left as it was; the Trainer converts it after transformers has
    checked it against the arguments."""
    if deepspeed_plugin is None:
        return
    converted = copy.deepcopy(deepspeed_plugin.deepspeed_config)
    if deepspeed_autocast(converted, precision):
        original, deepspeed_plugin.deepspeed_config = deepspeed_plugin.deepspeed_config, converted
        try:
            deepspeed_plugin.set_deepspeed_weakref()  # registers a copy of the converted config
        finally:
            deepspeed_plugin.deepspeed_config = original


def fsdp_autocast(fsdp_plugin, model: nn.Module, precision: str, device_type: str) -> bool:
    """Make FSDP compute bf16 / fp16 as the plain run does: fp32 parameters, gathered and reduced in fp32, the
    model's forward (not the losses after it) under ``torch.autocast`` -- as accelerate wraps it outside FSDP2 -- in
    place of the policy accelerate derives from ``mixed_precision`` (parameters cast to bf16, LayerNorm included,
    gradients reduced in bf16), under which PromptBERT's template denoising -- a difference of two close
    representations -- logged 1.29 against the plain run's 0.029. Costs twice the bytes per all-gather. Returns
    whether it changed the plugin and the model."""
    if precision == "fp32" or getattr(fsdp_plugin, "mixed_precision_policy", None) is None:
        return False
    fsdp_plugin.mixed_precision_policy = None
    model.forward = types.MethodType(autocast(precision, device_type)(type(model).forward), model)
    return True


@contextmanager
def full_models_while_loading(deepspeed_plugin=None):
    """Load whole models inside the block although a ZeRO-3 run lives in this process: transformers partitions
    every model it loads while DeepSpeed's config is registered (``is_deepspeed_zero3_enabled``), which leaves the
    export's reload with empty tensors. The registration is restored afterwards. Nothing to do without DeepSpeed."""
    hf_config = getattr(deepspeed_plugin, "hf_ds_config", None)
    if hf_config is None:
        yield
        return
    from transformers.integrations.deepspeed import set_hf_deepspeed_config, unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        set_hf_deepspeed_config(hf_config)
