"""ESimCSE (Wu et al., COLING 2022): SimCSE whose positive view repeats a few tokens of the sentence (word
repetition, §3.1) and whose negatives include a queue of earlier batches' embeddings from a momentum-updated copy of
the encoder (momentum contrast, §3.2). One training step, as the authors' code runs it (``esimcse/models.py:
cl_forward``, ``esimcse/trainers.py:CLTrainer.compute_loss``):

1. the encoder (dropout on) embeds both views in one forward: ``z1`` (the sentence), ``z2`` (its repeated copy);
2. the loss is InfoNCE of the anchors ``z1`` over the candidates ``[z2 ; queue]``: the queue's rows join every
   anchor's denominator (``infonce`` with ``z_queue``; the first step has an empty queue, i.e. plain InfoNCE);
3. the momentum encoder moves towards the encoder's current weights, ``theta_m <- lambda theta_m + (1 - lambda)
   theta`` (before this step's optimizer update, at every forward: every micro-batch under gradient accumulation);
4. the momentum encoder (dropout off) embeds the *un-repeated* sentences, through the same pooler and the online
   projector (the authors keep no momentum copy of the MLP); the batch, gathered over processes, is appended to
   the queue, whose oldest rows beyond ``queue_size`` drop out. No gradient reaches the queue.

The queue is emptied as each epoch begins (the authors' ``CLTrainer.train`` sets ``self.pre_z1 = None`` in its epoch
loop), so every epoch's first step is plain InfoNCE; under gradient accumulation that is the epoch's first
micro-batch. A one-epoch run, as the paper's (``run.sh``), is the same either way; ``empty_queue_each_epoch=False``
keeps the queue across epochs (as MoCo's). A run resumed inside an epoch goes on with its checkpoint's queue, as the
uninterrupted run would; one resumed at an epoch's start begins that epoch empty.

Where the paper and the code differ, both are options and the default is the code's, which produced the paper's
numbers (``run.sh``): ``dup_rule`` (:mod:`.repetition`) and ``momentum_init`` -- the paper does not say how the
momentum encoder starts; the code's ``BertForCL.__init__`` copies the encoder into it, then ``init_weights``
re-draws every weight and ``from_pretrained`` loads the encoder only (the run logs list ``momentum_model.*`` as
"newly initialized"), so it starts random (``"random"``); ``"copy"`` starts from the pretrained encoder, as MoCo.

Where hf_cse differs from the authors' code (each kept on purpose):

* several processes: the authors' queue holds each process's own momentum embeddings; here every process enqueues
  the gathered global batch once, so each holds the same queue and the loss equals one process's on the global batch;
* the first step's enqueue keeps at most ``queue_size`` rows (the authors' first enqueue keeps the whole batch,
  which differs only when a batch is larger than the queue);
* ``do_mlm``: the MLM term is added at every step (the authors' code drops it whenever the queue is non-empty);
* the draws of word repetition: see :mod:`.repetition` (the same function of the same draws; seeded per row); a
  repeated view is cut to the encoder's position limit, or the tokenizer's ``model_max_length`` if shorter, keeping
  its last token as truncation does (the authors' length 32 stays far below; they never cut);
* ``momentum_init="random"`` draws the momentum encoder with transformers' initialisation of the encoder's class,
  the scheme of the authors' ``init_weights`` (same distribution, other draws); their encoders also carry BERT's
  unused pooler layer, which hf_cse builds without;
* with ``encoder_dtype`` bf16/fp16 the momentum encoder stays fp32, so that its average keeps every update (the
  authors train fp32 weights under fp16 autocast);
* the authors' ``--dup_type word`` (repetition of whitespace words before tokenizing, their §5.2 comparison) and
  their stop-word insertion (``--add_stop``) are not implemented.
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal

import torch

from ...distributed import gather_with_grad
from ...encoders import encoder_max_length
from ...errors import CSEError
from ...losses import available_losses, get_loss_class
from ...losses.base import QUEUE_INPUT, literal_choices
from ...references import Paper, register_paper
from ..base import CSEPreTrainedModel
from ..config import CSEConfig
from ..loading import build_encoder
from ..modes import eval_mode
from ..outputs import CSEOutput
from ..views import first_view
from .momentum import EmbeddingQueue, check_queue_size, momentum_update
from .repetition import DupRule, WordRepetitionCollator

ESIMCSE = register_paper(Paper(
    key="wu2022esimcse",
    name="ESimCSE",
    title="ESimCSE: Enhanced Sample Building Method for Contrastive Learning of Unsupervised Sentence Embedding",
    authors=("Xing Wu", "Chaochen Gao", "Liangjun Zang", "Jizhong Han", "Zhongyuan Wang", "Songlin Hu"),
    venue="COLING 2022",
    year=2022,
    arxiv="2109.04380",
    code="https://github.com/caskcsg/sentemb/tree/main/ESimCSE",
    bibtex="""@inproceedings{wu2022esimcse,
  title     = "{ESimCSE}: Enhanced Sample Building Method for Contrastive Learning of Unsupervised Sentence Embedding",
  author    = {Wu, Xing and Gao, Chaochen and Zang, Liangjun and Han, Jizhong and Wang, Zhongyuan and Hu, Songlin},
  booktitle = {Proceedings of the 29th International Conference on Computational Linguistics (COLING)},
  year      = {2022},
  eprint    = {2109.04380},
  archivePrefix = {arXiv}
}""",
))

#: how the momentum encoder starts: a freshly initialised encoder (the authors' code) or a copy of the encoder
MomentumInit = Literal["random", "copy"]


class ESimCSEConfig(CSEConfig):
    """Configuration of :class:`ESimCSEModel`: the :class:`CSEConfig` fields plus word repetition and momentum
    contrast. Defaults are the authors' BERT-base setting (``run.sh``; preset ``esimcse_bert_base``)."""

    model_type = "hf_cse_esimcse"
    method = "esimcse"

    dup_rate: float = field(default=0.32, metadata={
        "help": "ESimCSE: repetition rate of word repetition (§3.1; the authors' run.sh: 0.32 BERT, 0.30 "
                "RoBERTa-base, 0.28 RoBERTa-large)",
        "rule": "fraction"})
    dup_rule: DupRule = field(default="code", metadata={
        "help": "ESimCSE: how many tokens are repeated: code (the authors' code, which produced the paper's numbers: "
                "randrange(min(10, int(dup_rate * L))) of the L tokens, [CLS]/[SEP] never) or paper (§3.1: uniform in "
                "[0, max(2, int(dup_rate * n))] of the n ordinary tokens)"})
    queue_size: int = field(default=160, metadata={
        "help": "ESimCSE: momentum-contrast queue of earlier batches' embeddings, extra negatives (160 = 2.5 x batch "
                "64; 128 for RoBERTa-large); 0 = word repetition only", "rule": "size"})
    momentum: float = field(default=0.995, metadata={
        "help": "ESimCSE: momentum lambda of the momentum encoder, theta_m <- lambda theta_m + (1 - lambda) theta",
        "rule": "unit_interval", "needs": [("queue_size", ">", 0)]})
    empty_queue_each_epoch: bool = field(default=True, metadata={
        "help": "ESimCSE: empty the momentum queue as each epoch begins, so its first step has no queued negatives "
                "(true, the authors' code; a one-epoch run, as the paper's, is the same either way) or keep the "
                "queue across epochs (false, as MoCo's)", "needs": [("queue_size", ">", 0)]})
    momentum_init: MomentumInit = field(default="random", metadata={
        "help": "ESimCSE: the momentum encoder starts freshly initialised (random, the authors' code: their logs list "
                "momentum_model.* as newly initialized) or as a copy of the pretrained encoder (copy, MoCo's start)",
                "needs": [("queue_size", ">", 0)]})

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        for name, choices in (("dup_rule", DupRule), ("momentum_init", MomentumInit)):
            if getattr(self, name) not in literal_choices(choices):
                raise CSEError(f"esimcse: unknown {name} {getattr(self, name)!r}; valid: "
                               f"{', '.join(literal_choices(choices))}.")
        if self.queue_size and self.lora_r:
            raise CSEError("esimcse: the momentum encoder averages every weight of the encoder, which LoRA freezes; "
                           "train without lora_r, or with queue_size 0 (word repetition only).")
        main = self.objectives[0]["loss"]
        if self.queue_size and main in available_losses() and not get_loss_class(main).takes_queue:
            takers = ", ".join(n for n in available_losses() if get_loss_class(n).takes_queue)
            raise CSEError(f"esimcse: loss {main!r} has no use for the momentum queue's negatives (queue_size "
                           f"{self.queue_size}); use one that takes them ({takers}), or queue_size 0 (word "
                           "repetition only).")


class ESimCSEModel(CSEPreTrainedModel):
    """ESimCSE: encoder + projector (trained), momentum encoder + queue (training state, never exported).

    Example::

        model = ESimCSEModel.from_encoder("bert-base-uncased", dup_rate=0.32, queue_size=160, momentum=0.995)
        collate = ESimCSEModel.collator(tokenizer, model.config)   # (sentence, sentence with repeated tokens)
        trainer = ContrastiveTrainer(model=model, data_collator=collate, ...)
    """

    config_class = ESimCSEConfig
    references = (ESIMCSE,)  # its own paper; SimCSE, the pipeline it extends, is cited last (builds_on)
    takes_pair_rows = False
    why_no_pair_rows = "its second view is the same sentence with repeated tokens"
    # another collator's views lack the repetition that makes the method (SimCSE plus a queue, without a word); the
    # ablation without it is dup_rate=0
    needs_collator = WordRepetitionCollator
    splits_into_minibatches = False
    why_no_minibatch_split = ("its momentum encoder and queue advance at every forward, which the cached mode runs "
                              "twice per mini-batch")
    # the CUDA-graph training step would replay the queue of the step it captured: refused with this reason
    captures_in_cuda_graph = False
    why_no_cuda_graph = ("its queue grows over the first steps (negatives of a changing shape) and moves with every "
                         "step's momentum pass")
    # measured through tests/sharded_on_cpu.py: FSDP stops at the first momentum update (tensors and DTensors mixed);
    # ZeRO-3 would update the momentum encoder from empty parameter stubs
    shards_under = ("ZeRO-2",)
    why_no_sharding = "its momentum encoder is updated from weights that FSDP and ZeRO-3 hold in shards"
    training_views = ("Each sentence and a copy of it with a few tokens repeated (ESimCSE's word repetition; a queue "
                      "of earlier batches' momentum-encoder embeddings adds negatives unless queue_size is 0)")
    views_differ_by_dropout = False
    training_only_parts = ("projection head", "momentum encoder", "queue")

    @classmethod
    def check_before_loading(cls, config: ESimCSEConfig) -> None:
        """Momentum 1 never moves the momentum encoder from its start; started at random (the authors' code), every
        queued negative would come from a random network."""
        if config.queue_size and config.momentum == 1 and config.momentum_init == "random":
            raise CSEError("esimcse: momentum 1 keeps the momentum encoder as it starts, and momentum_init 'random' "
                           "starts it at random: every queued negative would come from a random network. Use "
                           "momentum < 1 (the paper's 0.995), or momentum_init 'copy'.",
                           fields=("momentum", "momentum_init"))

    def __init__(self, config: ESimCSEConfig, encoder=None):
        super().__init__(config, encoder)
        self.momentum_encoder = None
        self.queue = None
        if config.queue_size:
            # built after post_init, which must not redraw it; "random" is transformers' own initialisation of
            # the architecture, as the authors' BertModel(config) that from_pretrained leaves unloaded
            # fp32 whatever the encoder's dtype: a bf16 average would lose the (1 - lambda) share of each update
            self.momentum_encoder = build_encoder(config).float()
            if config.momentum_init == "copy":
                self.momentum_encoder.load_state_dict(self.encoder.state_dict())
            self.momentum_encoder.requires_grad_(False)
            self.queue = EmbeddingQueue(config.queue_size, config.hidden_size)  # every projector keeps the width

    @classmethod
    def collator(cls, tokenizer, config: ESimCSEConfig):
        from ...masking import with_masked_lm

        # repeated views are capped at the encoder's position limit: a sentence tokenized at that limit grows past it
        return with_masked_lm(WordRepetitionCollator(tokenizer, dup_rate=config.dup_rate, rule=config.dup_rule,
                                                     max_length=encoder_max_length(config.encoder_config),
                                                     prompt=config.prompt),
                              tokenizer, config)

    @classmethod
    def check_run_batches(cls, config: ESimCSEConfig, global_batch: int, train_rows: int | None) -> None:
        """The queue's size against the run's global batch and training rows (None: a stream), by the command line
        before the model is built, and when the trainer is built, before the first enqueue allocates the queue's
        rows (:func:`.momentum.check_queue_size`)."""
        if config.queue_size:
            check_queue_size(config.queue_size, global_batch, train_rows)

    def training_epoch_begins(self) -> None:
        """Empty the queue (the authors' ``pre_z1 = None`` at each epoch), unless ``empty_queue_each_epoch`` is
        off."""
        if self.queue is not None and self.config.empty_queue_each_epoch:
            self.queue.clear()

    @torch.no_grad()
    def momentum_embeddings(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """The momentum encoder's embeddings, dropout off, through the pooler and the online projector."""
        with eval_mode(self):  # the momentum encoder and the projector (flags restored after)
            pooled = self._encode(input_ids, attention_mask, token_type_ids, encoder=self.momentum_encoder)
            return self.projected(pooled)

    def forward(self, input_ids, attention_mask, token_type_ids=None, mlm_input_ids=None, mlm_labels=None,
                **kwargs) -> CSEOutput:
        out = super().forward(input_ids, attention_mask, token_type_ids, mlm_input_ids, mlm_labels, **kwargs)
        if not self.training or self.queue is None:
            return out
        if self.queue.count():  # the negatives of this step: the queue before this batch joins it
            out.embeddings[QUEUE_INPUT] = self.queue.contents().to(out.embeddings["z1"].dtype)
        momentum_update(self.encoder, self.momentum_encoder, self.config.momentum)
        self.queue.enqueue(gather_with_grad(self.momentum_embeddings(*first_view(input_ids, attention_mask,
                                                                                  token_type_ids))))
        return out
