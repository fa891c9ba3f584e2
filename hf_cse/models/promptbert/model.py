"""PromptBERT (Jiang et al., EMNLP 2022): a sentence is put into a template and represented by the last layer's
hidden state at the template's ``[MASK]``; in training the two views of a row are two different templates, and
*template denoising* subtracts from each view the representation of its template with an empty sentence, whose
tokens after the sentence keep the positions they have around the real sentence.

Followed in the authors' code (kongds/Prompt-BERT, ``prompt_bert/models.py``: ``cl_forward`` and its ``get_delta``;
``train.py``: the templates' ``bs`` / ``es`` tokens; ``run.sh``: the settings of ``unsup-bert`` / ``unsup-roberta``;
``evaluation.py``: the reported evaluation). What the defaults do, and where paper and code part:

* **Templates** (``run.sh``): BERT view 1 ``This sentence of "[X]" means [MASK].``, view 2 ``This sentence :
  "[X]" means [MASK].``; RoBERTa ``This sentence : '[X] ' means<mask>.`` and ``The sentence : '[X] ' means<mask>.``.
  The first template is also the test-time one (``evaluation.py --mask_embedding_sentence_template $TEMPLATE``).
* **Denoising in training** (``template_denoising``, the paper's and the code's): one template-only forward per
  sentence length, in the encoder's current mode (dropout on in training) and with gradients
  (``denoising_grad``; the code's ``--mask_embedding_sentence_delta_freeze`` is off). The code computes a table of
  50 lengths and indexes it; here only the batch's lengths are computed (the same values; in training each length
  gets its own dropout draw in both).
* **No denoising at test time** (``test_template_denoising=False``): the unsupervised models' reported numbers
  come from ``evaluation.py`` without ``--mask_embedding_sentence_delta``.
* **A period ends each test sentence** (``test_sentence_period=True``): ``evaluation.py`` appends ``.`` to a
  sentence that ends in none of ``. ? " '`` before templating it (:func:`.templates.ended_with_period`); training
  and the authors' trainer's dev scoring take the sentence as it is, and so do hf_cse's. Applied where hf_cse
  tokenizes text (:meth:`PromptBERTModel.test_text_edit`: run_eval, the export); ``False`` embeds the text as given.
* **Denoising in the dev scoring that keeps the best checkpoint** (``dev_template_denoising=True``): the authors'
  trainer scores STS-B dev through ``sentemb_forward``, which subtracts the empty template's vector (computed
  without dropout, ``--mask_embedding_sentence_delta_no_delta_eval`` off), so their best checkpoint is chosen on
  denoised embeddings; the trainer does the same (:func:`hf_cse.evaluation.dev.scoring_dev`). hf-cse-eval in its
  dev mode scores the test-time embedding.
* **Positions of the empty template** (``denoising_positions``): ``authors_code`` (default) gives them from 0, as
  ``get_delta`` does; for BERT that is also the sentence's own numbering, for RoBERTa (whose positions start at 2)
  it is not, and ``encoder`` uses the encoder's own numbering -- "the same position ids" of the paper's text.
* **Head**: SimCSE's MLP on the denoised vector in training only (``run.sh``: ``mlp_only_train``).
* **Decoders** (not in the paper): a template without ``{mask}`` is read at its own last token, as PromptEOL's
  ``This sentence : "[X]" means in one word:"`` (the authors' later scaling_sentemb work).

Differences kept (the tests check the rest to float64 rounding, ``tests/models/test_promptbert.py``):

* Sentence truncation: the authors cut a sentence's own tokens at ``max_seq_length 32`` before the template;
  hf_cse's tokenization counts ``[CLS]``/``[SEP]`` in ``max_seq_length``, so the presets set 34 (32 + 2).
* ``evaluation.py`` templates the text, so that with RoBERTa's templates the sentence's first word follows a space
  there (``' word``) but not in training (``bs`` stripped, the sentence tokenized alone); hf_cse tests as it trains.
* The empty-template row is the template's token ids concatenated (``bs + es``); the code tokenizes the joined text
  ``bs + es`` and asserts that the two agree for its first template.
* With hard negatives (``negative_column``), the positive and the negative, both in ``template2``, get separate
  empty-template forwards; the code subtracts one (the same values without dropout, a different dropout draw).
* Each template's empty row shifts the tokens after its sentence slot by its own prefix length; the code's
  ``get_delta`` uses the first template's ``bs`` for the second template's row too. The same for every shipped
  template pair (both prefixes 4 tokens); a custom pair whose prefixes differ in length gets its own positions.

The paper's text is not in this repository's paper folder; the behaviour above is the code's, read at its ``HEAD``
(files and functions named), and the defaults are those of the runs that gave its reported numbers.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ...encoders import encoder_max_length, position_offset
from ...errors import CSEError
from ...references import Paper, register_paper
from ...tokenizer_match import FEW_SENTENCE_TOKENS
from ..base import CSEPreTrainedModel
from ..config import is_decoder_only
from ..outputs import OwnExportModules
from ..pooling import PoolingChoice
from ..views import check_training_batch
from .config import BERT_TEMPLATES, PromptBERTConfig, read_token, tokenized_templates
from .templates import TemplateIds, empty_template_batch, ended_with_period, put_in_template, special_tokens_around

PROMPTBERT = register_paper(Paper(
    key="jiang2022promptbert",
    name="PromptBERT",
    title="PromptBERT: Improving BERT Sentence Embeddings with Prompts",
    authors=("Ting Jiang", "Jian Jiao", "Shaohan Huang", "Zihan Zhang", "Deqing Wang", "Fuzhen Zhuang", "Furu Wei",
             "Haizhen Huang", "Denvy Deng", "Qi Zhang"),
    venue="EMNLP 2022",
    year=2022,
    arxiv="2201.04337",
    code="https://github.com/kongds/Prompt-BERT",
    bibtex="""@inproceedings{jiang2022promptbert,
  title     = {PromptBERT: Improving {BERT} Sentence Embeddings with Prompts},
  author    = {Jiang, Ting and Jiao, Jian and Huang, Shaohan and Zhang, Zihan and Wang, Deqing and Zhuang, Fuzhen and
               Wei, Furu and Huang, Haizhen and Deng, Denvy and Zhang, Qi},
  booktitle = {Proceedings of the 2022 Conference on Empirical Methods in Natural Language Processing (EMNLP)},
  year      = {2022},
  eprint    = {2201.04337},
  archivePrefix = {arXiv}
}""",
))

logger = logging.getLogger(__name__)


def _takes_position_ids(encoder) -> bool:
    params = inspect.signature(encoder.forward).parameters
    return "position_ids" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class PromptBERTModel(CSEPreTrainedModel):
    """PromptBERT: each view is the sentence in a template, represented at its ``[MASK]`` (template denoising in
    training); any registry loss takes the two views (``loss="gs_infonce"`` ...). Untrained, it is a pooling:
    the prompt representation of the encoder as it is.

    Example::

        model = PromptBERTModel.from_encoder("bert-base-uncased")       # the authors' unsup-bert templates
        batch = tokenizer(["A man plays a guitar."], return_tensors="pt")
        emb = model.eval().sentence_embedding(batch["input_ids"], batch["attention_mask"])
    """

    config_class = PromptBERTConfig
    references = (PROMPTBERT,)
    captures_in_cuda_graph = False
    why_no_cuda_graph = ("template denoising runs one forward per distinct sentence length in the batch, a number "
                         "read from the device")
    training_views = ("Each sentence in two templates, represented at the template's [MASK] minus the template's "
                      "representation with an empty sentence (PromptBERT's template denoising)")
    views_differ_by_dropout = False

    def __init__(self, config: PromptBERTConfig, encoder=None):
        super().__init__(config, encoder)
        self._cut_said = False  # sentences cut inside a template: said once (_say_cut_once)
        denoising = config.template_denoising or config.test_template_denoising or config.dev_template_denoising
        if denoising and not _takes_position_ids(self.encoder):
            raise CSEError(f"promptbert: template denoising gives the empty template explicit position ids, which "
                           f"{type(self.encoder).__name__} does not take; set template_denoising, "
                           "test_template_denoising and dev_template_denoising to false, or use another encoder.")

    # ----------------------------------------------------------------- templates from the tokenizer
    @classmethod
    def own_representation(cls, config: PromptBERTConfig | dict | None = None) -> str:
        """The token read: the template's [MASK], or its last token where the template has no ``{mask}`` (a
        decoder's)."""
        template = (config.get("template") if isinstance(config, dict) else getattr(config, "template", None))
        return f"the template's {read_token(template or BERT_TEMPLATES[0])} (PromptBERT)"

    @classmethod
    def pooling_when_unset(cls, choice: PoolingChoice, encoder_config) -> PoolingChoice:
        """On a decoder, pooler_type last (a first-token one is refused there:
        :meth:`PromptBERTConfig.check_pooler_on_encoder`), else ``choice``'s; its source says that the pooler only
        decides whether the head applies at test time (the card's pooler_source row named the papers' [CLS])."""
        decoder = is_decoder_only(encoder_config)
        pooler, why = ("last", "a decoder's") if decoder else (choice.pooler_type, f"from {choice.source}")
        return replace(choice, pooler_type=pooler, replaced_own=None if decoder else choice.replaced_own,
                       source=f"PromptBERT reads the template's token; pooler_type {pooler} ({why}) decides only "
                              "whether the projection head applies at test time")

    @classmethod
    def from_encoder(cls, name_or_path: str, trust_remote_code: bool = False, **config_kwargs: Any):
        """As :meth:`CSEPreTrainedModel.from_encoder`; the templates are tokenized with the encoder's tokenizer
        (:meth:`use_tokenizer`; the trainer tokenizes them again with its ``processing_class`` before training)."""
        from transformers import AutoTokenizer

        from ...tokenizer_match import is_stand_in

        model = super().from_encoder(name_or_path, trust_remote_code=trust_remote_code, **config_kwargs)
        try:
            tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        except (OSError, ValueError):  # no tokenizer beside the weights: the run's tokenizer comes later
            return model
        if is_stand_in(tokenizer):  # no tokenizer files either: the stand-in would make its templates [UNK]s
            return model
        model.use_tokenizer(tokenizer)
        return model

    def prepare_for_training(self, tokenizer, train_dataset, trust_remote_code: bool = False) -> None:
        self.use_tokenizer(tokenizer)

    def test_text_edit(self):
        """:func:`.templates.ended_with_period` where ``test_sentence_period`` is on, except while the trainer scores
        dev (the authors' trainer scores the sentence as it is)."""
        return ended_with_period if self.config.test_sentence_period and not self.scoring_dev else None

    @classmethod
    def check_with_tokenizer(cls, config: PromptBERTConfig, tokenizer, encoder_config) -> None:
        tokenized_templates(config, tokenizer, encoder_config)

    def use_tokenizer(self, tokenizer) -> None:
        """Tokenize both templates with ``tokenizer`` (the one that tokenizes the sentences) into the config."""
        views = tokenized_templates(self.config, tokenizer, self.encoder.config)
        limit = encoder_max_length(self.encoder.config)
        for name, ids in zip(("template", "template2"), views):
            if limit is not None and limit - len(ids) < FEW_SENTENCE_TOKENS:  # as check_room_for_text for a prompt
                logger.warning("promptbert: %s takes %d tokens of the encoder's %d positions and leaves %d token(s) "
                               "of each sentence; shorten %s", name, len(ids), limit, limit - len(ids), name)
        lead, n_trail = special_tokens_around(tokenizer)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else views[0].suffix[-1]
        self.config.template_token_ids = {
            "views": [{"prefix": list(v.prefix), "suffix": list(v.suffix), "mask_at": v.mask_at} for v in views],
            "n_lead": len(lead), "n_trail": n_trail, "pad": int(pad)}

    def template_ids(self, view: int) -> TemplateIds:
        ids = self.config.template_token_ids
        if not ids:
            raise CSEError("promptbert: the templates are not tokenized yet; call model.use_tokenizer(tokenizer) "
                           "(from_encoder does it when the encoder's folder has a tokenizer).")
        v = ids["views"][min(view, 1)]
        return TemplateIds(tuple(v["prefix"]), tuple(v["suffix"]), int(v["mask_at"]))

    # ----------------------------------------------------------------- the representation
    def template_noise(self, ids: TemplateIds, lengths: torch.Tensor) -> torch.Tensor:
        """The representation of the template with an empty sentence, for each row's sentence length ``(B, H)``:
        one forward per distinct length (the authors' ``get_delta``)."""
        distinct, which = torch.unique(lengths, return_inverse=True)
        start = 0 if self.config.denoising_positions == "authors_code" else position_offset(self.encoder.config)
        d_ids, d_positions = empty_template_batch(ids, distinct.tolist(), start, lengths.device)
        with torch.set_grad_enabled(self.config.denoising_grad and torch.is_grad_enabled()):
            hidden = self.encoder(input_ids=d_ids, position_ids=d_positions, return_dict=True).last_hidden_state
        return hidden[:, len(ids.prefix) + ids.mask_at][which]

    def prompt_representation(self, input_ids, attention_mask, denoise: bool = False) -> torch.Tensor:
        """Tokenized sentences ``(B, L)`` -> the hidden state at the first template's ``[MASK]`` ``(B, H)`` (the one
        test time uses), minus the empty template's where ``denoise``."""
        return self._represent([(input_ids, attention_mask, 0)], denoise)[0]

    def _represent(self, groups: list, denoise: bool) -> list[torch.Tensor]:
        """``[(input_ids, attention_mask, view), ...]`` -> their representations, from ONE encoder forward over every
        group's templated rows (padded together, as the authors' collator pads both views)."""
        spec, limit = self.config.template_token_ids, encoder_max_length(self.encoder.config)
        parts = []
        for input_ids, attention_mask, view in groups:
            ids = self.template_ids(view)
            self._say_cut_once(ids, view, int(attention_mask.sum(-1).max()) - spec["n_lead"] - spec["n_trail"], limit)
            parts.append((ids, put_in_template(input_ids, attention_mask, ids, spec["n_lead"], spec["n_trail"],
                                               spec["pad"], limit)))
        width = max(t.input_ids.shape[1] for _, t in parts)
        rows = torch.cat([torch.nn.functional.pad(t.input_ids, (0, width - t.input_ids.shape[1]), value=spec["pad"])
                          for _, t in parts])
        mask = torch.cat([torch.nn.functional.pad(t.attention_mask, (0, width - t.attention_mask.shape[1]))
                          for _, t in parts])
        hidden = self.encoder(input_ids=rows, attention_mask=mask, return_dict=True).last_hidden_state
        out, first = [], 0
        for ids, t in parts:
            rep = hidden[first + torch.arange(len(t.mask_index), device=hidden.device), t.mask_index]
            first += len(t.mask_index)
            if denoise:
                rep = rep - self.template_noise(ids, t.sentence_length)
            out.append(rep if self.config.encoder_dtype == "fp32" else rep.float())
        return out

    def _say_cut_once(self, ids: TemplateIds, view: int, longest: int, limit: int | None) -> None:
        """Warn once when a training sentence loses its tail inside the template (:func:`put_in_template` cuts it
        where the templated row would pass the encoder's positions): ``max_seq_length`` plus the template is above
        them. Not at test time, where a long input is cut as any sentence-transformers model cuts it (and the
        training flag named would not apply): the export's own check encodes long probe sentences too."""
        room = None if limit is None else limit - len(ids)
        if not self.training or room is None or longest <= room or self._cut_said:
            return
        self._cut_said = True
        name = "template2" if view else "template"
        logger.warning("promptbert: sentences of up to %d tokens are cut to %d inside %s (%d tokens of the encoder's "
                       "%d positions); use max_seq_length %d or less (what the template leaves) or shorten %s", longest,
                       room, name, len(ids), limit, room + self.config.template_token_ids["n_lead"]
                       + self.config.template_token_ids["n_trail"], name)

    def _encode(self, input_ids, attention_mask, token_type_ids=None, pooler: str | None = None):
        """Test time, dev scoring (and ImSimCSE's off-dropout pass in training): view 1's template; denoised as the
        config says for what the model is doing. ``pooler`` only decides, in :meth:`sentence_embedding`, whether the
        head is applied (the representation is always the template's ``[MASK]``)."""
        if self.training:
            denoise = self.config.template_denoising
        else:
            denoise = self.config.dev_template_denoising if self.scoring_dev else self.config.test_template_denoising
        return self.prompt_representation(input_ids, attention_mask, denoise)

    def two_view_embeddings(self, input_ids, attention_mask, token_type_ids=None):
        """View 1 in ``template``, view 2 (and a hard negative) in ``template2``, in one encoder forward, each
        denoised in training with its own template."""
        check_training_batch(input_ids, "the method's collator", self.training)
        n, views, _ = input_ids.shape
        groups = [(input_ids[:, v], attention_mask[:, v], v) for v in range(views)]
        pooled = torch.stack(self._represent(groups, self.config.template_denoising), dim=1)
        flat = pooled.reshape(n * views, -1)  # rows as the base class orders them (a BatchNorm head sees 2-D)
        z = self.projected(flat)
        return pooled, z.view(n, views, -1)

    # ----------------------------------------------------------------- sentence-transformers export
    def sentence_transformers_modules(self, max_seq_length: int) -> OwnExportModules:
        """The template applied to the tokenized texts before the encoder (``PromptTransformer``) and the ``[MASK]``
        read after it (``PromptMaskPooling``), with, where test-time denoising is on, the empty template's vector for
        every sentence length up to the encoder's limit (computed here, in eval mode: the same as the model's)."""
        from .st_pooling import PromptMaskPooling, PromptTransformer

        ids, spec = self.template_ids(0), self.config.template_token_ids
        limit = encoder_max_length(self.encoder.config)
        template = {"prefix": list(ids.prefix), "suffix": list(ids.suffix), "mask_at": ids.mask_at,
                    "n_lead": spec["n_lead"], "n_trail": spec["n_trail"], "pad": spec["pad"], "max_length": limit,
                    "end_with_period": bool(self.config.test_sentence_period)}
        pooling = PromptMaskPooling(self.config.hidden_size, 0)
        if self.config.test_template_denoising:
            lengths = torch.arange((limit or max_seq_length + len(ids)) - len(ids) + 1,
                                   device=next(self.parameters()).device)
            was_training = self.training
            with torch.no_grad():
                noise = self.eval().template_noise(ids, lengths).float().cpu()
            self.train(was_training)
            pooling = PromptMaskPooling(self.config.hidden_size, len(noise))
            pooling.noise.copy_(noise)

        def build_transformer(folder: str, seq_length: int, model_kwargs: dict):
            module = PromptTransformer(folder, max_seq_length=seq_length, model_kwargs=model_kwargs)
            module.template = template
            return module

        here = Path(__file__).parent
        words = (f"the last layer at the template's {read_token(self.config.template)} for the template "
                 f"`{self.config.template}` (PromptBERT)"
                 + (", minus the template's representation with an empty sentence (template denoising)"
                    if self.config.test_template_denoising else "")
                 + ("; a sentence ending in none of . ? \" ' gets a period first (the authors' evaluation)"
                    if self.config.test_sentence_period else ""))
        return OwnExportModules(build_transformer, pooling, (here / "st_pooling.py", here / "templates.py"), words)
