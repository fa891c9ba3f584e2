"""The output folder of the evaluation command (``hf-cse-eval``), the second job kind of the one output-folder policy
(:mod:`hf_cse.cli.output_dir` has the policy's summary and the training job): another evaluation's results are
refused; the partial results of the same command (the same models and settings), stopped before it finished, are
continued: the same command keeps the tasks it finished and runs the others (:mod:`hf_cse.cli.eval_run`), unless a model
folder's weights changed since they were scored (retrained in place: refused); files
that are not results are left alone. ``--overwrite_output_dir`` replaces another evaluation's results, but only when
the new evaluation writes its first result (:meth:`hf_cse.cli.eval_run.ModelsEvaluation.replace_earlier`): a model
that fails to load, or a stop before then, leaves them as they were. A training run's folder is
refused, and the default folder is chosen beside the model evaluated."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checkpoints import run_marks, training_run_files
from ..checks import local_resolved, resolved_path
from ..errors import CSEError
from ..files import weights_fingerprint
from ..output_folder import OutputFolderError, claim_output_dir, listing, matching
from ..run_files import TRAINING_INFO_FILE, WEIGHT_FILES
from ..run_settings import in_brief
from ..writing import json_safe
from .output_dir import OVERWRITE_FLAG, CommandJob, setting_differences

if TYPE_CHECKING:
    from ..evaluation.results import EvalResults

logger = logging.getLogger(__name__)

#: files that make a folder a model's (transformers' or sentence-transformers')
MODEL_FILES = ("config.json", "modules.json", *WEIGHT_FILES)

#: an evaluation's settings naming a path: compared resolved (given relative then, absolute now: the same folder)
EVAL_PATH_SETTINGS = ("senteval_data_dir", "eval_file")


@dataclass
class Evaluation(CommandJob):
    """An evaluation of ``models`` with ``settings`` (what shapes its results, JSON-safe; recorded in each results
    entry's ``settings["command"]``): the same command, stopped before it finished, left results of the same models
    and settings (a task in ``unfinished_tasks``, or fewer models than asked)."""

    models: list[str]
    settings: dict[str, Any] = field(default_factory=dict)
    folder_hint: str = "give a folder for results.json, results.md and the plots"

    def check(self, out: Path) -> None:
        """Not into a training run's folder: results there would mix with the run's files (which its
        --overwrite_output_dir removes), and an unfinished run's relaunch would refuse to resume it."""
        run = training_run_files(out)
        finished = (out / TRAINING_INFO_FILE).exists()
        if run and not finished:
            raise OutputFolderError(f"--output_dir {out} holds an unfinished training run ({', '.join(run[:2])}): "
                                    "results there would stop the same training command from resuming it. Choose "
                                    f"another folder, e.g. {out.name}-eval beside it.")
        if finished:
            raise OutputFolderError(f"--output_dir {out} is a finished training run's folder ({TRAINING_INFO_FILE}): "
                                    "results there would mix with the run's files. Choose another folder, e.g. "
                                    f"{out / EVAL_FOLDER} (where results of that run's own model go by default).")
        names = sorted(p.name for p in out.iterdir() if p.is_file()) if out.is_dir() else []
        model_files = matching(names, MODEL_FILES)
        if model_files:  # an encoder's folder, a sentence-transformers export (pushed or copied with its files)
            raise OutputFolderError(f"--output_dir {out} holds a model ({', '.join(model_files[:2])}): results there "
                                    "would mix with its files. Choose another folder, e.g. "
                                    f"{_beside_local_model(out) if _is_run_folder(out.parent) else out.name + '-eval'}"
                                    " beside it.")

    def left_behind(self, out: Path) -> list[str]:
        from ..evaluation.report import report_files  # the evaluation stack: not for the training checks

        return [str(p.relative_to(out)) for p in report_files(out)]

    def own_files(self, out: Path, left: list[str]) -> list[str]:
        return []  # replaced when the new evaluation writes its first result, not removed before (module doc)

    def remove(self, out: Path, names: list[str]) -> None:
        pass

    def started_over(self, out: Path) -> None:
        pass

    def partial_entries(self, out: Path) -> list[dict] | None:
        """The entries of ``out``'s results.json when they are partial results of the same models, else None; read
        as JSON alone, so that the command can tell another evaluation's results before it loads the evaluation
        stack (:func:`refuse_other_results`)."""
        try:
            saved = json.loads((out / "results.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        entries = saved.get("models", [saved]) if isinstance(saved, dict) else []
        entries = [e for e in entries if isinstance(e, dict)]
        if not entries or len(entries) > len(self.models) or not all(map(same_model, entries, self.models)):
            return None
        if len(entries) == len(self.models) and not any(e.get("unfinished_tasks") for e in entries):
            return None  # finished
        return entries

    def _partial_records(self, out: Path) -> list[EvalResults] | None:
        """The records of ``out``'s results.json when they are partial results of the same models, else None (also
        when one cannot be read as a record: hand-edited, or not hf_cse's)."""
        from ..evaluation.results import EvalResults

        entries = self.partial_entries(out)
        if entries is None:
            return None
        try:
            return [EvalResults.from_dict(e) for e in entries]
        except CSEError:
            return None

    def changed_settings(self, records: list[EvalResults]) -> list[str]:
        """How the settings recorded with the partial results differ from this evaluation's (all of them when
        none were recorded)."""
        for record in records:
            recorded = (record.settings or {}).get("command")
            if not isinstance(recorded, dict):  # written by an older hf_cse: nothing tells it is the same
                return ["its settings were not recorded"]
            then, now = ({k: resolved_path(v) if k in EVAL_PATH_SETTINGS else v for k, v in settings.items()}
                         for settings in (recorded, json_safe(self.settings)))
            changed = setting_differences(then, now)
            if changed:
                return changed
        return []

    def changed_model(self, records: list[EvalResults]) -> str | None:
        """Why the first model whose partial results were scored on other weights than its folder holds now cannot
        keep them (retrained or replaced in place since: its :func:`~hf_cse.files.weights_fingerprint` is not the
        one recorded), or None. A model whose weights were recorded as none (a Hub id, which is no folder) keeps
        them as before; a folder whose weights were not recorded (results of an hf_cse before they were) does not:
        nothing tells they are the weights it holds now. A folder that holds no weights now is left to loading it,
        which says what is missing."""
        for record, model in zip(records, self.models):  # the model as given now: reached from this folder
            recorded = (record.settings or {}).get("model_weights") or None
            now = weights_fingerprint(model)
            if now is not None and recorded != now:
                return (f"the model at {model} changed since the stopped evaluation scored it (its weights are "
                        "not the ones scored then: retrained or replaced)" if recorded else
                        f"the stopped evaluation did not record the weights of the model at {model} (an older "
                        "hf_cse), so nothing tells they are the ones scored")
        return None

    @staticmethod
    def other_results_error(out: Path, left: list[str]) -> OutputFolderError:
        return OutputFolderError(f"--output_dir {out} already holds the results of an evaluation "
                                 f"({', '.join(left[:3])}{', ...' if len(left) > 3 else ''}); pass "
                                 f"{OVERWRITE_FLAG} to replace them, or choose another folder.")

    def continue_interrupted(self, out: Path, left: list[str]) -> list[EvalResults]:
        """The same evaluation's partial results are kept, a record for each model it reached, for this evaluation
        to finish (the partial files of the writes it was killed in are removed); another evaluation's results, or
        the partial results of the same models with other settings, are refused."""
        from ..evaluation.report import remove_unfinished_writes

        records = self._partial_records(out)
        if records is None:
            raise self.other_results_error(out, left)
        changed = self.changed_settings(records)
        if changed:
            raise OutputFolderError(f"--output_dir {out} holds the partial results of an evaluation with other "
                                    f"settings ({in_brief(changed)}): rerun that "
                                    f"command to finish it, pass {OVERWRITE_FLAG} to start over, or choose another "
                                    "folder.")
        changed_model = self.changed_model(records)
        if changed_model:  # its kept scores would be another model's, shown as this one's
            raise OutputFolderError(f"--output_dir {out} holds the partial results of an evaluation, but "
                                    f"{changed_model}: rerun with {OVERWRITE_FLAG} to score everything anew, or "
                                    "choose another --output_dir.")
        logger.warning("%s holds the partial results of the same evaluation, stopped before it finished: keeping "
                       "what it finished and evaluating the rest", out)
        remove_unfinished_writes(out)
        return records


#: the folder of the results of a model folder's evaluation, inside it; and of the others under the current folder
EVAL_FOLDER, EVAL_RESULTS_DIR = "eval", "eval_results"


def _is_run_folder(folder: Path) -> bool:
    return bool(run_marks(folder))


def _beside_local_model(model: Path) -> Path:
    """``<model>/eval``; for a part of a training run (its export, a checkpoint) ``<run>/eval-<part>``, so that a
    run's --overwrite_output_dir, which removes its parts, keeps the results; and beside an unfinished run's folder
    (``<run>-eval...``), since files in it would stop that run from resuming."""
    run = model if _is_run_folder(model) else model.parent if _is_run_folder(model.parent) else None
    if run is None:
        return model / EVAL_FOLDER
    inside = EVAL_FOLDER if run == model else f"{EVAL_FOLDER}-{model.name}"
    return run / inside if (run / TRAINING_INFO_FILE).is_file() else run.parent / f"{run.name}-{inside}"


def _model_name(model: str) -> str:
    """A folder name for ``model``: the packaged encoder's name, a folder's name, a Hub id with ``--`` for ``/``."""
    from ..encoders import DEFAULT_ENCODER_HUB_ID, is_packaged_encoder

    path = Path(model).expanduser()
    if path.exists():
        if is_packaged_encoder(path):
            return Path(DEFAULT_ENCODER_HUB_ID).name
        path = path.resolve()  # a part of a run (its export, a checkpoint) by the run's name too: runs differ by it
        return f"{path.parent.name}-{path.name}" if _is_run_folder(path.parent) else path.name
    return model.replace("/", "--")


def default_eval_output_dir(models: Sequence[str]) -> Path:
    """Where ``hf-cse-eval`` writes without ``--output_dir``: next to the one model it scores when that is a folder
    of one's own (:func:`_beside_local_model`), else ``eval_results/<model name>`` under the current folder (a Hub
    id, the packaged default encoder, several models: ``eval_results/<name>+<name>``). Two models never share a
    folder by default; a folder holding another evaluation's results is still refused."""
    from ..encoders import is_packaged_encoder

    if len(models) == 1:
        path = Path(models[0]).expanduser()
        if path.is_dir() and not is_packaged_encoder(path):
            return _beside_local_model(path)
    return Path(EVAL_RESULTS_DIR) / "+".join(_model_name(m) for m in models)


def prepare_eval_output_dir(output_dir: str, overwrite: bool, models: Sequence[str] = (),
                            settings: dict[str, Any] | None = None) -> tuple[Path, list[EvalResults]]:
    """Evaluation's output folder (module doc), created and locked for the rest of the evaluation (the caller's
    entry point is marked with :func:`hf_cse.folder_lock.releases_folder_locks`), and the records of the models
    the same evaluation, stopped before it finished, left there to finish (empty for a new evaluation).
    ``settings``: what shapes the results besides the models (:class:`Evaluation`). ``overwrite``: another
    evaluation's results are left in place, for the evaluation to replace when it writes its first result."""
    job = Evaluation(list(models), dict(settings or {}))
    out, earlier = claim_output_dir(output_dir, job, flag="--output_dir", overwrite=overwrite, hold=True)
    left = job.left_behind(out) if overwrite else []
    if left:
        logger.warning("%s: the earlier results in %s (%s) are replaced when this evaluation writes its first result; "
                       "kept until then", OVERWRITE_FLAG, out, listing(left))
    return out, earlier or []


def same_model(entry: dict, model: str) -> bool:
    """Whether a results entry is of ``model`` as given now: the same name, or the same folder (recorded resolved,
    ``settings["model_folder"]``) named otherwise, relative then and absolute now. A relative name recorded without
    its folder is compared as a name: it meant a folder of the place it was given from."""
    if entry.get("model") == model:
        return True
    folder = (entry.get("settings") or {}).get("model_folder")
    return isinstance(folder, str) and folder == local_resolved(model)


def refuse_other_results(output_dir: str, models: Sequence[str]) -> None:
    """The refusals of :func:`prepare_eval_output_dir` that need only the folder and the models, made by the command
    before it imports the evaluation stack (seconds): a training run's or a model's folder, and a results.json that
    is not the partial results of the same models. Nothing is created or locked; the rest (the same models' settings
    and weights, the other report files) is checked when the folder is claimed."""
    out = Path(output_dir).expanduser()
    if not out.is_dir():
        return  # none yet, or a file: claiming it says so
    job = Evaluation(list(models))
    job.check(out)
    if (out / "results.json").is_file() and job.partial_entries(out) is None:
        raise job.other_results_error(out, [name for name in ("results.json", "results.md") if (out / name).exists()])
