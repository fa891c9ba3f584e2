"""What an export is checked against its source before anything is loaded (the command line calls these before the
model is loaded, :func:`hf_cse.export.to_sentence_transformer` again): the output folder must stay clear of the
checkpoint and of the encoder it was trained from, and lie in no other run's folder, the truncation length must be
one the encoder takes (:func:`hf_cse.encoders.seq_length_problem`, the rule training follows too), and evaluation
results must be the exported model's own, measured on the weights it holds now and on the embedding the export
ships (results of an export of it, ``<run>/sentence-transformers``, are compared with the weights the export writes
once they are written: :func:`check_results_export_weights`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..encoders import encoder_max_length, read_model_json, seq_length_problem
from ..evaluation.results import EvalResults
from ..files import weights_fingerprint
from ..folder_lock import held_here
from ..models.pooling import POOLERS, ST_POOLING_MODES, applies_projector, exported_pooler, pooler_at_test
from ..output_folder import same_or_inside
from ..run_files import RUN_EXPORT_FOLDER
from ..trainer_folder import runs_holding
from .errors import ExportError
from .folders import is_export_folder


def _local_folder(name: Any) -> Path | None:
    """``name`` as a local folder, or None (a Hub id, nothing)."""
    if not isinstance(name, (str, Path)) or not str(name):
        return None
    path = Path(name).expanduser()
    return path if path.is_dir() else None


def source_config(model_or_path: Any) -> dict[str, Any]:
    """The hf_cse config of the model to export, as a dict: its config.json (a folder, or a Hub id in the cache), or
    a loaded model's config; empty when it cannot be read (the loading then says why)."""
    if isinstance(model_or_path, (str, Path)):
        config = read_model_json(str(Path(model_or_path).expanduser()) if _local_folder(model_or_path)
                                 else str(model_or_path), "config.json")
        return config if isinstance(config, dict) else {}
    config = getattr(model_or_path, "config", None)
    return config.to_dict() if hasattr(config, "to_dict") else {}


def check_clear_of_source(out_dir: Path, model_or_path: Any, config: dict[str, Any]) -> None:
    """Refuse an output folder that is or holds the checkpoint, or is, holds or lies inside the encoder's folder
    (the checkpoint's ``base_encoder``): an export there would replace or mix with them, ``overwrite`` or not; the
    refusal offers a folder the export takes (:func:`folder_to_offer`). A run's folder holds the export of that run's
    final model only (:func:`check_run_owns_source`)."""
    source = _local_folder(model_or_path)
    if source is not None and same_or_inside(source, out_dir):
        raise ExportError(f"out_dir {out_dir} holds the checkpoint {model_or_path}; exporting there would replace "
                          f"it. Choose another folder, e.g. {folder_to_offer(source)}.")
    encoder = _local_folder(config.get("base_encoder"))
    if encoder is not None and (same_or_inside(encoder, out_dir) or same_or_inside(out_dir, encoder)):
        raise ExportError(f"out_dir {out_dir} is, holds or lies inside the folder of the encoder {encoder} this "
                          "model was trained from; exporting there would replace or mix with it, even with "
                          f"overwrite=True. Choose another folder, e.g. {folder_to_offer(source)}.")
    check_run_owns_source(out_dir, model_or_path)


def folder_to_offer(source: Path | None) -> str:
    """The export folder a refusal offers for the model folder ``source``, one the export takes: for a folder inside
    a training run (its ``checkpoint-N``), one beside the run, ``<run>-checkpoint-N`` (inside the run it is refused:
    the run's checkpoint rotation would delete it, and ``<run>/sentence-transformers`` is its final model's); else
    ``<source>/sentence-transformers``."""
    if source is None:  # a Hub id
        return f"<checkpoint>/{RUN_EXPORT_FOLDER}"
    runs = runs_holding(source)
    if runs:
        inside = source.expanduser().resolve().relative_to(runs[0])
        return str(runs[0].parent / "-".join((runs[0].name, *inside.parts)))
    return str(source / RUN_EXPORT_FOLDER)


def check_run_owns_source(out_dir: Path, model_or_path: Any) -> None:
    """Refuse an export into a training run's folder (its ``sentence-transformers/``) of a model that is not that
    run's: the run folder serves its export (its ``modules.json`` points there) while its own files and record
    describe the run's model, so the two would disagree. The run's own model is the run folder or one of its
    checkpoints, a model loaded from either, or a model exported by the process that holds the run (the run
    finishing); the export the run folder serves (``<run>/sentence-transformers``) is its final model's only (the
    run folder, or a model loaded from it): the run's record describes that one."""
    path = isinstance(model_or_path, (str, Path))
    source = _local_folder(model_or_path if path else getattr(model_or_path, "name_or_path", None))
    for run in runs_holding(out_dir):
        served = Path(out_dir).expanduser().resolve() == run / RUN_EXPORT_FOLDER  # the export the run folder loads
        if held_here(run) or (source is not None and (source.resolve() == run if served
                                                       else same_or_inside(source, run))):
            continue
        name = model_or_path if path else f"the loaded model ({source or 'not loaded from a folder'})"
        if served and source is not None and same_or_inside(source, run):
            raise ExportError(f"out_dir {out_dir} is the export the training run {run} serves (its modules.json "
                              f"points there), and {name} is not that run's final model: the run folder and its "
                              "record would describe another model than the one it serves. Export the run folder "
                              "there, or export the checkpoint to a folder outside the run.")
        raise ExportError(f"out_dir {out_dir} lies inside the training run {run}, and {name} is not that "
                          "run's model: the run folder would serve it while its own files describe another model. "
                          "Export the run's own model there (the run folder or one of its checkpoints), or choose "
                          "a folder outside the run.")


def unexportable_pooler(model_cls: type, test_pooler: str) -> str | None:
    """Why a model of ``model_cls`` with the test-time pooler ``test_pooler`` cannot be exported (known before it is
    built or trained), or None: a pooler mixing several layers has no sentence-transformers ``Pooling``, unless the
    method exports modules of its own (``sentence_transformers_modules``: PromptBERT's template)."""
    from ..models.base import CSEPreTrainedModel

    own = getattr(model_cls, "sentence_transformers_modules", None) is not \
        CSEPreTrainedModel.sentence_transformers_modules
    if own or test_pooler in ST_POOLING_MODES:
        return None
    return (f"this model's test-time pooler is {test_pooler!r}, which mixes several layers and has no plain "
            "sentence-transformers Pooling equivalent")


def test_pooler_of(model_cls: type, fields: dict[str, Any]) -> str:
    """The test-time pooler a model of ``model_cls`` built with the config ``fields`` will have (the config class's
    defaults for the fields not given)."""
    defaults = model_cls.config_class()
    pooler, mlp_only_train, projector = (fields.get(k, getattr(defaults, k))
                                         for k in ("pooler_type", "mlp_only_train", "projector"))
    return pooler_at_test(pooler, mlp_only_train, projector)


def check_pushable(model_cls: type, test_pooler: str, repo_id: str) -> None:
    """Refuse ``push_to_hub`` (which pushes the export made after training) for a model that cannot be exported,
    before training: the run would otherwise train to its end and fail at the push."""
    problem = unexportable_pooler(model_cls, test_pooler)
    if problem:
        raise ExportError(f"push_to_hub {repo_id} pushes the sentence-transformers export made after training, and "
                          f"{problem}; train with pooler_type cls, avg or max to push it, or drop push_to_hub.",
                          fields=("push_to_hub", "pooler_type"))


def check_export_length(max_seq_length: int | None, encoder_config: Any, encoder: str = "") -> None:
    """Refuse a truncation length outside [2, the encoder's position limit] (None: the default, always fine)."""
    if max_seq_length is None:
        return
    limit = encoder_max_length(encoder_config, cap=None) if encoder_config else None
    problem = seq_length_problem(int(max_seq_length), limit, encoder)
    if problem:
        raise ExportError(f"{problem}.", fields=("max_seq_length",))


#: the export's default truncation cap, whatever longer positions the encoder has
MAX_EXPORT_LENGTH = 512


def export_length(max_seq_length: int | None, encoder_config: Any, served: int | None = None) -> int | None:
    """The truncation length an export will have: ``max_seq_length`` where given, else the length the encoder was
    served with (``served``: ``config.encoder_max_seq_length``), at most its position limit capped at
    :data:`MAX_EXPORT_LENGTH`; None when the config names no limit (known once the model is loaded)."""
    if max_seq_length is not None:
        return int(max_seq_length)
    limit = encoder_max_length(encoder_config, cap=None) if encoder_config else None
    if limit is None:
        return None
    limit = min(limit, MAX_EXPORT_LENGTH)
    return min(limit, served or limit)


def check_results_length(results: EvalResults, length: int | None, source: str = "eval_results") -> None:
    """Refuse evaluation results measured at another truncation length than the export's (``run_eval.py``'s
    ``settings["max_length"]``): the card would show them for a model that embeds longer (or shorter) sentences
    otherwise. Results recording no length are taken."""
    recorded = (results.settings or {}).get("max_length")
    if recorded is None or length is None or int(recorded) == int(length):
        return
    raise ExportError(f"{source} were measured with max_length {recorded}, but the export truncates at "
                      f"max_seq_length {length}: the card would show them for another embedding. Give results of "
                      f"run_eval.py with max_seq_length {length}, export with max_seq_length {recorded}, or leave "
                      "eval_results out.", fields=("max_seq_length",))


def check_results_model(results: EvalResults, model_or_path: Any, out_dir: Path, source: str = "eval_results") -> None:
    """Refuse evaluation results recorded for another model than the one exported: the model they name
    (``results.json``'s ``"model"``) must be the checkpoint, the export's own folder, or another hf_cse export
    (``run_eval.py`` on the run's ``<run>/sentence-transformers``, as the README's workflow scores it) whose
    recorded weights are the ones the export writes (:func:`check_results_export_weights`, once they are written:
    the same model, in the same form); paths are resolved, a Hub id is compared as it is written. Where they record
    the weights they measured (``settings["model_weights"]``: :func:`hf_cse.files.weights_fingerprint`), the folder
    they name must hold those weights still, not those of a retraining into it. Results naming no model, or the
    checkpoint or out_dir without recorded weights (an older ``run_eval.py``'s), or an export of a loaded model, are
    taken as they are; another export's results recording no weights are refused (nothing tells they are this
    model's)."""
    recorded = results.model or (results.settings or {}).get("model")
    if not recorded or not isinstance(model_or_path, (str, Path)):
        return
    recorded = str(recorded)
    if Path(recorded).expanduser().exists() or Path(model_or_path).expanduser().exists():
        named = Path(recorded).expanduser().resolve()
        mine = [Path(model_or_path).expanduser().resolve(), Path(out_dir).expanduser().resolve()]
        weights = (results.settings or {}).get("model_weights")
        if named in mine or (weights and is_export_folder(named)):
            _check_results_weights(results, named, recorded, source)
            return
        if is_export_folder(named):
            raise ExportError(f"{source} holds the results of the export {recorded}, and they record no weights (an "
                              "older run_eval.py's), so nothing tells they are the exported model's: evaluate it "
                              "again with run_eval.py, or leave eval_results out.")
    elif recorded == str(model_or_path):
        return
    raise ExportError(f"{source} holds the results of {recorded}, not of the exported model {model_or_path}; give "
                      f"the results.json of run_eval.py for {model_or_path} (or for out_dir {out_dir}, or for an "
                      "export of it), or leave eval_results out.")


def _check_results_weights(results: EvalResults, folder: Path, recorded: str, source: str) -> None:
    """Refuse results whose recorded weights (``settings["model_weights"]``) ``folder`` no longer holds."""
    weights = (results.settings or {}).get("model_weights")
    if weights and weights != weights_fingerprint(folder):
        raise ExportError(f"{source} were measured on other weights of {recorded} than it holds now (it was "
                          "retrained or replaced since): evaluate it again with run_eval.py, or leave eval_results "
                          "out.")


def check_results_export_weights(results: EvalResults, model_or_path: Any, written: Path,
                                 source: str = "eval_results") -> None:
    """Once the export's weights are written (into ``written``): refuse results naming another folder than the
    checkpoint (out_dir, another export of it) whose recorded weights are not those weights -- another model's, or
    this model's exported with another head (a sentence-transformers folder's results record its own embedding, so
    only its weights tell). Results recording no weights were judged by :func:`check_results_model` alone."""
    recorded = results.model or (results.settings or {}).get("model")
    weights = (results.settings or {}).get("model_weights")
    if not (recorded and weights and isinstance(model_or_path, (str, Path))):
        return
    if Path(str(recorded)).expanduser().resolve() == Path(model_or_path).expanduser().resolve():
        return  # the checkpoint's own results: its weights were compared before it was loaded
    if weights != weights_fingerprint(written):
        raise ExportError(f"{source} holds the results of {recorded}, whose weights are not the ones this export "
                          f"writes for {model_or_path} (another model, or another head kept): give the results.json "
                          f"of run_eval.py for {model_or_path}, or for an export of it made as this one is, or leave "
                          "eval_results out.")


def exported_pooler_of(config: dict[str, Any], keep_projector: bool) -> str | None:
    """:func:`hf_cse.models.pooling.exported_pooler` from a checkpoint's config.json (None when it names no pooler)."""
    if not config.get("pooler_type"):
        return None
    test = pooler_at_test(config["pooler_type"], config.get("mlp_only_train", True), config.get("projector", "mlp"))
    return exported_pooler(test, keep_projector)


def check_onnx_head(backend: str, config: dict[str, Any], keep_projector: bool) -> None:
    """Refuse backend onnx for an export with a projection head (Dense modules: kept on request, or used by the test
    embedding), in one line before loading: its ONNX graph is the Transformer module alone, and
    :class:`hf_cse.export.onnx.OnnxEncoder` runs Transformer, Pooling and Normalize modules only."""
    projector = config.get("projector", "mlp")
    if backend != "onnx" or projector == "none" or not config.get("pooler_type"):
        return
    used = applies_projector(pooler_at_test(config["pooler_type"], config.get("mlp_only_train", True), projector))
    if keep_projector or used:
        why = "this model's embedding goes through" if used else "keep_projector keeps"
        raise ExportError(f"backend onnx runs Transformer, Pooling and Normalize modules on ONNX Runtime, and "
                          f"{why} its `{projector}` projection head (Dense modules, which it does not run): export "
                          f"it without backend onnx{'' if used else ', or without keep_projector'}.",
                          fields=("backend",) if used else ("backend", "keep_projector"))


def check_results_pooler(results: EvalResults, exported: str | None, source: str = "eval_results") -> None:
    """Refuse evaluation results measured on another embedding than the export ships: ``run_eval.py``'s ``pooler``
    setting must be the exported embedding's (``exported``: :func:`hf_cse.models.pooling.exported_pooler`); results
    of the model's own embedding (no pooler given: the test pooler, or for a sentence-transformers folder its own
    modules, recorded as what they do, e.g. ``avg (sentence-transformers Pooling)``; ``model`` before) and results
    recording no pooler are taken."""
    recorded = (results.settings or {}).get("pooler")
    if recorded is None or recorded == exported or recorded not in POOLERS:  # not a pooler of hf_cse's: own modules
        return
    if exported:
        ships = f"{exported!r} embedding. Give results of run_eval.py with pooler {exported!r}, or"
    else:
        ships = "embedding, which no pooler computes (a head kept after the test pooler);"
    raise ExportError(f"{source} holds scores of run_eval.py's pooler {recorded!r}; the card would show them for the "
                      f"export's {ships} leave eval_results out.")
