"""DiffCSE's configuration (:class:`DiffCSEConfig`): the :class:`hf_cse.models.config.CSEConfig` fields plus the
replaced-token-detection (RTD) settings of :class:`hf_cse.models.diffcse.model.DiffCSEModel`, their choices, and the
settings each acts only with."""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Literal

from ...errors import CSEError
from ..config import CSEConfig, ProjectorName
from .edits import EDIT_OPERATIONS
from .generators import GENERATOR_FILLS, UNIGRAM

RTD_REDUCTIONS = ("mean", "sum")
DISCRIMINATOR_INITS = ("encoder", "random")
# choices as types (the names are kept once, in the tuples)
EditOperation = Literal[EDIT_OPERATIONS]  # type: ignore[valid-type]
GeneratorFill = Literal[GENERATOR_FILLS]  # type: ignore[valid-type]
RTDReduction = Literal[RTD_REDUCTIONS]  # type: ignore[valid-type]
DiscriminatorInit = Literal[DISCRIMINATOR_INITS]  # type: ignore[valid-type]

#: what the RTD settings act only with (:func:`hf_cse.hyperparameter_rules.field_needs`): the RTD loss weighed in;
#: an edit a generator makes (delete removes tokens); a masked LM as the generator (unigram has no sampling, dropout or
#: fill choice)
RTD_ON = [("lambda_rtd", ">", 0)]
EDITS_BY_A_GENERATOR = ("edit_operation", "!=", "delete")
A_MODEL_GENERATOR = ("generator_name_or_path", "not_in", [None, UNIGRAM])


class DiffCSEConfig(CSEConfig):
    r"""Configuration of :class:`~hf_cse.models.diffcse.model.DiffCSEModel`: the :class:`CSEConfig` fields plus the
    replaced-token-detection (RTD) task; each field's ``metadata["help"]`` says what it means. Defaults are the paper's
    BERT STS setting."""

    model_type = "hf_cse_diffcse"
    method = "diffcse"

    projector: ProjectorName = field(default="batchnorm", metadata={
        "help": "training-time head on the pooled vector: batchnorm (DiffCSE's ProjectionMLP, App. A), mlp (Table 5's "
                "'w/o BN'), linear, none"})
    lambda_rtd: float = field(default=0.005, metadata={
        "help": "DiffCSE: weight lambda of the RTD loss (paper: 0.005 for STS, 0.05 for transfer)",
        "rule": "non_negative"})
    masking_ratio: float = field(default=0.30, metadata={
        "help": "DiffCSE: share of tokens edited (0.30 BERT, 0.20 RoBERTa: Table 12; Table 7 sweeps it)",
        "rule": "edit_share", "needs": RTD_ON})
    edit_operation: EditOperation = field(default="replace", metadata={
        "help": "DiffCSE: how sentences are edited: replace (the paper's), insert, delete (Table 4)", "needs": RTD_ON})
    generator_name_or_path: str | None = field(default=None, metadata={
        "help": "DiffCSE generator: a masked LM (paper: distilbert-base-uncased / distilroberta-base) or 'unigram' "
                "(no weights; departs from the paper); attached after the model is built, never saved with it "
                "(run_unsup.py: unigram when not given)", "needs": [*RTD_ON, EDITS_BY_A_GENERATOR]})
    generator_sampling: bool = field(default=False, metadata={
        "help": "DiffCSE: sample the generator's tokens instead of argmax (paper text: sampling; code: argmax)",
        "needs": [*RTD_ON, EDITS_BY_A_GENERATOR, A_MODEL_GENERATOR]})
    generator_train_mode: bool = field(default=True, metadata={
        "help": "DiffCSE: run the generator with dropout on in training (the authors' code: model.train() reaches "
                "it) or off (false)", "needs": [*RTD_ON, EDITS_BY_A_GENERATOR, A_MODEL_GENERATOR]})
    generator_fill: GeneratorFill = field(default="all", metadata={
        "help": "DiffCSE: generator tokens at every position (all, the authors' code) or only at [MASK] positions "
                "(masked, ELECTRA); insert edits always fill the inserted tokens only",
                "needs": [*RTD_ON, ("edit_operation", "==", "replace"), A_MODEL_GENERATOR]})
    rtd_reduction: RTDReduction = field(default="mean", metadata={
        "help": "DiffCSE: L_RTD as the mean over all positions incl. [CLS] and padding (mean, the authors' code; "
                "lambda was tuned for it) or the sum of the paper's formula (sum)", "needs": RTD_ON})
    rtd_ignore_pad: bool = field(default=False, metadata={
        "help": "DiffCSE: leave padding positions out of L_RTD (the discriminator then reads the pad id there); "
                "false, the authors' code: padding enters L_RTD with label 0 and id 0, as their g_pred * "
                "attention_mask writes it (the pad id itself for BERT; <s> for RoBERTa, whose pad id is 1)",
                "needs": RTD_ON})
    discriminator_init: DiscriminatorInit = field(default="encoder", metadata={
        "help": "DiffCSE: discriminator starts from the encoder's checkpoint (encoder, the paper) or at random",
        "needs": RTD_ON})

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        choices = {"edit_operation": EDIT_OPERATIONS, "generator_fill": GENERATOR_FILLS,
                   "rtd_reduction": RTD_REDUCTIONS, "discriminator_init": DISCRIMINATOR_INITS}
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise CSEError(f"DiffCSE: unknown {name} {getattr(self, name)!r}. Valid: {', '.join(valid)}.")
        if self.do_mlm:
            raise CSEError("DiffCSE: do_mlm does not apply (its masked copies feed the RTD task); drop do_mlm.")

    @property
    def card_training_terms(self) -> list[str]:
        generator = self.generator_name_or_path or UNIGRAM
        departs = (" (unigram replacements counted on the training corpus: this departs from the paper, whose "
                   "generator is a frozen masked LM)" if generator == UNIGRAM else "")
        return [f"`rtd`: replaced-token detection (DiffCSE's conditional ELECTRA objective) with weight "
                f"{self.lambda_rtd:g}: a discriminator conditioned on the sentence embedding tells which tokens the "
                f"generator `{Path(str(generator)).name}` replaced in a copy with {self.masking_ratio:.0%} of them "
                f"masked{departs}."]
