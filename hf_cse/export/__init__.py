"""Export hf_cse models as standard sentence-transformers folders, with a model card, and push them to the Hub.

    hf-cse-export outputs/simcse-infonce outputs/simcse-st --eval_results results.json
    hf-cse-export outputs/simcse-infonce outputs/simcse-st --push_to_hub me/simcse-minilm

What the export holds (written with sentence-transformers' own modules, so loading needs no custom code and
no ``trust_remote_code``):

* ``Transformer``: the trained encoder (``model.encoder``, LoRA adapters merged into its weights: a plain model
  that loads without peft; a bidirectional decoder's ``config.json`` says ``is_causal: false``, which a load and a
  copy sentence-transformers saves keep: eager attention is pinned only where the installed transformers does not
  follow it on batches without padding, :func:`hf_cse.export.modules.pin_eager_where_needed`) and its tokenizer;
  ``max_seq_length`` is the length a sentence-transformers encoder was served with (its own ``max_seq_length``,
  recorded in ``config.encoder_max_seq_length``: all-MiniLM-L6-v2's 256), else the encoder's limit
  (``max_position_embeddings`` minus RoBERTa's position offset, capped at 512), not the training length 32; a
  ``max_seq_length`` given must lie in [2, that limit uncapped] and leave a
  token of the text beside the special tokens and the prompt (the rules training follows:
  :func:`hf_cse.encoders.seq_length_problem`, :func:`hf_cse.tokenizer_match.check_room_for_text`).
* ``Pooling``: what the method uses at test time (``config.test_pooler``): ``cls_before_pooler``/``cls`` -> CLS
  token, ``avg`` -> mean over tokens, ``max`` -> max over tokens, ``last`` -> last token (``lasttoken``)
  (``hf_cse.models.pooling.ST_POOLING_MODES``). The model's ``prompt`` is the export's default prompt.
  ``avg_first_last``/``avg_top2`` mix layers and are refused (ExportError).
* ``Normalize``: when the model normalises its embeddings (``config.normalize``: the encoder's own Normalize).
* ``Dense``: the projection head, only when the test embedding uses it (``mlp_only_train=False``) or with
  ``keep_projector=True``: each head's own sentence-transformers form (:mod:`hf_cse.models.heads`): SimCSE's MLP =
  Dense + tanh, the unified gradient paradigm's linear head = Dense, DiffCSE's BatchNorm head = two Dense modules
  with the (eval-mode) BatchNorm statistics folded in (exact).
* Nothing else: DiffCSE's discriminator/generator and other training-only parts are not exported.
* ``README.md``: the model card (:mod:`hf_cse.model_card`) and ``hf_cse_config.json`` (the full hf_cse config, for
  provenance); the card's inputs are kept beside them (not uploaded) so a push can render it for its repo.

The export is checked before it is committed: the folder is reloaded with ``SentenceTransformer`` and its vectors
compared with the model's own ``sentence_embedding``. It is written into a temporary folder beside the target and
renamed into place, so a failure leaves nothing behind; a non-empty target needs ``overwrite=True``, which replaces
only the files the earlier export wrote (:func:`.folders.export_files`). A folder holding the checkpoint, the
encoder it was trained from, or any model that is not an earlier export is refused even then, and so are evaluation
results recorded for another model (an export of this one, ``<run>/sentence-transformers``, is this model where
the weights its results record are those the export writes) or measured on another embedding (``run_eval.py``'s
``pooler`` or ``max_length``: the card would claim them for the export's) (:mod:`hf_cse.export.sources`). The folder
is locked while it is written (:mod:`hf_cse.folder_lock`): a second export into it is refused.

This package is a face: the export itself is :func:`.sentence_transformers.to_sentence_transformer`; the jobs it
uses live in sub-modules: :mod:`.checkpoint` (model and tokenizer loading, tokenizer checks), :mod:`.modules`
(the sentence-transformers modules), :mod:`.folders` (the export's answers to the one output-folder policy,
:mod:`hf_cse.output_folder`, and atomic writing), :mod:`.verify`, :mod:`.card` (the card's
recorded inputs), :mod:`.training_info`, :mod:`.hub` (the push, :class:`HubPushError`), :mod:`.after_training`
(run_unsup.py's last step). The ``hf-cse-export`` command is :mod:`hf_cse.cli.export`.

Hub: :func:`push_export` uploads such a folder (``run_unsup.py --push_to_hub`` does it after training). The raw
hf_cse checkpoint can also be pushed with ``model.push_to_hub(repo)``; loading it back needs ``import hf_cse``
before ``AutoModel.from_pretrained(repo)`` (the classes are registered locally, not shipped as remote code: the
method modules import each other, which ``trust_remote_code`` folders cannot hold).
"""

from __future__ import annotations

from .after_training import export_after_training
from .card import CARD_INPUTS_FILE
from .checkpoint import check_tokenizer_fits
from .errors import ExportError
from .hub import HubPushError, push_export, take_over_hub_push
from .modules import HF_CSE_CONFIG_FILE, projector_to_dense, public_config_dict
from .sentence_transformers import to_sentence_transformer
from .sources import MAX_EXPORT_LENGTH
from .training_info import TRAINING_INFO_FILE, read_training_info, training_info_from_run
from .verify import PROBE_SENTENCES, reference_embeddings

__all__ = [
    "CARD_INPUTS_FILE", "HF_CSE_CONFIG_FILE", "MAX_EXPORT_LENGTH", "PROBE_SENTENCES",
    "TRAINING_INFO_FILE", "ExportError", "HubPushError", "check_tokenizer_fits", "export_after_training",
    "projector_to_dense", "public_config_dict", "push_export", "read_training_info", "reference_embeddings",
    "take_over_hub_push", "to_sentence_transformer", "training_info_from_run",
]
