"""An hf_cse run's folder (or one of its checkpoints) named where a plain encoder is wanted: the encoder a run starts
from (``model_name_or_path``, :meth:`~hf_cse.models.base.CSEPreTrainedModel.from_encoder`). Its config is an hf_cse
method model's (``model_type`` ``hf_cse_<method>``: the encoder wrapped with its training head), not an encoder's,
and was refused as "not a text model". The fixes: start from the run's export (``<run>/sentence-transformers``, the
merged plain encoder), or go on with the run itself from its last checkpoint (``resume_from_checkpoint``).

Imports nothing heavy: the command line's checks before torch is imported (:mod:`hf_cse.cli.entry_points`) use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .checkpoints import checkpoint_step, is_checkpoint_name, saved_config
from .errors import CSEError
from .run_files import CHECKPOINT_PREFIX, RUN_EXPORT_FOLDER

#: how the ``model_type`` of every hf_cse method model's config starts (``hf_cse_simcse``, ``hf_cse_diffcse``...)
METHOD_MODEL_TYPE_PREFIX = "hf_cse_"


def is_method_model_config(config) -> bool:
    """Whether ``config`` (a config object, or a config.json's dict) is an hf_cse method model's: its model_type has
    the prefix, and it nests its encoder's config (a custom-code encoder may name its own model_type ``hf_cse_...``)."""
    def get(name):
        return config.get(name) if isinstance(config, dict) else getattr(config, name, None)

    return str(get("model_type") or "").startswith(METHOD_MODEL_TYPE_PREFIX) and get("encoder_config") is not None


@dataclass(frozen=True)
class RunAsEncoder:
    """What the fixes name for ``source``, an hf_cse method model's folder or Hub id: its method, its run folder,
    the run's export (None where it has none here) and the run's last checkpoint (None where it saved none)."""

    source: str
    method: str
    run: Path | None
    export: Path | None
    last_checkpoint: Path | None

    @classmethod
    def of(cls, source: str, model_type: str) -> RunAsEncoder:
        method = str(model_type)[len(METHOD_MODEL_TYPE_PREFIX):] or "method"
        path = Path(str(source)).expanduser()
        if not path.is_dir():  # a Hub id: nothing to look into here
            return cls(str(source), method, None, None, None)
        run = path.parent if is_checkpoint_name(path.name) else path
        export = path / RUN_EXPORT_FOLDER
        checkpoints = sorted((p for p in run.glob(f"{CHECKPOINT_PREFIX}-*") if p.is_dir() and
                              is_checkpoint_name(p.name)), key=checkpoint_step)
        return cls(str(source), method, run, export if export.is_dir() else None,
                   checkpoints[-1] if checkpoints else None)

    @property
    def what(self) -> str:
        return (f"holds an hf_cse {self.method} model (a training run's output, model_type "
                f"'{METHOD_MODEL_TYPE_PREFIX}{self.method}': the encoder wrapped with its training head), not a plain "
                "encoder")

    def from_encoder_error(self, model_class: str) -> CSEError:
        """The error of ``from_encoder(source)``, in the Python API's terms (``model_class``: the method model's)."""
        if self.export is not None:
            new = f"from_encoder({str(self.export)!r}) (its export: the merged plain encoder)"
        else:
            new = (f"its export (hf_cse.export.to_sentence_transformer({self.source!r}, folder), the merged plain "
                   "encoder): from_encoder(folder)")
        go_on = f"{model_class}.from_pretrained({self.source!r}) loads it"
        if self.last_checkpoint is not None:
            go_on += (f", and the Trainer's train(resume_from_checkpoint={str(self.last_checkpoint)!r}) with "
                      f"output_dir={str(self.run)!r} goes on with its training")
        return CSEError(f"{self.source} {self.what}. To start a new run from what it learned, use {new}; to go on "
                        f"with the run itself, {go_on}.")


def local_run_as_encoder(source: str) -> RunAsEncoder | None:
    """:class:`RunAsEncoder` of a local folder whose ``config.json`` is an hf_cse method model's, else None (read from
    the JSON file alone: no model class is needed)."""
    path = Path(str(source)).expanduser()
    config = saved_config(path) if path.is_dir() else None
    return RunAsEncoder.of(source, config["model_type"]) if config and is_method_model_config(config) else None
