"""How the encoder is loaded and built: its class, its weights' dtype, its attention implementation, and
bidirectional attention for decoder (LLM) encoders. Set by the config fields ``encoder_dtype`` (``torch_dtype``),
``encoder_attention`` (``attn_implementation``) and ``bidirectional``; everything is checked before any weight is
read.

**Where each dtype lives.** ``torch_dtype bf16|fp16`` loads the encoder's (and DiffCSE's discriminator's) weights
in that dtype, so the encoder computes in it. The pooled vectors are cast to fp32 before the projection head, which
stays fp32 (the model's ``fp32_modules``, also when a checkpoint is reloaded), and every loss computes in fp32
(:func:`hf_cse.losses.inputs.compute_dtype`).
The optimizer keeps its states in the dtype of the parameters it updates: with LoRA (:mod:`.lora`) the trainable
adapters are fp32 (peft's ``autocast_adapter_dtype``) and so are their AdamW moments, while the frozen encoder
weights have no optimizer state; without LoRA the encoder's own weights train in bf16/fp16 and so do their AdamW
states (updates below the dtype's resolution are lost: a logged warning says so). ``precision`` (autocast) is
independent: it decides the compute dtype of fp32 weights.

**Attention and the CPU fast dropout** (:mod:`.fast_dropout`): ``sdpa`` (transformers' default where the
architecture has it) is routed through ``hf_cse_sdpa``, so CPU attention-probability dropout uses the fast masks;
``eager`` keeps transformers' eager attention, whose attention-probability dropout stays torch's (the hidden-state
dropouts are fast in both); ``flash_attention_2`` runs only on a CUDA GPU, where fast dropout never applies (it
is a CPU optimisation) and the dropout is the flash kernel's own.

**Bidirectional attention** (LLM2Vec, BehnamGhader et al., 2024, Sec. 2.1: a decoder turned into an encoder by
letting every token attend to every other): transformers builds decoder masks with
``masking_utils.create_causal_mask`` / ``create_sliding_window_causal_mask``, which return a bidirectional
(padding-only) mask when ``config.is_causal`` is False, and its attention modules pass their own ``is_causal``
attribute to SDPA / flash attention. Setting both turns the model bidirectional without any copied model code.
A load of the saved encoder reads ``is_causal: false`` from its ``config.json`` but sets the modules' flags again;
transformers 5.24 passes ``config.is_causal`` to every attention call ahead of those flags, so the load attends both
ways (:func:`follows_saved_is_causal` checks it; exports pin eager attention where it fails, :mod:`hf_cse.export`).
Architectures whose modeling module builds its masks with those functions take it (Llama, Mistral, Mixtral,
Qwen2/3, Gemma 1/2/3, Phi-3, GPT-2, OPT, GPT-NeoX, Falcon, ... in transformers 5; tested for Llama, Mistral,
Qwen2, Gemma and GPT-2 under sdpa and eager); others (Mamba, Llama 4's chunked attention...) are refused.
LLM2Vec itself copies each model's code to drop the causal mask; transformers 5 makes that unnecessary.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch
from transformers import AutoModel, PretrainedConfig, PreTrainedModel
from transformers.utils import logging as hf_logging

from ..encoders import without_pooler_kwargs
from ..errors import CSEError
from ..precision import DTYPES
from ..run_as_encoder import is_method_model_config
from .fast_dropout import install_fast_dropout
from .modes import eval_mode
from .padding_free import install_packed_attention

EncoderDtype = Literal["fp32", "bf16", "fp16"]
Attention = Literal["sdpa", "eager", "flash_attention_2"]
ENCODER_DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16")
ATTENTIONS: tuple[str, ...] = ("sdpa", "eager", "flash_attention_2")
#: the transformers mask builders that honour ``config.is_causal = False``
_BIDIRECTIONAL_MASKS = ("create_causal_mask", "create_sliding_window_causal_mask")


def torch_dtype(name: str) -> torch.dtype:
    """``fp32`` / ``bf16`` / ``fp16`` as a torch dtype."""
    return torch.float32 if name == "fp32" else DTYPES[name]


def load_kwargs(config) -> dict:
    """``dtype`` and ``attn_implementation`` for ``from_pretrained`` / ``from_config`` of the encoder."""
    kwargs = {"dtype": torch_dtype(config.encoder_dtype)}
    attention = config.encoder_attention
    if attention == "flash_attention_2":
        try:
            check_attention(attention)
        except ValueError:  # a saved model trained with flash attention, loaded where it cannot run: the same
            attention = None  # function through transformers' default attention
    if attention is not None:
        kwargs["attn_implementation"] = attention
    return kwargs


def check_attention(attention: str | None) -> None:
    """Refuse an attention implementation this machine cannot run, naming the fix."""
    if attention is None:
        return
    if attention not in ATTENTIONS:
        raise CSEError(f"unknown attn_implementation {attention!r}; choose one of {', '.join(ATTENTIONS)}.")
    if attention == "flash_attention_2":
        if importlib.util.find_spec("flash_attn") is None:
            raise CSEError("attn_implementation flash_attention_2 needs the flash-attn package: pip install "
                           "flash-attn (CUDA GPUs only), or use attn_implementation sdpa.")
        if not torch.cuda.is_available():
            raise CSEError("attn_implementation flash_attention_2 runs only on a CUDA GPU and none is visible; "
                           "use attn_implementation sdpa (or eager).")


def _modeling_module(encoder_config):
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    try:
        return sys.modules[MODEL_MAPPING[type(encoder_config)].__module__]
    except KeyError:
        return None


def check_bidirectional(encoder_config) -> None:
    """Refuse ``bidirectional`` on an architecture whose masks do not honour ``config.is_causal`` (see module doc)."""
    module = _modeling_module(encoder_config)
    model_type = getattr(encoder_config, "model_type", "?")
    if module is None or not any(hasattr(module, name) for name in _BIDIRECTIONAL_MASKS):
        raise CSEError(f"bidirectional attention is not available for {model_type!r}: its transformers code does "
                       "not build its attention mask with create_causal_mask (which reads config.is_causal). "
                       "Drop bidirectional=True.")
    source = inspect.getsource(module)
    if "create_chunked_causal_mask" in source:  # chunked attention (Llama 4) ignores is_causal
        raise CSEError(f"bidirectional attention is not available for {model_type!r} (chunked attention masks "
                       "ignore config.is_causal). Drop bidirectional=True.")


def make_bidirectional(encoder: torch.nn.Module) -> int:
    """Let every token attend to every other in a decoder encoder: ``config.is_causal = False`` (mask builders)
    and ``is_causal = False`` on every attention module (SDPA / flash attention flags). Returns the number of
    attention modules changed."""
    encoder.config.is_causal = False
    changed = 0
    for module in encoder.modules():
        if getattr(module, "is_causal", None) is True:
            module.is_causal = False
            changed += 1
    return changed


def bidirectional_as_saved(model: torch.nn.Module) -> int:
    """Clear the attention modules' ``is_causal`` flags of every transformers model inside ``model`` whose config
    says ``is_causal = False`` (a bidirectional encoder loaded from its folder, e.g. by sentence-transformers): the
    same computation whether or not transformers passes ``config.is_causal`` on to SDPA / flash attention
    (:func:`follows_saved_is_causal`). Returns the number of attention modules changed."""
    changed = 0
    for module in model.modules():
        if isinstance(module, PreTrainedModel) and getattr(module.config, "is_causal", True) is False:
            changed += make_bidirectional(module)
    return changed


def follows_saved_is_causal(encoder: PreTrainedModel) -> bool:
    """Whether ``encoder``, loaded from a folder whose ``config.json`` says ``is_causal: false`` (a load sets its
    attention modules' own ``is_causal`` flags again), attends both ways on a batch without padding, where the mask
    builders return no mask and SDPA / flash attention follow an ``is_causal`` flag. transformers 5.24 passes
    ``config.is_causal`` to every attention call (``merge_with_config_defaults``), ahead of the module's flag; a
    version or architecture that does not would attend causally there. Checked by running a few tokens with the
    flags as loaded and with them cleared (:func:`make_bidirectional`); the flags are restored."""
    flagged = [m for m in encoder.modules() if getattr(m, "is_causal", None) is True]
    if not flagged:
        return True
    ids = torch.arange(2, 10, device=encoder.device).clamp(max=encoder.config.vocab_size - 1).unsqueeze(0)
    with eval_mode(encoder), torch.no_grad():
        as_loaded = encoder(input_ids=ids, attention_mask=torch.ones_like(ids))[0].float()
        for module in flagged:
            module.is_causal = False
        try:
            cleared = encoder(input_ids=ids, attention_mask=torch.ones_like(ids))[0].float()
        finally:
            for module in flagged:
                module.is_causal = True
    return (as_loaded - cleared).abs().max().item() <= 1e-2 * cleared.abs().max().item()


def check_text_encoder(encoder_config) -> None:
    """Refuse, before any weight is read, an architecture that cannot embed sentences as hf_cse trains them: an
    encoder-decoder (T5, BART: transformers' model needs decoder inputs), or a model without token ids of its own
    (vision, audio, multimodal: no ``vocab_size``, or a forward without ``input_ids``)."""
    model_type = getattr(encoder_config, "model_type", "?")
    if is_method_model_config(encoder_config):  # a run's model (from its folder): no encoder, it wraps one
        raise CSEError(f"encoder_config is an hf_cse model's config (model_type {model_type!r}: a training run's "
                       "output, the encoder wrapped with its training head), not a plain encoder's: start from the "
                       "run's export (<run>/sentence-transformers, the merged plain encoder), or go on with the run "
                       "itself from its last checkpoint (resume_from_checkpoint).", fields=("encoder_config",))
    takes = "hf_cse trains text encoders (BERT, RoBERTa, MiniLM...) and decoders (GPT-2, Llama...)"
    if getattr(encoder_config, "is_encoder_decoder", False):
        raise CSEError(f"{model_type!r} is an encoder-decoder model, whose forward needs decoder inputs: {takes}. "
                       "Start from one of those.")
    encoder_class = encoder_class_of(encoder_config)
    reads_tokens = encoder_class is None or "input_ids" in inspect.signature(encoder_class.forward).parameters
    if not reads_tokens or getattr(encoder_config, "vocab_size", None) is None:
        raise CSEError(f"{model_type!r} is not a text model (no token vocabulary of its own): {takes}. Start from "
                       "one of those.")


def encoder_class_of(encoder_config) -> type | None:
    """The ``AutoModel`` class of an encoder config, or None where it is not known yet (custom code not loaded)."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    try:
        return MODEL_MAPPING[type(encoder_config)]
    except KeyError:
        return None


@contextmanager
def without_load_reports() -> Iterator[None]:
    """transformers logs errors only (no load report) inside: for a load whose missing or unused weights (BERT's
    pooler layer) are expected."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)


def load_encoder(name_or_path: str, config, **kwargs) -> PreTrainedModel:
    """The pretrained encoder, in fp32 unless ``dtype`` says otherwise (:func:`load_kwargs`) and without
    BERT's pretrained pooler layer (SimCSE trains without it)."""
    kwargs = {"config": config, "dtype": torch.float32, **kwargs}
    with without_load_reports():  # the dropped BERT pooler is expected, not worth a load report
        encoder_class = encoder_class_of(config)
        if encoder_class is not None:
            return AutoModel.from_pretrained(name_or_path, **without_pooler_kwargs(encoder_class), **kwargs)
        try:  # custom code, whose class is known only once loaded: try the pooler flag, as BERT-like models take it
            return AutoModel.from_pretrained(name_or_path, add_pooling_layer=False, **kwargs)
        except TypeError:
            return AutoModel.from_pretrained(name_or_path, **kwargs)


def prepare_encoder(encoder: PreTrainedModel, config: PretrainedConfig) -> PreTrainedModel:
    """What the method's config (a :class:`~hf_cse.models.config.CSEConfig`) asks of a loaded encoder: the fast CPU
    dropout, the padding-free attention, bidirectional attention."""
    if config.fast_dropout:
        install_fast_dropout(encoder)
    if config.padding_free:
        install_packed_attention(encoder)
    if config.bidirectional:
        make_bidirectional(encoder)
    return encoder


def build_encoder(config: PretrainedConfig) -> PreTrainedModel:
    """A freshly initialised encoder of a method config's ``encoder_config`` without BERT's pooler layer (SimCSE's and
    DiffCSE's discriminator's), in the config's dtype and attention (:func:`prepare_encoder`)."""
    enc_cfg = config.build_encoder_config()
    encoder_class = encoder_class_of(enc_cfg)
    encoder = AutoModel.from_config(enc_cfg, **(without_pooler_kwargs(encoder_class) if encoder_class else {}),
                                    **load_kwargs(config))
    return prepare_encoder(encoder, config)


def encoder_skeleton(config) -> PreTrainedModel:
    """The encoder of a method config, built on the meta device from its config alone (no weights read, no memory
    used): what the checks before loading inspect. Its class is constructed directly where it is known: in a ZeRO-3
    run ``from_config`` partitions the model and initialises its weights, which fails on the meta device."""
    enc_cfg = config.build_encoder_config()
    encoder_class = encoder_class_of(enc_cfg)
    with torch.device("meta"):
        return encoder_class(enc_cfg) if encoder_class else AutoModel.from_config(enc_cfg)
