"""DiffCSE (Chuang et al., NAACL 2022): contrastive learning + conditional ELECTRA (DiffCSE, Sec. 3).

    L = L_contrast + lambda * L_RTD

* L_contrast: any registry loss on the two dropout views, computed by the trainer exactly as for SimCSE
  (this model reuses :meth:`CSEPreTrainedModel.forward`, so off-dropout / DCL / Focal switches keep working).
* L_RTD: a frozen generator G fills a randomly edited copy x' of each of the 2B rows (x'' = G(x')); the
  discriminator D (a second encoder, initialised from the encoder's checkpoint) predicts for every token of
  x'' whether it was replaced, conditioned on the sentence vector h of the same row: h REPLACES D's
  position-0 embedding output (after word/position embeddings and LayerNorm, before layer 1; a forward hook on
  ``discriminator.embeddings``, the modern form of the authors' patched ``cls_input``). h is the projector
  output -- the tensor the contrastive loss sees (BatchNorm projector of App. A by default) -- so the RTD
  gradient reaches the encoder f only through h. At test time only f is used (``model.encoder`` +
  ``config.test_pooler`` = raw [CLS]).

L_RTD is computed per process: it is a per-token classification with no negatives, so the local mean is the
right estimate and DDP's gradient averaging combines processes (only the contrastive embeddings are gathered).

Generators (:mod:`.generators`) are attached with :meth:`DiffCSEModel.attach_generator` after the
model is built; they are never parameters of the model and never saved with it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from ...checks import check_model_source
from ...encoders import encoder_max_length
from ...errors import CSEError
from ...references import DIFFCSE, SIMCSE
from ..base import CSEPreTrainedModel
from ..heads import TorchInitLinear
from ..loading import build_encoder
from ..lora import base_state_dict
from ..outputs import CSEOutput
from .config import DiffCSEConfig
from .edits import DiffCSECollator
from .generators import UNIGRAM, Generator, GeneratorError, load_generator

logger = logging.getLogger(__name__)


@dataclass
class RTDOutput:
    """The discriminator's result on one batch (all tensors over the flattened 2B rows)."""

    loss: torch.Tensor  # unweighted L_RTD
    logits: torch.Tensor  # (2B, L', 2)
    labels: torch.Tensor  # (2B, L'), 1 = replaced
    attention_mask: torch.Tensor  # (2B, L')
    metrics: dict[str, float]


class DiffCSEModel(CSEPreTrainedModel):
    """DiffCSE: encoder + projector (contrastive views) + conditional discriminator + RTD head.

    Example::

        model = DiffCSEModel.from_encoder("bert-base-uncased", loss_kwargs={"temperature": 0.05})
        model.attach_generator("distilbert-base-uncased", tokenizer)   # or "unigram" (no weights)
        trainer = ContrastiveTrainer(model=model, data_collator=DiffCSEModel.collator(tokenizer, model.config), ...)
    """

    references = (DIFFCSE, SIMCSE)  # the method's paper first (hf_cse.references)
    takes_pair_rows = False
    why_no_pair_rows = "its second view is an edit of the same sentence"
    splits_into_minibatches = False
    # (its default BatchNorm projector says no for itself: hf_cse.models.heads.BatchNormProjector)
    why_no_minibatch_split = "its RTD loss is computed inside the forward on each mini-batch"
    streams = False
    why_no_streaming = ("no DiffCSE generator is supported on a stream; the default one, unigram replacements, "
                        "counts the whole corpus")
    captures_in_cuda_graph = False
    why_no_cuda_graph = ("DiffCSE's generator and discriminator step has not been checked under CUDA graph capture "
                         "yet; it trains eagerly")
    # measured through tests/sharded_on_cpu.py: ZeRO-3 logged other losses from the first step
    shards_under = ("FSDP", "ZeRO-2")
    why_no_sharding = "its hook-conditioned discriminator trained another curve under ZeRO-3 from the first step"
    training_only_parts = ("projection head", "RTD discriminator", "generator")
    needs_collator = DiffCSECollator  # the edited copies (mlm_input_ids) the RTD loss reads

    config_class = DiffCSEConfig
    fp32_modules = (*CSEPreTrainedModel.fp32_modules, "rtd_head")

    def __init__(self, config: DiffCSEConfig, encoder: PreTrainedModel | None = None):
        super().__init__(config, encoder)
        self.discriminator = build_encoder(config)
        # ELECTRA head: replaced vs original; PyTorch's initialisation, as the authors' (made after loading)
        self.rtd_head = TorchInitLinear(config.hidden_size, 2)
        if not hasattr(self.discriminator, "embeddings"):
            raise CSEError(f"DiffCSE needs a discriminator with an `embeddings` module to condition on h; "
                           f"{type(self.discriminator).__name__} has none.")
        self._generator: Generator | None = None  # plain attribute: not a parameter, not saved
        self._rtd_condition: torch.Tensor | None = None
        self.discriminator.embeddings.register_forward_hook(self._condition_on_h)
        self.post_init()  # initialises only the new modules (the others are flagged initialised)

    @classmethod
    def from_encoder(cls, name_or_path: str, trust_remote_code: bool = False,
                     **config_kwargs: Any) -> "DiffCSEModel":
        """As :meth:`CSEPreTrainedModel.from_encoder`; the discriminator starts from the same checkpoint
        (``discriminator_init="encoder"``, the paper) or stays randomly initialised (``"random"``)."""
        model = super().from_encoder(name_or_path, trust_remote_code=trust_remote_code, **config_kwargs)
        if model.config.discriminator_init == "encoder":
            missing, unexpected = model.discriminator.load_state_dict(base_state_dict(model.encoder), strict=False)
            if unexpected or [k for k in missing if "pooler" not in k]:
                raise RuntimeError(f"discriminator weights did not match: missing {missing}, unexpected {unexpected}")
        return model

    def transformer_encoders(self) -> list[PreTrainedModel]:
        return [self.encoder, self.discriminator]

    @classmethod
    def collator(cls, tokenizer, config: DiffCSEConfig):
        """Two views plus an edited copy of every row (:class:`.edits.DiffCSECollator`)."""
        return DiffCSECollator(tokenizer, masking_ratio=config.masking_ratio, edit_operation=config.edit_operation)

    # ----------------------------------------------------------------- before training
    @classmethod
    def check_before_loading(cls, config: DiffCSEConfig) -> None:
        """A named masked-LM generator must be loadable (a folder with its config, or a Hub id the cache holds
        when offline): it is loaded only after the encoder and the data."""
        if config.generator_name_or_path not in (None, UNIGRAM):
            check_model_source(config.generator_name_or_path, "generator_name_or_path")

    def prepare_for_training(self, tokenizer, train_dataset, trust_remote_code: bool = False) -> None:
        """Attach the frozen generator (never part of the model): the config's, or unigram replacements counted
        on ``train_dataset`` when none is named -- with a warning, as that departs from the paper. A generator
        attached already (by :meth:`attach_generator`) is kept."""
        if self._generator is not None:
            return
        name = self.config.generator_name_or_path
        if name is None or name == UNIGRAM:
            logger.warning(
                "DiffCSE generator: UNIGRAM replacements drawn from the training corpus (no masked-LM weights). This "
                "DEPARTS FROM THE PAPER, which fills masks with a frozen masked LM: pass generator_name_or_path "
                "distilbert-base-uncased (BERT vocab) / distilroberta-base (RoBERTa) or a local masked-LM folder."
            )
            self.attach_generator(UNIGRAM, tokenizer, train_token_ids=train_dataset["input_ids"])
        else:
            self.attach_generator(name, tokenizer, trust_remote_code=trust_remote_code)
        logger.info("DiffCSE generator: %r (frozen, not saved with the model)", self.generator)

    # ----------------------------------------------------------------- generator
    @property
    def generator(self) -> Generator | None:
        """The attached (frozen, unsaved) generator, or None."""
        return self._generator

    def attach_generator(self, generator=None, tokenizer=None, train_token_ids=None,
                         trust_remote_code: bool = False) -> Generator:
        """Load (or take) the generator and keep it outside the model's parameters and checkpoints.

        ``generator``: ``"unigram"``, a masked-LM folder / Hub id, an ``AutoModelForMaskedLM`` module, or a ready
        generator object with ``fill``; None = ``config.generator_name_or_path``. ``tokenizer``: the encoder's
        tokenizer (loaded from ``config.base_encoder`` when omitted). ``train_token_ids``: token-id sequences of the
        training set for the unigram counts (uniform over the vocabulary when omitted). ``trust_remote_code``: allow
        a masked LM whose code ships with its checkpoint (off by default).
        """
        generator = generator if generator is not None else self.config.generator_name_or_path
        if generator is None:
            raise GeneratorError(
                "no generator given: call model.attach_generator('distilbert-base-uncased', tokenizer) (the paper's, "
                "for BERT-uncased vocabularies), a local masked-LM folder, or 'unigram' (no weights)."
            )
        if hasattr(generator, "fill"):
            gen = generator
            if getattr(gen, "vocab_size", self.encoder.config.vocab_size) != self.encoder.config.vocab_size:
                raise GeneratorError(f"generator vocabulary ({gen.vocab_size}) differs from the encoder's "
                                     f"({self.encoder.config.vocab_size}).")
        else:
            tokenizer = tokenizer or self._encoder_tokenizer()
            cfg = self.config
            gen = load_generator(generator, tokenizer, encoder_vocab_size=self.encoder.config.vocab_size,
                                 train_token_ids=train_token_ids, sampling=cfg.generator_sampling,
                                 train_mode=cfg.generator_train_mode, fill=cfg.generator_fill,
                                 trust_remote_code=trust_remote_code)
        self._generator = gen
        name = generator if isinstance(generator, str) else getattr(gen, "name", None)
        if name is not None:
            self.config.generator_name_or_path = str(name)
        return gen

    def _encoder_tokenizer(self):
        from transformers import AutoTokenizer

        from ...tokenizer_match import check_not_stand_in

        try:
            tokenizer = AutoTokenizer.from_pretrained(self.config.base_encoder)
        except (OSError, TypeError, ValueError) as err:
            raise GeneratorError(f"attach_generator needs the encoder's tokenizer and could not load it from "
                                 f"{self.config.base_encoder!r} ({err}); pass tokenizer=...") from err
        check_not_stand_in(tokenizer, self.config.base_encoder, "pass the encoder's tokenizer to "
                           "attach_generator(generator, tokenizer)", GeneratorError)
        return tokenizer

    # ----------------------------------------------------------------- RTD
    def _condition_on_h(self, module, args, output):
        """Forward hook on ``discriminator.embeddings``: position 0 of its output becomes h (DiffCSE, Sec. 3)."""
        h = self._rtd_condition
        if h is None:  # the discriminator used on its own
            return None
        if h.shape[0] != output.shape[0]:
            raise CSEError(f"DiffCSE: {h.shape[0]} condition vectors for {output.shape[0]} discriminator rows.")
        return torch.cat([h.to(output.dtype).unsqueeze(1), output[:, 1:]], dim=1)

    def rtd_batch(self, input_ids, attention_mask, mlm_input_ids, mlm_attention_mask=None, rtd_labels=None):
        """Discriminator inputs ``(ids, attention_mask, labels)`` over the flattened rows, from the collator's edit.

        replace: x'' = G(x'), position 0 keeps the original id; label = [x''_t != x_t] on real tokens (0 at [CLS]
        and padding). insert: G fills the inserted [MASK]s; labels from the collator. delete: the edited ids as they
        are; labels from the collator.

        Padding (:meth:`discriminator_ids`) gets id 0, as the authors' ``e_inputs = g_pred * attention_mask``: the
        discriminator's hidden states there, which L_RTD averages with label 0 unless ``rtd_ignore_pad``, are theirs.
        Only an encoder whose pad id is not 0 sees the difference: RoBERTa (pad id 1; id 0 is ``<s>``, which its
        position numbering counts as a token). With ``rtd_ignore_pad`` the pad id is kept: padding is then out of
        the loss, and no real token attends to it, so L_RTD is the same either way.
        """
        op = self.config.edit_operation
        flat = lambda t: t.reshape(-1, t.shape[-1])  # noqa: E731
        if op != "delete" and self._generator is None:
            raise GeneratorError(
                f"DiffCSE ({op!r} edits) needs a generator in training: call model.attach_generator(...) after "
                "building or loading the model (generators are never saved in checkpoints)."
            )
        if op == "replace":
            if mlm_input_ids.shape != input_ids.shape:
                raise CSEError(f"replace edits keep the length: mlm_input_ids {tuple(mlm_input_ids.shape)} vs "
                               f"input_ids {tuple(input_ids.shape)}.")
            ids, att = flat(input_ids), flat(attention_mask)
            filled = self._generator.fill(flat(mlm_input_ids), att)
            real = att.bool().clone()
            real[:, 0] = False  # position 0 carries h, never "replaced" (authors: g_pred[:, 0] = [CLS])
            filled = torch.where(real, filled, ids)
            return self.discriminator_ids(filled, att), att, (filled != ids).long()
        if mlm_attention_mask is None or rtd_labels is None:
            raise CSEError(f"{op!r} edits need mlm_attention_mask and rtd_labels from DiffCSEModel.collator.")
        ids, att, labels = flat(mlm_input_ids), flat(mlm_attention_mask), flat(rtd_labels).long()
        if op == "insert":
            ids = torch.where(labels.bool(), self._generator.fill(ids, att), ids)
        return self.discriminator_ids(ids, att), att, labels

    def discriminator_ids(self, ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """``ids`` with 0 at padding (the authors' ``g_pred * attention_mask``), or as they are with
        ``rtd_ignore_pad`` (padding out of L_RTD: see :meth:`rtd_batch`)."""
        return ids if self.config.rtd_ignore_pad else ids.masked_fill(att == 0, 0)

    def training_row_limit(self, encoder_limit: int | None) -> tuple[int | None, str]:
        """Insert edits add ``round(masking_ratio * n)`` [MASK]s to a row of n ordinary tokens (and 2 special ones):
        the longest row whose edited copy fits the discriminator's positions."""
        positions = encoder_max_length(self.discriminator.config)
        if self.config.edit_operation != "insert" or positions is None:
            return super().training_row_limit(encoder_limit)
        longest = min(positions, encoder_limit or positions)
        while longest > 1 and longest + round(self.config.masking_ratio * max(longest - 2, 0)) > positions:
            longest -= 1
        return longest, (f"the {longest} that DiffCSE's insert edits (masking_ratio {self.config.masking_ratio:g}) "
                         f"keep within the discriminator's {positions} positions")

    def rtd_forward(self, h: torch.Tensor, ids: torch.Tensor, att: torch.Tensor, labels: torch.Tensor) -> RTDOutput:
        """The conditional discriminator on ``ids (2B, L')`` with ``h (2B, H)`` at position 0, and L_RTD."""
        max_len = encoder_max_length(self.discriminator.config)
        if max_len is not None and ids.shape[-1] > max_len:  # insert edits lengthen the rows
            raise CSEError(f"DiffCSE: edited rows of length {ids.shape[-1]} exceed the discriminator's "
                           f"{max_len} positions; lower max_seq_length or masking_ratio.")
        self._rtd_condition = h
        try:
            hidden = self.discriminator(input_ids=ids, attention_mask=att, return_dict=True).last_hidden_state
        finally:
            self._rtd_condition = None
        logits = self.rtd_head(hidden.to(self.rtd_head.weight.dtype))  # bf16/fp16 discriminator weights
        ce = F.cross_entropy(logits.reshape(-1, 2).float(), labels.reshape(-1), reduction="none")
        # a 0/1 weight instead of boolean indexing, whose data-dependent shape would sync a GPU every step
        keep = att.reshape(-1).to(ce.dtype) if self.config.rtd_ignore_pad else torch.ones_like(ce)
        loss = (ce * keep).sum()
        if self.config.rtd_reduction == "mean":
            loss = loss / keep.sum()
        return RTDOutput(loss, logits, labels, att, self._rtd_metrics(loss, logits, labels, att))

    @staticmethod
    @torch.no_grad()
    def _rtd_metrics(loss, logits, labels, att) -> dict[str, torch.Tensor]:
        # masked means, not boolean indexing or .any(): those read the device on the host (hf_cse.metrics)
        real = att.bool().clone()
        real[:, 0] = False  # h's slot is not a token
        replaced = (labels.bool() & real).float()
        real = real.float()
        pred = logits.argmax(-1)
        return {"rtd_loss": loss.detach(),
                # NaN (left out of the logged mean) when undefined: no real token / none replaced
                "rtd_accuracy": ((pred == labels).float() * real).sum() / real.sum(),
                "rtd_replaced_share": replaced.sum() / real.sum().clamp_min(1),
                # recall on replaced tokens (authors' electra_rep_acc)
                "rtd_replaced_accuracy": ((pred == 1).float() * replaced).sum() / replaced.sum()}

    # ----------------------------------------------------------------- training forward
    def forward(self, input_ids, attention_mask, token_type_ids=None, mlm_input_ids=None, mlm_attention_mask=None,
                rtd_labels=None, **kwargs) -> CSEOutput:
        """Base two-view forward (+ off-dropout) plus ``aux_losses["rtd_loss"] = lambda * L_RTD``.

        Metrics: ``rtd_loss`` (unweighted; it overrides the trainer's weighted value of the same name in the
        logs), ``rtd_accuracy`` (all real tokens), ``rtd_replaced_accuracy``, ``rtd_replaced_share``.
        """
        out = super().forward(input_ids, attention_mask, token_type_ids, **kwargs)
        if mlm_input_ids is None:
            if self.training:
                raise CSEError("DiffCSE training batches need mlm_input_ids: use DiffCSEModel.collator(tokenizer, "
                               "config) as the data collator.")
            return out
        if not self.training and self._generator is None and self.config.edit_operation != "delete":
            return out  # e.g. a reloaded checkpoint scored without its generator
        ids, att, labels = self.rtd_batch(input_ids, attention_mask, mlm_input_ids, mlm_attention_mask, rtd_labels)
        # h in the flattened row order [x1_v1, x1_v2, x2_v1, ...] of the edited rows
        h = torch.stack([out.embeddings["z1"], out.embeddings["z2"]], dim=1).reshape(ids.shape[0], -1)
        rtd = self.rtd_forward(h, ids, att, labels)
        out.aux_losses["rtd_loss"] = self.config.lambda_rtd * rtd.loss
        out.metrics.update(rtd.metrics)
        return out


__all__ = ["DiffCSEConfig", "DiffCSEModel", "RTDOutput"]
