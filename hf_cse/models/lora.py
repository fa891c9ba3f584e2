"""LoRA adapters on the encoder through peft (Hu et al., ICLR 2022, "LoRA: Low-Rank Adaptation of Large Language
Models"), as LLM2Vec's unsupervised SimCSE stage trains decoder LLMs (BehnamGhader et al., COLM 2024; its released
SimCSE configs: r = 16, alpha = 2r, dropout 0.05 on all seven attention and MLP projections, bf16 weights, flash
attention, gradient checkpointing).

With ``lora_r > 0`` the encoder is wrapped by ``peft.get_peft_model``: its weights are frozen and low-rank adapters
``W + (alpha / r) * B A`` train on the ``lora_target_modules`` (default: every attention and feed-forward linear
layer of the architecture, :data:`DEFAULT_TARGETS`; peft's ``all-linear`` for others). The projection head and any
other part of the method model still train in full; DiffCSE's discriminator (training only, never exported) also
trains in full, started from the encoder's weights.

* checkpoints hold the whole state (frozen weights + adapters, so ``from_pretrained`` and the Trainer's resume work
  unchanged) and the adapter alone in peft's format under ``adapter/`` (``PeftModel.from_pretrained(base, path)``);
* the sentence-transformers export holds the MERGED encoder (:func:`merged_encoder`): a plain transformers model
  that loads without peft and gives the same embeddings; the adapters are merged into fp32 weights, and the export is
  saved in fp32 whatever dtype the encoder trained in (``encoder_dtype`` bf16/fp16 would round a small update away
  in part);
* the model card records the adapter settings (:func:`adapter_settings`).
"""

from __future__ import annotations

import copy
import importlib.util

from torch import nn

from ..errors import CSEError, closest_name
from ..seams import mark_initialized

#: LoRA target modules per architecture: every linear layer of attention and feed-forward blocks (LLM2Vec uses all of
#: them for Llama / Mistral); BERT's ``dense`` names the attention output, intermediate and output projections
DEFAULT_TARGETS: dict[str, list[str]] = {
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "electra", "mpnet", "camembert"),
                    ["query", "key", "value", "dense"]),
    "distilbert": ["q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"],
    **dict.fromkeys(("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3"),
                    ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "modernbert": ["Wqkv", "Wo", "Wi"],
}


def check_peft_installed() -> None:
    if importlib.util.find_spec("peft") is None:
        raise CSEError("LoRA (lora_r > 0) needs the peft package: pip install 'hf_cse[lora]' (or pip install peft).")


def target_modules(config) -> list[str] | str:
    """The configured target modules, else the architecture's default (:data:`DEFAULT_TARGETS`, or ``all-linear``)."""
    if config.lora_target_modules:
        targets = list(config.lora_target_modules)
        return "all-linear" if targets == ["all-linear"] else targets  # peft's name for every linear layer
    model_type = getattr(config.encoder_config, "model_type", None)
    return DEFAULT_TARGETS.get(model_type, "all-linear")


def lora_alpha(lora_r: int, alpha: float | None) -> float:
    """The alpha the adapters are built with: ``lora_alpha``, else ``2 * lora_r`` (LLM2Vec's 32 for r = 16)."""
    return alpha if alpha is not None else 2 * lora_r


def peft_config(config):
    """The ``peft.LoraConfig`` of an hf_cse config with ``lora_r > 0``."""
    check_peft_installed()
    from peft import LoraConfig

    return LoraConfig(r=config.lora_r, lora_alpha=lora_alpha(config.lora_r, config.lora_alpha),
                      lora_dropout=config.lora_dropout, target_modules=target_modules(config), bias="none")


def check_targets_match(config) -> None:
    """Refuse target modules that match no module of the encoder, from its config alone (a skeleton built on the
    meta device: no weights read, no memory used)."""
    from peft.tuners.tuners_utils import check_target_module_exists

    from .loading import encoder_skeleton

    lora = peft_config(config)
    if lora.target_modules == "all-linear":
        return
    skeleton = encoder_skeleton(config)
    matched = [(name, m) for name, m in skeleton.named_modules() if check_target_module_exists(lora, name)]
    linear = sorted({name.rsplit(".", 1)[-1] for name, m in skeleton.named_modules() if isinstance(m, nn.Linear)})
    named = f"its linear layers are named {', '.join(linear) or '(none)'}: pass some of those to lora_target_modules."
    if not matched:
        raise CSEError(f"lora_target_modules {sorted(lora.target_modules)} match no module of the "
                       f"{config.encoder_config.model_type!r} encoder; {named}")
    # each name on its own too: peft adapts what the others match and drops a misspelt one without a word
    leaves = {name for name, _ in skeleton.named_modules()}
    for target in sorted(lora.target_modules):
        if not any(name == target or name.endswith(f".{target}") for name in leaves):
            close = closest_name(target, linear)
            guess = f" (did you mean {close!r}?)" if close else ""
            raise CSEError(f"lora_target_modules {target!r} matches no module of the "
                           f"{config.encoder_config.model_type!r} encoder{guess}; {named}",
                           fields=("lora_target_modules",))
    unsupported = sorted({type(m).__name__ for _, m in matched if not isinstance(m, _adaptable_types())})
    if unsupported:  # peft would refuse them at load time, in its own words
        raise CSEError(f"lora_target_modules {sorted(lora.target_modules)} match {', '.join(unsupported)} "
                       f"modules, which LoRA cannot adapt; {named}")


def _adaptable_types() -> tuple[type, ...]:
    """The module types peft's LoRA layers wrap (linear, embedding and convolution layers, GPT-2's Conv1D)."""
    from transformers.pytorch_utils import Conv1D

    return nn.Linear, nn.Embedding, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.MultiheadAttention, Conv1D


def apply_lora(encoder: nn.Module, config) -> nn.Module:
    """The encoder wrapped with fresh LoRA adapters (``peft.PeftModel``; adapters in fp32 whatever the weights'
    dtype). The new modules are flagged initialised, so transformers' ``post_init`` does not redraw them (LoRA's
    B = 0 start, which leaves the pretrained function unchanged)."""
    from peft import get_peft_model

    wrapped = get_peft_model(encoder, peft_config(config), autocast_adapter_dtype=True)
    for name, module in wrapped.named_modules():
        if "lora_" in name:
            mark_initialized(module)
    return wrapped


def is_lora(encoder: nn.Module) -> bool:
    return hasattr(encoder, "peft_config") and hasattr(encoder, "merge_and_unload")


def merged_encoder(encoder: nn.Module) -> nn.Module:
    """A plain transformers encoder: a LoRA encoder's adapters merged into an fp32 copy of its weights, so that each
    merged weight is ``W + (alpha / r) * B A`` to fp32 precision, and the copy stays fp32 (the encoder itself when it
    has no adapters). Merged into bf16 / fp16 weights (``encoder_dtype``), an update small next to the weight would
    be rounded away in part (bf16 keeps 8 bits of mantissa)."""
    if not is_lora(encoder):
        return encoder
    return copy.deepcopy(encoder).float().merge_and_unload()


def base_state_dict(encoder: nn.Module) -> dict:
    """The frozen weights of a LoRA encoder under the plain encoder's names (the adapters left out), e.g. to start
    DiffCSE's discriminator from the same weights; a plain encoder's own state dict."""
    if not is_lora(encoder):
        return encoder.state_dict()
    prefix = "base_model.model."
    return {key[len(prefix):].replace(".base_layer.", "."): value for key, value in encoder.state_dict().items()
            if "lora_" not in key}


def describe_lora(model: nn.Module) -> str:
    """What trains in a LoRA run, for its log line: the adapters and the trainable share of the method model (the
    adapters plus the parts that train in full, such as the projection head)."""
    config = model.config
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    settings = adapter_settings(config)
    targets = settings["target_modules"]
    return (f"LoRA active: rank {settings['r']}, alpha {settings['alpha']:g} on "
            f"{targets if isinstance(targets, str) else ', '.join(targets)}; {trainable:,} trainable parameters of "
            f"{total:,} ({100 * trainable / max(total, 1):.2f}%)")


def adapter_settings(config) -> dict | None:
    """What the model card and training info record about the adapters (None without LoRA)."""
    if not config.lora_r:
        return None
    targets = target_modules(config)
    return {"method": "LoRA (peft)", "r": config.lora_r,
            "alpha": lora_alpha(config.lora_r, config.lora_alpha),
            "dropout": config.lora_dropout, "target_modules": targets if isinstance(targets, str) else list(targets)}
