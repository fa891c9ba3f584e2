"""PromptBERT's configuration (:class:`PromptBERTConfig`): the :class:`hf_cse.models.config.CSEConfig` fields plus the
templates and template-denoising settings of :class:`hf_cse.models.promptbert.model.PromptBERTModel` (what each default
follows: that module's docstring), and the templates tokenized with a tokenizer (:func:`tokenized_templates`)."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from ...encoders import encoder_max_length
from ...errors import CSEError
from ..config import FIRST_TOKEN_POOLERS, CSEConfig, attends_causally, is_decoder_only
from .templates import MASK as MASK_WORD
from .templates import TemplateIds, special_tokens_around

DenoisingPositions = Literal["authors_code", "encoder"]
DENOISING_POSITIONS = ("authors_code", "encoder")
#: the authors' run.sh templates (unsup-bert), in hf_cse's placeholders
BERT_TEMPLATES = ('This sentence of "{sentence}" means{mask}.', 'This sentence : "{sentence}" means{mask}.')
#: the authors' run.sh templates (unsup-roberta): their leading block is stripped, the sentence is not
ROBERTA_TEMPLATES = ("This sentence : '{sentence} ' means{mask}.", "The sentence : '{sentence} ' means{mask}.")


class PromptBERTConfig(CSEConfig):
    r"""Configuration of :class:`PromptBERTModel`; defaults are the authors' ``unsup-bert`` setting."""

    model_type = "hf_cse_promptbert"
    method = "promptbert"

    template: str = field(default=BERT_TEMPLATES[0], metadata={
        "help": "PromptBERT: template of view 1 and of test time, with {sentence} and {mask} (a decoder: no {mask}, "
                "the last token represents the sentence)", "rule": "template"})
    template2: str = field(default=BERT_TEMPLATES[1], metadata={
        "help": "PromptBERT: template of view 2 (and of a hard negative); the paper's positives are two templates",
        "rule": "template"})
    template_denoising: bool = field(default=True, metadata={
        "help": "PromptBERT: in training, subtract each template's representation with an empty sentence"})
    test_template_denoising: bool = field(default=False, metadata={
        "help": "PromptBERT: denoise test embeddings too (the authors' unsupervised evaluation does not)"})
    test_sentence_period: bool = field(default=True, metadata={
        "help": "PromptBERT: at test time, end a sentence that ends in none of . ? \" ' with a period before "
                "templating it (the authors' evaluation.py; training and dev scoring do not)"})
    dev_template_denoising: bool = field(default=True, metadata={
        "help": "PromptBERT: denoise the dev embeddings the trainer scores to keep its best checkpoint (the authors' "
                "trainer does)"})
    denoising_grad: bool = field(default=True, metadata={
        "help": "PromptBERT: gradients through the empty-template forward (the authors' code: yes)",
        "needs": [("template_denoising", "==", True)]})
    denoising_positions: DenoisingPositions = field(default="authors_code", metadata={
        "help": "PromptBERT: positions of the empty template from 0 (authors_code) or as the encoder numbers a "
                "sentence (encoder; differs for RoBERTa only)", "needs": [("template_denoising", "==", True)]})
    #: the templates' token ids, from the tokenizer (PromptBERTModel.use_tokenizer); saved with the model
    template_token_ids: dict | None = field(default=None)

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)  # the templates' rule (hyperparameter_rules: template) among the fields'
        if self.denoising_positions not in DENOISING_POSITIONS:
            raise CSEError(f"promptbert: unknown denoising_positions {self.denoising_positions!r}. Valid: "
                           f"{', '.join(DENOISING_POSITIONS)}.")

    def check_pooler_on_encoder(self) -> None:
        if self.pooler_type in FIRST_TOKEN_POOLERS and attends_causally(self.encoder_config, self.bidirectional):
            raise CSEError(f"promptbert: pooler_type {self.pooler_type!r} on a causal (decoder-only) encoder "
                           f"({self.encoder_config.model_type!r}): PromptBERT reads the template's token whatever the "
                           "pooler, which decides only whether the projection head applies at test time, and a "
                           "first-token pooler is not taken on a decoder; leave pooler_type unset (last).",
                           fields=("pooler_type",))

    @property
    def dev_scoring_note(self) -> str | None:
        differ = []
        if self.dev_template_denoising != self.test_template_denoising:
            scored, shipped = (("denoised", "not") if self.dev_template_denoising else ("not denoised", "is"))
            differ.append(f"the trainer chose its checkpoint by the dev scores of the template-{scored} embedding, "
                          f"and this model's embedding is {shipped} denoised")
        if self.test_sentence_period:
            differ.append("training scored each dev sentence as written, and this model ends a sentence without "
                          "final punctuation with a period")
        if not differ:
            return None
        return (f"As PromptBERT's authors' trainer and evaluation: {'; '.join(differ)}. So its dev scores "
                "(`hf_cse.evaluation.evaluate(..., mode=\"dev\")`) are another figure than training's.")


def tokenized_templates(config: PromptBERTConfig, tokenizer, encoder_config) -> list[TemplateIds]:
    """Both templates' token ids, or a one-line refusal naming the template: a mask rule of
    :meth:`TemplateIds.build` broken, or a template whose own tokens (special ones included) leave no position of the
    encoder for the sentence (the first step would fail inside the encoder)."""
    views, limit = [], encoder_max_length(encoder_config)
    for name in ("template", "template2"):
        try:  # templates.py raises ValueError: it ships with exports, without hf_cse
            special_tokens_around(tokenizer)
            views.append(TemplateIds.build(tokenizer, getattr(config, name), name, is_decoder_only(encoder_config)))
        except ValueError as err:
            raise CSEError(str(err), fields=(name,)) from None
        if limit is not None and len(views[-1]) >= limit:
            raise CSEError(f"promptbert: {name} takes {len(views[-1])} tokens (the tokenizer's special ones "
                           f"included) and the encoder takes {limit} positions, which leaves no token for the "
                           f"sentence; shorten {name}.", fields=(name,))
    return views


def read_token(template: str) -> str:
    """The template's token that represents the sentence, in words: its [MASK] (``{mask}``), else its last token."""
    return "[MASK] token" if MASK_WORD in template else "last token"
