"""Configuration of every hf_cse method model: everything that defines a trained model lives here,
so ``from_pretrained`` rebuilds it exactly."""

from __future__ import annotations

import contextvars
import copy
from collections.abc import Mapping
from dataclasses import field, fields
from typing import Any, Literal

from transformers import AutoConfig, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec

from ..errors import CSEError, closest_name
from ..hyperparameter_rules import (
    check_rule,
    field_needs,
    field_rules,
    need_words,
    plain_number,
    shown_value,
    unmet_need,
)
from ..matryoshka import say_reordered, warn_untrained_width
from ..matryoshka_rules import check_matryoshka, head_error
from ..objectives import DCL, LEGACY_FIELDS, check_objectives, dcl_defaults, normalise_objectives, objective
from .encoder_dropout import dropout_fields, set_dropout
from .heads import PROJECTORS
from .loading import (
    ENCODER_DTYPES,
    Attention,
    EncoderDtype,
    check_attention,
    check_bidirectional,
    check_text_encoder,
)
from .lora import check_peft_installed
from .pooling import PAPERS_POOLER, POOLERS, applies_projector, check_pooler, pooler_at_test

PoolerName = Literal[POOLERS]  # type: ignore[valid-type]  # the names are kept once, in pooling.POOLERS
ProjectorName = Literal[tuple(PROJECTORS)]  # type: ignore[valid-type]  # the registered ones at import

# Set while a saved configuration is read (from_dict): see CSEConfig.from_dict.
_LOADING = contextvars.ContextVar("hf_cse_loading_config", default=False)


def is_decoder_only(encoder_config: PretrainedConfig | None) -> bool:
    """Whether the encoder attends causally (GPT-2, Llama...): a causal-LM family with no masked-LM head, or a
    config flagged ``is_decoder``."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if encoder_config is None:
        return False
    model_type = encoder_config.model_type
    if getattr(encoder_config, "is_decoder", False):
        return True
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


#: the poolers that read the first token (its vector, or the pooler layer over it)
FIRST_TOKEN_POOLERS = ("cls", "cls_before_pooler")


def check_switched_on(given: dict, config) -> None:
    """Refuse a field given in the keywords ``given`` with another value than its default while a setting it acts
    only with (its ``metadata["needs"]``, :func:`hf_cse.hyperparameter_rules.field_needs`: ``mlm_weight`` only with
    ``do_mlm``) is not so in ``config``: it would do nothing (the command line passes every field; it refuses the
    flags a user gave in its own terms first)."""
    defaults = {f.name: f.default for f in fields(type(config))}
    for name, needs in field_needs(type(config)).items():
        # a setting that may be named after the model is built (DiffCSE's generator: attach_generator) is not
        # judged while unset
        needs = [(other, test, value) for other, test, value in needs
                 if not (test == "not_in" and None in value and getattr(config, other, None) is None)]
        need = unmet_need(needs, lambda other: getattr(config, other, None)) if name in given else None
        if need is not None and given[name] != defaults.get(name):
            raise CSEError(f"{name} does nothing while {need[0]} is {shown_value(getattr(config, need[0], None))}: "
                           f"it acts only with {need_words(*need)}. Set that, or drop {name}.", fields=(name, need[0]))


def attends_causally(encoder_config: PretrainedConfig | None, bidirectional: bool = False) -> bool:
    """Whether the encoder computes each token from those before it alone: a decoder (:func:`is_decoder_only`) not
    made bidirectional, by ``bidirectional`` or by its saved ``config.is_causal = False`` (a bidirectional run's
    export)."""
    return (is_decoder_only(encoder_config) and not bidirectional
            and getattr(encoder_config, "is_causal", True) is not False)


def check_first_token_pooler(pooler: str | None, encoder_config: PretrainedConfig | None, bidirectional: bool = False,
                             field: str = "pooler_type") -> None:
    """Refuse a first-token pooler on a causal encoder (:func:`attends_causally`): the first token is computed
    without the rest of the sentence, the same vector for every sentence that starts alike. ``field``: the name the
    caller gave the pooler by (a training config's ``pooler_type``, the scoring encoder's ``pooler``)."""
    if pooler not in FIRST_TOKEN_POOLERS or not attends_causally(encoder_config, bidirectional):
        return
    fix = " (or bidirectional=True)" if field == "pooler_type" else ""
    raise CSEError(f"pooler {pooler!r} reads the first token, which a causal (decoder-only) encoder such as "
                   f"{encoder_config.model_type!r} computes without seeing the rest of the sentence. Use {field} avg "
                   f"or last{fix}.", fields=(field,))


class CSEConfig(PretrainedConfig):
    r"""Shared configuration of hf_cse models: every field says what it means in its ``metadata["help"]`` (read by
    the command line of ``run_unsup.py`` and by the model card).

    Objectives are data: ``objectives`` lists the registry losses the model trains with (see
    :mod:`hf_cse.objectives`), checked by the registry when the configuration is created. The fields of older
    configs -- ``loss``, ``loss_kwargs``, ``dcl_weight``, ``dcl_temperature``, ``dcl_normalization`` -- are still
    accepted (as keywords and in config.json) and converted; they remain readable as properties.
    """

    model_type = "hf_cse"
    method = "base"
    # the wrapped encoder's configuration is a sub-configuration, as in transformers' composite models: a config
    # object in memory (its class picked by its model_type), a dict in config.json
    sub_configs_defaults = {"encoder_config": SubConfigSpec(AutoConfig, model_type="bert", optional=True)}

    # Fields (transformers >= 5 configs are dataclasses: subclasses only change defaults or add fields).
    encoder_config: PretrainedConfig | None = field(default=None, metadata={
        "help": "configuration of the wrapped encoder"})
    pooler_type: PoolerName | None = field(default=None, metadata={
        "help": "training pooler (not set = the encoder's own: a sentence-transformers model keeps its Pooling "
                "module's mode, mean -> avg, cls -> cls, max -> max; a plain encoder gets the papers' cls)"})
    normalize: bool | None = field(default=None, metadata={
        "help": "L2-normalise the test-time embeddings, as a sentence-transformers Normalize module (not set = the "
                "encoder's own: true when its sentence-transformers modules end in Normalize); the training losses "
                "see the vectors before normalisation, as the papers define them"})
    pooler_source: str | None = field(default=None, metadata={
        "help": "why the model pools as it does (the encoder's own pooling, a flag, a preset, the papers' default)"})
    projector: ProjectorName = field(default="mlp", metadata={
        "help": "training-time head on the pooled vector: mlp (SimCSE's Linear+tanh), linear (N(0, 6e-3) init, "
                "the paradigm paper's), batchnorm (DiffCSE's, App. A), none"})
    mlp_only_train: bool = field(default=True, metadata={
        "help": "head used in training only (test embedding = pooled vector; the papers' unsupervised setting)"})
    objectives: list[dict] = field(default_factory=lambda: [objective("infonce")], metadata={
        "help": "training objectives: registry loss, weight and hyperparameters of each, the main contrastive "
                "one first"})
    dropout: float | None = field(default=None, metadata={
        "help": "encoder dropout override (not set = the encoder's own; GS-InfoNCE's code uses 0.2 for BERT)",
        "rule": "fraction"})
    freeze_embeddings: bool = field(default=False, metadata={
        "help": "train with the encoder's embedding layer frozen (word, position, token-type embeddings and their "
                "LayerNorm), as the gradient paradigm's authors' code (custom_param_init) trains every model behind "
                "the paper's numbers (Li et al., ACL 2024); the rest of the encoder and the heads train (with LoRA "
                "it adds nothing, LoRA freezes them already; hf_cse.models.frozen_embeddings)"})
    off_dropout: bool = field(default=False, metadata={
        "help": "ImSimCSE off-dropout negatives: a third, dropout-free pass gives the negatives of "
                "off_dropout_infonce"})
    off_dropout_grad: bool = field(default=True, metadata={"help": "gradients through the dropout-free pass",
                                                           "needs": [("off_dropout", "==", True)]})
    base_encoder: str | None = field(default=None, metadata={"help": "encoder the training started from"})
    base_encoder_local: bool | None = field(default=None, metadata={
        "help": "whether base_encoder is a local folder (recorded as an absolute path) rather than a Hub id (set by "
                "from_encoder; not set: a checkpoint from before it was recorded)"})
    encoder_max_seq_length: int | None = field(default=None, metadata={
        "help": "the truncation length the encoder was served with, a sentence-transformers model's max_seq_length "
                "(set by from_encoder): the default of evaluation and the export; not set = the encoder's position "
                "limit"})
    do_mlm: bool = field(default=False, metadata={
        "help": "SimCSE's auxiliary masked-LM objective (paper appendix; authors' do_mlm): a masked copy of the "
                "batch through the encoder and the checkpoint's pretrained MLM head, mlm_weight x CE added"})
    mlm_weight: float = field(default=0.1, metadata={"help": "weight lambda of the MLM objective (SimCSE: 0.1)",
                                                      "rule": "positive", "needs": [("do_mlm", "==", True)]})
    mlm_probability: float = field(default=0.15, metadata={
        "help": "share of tokens masked for the MLM objective (SimCSE's code: 0.15, BERT's 80/10/10 recipe)",
        "rule": "open_fraction", "needs": [("do_mlm", "==", True)]})
    fast_dropout: bool = field(default=True, metadata={
        "help": "CPU dropout masks from 16 random bits per element (same distribution up to p +- 7.7e-6, ~1.2x "
                "faster CPU steps; no effect on GPU); false = torch's dropout"})
    padding_free: bool = field(default=True, metadata={
        "help": "CPU: the encoder's linear layers run on the real tokens only, padding packed away (BERT, RoBERTa, "
                "DistilBERT, ELECTRA, ALBERT and kin under sdpa; the same results, ~1.2-1.3x faster steps when a "
                "fifth of the tokens is padding; GPUs run padded); false = the padded batch"})
    # how the encoder is loaded (hf_cse.models.loading); the config's own dtype / attn_implementation belong to
    # transformers, hence the encoder_ names (the flags keep transformers' names as aliases)
    encoder_dtype: EncoderDtype = field(default="fp32", metadata={
        "help": "dtype of the encoder's weights (torch_dtype): fp32, or bf16/fp16 to halve their memory; the "
                "projection head and every loss stay fp32, optimizer states follow the trained weights' dtype (LoRA "
                "adapters: fp32)", "aliases": ["torch_dtype"]})
    encoder_attention: Attention | None = field(default=None, metadata={
        "help": "attention implementation of the encoder (attn_implementation): sdpa, eager, flash_attention_2 "
                "(CUDA + flash-attn only); not set = transformers' default", "aliases": ["attn_implementation"]})
    bidirectional: bool = field(default=False, metadata={
        "help": "decoder (LLM) encoders: every token attends to every other (LLM2Vec), through transformers' "
                "config.is_causal; Llama, Mistral, Qwen2/3, Gemma, Phi-3, GPT-2 and others"})
    prompt: str | None = field(default=None, metadata={
        "help": "instruction / prefix prepended to every sentence in training, evaluation and the "
                "sentence-transformers export (its default prompt), e.g. 'Retrieve semantically similar text: '"})
    matryoshka_dims: list[int] | None = field(default=None, metadata={
        "help": "Matryoshka training: every objective is applied to each of these leading prefixes of the "
                "embedding (e.g. 384,256,128,64; one forward, the prefixes are slices of it), so the exported "
                "embedding can be truncated to any of them; list the full width to train the whole embedding "
                "too; not set = the full embedding only",
        "flag_type": "int_list"})
    matryoshka_weights: list[float] | None = field(default=None, metadata={
        "help": "weight of each matryoshka_dims prefix's loss, in the same order (not set = 1 each)",
        "flag_type": "float_list"})
    lora_r: int = field(default=0, metadata={
        "help": "LoRA rank (peft): > 0 freezes the encoder and trains low-rank adapters; 0 = full fine-tuning",
        "rule": "size"})
    lora_alpha: float | None = field(default=None, metadata={
        "help": "LoRA alpha (adapter scale alpha / r); not set = 2 * lora_r (LLM2Vec's 32 for r = 16)",
        "rule": "positive", "needs": [("lora_r", ">", 0)]})
    lora_dropout: float = field(default=0.05, metadata={"help": "dropout on the LoRA adapters' input (LLM2Vec's)",
                                                        "rule": "fraction", "needs": [("lora_r", ">", 0)]})
    lora_target_modules: list[str] | None = field(default=None, metadata={
        "help": "module names the adapters wrap; not set = every attention and feed-forward linear layer of the "
                "architecture (BERT query key value dense; Llama q/k/v/o/gate/up/down_proj)",
                "needs": [("lora_r", ">", 0)]})

    def __post_init__(self, **kwargs):
        kwargs.pop("method", None)  # written by to_dict for readers of config.json; the class decides
        legacy = {name: kwargs.pop(name) for name in LEGACY_FIELDS if name in kwargs}
        if isinstance(self.encoder_config, Mapping):  # config.json, or a dict given by hand
            if not self.encoder_config:
                self.encoder_config = None  # configs made without an encoder (e.g. to read a method's defaults)
            elif "model_type" not in self.encoder_config:
                raise CSEError("encoder_config has no model_type; build the model with from_encoder(...).")
        super().__post_init__(**kwargs)  # builds the encoder's config object (sub_configs_defaults)
        self.objectives = normalise_objectives(self.objectives, legacy)
        if self.pooler_type is None:  # made without from_encoder (which resolves the encoder's own pooling)
            self.pooler_type = PAPERS_POOLER
        self.normalize = bool(self.normalize)
        check_pooler(self.pooler_type)
        self.check_field_rules()
        if self.projector not in PROJECTORS:
            raise CSEError(f"Unknown projector {self.projector!r}. Valid projectors: {', '.join(PROJECTORS)}.")
        if self.dropout is not None and self.encoder_config is not None and not dropout_fields(self.encoder_config):
            raise CSEError(f"dropout is set, but the {self.encoder_config.model_type!r} encoder's config has no "
                           "dropout rate it could set; leave dropout unset.")
        self._check_loading()
        self.check_pooler_on_encoder()
        check_objectives(self.objectives, self.off_dropout, loading=_LOADING.get())
        self._check_matryoshka()

    def check_field_rules(self) -> None:
        """Each field with a rule (``metadata["rule"]``; None passes: not set) keeps it; a method's own fields are
        named with the method, as the command line's early check names them (:func:`field_rule_owners`). A NumPy
        scalar is kept as the Python number it holds (:func:`~hf_cse.hyperparameter_rules.plain_number`)."""
        for name, (rule, owner) in field_rule_owners(type(self)).items():
            if getattr(self, name) is not None:
                setattr(self, name, plain_number(getattr(self, name)))
                check_rule(owner, name, getattr(self, name), rule, fields=(name,))

    def check_pooler_on_encoder(self) -> None:
        """The pooler against the encoder: a first-token one refused on a causal encoder (a method that reads a
        token of its own, PromptBERT, says so in its own words)."""
        check_first_token_pooler(self.pooler_type, self.encoder_config, self.bidirectional)

    def _check_matryoshka(self) -> None:
        """The prefixes are those of the training embedding; they must be prefixes of the embedding users get."""
        given = self.matryoshka_dims, self.matryoshka_weights
        self.matryoshka_dims, self.matryoshka_weights = check_matryoshka(*given, self.hidden_size)
        if self.matryoshka_dims and not (self.projector == "none" or applies_projector(self.test_pooler)):
            raise head_error(self.projector)
        if not _LOADING.get():  # said when a model is built to train, not each time a trained one loads
            say_reordered(*given, self.matryoshka_dims, self.matryoshka_weights)
            warn_untrained_width(self.matryoshka_dims, self.hidden_size)

    def _check_loading(self) -> None:
        """The encoder-loading fields (:mod:`hf_cse.models.loading`, :mod:`hf_cse.models.lora`)."""
        if self.encoder_dtype not in ENCODER_DTYPES:
            raise CSEError(f"unknown encoder_dtype {self.encoder_dtype!r}; choose one of "
                           f"{', '.join(ENCODER_DTYPES)}.")
        if not _LOADING.get():  # a saved model trained on a GPU still loads on a CPU (see loading.load_kwargs)
            check_attention(self.encoder_attention)
        if self.encoder_config is not None:
            check_text_encoder(self.encoder_config)
        if self.bidirectional and self.encoder_config is not None:
            if not is_decoder_only(self.encoder_config):
                raise CSEError(f"bidirectional applies to decoder (causal) encoders; "
                               f"{self.encoder_config.model_type!r} already attends in both directions. "
                               "Drop bidirectional=True.")
            check_bidirectional(self.encoder_config)
        if not self.lora_r and (self.lora_alpha is not None or self.lora_target_modules):
            raise CSEError("lora_alpha / lora_target_modules are set but lora_r is 0 (no LoRA); pass lora_r, "
                           "e.g. lora_r 16.")
        if self.lora_r:
            check_peft_installed()

    @classmethod
    def check_field_names(cls, names) -> None:
        """Refuse a keyword that is no field of this config: transformers' configs store any keyword as an
        attribute, so a misspelt field (``pooler="avg"``) would be kept and ignored."""
        known = {f.name for f in fields(cls)}
        aliases = {alias: f.name for f in fields(cls) for alias in f.metadata.get("aliases", ())}
        for name in names:
            if name in known or name in LEGACY_FIELDS or name == "method":
                continue
            hint = aliases.get(name) or closest_name(name, sorted(known))
            # a loss's hyperparameter given as a field (temperature=0.05): it belongs to an objective
            objective = ("; a loss's hyperparameters go in its objective: objectives=[{'loss': NAME, "
                         f"'hyperparameters': {{{name!r}: ...}}}}]") if not hint else ""
            raise CSEError(f"{cls.__name__} has no field {name!r}" + (f"; did you mean {hint!r}?" if hint else
                                                                       objective + "; see its fields in "
                                                                       "hf_cse.models.config."))

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any):
        """A saved configuration: a loss this process has not registered only warns (the model loads for
        inference; training it needs the loss registered)."""
        token = _LOADING.set(True)
        try:
            return super().from_dict(config_dict, **kwargs)
        finally:
            _LOADING.reset(token)

    @property
    def card_training_terms(self) -> list[str]:
        """The model card's lines for the method's own training terms beside the objectives (DiffCSE's RTD task)."""
        return []

    @property
    def dev_scoring_note(self) -> str | None:
        """What the model card says where the trainer's dev score embeds otherwise than the model ships
        (:func:`hf_cse.evaluation.dev.scoring_dev`); None: the same embedding."""
        return None

    # ----------------------------------------------------------------- fields of older configs, read-only
    @property
    def loss(self) -> str:
        """Registry name of the main contrastive loss."""
        return self.objectives[0]["loss"]

    @property
    def loss_kwargs(self) -> dict:
        """Hyperparameters given for the main contrastive loss."""
        return dict(self.objectives[0]["hyperparameters"])

    def _dcl(self) -> dict | None:
        return next((e for e in self.objectives[1:] if e["loss"] == DCL), None)

    @property
    def dcl_weight(self) -> float:
        """Weight of the dimension-wise contrastive objective (0 = none)."""
        dcl = self._dcl()
        return dcl["weight"] if dcl else 0.0

    @property
    def dcl_temperature(self) -> float:
        return dcl_defaults((self._dcl() or {}).get("hyperparameters", {}))["temperature"]

    @property
    def dcl_normalization(self) -> str:
        return dcl_defaults((self._dcl() or {}).get("hyperparameters", {}))["normalization"]

    @property
    def hidden_size(self) -> int:  # type: ignore[override]
        """The encoder's output size, under whatever name its config uses (``dim``, GPT-2's ``n_embd``...; 0 for a
        config without an encoder)."""
        return 0 if self.encoder_config is None else int(self.encoder_config.hidden_size)

    @property
    def test_pooler(self) -> str:
        """The pooler used for evaluation and export: raw [CLS] for unsup CLS models with mlp_only_train."""
        return pooler_at_test(self.pooler_type, self.mlp_only_train, self.projector)

    def build_encoder_config(self) -> PretrainedConfig:
        """A copy of the wrapped encoder's config for building the encoder, with the dropout override applied
        (``encoder_config`` itself keeps the encoder's own values)."""
        if self.encoder_config is None:
            raise CSEError("this config has no encoder_config; build the model with from_encoder(...).")
        cfg = copy.deepcopy(self.encoder_config)
        if self.dropout is not None:
            set_dropout(cfg, self.dropout)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["method"] = self.method
        return out


def field_rule_owners(config_cls: type) -> dict[str, tuple[str, str]]:
    """Each field of ``config_cls`` that has a rule: (the rule, whose field it is: the method's name for a field its
    config adds, "" for those of :class:`CSEConfig`, which every method has)."""
    return {name: (rule, "" if name in CSEConfig.__dataclass_fields__ else config_cls.method)
            for name, rule in field_rules(config_cls).items()}
