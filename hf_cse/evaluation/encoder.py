"""One encoder interface for every kind of model the evaluation accepts.

``SentenceEncoder`` turns a list of sentences into a float32 ``(N, H)`` array, whatever is behind it:

* an **hf_cse** model (object with ``sentence_embedding``, or a folder whose ``config.json`` ``model_type``
  starts with ``"hf_cse"``): its own test pooler by default (``config.test_pooler``, i.e.
  ``cls_before_pooler`` for the papers' unsup models; ``cls`` applies the trained MLP);
* a **sentence-transformers** model (folder or Hub repo with ``modules.json``, or a ``SentenceTransformer``
  object): its own modules (pooling, Dense, Normalize...) by default; a ``pooler`` flag reads the
  underlying transformer's hidden states with :func:`hf_cse.models.pooling.pool` instead;
* a **plain Hugging Face encoder** (``AutoModel`` folder / Hub id, or a model object plus tokenizer):
  pooler by flag, default ``cls_before_pooler`` (a causal decoder: ``last``; first-token poolers refused, as in
  training); ``cls`` uses ``outputs.pooler_output`` when the model has one (as SimCSE's ``evaluation.py``), else
  the [CLS] row. A tokenizer without a padding token pads with its end-of-text token, as in training.

Speed: sentences are de-duplicated, tokenized once, sorted by token length and encoded in batches
(default 128) under ``torch.inference_mode()`` with the model in eval mode; the train/eval state of
every sub-module is restored afterwards (the trainer calls this mid-training). On a GPU the batches go from
pinned memory without waiting and the embeddings come back in one copy per 256 MB, so the host queues the next
batch while the GPU encodes (:mod:`hf_cse.evaluation.encoding_batches`). Sequences are truncated only at the model's
limit (no 32-token training truncation).
"""

from __future__ import annotations

import logging
import weakref
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..checks import resolved_path
from ..data_checks import check_ids_in_vocabulary
from ..encoders import encoder_max_length, takes_token_type_ids
from ..errors import CSEError
from ..files import weights_fingerprint
from ..models.config import attends_causally, check_first_token_pooler
from ..models.modes import eval_mode
from ..models.pooling import POOLERS, applies_projector, check_pooler, needs_hidden_states, pool
from ..padding import pad_token_rows, padding_where_positions_allow, with_pad_token
from ..precision import autocast, describe_scoring, resolve
from ..tokenizer_match import check_room_for_text, warn_unread_embeddings
from .encoding_batches import PreparedSentences, batch_indices, embed_batches, sorted_texts
from .model_kind import (
    check_pooler_on_own_representation,
    check_pooler_replaces_modules,
    check_st_modules_encode,
    detect_kind,
    load_model,
    own_modules_pooling,
)

KINDS = ("hf_cse", "sentence_transformers", "hf")
#: a plain causal decoder's default pooler: its last real token, the one that has seen the whole sentence
DECODER_POOLER = "last"

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------- loading
def _is_sentence_transformer(model: Any) -> bool:
    return type(model).__module__.startswith("sentence_transformers") and hasattr(model, "preprocess")


def _model_max_length(tokenizer, config) -> int:
    limits = []
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 100_000:
        limits.append(tok_max)
    positions = encoder_max_length(config)  # None when the config names no position limit
    if positions is not None:
        limits.append(positions)
    return min(limits) if limits else 512


# --------------------------------------------------------------------------------------------- encoder
class SentenceEncoder:
    """Embeds sentences with any supported model; see the module docstring.

    Args:
        model: an hf_cse model, a plain HF encoder (``PreTrainedModel`` returning ``last_hidden_state``) or a
            ``SentenceTransformer``. Use :meth:`from_pretrained` for folders and Hub ids.
        tokenizer: the model's tokenizer (not needed for a ``SentenceTransformer``).
        pooler: one of ``hf_cse.models.pooling.POOLERS`` or None for the model's own (hf_cse: its test
            pooler; sentence-transformers: its modules; plain: ``cls_before_pooler``, a causal decoder's ``last``).
        batch_size: sentences per forward pass.
        max_length: truncation length in tokens; default = the model's limit.
        device: where to run; default = where the model's parameters are.
        precision: ``fp32``, or ``bf16`` / ``fp16`` to encode under autocast (embeddings are returned in fp32);
            :meth:`from_pretrained` also takes ``auto`` (:mod:`hf_cse.precision`).
        show_progress_bar: tqdm bar over batches.
        name: label used in reports (default: the model path or class name).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        pooler: str | None = None,
        batch_size: int = 128,
        max_length: int | None = None,
        device: str | torch.device | None = None,
        show_progress_bar: bool = True,
        name: str | None = None,
        precision: str = "fp32",
    ):
        if pooler is not None:
            check_pooler(pooler)
        if batch_size < 1:
            raise CSEError(f"batch_size must be >= 1, got {batch_size}.")
        self.model = model
        self.pooler = pooler
        #: the weights of the folder it was loaded from (:func:`hf_cse.files.weights_fingerprint`; set by
        #: :meth:`from_pretrained`), recorded as ``settings["model_weights"]``; None: not loaded from a local folder
        self.weights: dict[str, str] | None = None
        #: the folder it was loaded from, resolved (None: a Hub id), recorded as ``settings["model_folder"]``: a
        #: stopped evaluation is finished by the same folder however it is named then (relative, absolute)
        self.folder: str | None = None
        self.batch_size = int(batch_size)
        self.show_progress_bar = show_progress_bar
        if _is_sentence_transformer(model):
            self.kind = "sentence_transformers"
            first = model[0]
            self._st_transformer = first
            self.tokenizer = tokenizer or getattr(model, "tokenizer", None)
            self._lower = bool(getattr(first, "do_lower_case", False))
            st_max = getattr(model, "max_seq_length", None)
            hf_model = getattr(first, "auto_model", None) or getattr(first, "model", None)
            self._hf_model = hf_model
            if pooler is None:
                check_st_modules_encode(model, hf_model)
            else:
                check_pooler_replaces_modules(model, pooler)
            default_max = st_max or _model_max_length(self.tokenizer, getattr(hf_model, "config", None))
        else:
            if tokenizer is None:
                raise CSEError("A tokenizer is needed for a transformers model (or use from_pretrained).")
            self.kind = "hf_cse" if hasattr(model, "sentence_embedding") else "hf"
            self.tokenizer = tokenizer
            self._lower = False
            self._hf_model = getattr(model, "encoder", model) if self.kind == "hf_cse" else model
            default_max = _model_max_length(tokenizer, getattr(self._hf_model, "config", None))
            served = getattr(getattr(model, "config", None), "encoder_max_seq_length", None)  # as its export
            default_max = min(default_max, served) if self.kind == "hf_cse" and served else default_max
        if self.tokenizer is not None and (self.kind != "sentence_transformers" or pooler is not None):
            # hf_cse pads these rows itself (sentence-transformers' own modules pad theirs as they always do), as
            # training does: on the right where learned positions count padding, with the end-of-text token where
            # the tokenizer has no padding token (a copy of the caller's tokenizer either way)
            self.tokenizer = with_pad_token(
                padding_where_positions_allow(self.tokenizer, getattr(self._hf_model, "config", None)))
        self._check_pooler()
        if max_length is not None:
            limit = _model_max_length(self.tokenizer, getattr(self._hf_model, "config", None))
            if not 0 < int(max_length) <= limit:  # longer inputs would index past the position embeddings
                raise CSEError(f"max_length must be in [1, {limit}] for this model (its position limit), got "
                               f"{max_length}; leave it out to use the model's limit.")
        self.max_length = int(max_length) if max_length else int(default_max)
        if device is None:
            try:
                device = next(model.parameters()).device
            except (StopIteration, AttributeError):
                device = torch.device("cpu")
        self.device = torch.device(device)
        self.precision, _ = resolve(precision, self.device.type, scoring=True)  # refuses fp16 on a CPU
        self.name = (name or getattr(getattr(self._hf_model, "config", None), "name_or_path", None)
                     or type(model).__name__)
        if self.tokenizer is not None:
            warn_unread_embeddings(self.tokenizer, self._hf_model, self.name)
        if max_length is not None and self.tokenizer is not None:  # e.g. 2: [CLS] [SEP] only, every cosine 1
            check_room_for_text(self.tokenizer, self.max_length, self.prompt, scoring=True)

    def _check_pooler(self) -> None:
        """A first-token pooler on a causal decoder refused as in training; a plain one's default said in the log."""
        config = getattr(self._hf_model, "config", None)
        bidirectional = self.kind == "hf_cse" and bool(getattr(self.model.config, "bidirectional", False))
        check_first_token_pooler(self.pooler, config, bidirectional, field="pooler")
        if self.kind == "hf_cse":
            check_pooler_on_own_representation(self.model, self.pooler)
        if self.kind == "hf" and self.pooler is None and attends_causally(config):
            logger.info("pooling: %s (a causal decoder's default: its first token is computed without seeing the rest "
                        "of the sentence)", self.effective_pooler)

    @property
    def prompt(self) -> str | None:
        """The instruction / prefix the model was trained with, put in front of every sentence: an hf_cse model's
        ``config.prompt``, a sentence-transformers model's default prompt."""
        if self.kind == "hf_cse":
            return getattr(self.model.config, "prompt", None)
        if self.kind == "sentence_transformers" and getattr(self.model, "default_prompt_name", None):
            return self.model.prompts.get(self.model.default_prompt_name)
        return None

    @property
    def text_edit(self):
        """How an hf_cse model's test-time embedding edits each sentence's text first
        (:meth:`~hf_cse.models.base.CSEPreTrainedModel.test_text_edit`: PromptBERT's period), or None."""
        says = getattr(self.model, "test_text_edit", None) if self.kind == "hf_cse" else None
        return says() if says else None

    # ------------------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        *,
        pooler: str | None = None,
        batch_size: int = 128,
        max_length: int | None = None,
        device: str | torch.device | None = None,
        show_progress_bar: bool = True,
        revision: str | None = None,
        trust_remote_code: bool = False,
        precision: str = "fp32",
    ) -> "SentenceEncoder":
        """Load an hf_cse checkpoint, a sentence-transformers folder/repo or a plain HF encoder."""
        name_or_path = str(name_or_path)
        kind = detect_kind(name_or_path, revision)
        weights = weights_fingerprint(name_or_path)  # before loading: the weights the scores are of
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        model, tokenizer = load_model(name_or_path, kind, device, pooler, revision, trust_remote_code)
        from ..divergence import check_finite_weights
        from ..models.loading import bidirectional_as_saved

        bidirectional_as_saved(model)  # a bidirectional decoder's export or a copy of it, whatever its attention
        check_finite_weights(model, name_or_path)  # a diverged run's checkpoint would score nan
        model.eval()
        encoder = cls(model, tokenizer, pooler=pooler, batch_size=batch_size, max_length=max_length, device=device,
                      show_progress_bar=show_progress_bar, name=name_or_path, precision=precision)
        encoder.weights = weights
        encoder.folder = resolved_path(name_or_path) if Path(name_or_path).expanduser().is_dir() else None
        return encoder

    # ------------------------------------------------------------------------------ description
    @property
    def effective_pooler(self) -> str:
        """The pooling actually used (a sentence-transformers model's own modules: :func:`own_modules_pooling`)."""
        if self.pooler is not None:
            return self.pooler
        if self.kind == "hf_cse":
            return self.model.config.test_pooler
        if self.kind == "sentence_transformers":
            return own_modules_pooling(self.model)
        return DECODER_POOLER if attends_causally(getattr(self._hf_model, "config", None)) else "cls_before_pooler"

    def describe(self) -> dict:
        """The settings a result was measured with; ``representation``: what a method embeds instead of the pooler's
        output (PromptBERT's template token; its ``pooler`` then decides only whether the head applies)."""
        says_own = getattr(self.model, "own_representation", None) if self.kind == "hf_cse" else None
        own = says_own(self.model.config) if says_own else ""
        edit = self.text_edit
        return {"model": self.name, "kind": self.kind, "pooler": self.effective_pooler,
                **({"representation": own} if own else {}), **({"text_edit": edit.__name__} if edit else {}),
                "max_length": self.max_length,
                "batch_size": self.batch_size, "precision": describe_scoring(self.precision),
                **({"model_weights": self.weights} if self.weights else {}),
                **({"model_folder": self.folder} if self.folder else {})}

    # ------------------------------------------------------------------------------ encoding
    def encode(self, sentences: Sequence[str], batch_size: int | None = None,
               show_progress_bar: bool | None = None) -> np.ndarray:
        """float32 ``(len(sentences), H)`` embeddings, row i for ``sentences[i]``."""
        sentences = list(sentences)
        if not sentences:
            return np.zeros((0, 0), dtype=np.float32)
        texts, inverse, order, tokens, batch_size = self._tokenized(sentences, batch_size)
        batches = ((idx, self._batch_features(idx, texts, tokens)) for idx in batch_indices(order, batch_size))
        return self._embed(batches, len(texts), -(-len(texts) // batch_size), show_progress_bar)[inverse]

    def prepare(self, sentences: Sequence[str], batch_size: int | None = None) -> PreparedSentences:
        """``sentences`` tokenized, sorted and padded into batches once, for :meth:`encode_prepared` to encode as
        often as needed (the trainer's dev set, scored at every evaluation). Holds every padded batch in memory:
        meant for dev-sized sets."""
        sentences = list(sentences)
        if not sentences:
            raise CSEError("prepare() needs at least one sentence.")
        texts, inverse, order, tokens, batch_size = self._tokenized(sentences, batch_size)
        batches = [(idx, self._batch_features(idx, texts, tokens)) for idx in batch_indices(order, batch_size)]
        return PreparedSentences(tuple(sentences), inverse, len(texts), batches, self.tokenization_settings(batch_size))

    def encode_prepared(self, prepared: PreparedSentences, show_progress_bar: bool | None = None) -> np.ndarray:
        """:meth:`encode` of the sentences :meth:`prepare` made ``prepared`` of, without tokenizing them again."""
        if not prepared.fits(self):
            raise CSEError("these sentences were prepared by an encoder with another tokenizer, length limit, "
                           "prompt or batch size: prepare them again with this encoder.")
        return self._embed(iter(prepared.batches), prepared.n_texts, len(prepared.batches),
                           show_progress_bar)[prepared.inverse]

    def tokenization_settings(self, batch_size: int) -> tuple:
        """What a tokenized, padded batch depends on (the tokenizer or the sentence-transformers model by identity,
        which ``PreparedSentences.fits`` compares)."""
        st_modules = self.kind == "sentence_transformers" and self.pooler is None
        source = self.model if st_modules else self.tokenizer
        return (weakref.ref(source), st_modules, self.max_length, self.prompt, self._lower, self.text_edit,
                int(batch_size))

    def _tokenized(self, sentences: list[str], batch_size: int | None):
        """:func:`sorted_texts` with this encoder's prompt, lower-casing, tokenizer and length limit; and the batch
        size."""
        return (*sorted_texts(sentences, self.prompt, self._lower, self.tokenizer, self.max_length, self.text_edit),
                int(batch_size or self.batch_size))

    def _embed(self, batches, n_texts: int, n_batches: int, show_progress_bar: bool | None) -> np.ndarray:
        """Embeddings of ``(row indices, features)`` batches, in eval mode, inference mode and the precision."""
        from tqdm.auto import tqdm

        show = self.show_progress_bar if show_progress_bar is None else show_progress_bar

        def progress(items):
            return tqdm(items, total=n_batches, desc="Encoding", disable=not show, unit="batch", leave=False)

        with eval_mode(self.model), torch.inference_mode(), autocast(self.precision, self.device.type):
            return embed_batches(batches, self._encode_batch, self.device, n_texts, progress)

    def _batch_features(self, idx: np.ndarray, texts: list[str], tokens) -> dict[str, Any]:
        """The padded features of the texts ``idx`` on the CPU (in pinned memory for a GPU): the tokenizer's, or the
        sentence-transformers modules' own (their tokenizer, with ``max_length`` as their ``max_seq_length``)."""
        features = self._padded_features(idx, texts, tokens)
        check_ids_in_vocabulary(features.get("input_ids"), self._hf_model, self.name)  # another model's tokenizer
        if self.device.type == "cuda":
            return {k: (v.pin_memory() if isinstance(v, torch.Tensor) else v) for k, v in features.items()}
        return features

    def _padded_features(self, idx: np.ndarray, texts: list[str], tokens) -> dict[str, Any]:
        if not (self.kind == "sentence_transformers" and self.pooler is None):
            batch = {k: [tokens[k][i] for i in idx] for k in tokens.keys()}
            return dict(pad_token_rows(self.tokenizer, batch))
        module = self.model
        st_max = getattr(module, "max_seq_length", None)
        try:
            if st_max is not None and st_max != self.max_length:
                module.max_seq_length = self.max_length  # max_seq_length also for the ST's own modules
            return module.preprocess([texts[i] for i in idx])  # texts hold its default prompt
        finally:
            if st_max is not None and st_max != self.max_length:
                module.max_seq_length = st_max

    def _encode_batch(self, feats: dict[str, Any]) -> torch.Tensor:
        if self.kind == "sentence_transformers" and self.pooler is None:
            return self.model(feats)["sentence_embedding"]
        if self.kind == "hf_cse":
            return self.model.sentence_embedding(feats["input_ids"], feats["attention_mask"],
                                                 feats.get("token_type_ids"), pooler=self.pooler)
        pooler = self.effective_pooler
        model = self._hf_model
        kwargs = {k: v for k, v in feats.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        if not takes_token_type_ids(model.config):
            kwargs.pop("token_type_ids", None)
        want_hidden = needs_hidden_states(pooler)
        outputs = model(**kwargs, output_hidden_states=want_hidden, return_dict=True)
        if applies_projector(pooler) and getattr(outputs, "pooler_output", None) is not None:
            return outputs.pooler_output
        last = getattr(outputs, "last_hidden_state", None)
        if last is None:
            raise CSEError(f"{type(model).__name__} returns no last_hidden_state: pass a base encoder (AutoModel).")
        return pool(pooler, feats["attention_mask"], last, outputs.hidden_states if want_hidden else None)


__all__ = ["KINDS", "POOLERS", "SentenceEncoder", "detect_kind"]
