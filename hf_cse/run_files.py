"""The names of what a training run writes into its output folder, in one module that imports nothing heavy: the
checks of the command line that run before torch is imported (:mod:`hf_cse.cli.entry_points`) read them as the later
ones do (:mod:`hf_cse.cli.output_dir`, :mod:`hf_cse.checkpoints`, the export and the trainer)."""

from __future__ import annotations

#: the Trainer's checkpoint folders are ``checkpoint-<step>`` (transformers' ``PREFIX_CHECKPOINT_DIR``; a test checks
#: they agree)
CHECKPOINT_PREFIX = "checkpoint"
#: the settings of the training run that owns a folder, written when it starts
RUN_RECORD_FILE = "hf_cse_run.json"
#: keys of the run record under another name than their flag's: the encoder and DiffCSE's generator, a local folder
#: resolved (a ``--config`` of the record reaches it from any folder); the generator's config field is not recorded
#: beside it (records written before lack this rule and hold both: the resolved one is read)
RECORD_NAMES = {"encoder": "model_name_or_path", "generator": "generator_name_or_path"}
#: the settings of the run a checkpoint was saved by, beside its model's config.json (:mod:`hf_cse.run_settings`)
RUN_SETTINGS_FILE = "hf_cse_settings.json"
#: the key of the run record holding the content of the local training files (name -> size and hash; a local
#: ``dataset_name`` folder's files as ``<folder name>/<path in it>``): records written before it existed lack it, and
#: those written before the folder's files were recorded lack their keys, and resume as they did
TRAIN_FILE_CONTENT = "train_file_content"
#: the key of the run record holding how the run was scored and its checkpoint chosen (dev data, evaluation and save
#: schedule, best-model selection): not compared on resume (watching a run differently continues the same run)
#: and absent from records written before it existed
DEV_AND_SELECTION = "dev_and_selection"
#: the key of the run record holding the run's other training arguments that its checkpoints record and the Trainer
#: compares on resume (:data:`hf_cse.run_settings.TRAINING_SETTINGS`: the optimizer, clipping, data order), kept for
#: a rerun from the record; not compared by the record (absent from records written before it existed)
TRAINING_ARGUMENTS = "training_arguments"
#: in a checkpoint's settings (:data:`RUN_SETTINGS_FILE`), the key under :data:`DEV_AND_SELECTION` of the dev data's
#: description and content hash (:func:`hf_cse.evaluation.evaluators.dev_data_fingerprint`): a run resumed on other
#: dev data chooses its best checkpoint again from the evaluations on the new data (:mod:`hf_cse.trainer_resume`);
#: absent from checkpoints saved before it existed
DEV_DATA = "dev_data"
#: the key of the run record naming the modules of the user's own the run imported (``--import_module``: its loss or
#: method may be registered there), so that a rerun from the record can be told to import them; not compared on resume
USER_MODULES = "user_modules"
#: the record of a finished run (data, arguments, final metrics), written last: its presence means the run finished
TRAINING_INFO_FILE = "training_info.json"
#: the final training metrics a finished run writes (the Trainer's ``save_metrics("train")``), which its record holds
#: too (``training_info.json``'s ``train_metrics``)
TRAIN_RESULTS_FILE = "train_results.json"
#: the folder of a run's TensorBoard logs (``--report_to tensorboard``): transformers' ``default_logdir()``,
#: ``runs/<date>_<host>``, in the output folder; each start or resume of a run adds a folder there
TENSORBOARD_FOLDER = "runs"
#: the logged curves, drawn at the end of a run
CURVES_FILE = "training_curves.png"
#: a LoRA run's adapter weights
ADAPTER_FOLDER = "adapter"
#: the weight files save_pretrained writes (whole or sharded, with the shards' index): exact shapes, so that a file
#: of the user's that merely starts with "model" (model_v1_backup.safetensors) is never taken for a run's
WEIGHT_FILES = ("model.safetensors", "model-[0-9]*-of-[0-9]*.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "pytorch_model-[0-9]*-of-[0-9]*.bin", "pytorch_model.bin.index.json")
#: the run folder's own sentence-transformers files, naming the modules of its export (their paths inside it), so
#: that ``SentenceTransformer(<run folder>)`` loads the export: sentence-transformers reads a folder's ``modules.json``
#: before its ``config.json``, here the method model's, which transformers does not know without hf_cse
#: (:func:`hf_cse.export.folders.point_run_folder_at_export`)
RUN_LOADER_FILES = ("modules.json", "config_sentence_transformers.json")
#: the run's own sentence-transformers export, inside its folder: the one :data:`RUN_LOADER_FILES` point at
RUN_EXPORT_FOLDER = "sentence-transformers"
