"""The base class of every method model: encoder wrapping, pooling, projector, test-time embeddings and the
off-dropout pass (:class:`CSEPreTrainedModel`); what it hands the trainer and the export is in :mod:`.outputs`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PreTrainedModel
from transformers.utils import logging as hf_logging

from ..checks import check_model_source
from ..encoders import own_max_seq_length, takes_token_type_ids
from ..errors import CSEError
from ..losses.base import HARD_NEGATIVE_INPUT, NO_DROPOUT_INPUT
from ..references import SIMCSE, Paper
from ..run_as_encoder import RunAsEncoder, is_method_model_config
from ..run_files import ADAPTER_FOLDER
from ..seams import PreTrainedModelHooks, set_no_split_modules
from ..sharding import ENGINES, shard_units
from .config import CSEConfig, check_switched_on
from .fast_dropout import install_fast_dropout
from .frozen_embeddings import freeze_embedding_layer
from .heads import build_projector, initialise
from .loading import build_encoder, load_encoder, load_kwargs, prepare_encoder
from .lora import apply_lora, check_targets_match, is_lora
from .mlm import build_mlm_head, load_mlm_head, masked_lm_loss
from .modes import eval_mode
from .outputs import CSEOutput, OwnExportModules
from .padding_free import packed_forward, unsupported_reason
from .pooling import PoolingChoice, applies_projector, describe_pooling, needs_hidden_states, pool, resolve_pooling
from .views import check_training_batch, first_view

logger = hf_logging.get_logger(__name__)


class CSEPreTrainedModel(PreTrainedModelHooks, PreTrainedModel):
    """Shared machinery: encoder wrapping, pooling, projector, test-time embeddings, off-dropout pass."""

    config_class = CSEConfig
    base_model_prefix = "cse"
    supports_gradient_checkpointing = True
    #: the modules kept fp32 whatever the encoder's dtype, also when reloaded (loading.py): the head, LoRA adapters
    fp32_modules: tuple[str, ...] = ("projector", "lora_A", "lora_B")
    # ----------------------------------------------------------------- what the method declares
    # The command line, the cached mode and the model card read these instead of the method's name; a method
    # overrides, in its own file, those that differ (CONTRIBUTING.md, "Adding a method"). ``register_method`` checks
    # that every "no" comes with its reason.

    #: the papers that define the method (:mod:`hf_cse.references`), its own first; model cards cite these
    references: tuple[Paper, ...] = ()
    #: the papers of the training pipeline the method extends; cards cite them after the losses' papers, so that
    #: the method's own papers lead (SimCSE's two-view pipeline for every method here, SimCSE itself included)
    builds_on: tuple[Paper, ...] = (SIMCSE,)
    #: whether the method trains on (anchor, positive[, hard negative]) rows (``pair_column``, supervised SimCSE's
    #: layout, through :meth:`pair_collator`) as well as on plain sentences
    takes_pair_rows: bool = True
    #: why not, when ``takes_pair_rows`` is False: a clause of the one-line refusal
    why_no_pair_rows: str = ""
    #: whether a batch's rows can be split into mini-batches with the same gradient (the cached mode,
    #: ``cached_minibatch_size``): false when the forward computes a term over the whole batch itself
    splits_into_minibatches: bool = True
    #: why not, when ``splits_into_minibatches`` is False: a clause of the one-line refusal
    why_no_minibatch_split: str = ""
    #: whether the method trains from a stream of unknown length (``streaming``)
    streams: bool = True
    #: why not, when ``streams`` is False: a clause of the one-line refusal
    why_no_streaming: str = ""
    #: whether the training forward can be captured as a CUDA graph (:mod:`hf_cse.cuda_graphs`): no host read of a
    #: device value, no shape that depends on the data
    captures_in_cuda_graph: bool = True
    #: why not, when ``captures_in_cuda_graph`` is False: the reason the run's log line gives
    why_no_cuda_graph: str = ""
    #: the sharding engines the method trains under as its plain run (:data:`hf_cse.sharding.ENGINES`;
    #: tests/trainer/test_sharded_engines.py runs each method under each one)
    shards_under: tuple[str, ...] = ENGINES
    #: why not under the others: a clause of the one-line refusal
    why_no_sharding: str = ""
    #: the collator class whose batches the training forward needs (DiffCSE's edited copies; None: any of hf_cse's);
    #: another of hf_cse's as ``data_collator`` is refused (:func:`hf_cse.data_checks.check_own_collator`)
    needs_collator: type | None = None
    #: how the views of a plain sentence are made, in words, for the model card ("... are encoded in one forward
    #: pass; the other sentences of the batch are the negatives")
    training_views: str = "Two dropout views of every sentence"
    #: whether a plain sentence's views differ only by dropout (then refused on an encoder without: encoder_dropout.py)
    views_differ_by_dropout: bool = True
    #: the parts that exist only in training and are never exported, in words, for the model card ("RTD
    #: discriminator"); the export keeps the encoder (and the projector where its pooling applies it) only
    training_only_parts: tuple[str, ...] = ("projection head",)
    #: set while the trainer scores dev (:func:`hf_cse.evaluation.dev.scoring_dev`): PromptBERT's authors did so apart
    scoring_dev: bool = False

    @classmethod
    def method_name(cls) -> str:
        """The method's name: its key in :data:`hf_cse.models.METHODS`, its config's ``method``."""
        return cls.config_class.method

    @classmethod
    def check_before_loading(cls, config: CSEConfig) -> None:
        """Checks of the method's own settings that need no weights and no data (e.g. that a model it names can
        load), run by the command line before anything is loaded; raise
        :class:`hf_cse.checks.InputError` with one line naming the flag and the fix. Nothing by default."""

    @classmethod
    def own_representation(cls, config: CSEConfig | dict | None = None) -> str:
        """What a model of ``config`` (a config, or its fields) embeds where that is not the pooler's output, in
        words for the log and the results; "" (the default): the pooler's."""
        return ""

    @classmethod
    def pooling_when_unset(cls, choice: PoolingChoice, encoder_config) -> PoolingChoice:
        """The pooling where no pooler_type is given: ``choice`` (the encoder's own, else the papers'), or the
        method's where it reads a token of its own (PromptBERT). The one rule for from_encoder and the command line."""
        return choice

    @classmethod
    def check_with_tokenizer(cls, config: CSEConfig, tokenizer, encoder_config) -> None:
        """Checks of the method's settings that need the tokenizer but no weights (PromptBERT's templates), run by
        the command line once the tokenizer is loaded, before the model; one-line CSEError. Nothing by default."""

    @classmethod
    def check_run_batches(cls, config: CSEConfig, global_batch: int, train_rows: int | None) -> None:
        """The method's settings against the run's global batch and training rows (None: a stream), run by the
        command line before the model is built and by the trainer (ESimCSE's queue); one-line CSEError."""

    def prepare_for_training(self, tokenizer, train_dataset, trust_remote_code: bool = False) -> None:
        """What the method needs once the model is built and the data tokenized, before the first step (DiffCSE
        attaches its generator). ``train_dataset``: the tokenized training rows (an iterable one with
        ``streaming``). Nothing by default."""

    def training_epoch_begins(self) -> None:
        """Called by the trainer before each epoch's first batch (not when a run resumes inside an epoch: its
        checkpoint holds the state that epoch had reached). ESimCSE empties its queue. Nothing by default."""

    def training_row_limit(self, encoder_limit: int | None) -> tuple[int | None, str]:
        """The longest tokenized training row the method can train on, and how messages name it ("": as the
        encoder's position limit, :class:`hf_cse.data_checks.EncoderLimits`): ``encoder_limit`` by default
        (DiffCSE's insert edits lengthen rows)."""
        return encoder_limit, ""

    def sentence_transformers_modules(self, max_seq_length: int) -> OwnExportModules | None:
        """The export's own modules where the test embedding is no sentence-transformers ``Pooling`` of the encoder's
        tokens (PromptBERT's template); None (the default): ``Transformer`` + ``Pooling`` by the test pooler."""
        return None

    def __init__(self, config: CSEConfig, encoder: PreTrainedModel | None = None):
        """``encoder``: a loaded encoder to wrap (:meth:`from_encoder`); None builds a fresh one from the config
        (``from_pretrained`` then loads the saved weights into it)."""
        super().__init__(config)
        self.encoder = build_encoder(config) if encoder is None else prepare_encoder(encoder, config)
        self.projector = build_projector(config.projector, config.hidden_size)
        # SimCSE's auxiliary MLM head (hf_cse.models.mlm); from_encoder loads the checkpoint's pretrained one
        self.lm_head = build_mlm_head(config.build_encoder_config()) if config.do_mlm else None
        self.post_init()  # initialises the new modules only: the loaded encoder is flagged initialised
        if config.lora_r:  # after post_init, which must not redraw the adapters (lora.apply_lora flags them)
            self.encoder = apply_lora(self.encoder, config)
            if config.fast_dropout:
                install_fast_dropout(self.encoder)  # the adapters' own dropout
        if config.freeze_embeddings:  # after LoRA, so that adapters on the embedding layer are frozen too
            freeze_embedding_layer(self.encoder, config.encoder_config.model_type)

    def post_init(self):
        super().post_init()  # collects the encoders' shard units
        set_no_split_modules(self, shard_units(self))

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_encoder(cls, name_or_path: str, trust_remote_code: bool = False,
                     **config_kwargs: Any) -> "CSEPreTrainedModel":
        """Build a fresh method model around a plain pretrained encoder (local folder or Hub id).

        ``config_kwargs`` are fields of the method's config (pooler_type, projector, objectives...; the older
        loss, loss_kwargs, dcl_* are accepted too). Sentence-transformers folders work too: their transformer
        weights sit at the top level, and their own pooling (and Normalize) is the default when ``pooler_type`` /
        ``normalize`` are not given (:func:`hf_cse.models.pooling.resolve_pooling`; one log line says which).
        ``trust_remote_code``: allow an encoder whose code ships with its checkpoint
        (transformers' flag, off by default); its classes are then registered with ``AutoConfig``/``AutoModel``
        for this process.
        """
        remote = {"trust_remote_code": True} if trust_remote_code else {}
        cls.config_class.check_field_names(config_kwargs)  # before anything is read
        # a missing folder, a file, the Hub out of reach: one line now, not a minute of retries and transformers' error
        check_model_source(name_or_path, flag="encoder")
        enc_config = AutoConfig.from_pretrained(name_or_path, **remote)
        if isinstance(enc_config, CSEConfig) or is_method_model_config(enc_config):  # a run's model
            raise RunAsEncoder.of(str(name_or_path), enc_config.model_type).from_encoder_error(cls.__name__)
        if config_kwargs.get("pooler_source") is None:  # run_unsup.py resolves it before any weights load
            choice = resolve_pooling(str(name_or_path), config_kwargs.get("pooler_type"),
                                     config_kwargs.get("normalize"), given_by="the caller",
                                     normalize_given_by="the caller")
            if config_kwargs.get("pooler_type") is None:
                choice = cls.pooling_when_unset(choice, enc_config)
            config_kwargs = {**config_kwargs, **choice.config_fields()}
            logger.info("pooling: %s", describe_pooling(choice, cls.own_representation(config_kwargs)))
        if trust_remote_code:
            AutoConfig.register(enc_config.model_type, type(enc_config), exist_ok=True)
        # the config checks its objectives with the loss registry: a bad loss or value fails here, before any weights
        config = cls.config_class(encoder_config=enc_config, **config_kwargs)
        check_switched_on(config_kwargs, config)
        if config.lora_r:  # peft's own refusal would come after the weights load, in its words
            check_targets_match(config)
        encoder = load_encoder(name_or_path, config.build_encoder_config(), **load_kwargs(config), **remote)
        if config.encoder_dtype != "fp32" and not config.lora_r:
            logger.warning("encoder_dtype %s without LoRA: the encoder's weights and their AdamW states train in %s "
                           "(updates below its resolution are lost); LoRA (lora_r > 0) trains fp32 adapters instead.",
                           config.encoder_dtype, config.encoder_dtype)
        if trust_remote_code:  # so that build_encoder (from_pretrained, DiffCSE's discriminator) finds the class
            AutoModel.register(type(enc_config), type(encoder), exist_ok=True)
        head = load_mlm_head(name_or_path, config.build_encoder_config(), **remote) if config.do_mlm else None
        # a local folder absolute: a relative path read from another folder would pass for a Hub id
        config.base_encoder_local = Path(str(name_or_path)).expanduser().is_dir()
        config.base_encoder = (str(Path(str(name_or_path)).expanduser().resolve()) if config.base_encoder_local
                               else str(name_or_path))
        encoder.config.name_or_path = config.base_encoder
        config.encoder_max_seq_length = own_max_seq_length(str(name_or_path))
        model = cls(config, encoder=encoder.train())  # a fresh model trains: from_pretrained left it in eval mode
        if head is not None:
            model.lm_head.load_state_dict(head.state_dict())
        return model

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' loading of a saved hf_cse model; a local folder of a plain encoder is refused naming
        :meth:`from_encoder` (transformers would dump its config and fail inside with an ``AttributeError``)."""
        import json
        from pathlib import Path

        config_file = Path(str(pretrained_model_name_or_path)).expanduser() / "config.json"
        try:
            saved = json.loads(config_file.read_text(encoding="utf-8"))
            model_type, saved_method = str(saved.get("model_type", "")), saved.get("method")
        except (OSError, ValueError, AttributeError):  # a Hub id, or no readable config: transformers says why
            model_type, saved_method = "hf_cse", None
        mine = None if cls.config_class is CSEConfig else cls.config_class.method  # the base class loads any
        if saved_method and mine and saved_method != mine:  # the method's own parts would be drawn at random
            raise CSEError(f"{pretrained_model_name_or_path} holds a {saved_method} model, not a {mine} one: load it "
                           f"with its method's class, or with transformers' AutoModel after import hf_cse.models.")
        if not model_type.startswith("hf_cse"):
            raise CSEError(f"{pretrained_model_name_or_path} holds a plain {model_type or 'encoder'} model, not an "
                           f"hf_cse one: build a method model around it with {cls.__name__}.from_encoder("
                           f"{str(pretrained_model_name_or_path)!r}).")
        loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # (model, loading info) on request
        if model.config.freeze_embeddings:  # transformers' loading may put new parameters in place of the frozen ones
            freeze_embedding_layer(model.encoder, model.config.encoder_config.model_type)
        return loaded

    def init_new_module(self, module: nn.Module) -> None:
        """Draw a new module's weights (the heads, a weight missing from a checkpoint; transformers asks through
        :class:`hf_cse.seams.PreTrainedModelHooks`): as the encoder's own init, or the head's own
        (:func:`.heads.initialise`)."""
        initialise(module, float(getattr(self.config.encoder_config, "initializer_range", 0.02)))

    @classmethod
    def collator(cls, tokenizer, config: CSEConfig):
        """The data collator this method trains with (two views of each sentence)."""
        from ..data import TwoViewCollator
        from ..masking import with_masked_lm

        return with_masked_lm(TwoViewCollator(tokenizer), tokenizer, config)

    @classmethod
    def pair_collator(cls, tokenizer, config: CSEConfig):
        """The data collator of (anchor, positive[, hard negative]) rows (``pair_column``), for a method that
        ``takes_pair_rows``: the row's texts are its views."""
        from ..data import PairCollator
        from ..masking import with_masked_lm

        return with_masked_lm(PairCollator(tokenizer), tokenizer, config)

    def save_pretrained(self, save_directory, *args, **kwargs) -> None:
        """As transformers'; a LoRA model also writes its adapter alone in peft's format in ``adapter/``."""
        state_dict = kwargs.get("state_dict")  # FSDP / DeepSpeed's, emptied by transformers as it writes shards
        if state_dict is not None:
            state_dict = {k[len("encoder."):]: v for k, v in state_dict.items() if k.startswith("encoder.")}
        super().save_pretrained(save_directory, *args, **kwargs)
        if is_lora(self.encoder) and kwargs.get("is_main_process", True):
            self.encoder.save_pretrained(Path(save_directory) / ADAPTER_FOLDER, state_dict=state_dict)

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.get_input_embeddings()

    def transformer_encoders(self) -> list[PreTrainedModel]:
        """Every transformers encoder this method trains (DiffCSE adds its discriminator)."""
        return [self.encoder]

    def enable_activation_checkpointing(self) -> None:
        """Activation (gradient) checkpointing inside every encoder; the wrapper itself has no layers to
        checkpoint. Under the name the installed transformers has (5: ``activation_checkpointing_enable``)."""
        for encoder in self.transformer_encoders():
            enable = getattr(encoder, "activation_checkpointing_enable", None) or encoder.gradient_checkpointing_enable
            enable()

    # ----------------------------------------------------------------- embeddings
    def runs_padding_free(self, device_type: str = "cpu") -> bool:
        """Whether the embeddings' forward on ``device_type`` packs the real tokens (:mod:`.padding_free`): asked
        for, an encoder it was checked on, on CPU, and not inside ``torch.compile`` (a packed length that changes
        every batch recompiles)."""
        return (self.config.padding_free and not torch.compiler.is_compiling()
                and unsupported_reason(self.encoder, device_type) is None)

    def _encode(self, input_ids, attention_mask, token_type_ids=None, pooler: str | None = None, encoder=None):
        """Pooled vectors of ``encoder`` (default: the trained one; ESimCSE passes its momentum encoder)."""
        pooler = pooler or self.config.pooler_type
        encoder = self.encoder if encoder is None else encoder
        if self.runs_padding_free(input_ids.device.type):
            out = packed_forward(encoder, input_ids, attention_mask, token_type_ids, needs_hidden_states(pooler))
        else:
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None and takes_token_type_ids(encoder.config):
                kwargs["token_type_ids"] = token_type_ids
            out = encoder(**kwargs, output_hidden_states=needs_hidden_states(pooler), return_dict=True)
        pooled = pool(pooler, attention_mask, out.last_hidden_state, out.hidden_states)
        # bf16/fp16 weights: the head and the losses take fp32 (hf_cse.models.loading)
        return pooled if self.config.encoder_dtype == "fp32" else pooled.float()

    def test_text_edit(self) -> Callable[[str], str] | None:
        """How the method's test-time embedding edits a sentence's text before it is tokenized, or None: no edit (the
        default; PromptBERT ends a sentence with a period, as its authors' evaluation, except while the trainer scores
        dev). Applied wherever hf_cse tokenizes text for it (SentenceEncoder: run_eval, dev scoring; the export and
        its check); :meth:`sentence_embedding` takes token ids as they are."""
        return None

    def sentence_embedding(self, input_ids, attention_mask, token_type_ids=None, pooler: str | None = None,
                           projector: bool | None = None):
        """Test-time embeddings ``(B, H)``. ``pooler=None`` uses ``config.test_pooler``; whether the trained
        projector is applied is :func:`hf_cse.models.pooling.applies_projector`'s rule (``"cls"`` only) unless
        ``projector`` says (the export's kept head); with ``config.normalize`` they are then L2-normalised (the
        encoder's sentence-transformers Normalize)."""
        pooler = pooler or self.config.test_pooler
        emb = self._encode(input_ids, attention_mask, token_type_ids, pooler)
        if applies_projector(pooler) if projector is None else projector:
            emb = self.projected(emb)
        return nn.functional.normalize(emb, dim=-1) if self.config.normalize else emb

    def two_view_embeddings(self, input_ids, attention_mask, token_type_ids=None):
        """Every view from ONE flattened forward of ``N * views`` rows, as in SimCSE: two dropout views of
        a sentence, or (pair / triplet data, :class:`hf_cse.data.PairCollator`) anchor, positive[, negative].

        Returns ``(cls, z)`` with ``cls`` the pooled vectors ``(N, views, H)`` and ``z`` their projections.
        """
        check_training_batch(input_ids, "hf_cse.data.TwoViewCollator", self.training)
        n, views, length = input_ids.shape
        flat = lambda t: None if t is None else t.reshape(n * views, length)  # noqa: E731
        pooled = self._encode(flat(input_ids), flat(attention_mask), flat(token_type_ids))
        return pooled.view(n, views, -1), self.projected(pooled).view(n, views, -1)

    def no_dropout_embeddings(self, input_ids, attention_mask, token_type_ids=None):
        """ImSimCSE's third pass: the un-duplicated batch with dropout off, through the projector."""
        with eval_mode(self.encoder), torch.set_grad_enabled(self.config.off_dropout_grad and torch.is_grad_enabled()):
            return self.projected(self._encode(input_ids, attention_mask, token_type_ids))

    def projected(self, pooled: torch.Tensor) -> torch.Tensor:
        """Pooled vectors through the projection head, where the model has one."""
        return pooled if self.projector is None else self.projector(pooled)

    # ----------------------------------------------------------------- training forward
    def masked_lm_term(self, input_ids, attention_mask, token_type_ids, mlm_input_ids, mlm_labels) -> torch.Tensor:
        """SimCSE's weighted MLM term (:mod:`hf_cse.models.mlm`): the masked copy of every row through the encoder
        with the rows' attention mask, the MLM head's cross-entropy at the masked positions, times mlm_weight."""
        length = input_ids.shape[-1]
        flat = lambda t: None if t is None else t.reshape(-1, length)  # noqa: E731
        kwargs = {"input_ids": flat(mlm_input_ids), "attention_mask": flat(attention_mask)}
        if token_type_ids is not None and takes_token_type_ids(self.encoder.config):
            kwargs["token_type_ids"] = flat(token_type_ids)
        hidden = self.encoder(**kwargs, return_dict=True).last_hidden_state
        return self.config.mlm_weight * masked_lm_loss(self.lm_head, hidden, flat(mlm_labels))

    def forward(self, input_ids, attention_mask, token_type_ids=None, mlm_input_ids=None, mlm_labels=None,
                **kwargs) -> CSEOutput:
        unused = set(kwargs) - {"return_dict", "num_items_in_batch"}
        if unused:
            raise CSEError(f"{type(self).__name__}.forward got unexpected inputs {sorted(unused)}.")
        if input_ids.dim() == 3 and input_ids.shape[1] not in (2, 3):
            raise CSEError(f"training batches hold 2 views (two dropout views, or anchor and positive) or 3 "
                           f"(anchor, positive, hard negative); got {input_ids.shape[1]}.")
        _, z = self.two_view_embeddings(input_ids, attention_mask, token_type_ids)
        embeddings = {"z1": z[:, 0], "z2": z[:, 1]}
        if z.shape[1] == 3:  # triplets: the hard negatives (supervised SimCSE)
            embeddings[HARD_NEGATIVE_INPUT] = z[:, 2]
        metrics: dict[str, float] = {}
        if self.config.off_dropout:
            timed = not torch.compiler.is_compiling()  # a clock read inside a compiled graph is a graph break
            start = time.perf_counter() if timed else 0.0
            embeddings[NO_DROPOUT_INPUT] = self.no_dropout_embeddings(*first_view(input_ids, attention_mask,
                                                                                  token_type_ids))
            if timed:
                metrics["off_dropout_seconds"] = time.perf_counter() - start
        aux: dict[str, torch.Tensor] = {}
        if self.lm_head is not None and (mlm_input_ids is not None or self.training):
            if mlm_input_ids is None or mlm_labels is None:
                raise CSEError("do_mlm: training batches need mlm_input_ids and mlm_labels; collate with "
                               "hf_cse.masking.MaskedLMCollator (the method's collator does).")
            aux["mlm_loss"] = self.masked_lm_term(input_ids, attention_mask, token_type_ids, mlm_input_ids,
                                                  mlm_labels)
        return CSEOutput(embeddings=embeddings, aux_losses=aux, metrics=metrics)
