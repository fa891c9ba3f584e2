"""Training with the encoder's embedding layer frozen (the config field ``freeze_embeddings``), as the gradient
paradigm's authors train every model behind their numbers (Li, Zhang and Nie, "Towards Better Understanding of
Contrastive Sentence Representation Learning: A Unified Paradigm for Gradient", ACL 2024).

The paper does not say so (App. A.3 lists the other training details); the authors' code does: UnderstandingCSE
``isotropy/models.py`` ``custom_param_init``, called by ``train.py`` for every run, sets ``requires_grad = False`` on
every BERT parameter whose name contains neither ``pooler`` nor ``layer.{11-i}`` for ``i < num_layers``, and every
script passes ``num_layers 12``: on BERT-base exactly the word, position and token-type embeddings and their
LayerNorm stay as pretrained.

The embedding layer is found without naming any architecture: the module that holds the encoder's input embeddings
(``get_input_embeddings()``) as a direct child, BERT's ``embeddings`` (RoBERTa's, DistilBERT's, ELECTRA's...), all
of whose parameters are frozen. An encoder whose input embeddings sit directly on the model itself (Llama's
``embed_tokens``, GPT-2's ``wte`` / ``wpe``) has no such layer and is refused. Only the encoder is frozen (the one
exported); DiffCSE's discriminator and every head train as before. With LoRA (``lora_r > 0``) the encoder's own
weights, the embeddings' included, are frozen by LoRA anyway: the option then changes nothing, but for adapters that
``lora_target_modules`` puts on the embedding layer, which it freezes too.
"""

from __future__ import annotations

from torch import nn
from transformers import PreTrainedModel

from ..errors import CSEError


def embedding_layer(encoder: nn.Module) -> nn.Module | None:
    """The module holding ``encoder``'s input embeddings beside its other embeddings (BERT's ``embeddings``: word,
    position, token-type embeddings and their LayerNorm); None where the input embeddings sit on the model itself
    or the encoder has none."""
    try:
        inputs = encoder.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    for module in encoder.modules():
        # a model holding them directly (Llama's embed_tokens) would freeze the whole encoder: not an embedding layer
        if not isinstance(module, PreTrainedModel) and any(child is inputs for child in module.children()):
            return module
    return None


def check_embedding_layer(encoder: nn.Module, model_type: str) -> nn.Module:
    """The encoder's embedding layer (:func:`embedding_layer`), or one line saying there is none to freeze."""
    layer = embedding_layer(encoder)
    if layer is None:
        raise CSEError(f"freeze_embeddings: the {model_type!r} encoder has no embedding layer apart from the model "
                       "itself (its input embeddings sit on the model, as in decoder LLMs); drop "
                       "freeze_embeddings=True.", fields=("freeze_embeddings",))
    return layer


def freeze_embedding_layer(encoder: nn.Module, model_type: str) -> int:
    """Freeze every parameter of the encoder's embedding layer; the number of parameters frozen."""
    frozen = 0
    for param in check_embedding_layer(encoder, model_type).parameters():
        param.requires_grad_(False)
        frozen += param.numel()
    return frozen


def check_freezable(config) -> None:
    """Refuse ``freeze_embeddings`` on an encoder without an embedding layer, from the method config alone (a
    skeleton on the meta device), before any weight is read."""
    from .loading import encoder_skeleton

    check_embedding_layer(encoder_skeleton(config), config.encoder_config.model_type)
