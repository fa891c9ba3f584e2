"""MTEB tasks (the ``mteb`` package, ``pip install 'hf_cse[mteb]'``) on any model ``run_eval.py`` accepts.

``run_eval.py --tasks mteb:STS22,Banking77Classification`` runs MTEB's own task definitions and metrics; the
embeddings come from hf_cse's :class:`SentenceEncoder` (the model's test-time pooler; de-duplicated,
length-sorted batches, inference mode), wrapped as an MTEB encoder by :func:`mteb_encoder`.

Local data: :class:`LocalSTSTask` is an MTEB STS task whose ``load_data`` reads scored pairs from your files
instead of the Hub (``LocalSTSTask.from_file("sts-test.csv", "5", "6", "4", name="SentEvalSTSB")``; columns as
in :mod:`hf_cse.evaluation.custom_dev`). See docs/evaluation.md.

``mteb`` is imported on first use, so this module loads without it; :func:`require_mteb` says how to install it.
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
from pathlib import Path
from typing import Callable

from ..checks import InputError
from ..hub_reach import is_offline, offline_fix, offline_if_unreachable
from ..task_names import mteb_name_problem, mteb_revision_problem  # noqa: F401 - their home is light
from .data import STSPairs
from .encoder import SentenceEncoder
from .mteb_staging import make_staging_folder, move_staged_results

logger = logging.getLogger(__name__)

def require_mteb():
    try:
        import mteb
    except ImportError as err:
        raise InputError("MTEB tasks need the mteb package: pip install 'hf_cse[mteb]' (or pip install mteb).") \
            from err
    return mteb


def get_mteb_tasks(names: list[str], load: bool = True) -> list:
    """MTEB task objects by name, their data loaded (so an unknown name or unreachable data fails before any
    model is run)."""
    mteb = require_mteb()
    tasks = []
    for name in names:
        try:
            task = mteb.get_task(name)
        except KeyError as err:
            hint = str(err).strip("'\"").removeprefix("KeyError: ")
            raise InputError(f"unknown MTEB task {name!r} ({hint}). The names: "
                             "python -c \"import mteb; print(sorted(t.metadata.name for t in mteb.get_tasks()))\"") \
                from err
        if load:
            load_task_data(task)
        tasks.append(task)
    return tasks


def load_task_data(task) -> None:
    offline_if_unreachable()
    try:
        task.load_data()
    except (ConnectionError, FileNotFoundError, ValueError) as err:
        path = task.metadata.dataset.get("path", "?")
        if is_offline():
            raise InputError(f"MTEB task {task.metadata.name}: its data ({path}) are not in the local cache; "
                             f"{offline_fix()}, or run the task on local files "
                             "(hf_cse.evaluation.mteb_tasks.LocalSTSTask, docs/evaluation.md).") from err
        raise InputError(f"MTEB task {task.metadata.name}: cannot load its data ({path}): "
                         f"{' '.join(str(err).split())}") from err


@functools.cache
def _classes() -> dict[str, type]:
    """The classes built on mteb's (made on first use, so that importing this module does not need mteb)."""
    require_mteb()
    import numpy as np
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.models import ModelMeta
    from mteb.models.abs_encoder import AbsEncoder
    from mteb.models.model_meta import ScoringFunction

    class HFCSEMTEBEncoder(AbsEncoder):
        """An MTEB encoder backed by a :class:`SentenceEncoder`; no prompts (hf_cse models take none), cosine.
        ``meta``: the ModelMeta fields to set (:func:`model_meta_fields`, :func:`truncated_model_meta`)."""

        def __init__(self, encoder: SentenceEncoder, meta: dict | None = None):
            self.model = encoder
            self.logged_task: str | None = None
            self.mteb_model_meta = ModelMeta.create_empty(
                {"name": mteb_model_name(encoder.name), "revision": "local", "similarity_fn_name":
                 ScoringFunction.COSINE, "framework": ["PyTorch"], "embed_dim": None, "max_tokens": encoder.max_length,
                 **(meta or {})})

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
            texts = [text for batch in inputs for text in batch["text"]]
            if task_metadata.name != self.logged_task:  # one line per task, not per subset or split
                self.logged_task = task_metadata.name
                logger.info("MTEB %s: encoding its texts", task_metadata.name)
            return self.model.encode(texts, batch_size=kwargs.get("batch_size"))  # the encoder's bar

    class LocalSTSTask(AbsTaskSTS):
        """An MTEB STS task (MTEB's evaluator and scores) on scored pairs read by ``read_pairs()`` ->
        ``{split: STSPairs}`` when MTEB loads the data. ``like`` names the MTEB task whose description is copied."""

        def __init__(self, read_pairs: Callable[[], dict[str, STSPairs]], name: str, splits=("test",),
                     like: str = "STSBenchmark", **kwargs):
            import mteb

            self.metadata = mteb.get_task(like).metadata.model_copy(update={
                "name": name, "dataset": {"path": "local", "revision": "local"}, "eval_splits": list(splits),
                "superseded_by": None, "description": f"{name}: local scored pairs (MTEB {like} definition)"})
            self.read_pairs = read_pairs
            super().__init__(**kwargs)

        @property
        def metadata(self):  # per instance (mteb reads it from the class after unloading filtered data)
            return self._local_metadata

        @metadata.setter
        def metadata(self, value) -> None:
            self._local_metadata = value

        @classmethod
        def from_file(cls, path, sentence1_column="sentence1", sentence2_column="sentence2", score_column="score",
                      name: str | None = None, split: str = "test", **kwargs):
            """A task on one CSV/TSV file (read by :func:`hf_cse.evaluation.custom_dev.read_pair_file` when the task
            runs; a missing file is refused now)."""
            from .custom_dev import read_pair_file

            if not Path(path).is_file():
                raise InputError(f"LocalSTSTask.from_file: {path}: no such file.")

            def read():
                return {split: read_pair_file(path, sentence1_column, sentence2_column, score_column)}

            return cls(read, name or Path(path).stem, splits=(split,), **kwargs)

        def load_data(self, num_proc=None, **kwargs) -> None:
            if self.data_loaded:
                return
            splits = {}
            for split, pairs in self.read_pairs().items():
                splits[split] = Dataset.from_dict({"sentence1": list(pairs.sentences1),
                                                   "sentence2": list(pairs.sentences2),
                                                   "score": pairs.scores.tolist()})
            scores = np.concatenate([np.asarray(d["score"], dtype=float) for d in splits.values()])
            self.min_score, self.max_score = float(scores.min()), float(scores.max())  # MTEB rescales to [0, 1]
            self.dataset = {"default": DatasetDict(splits)}
            self.data_loaded = True

    return {"HFCSEMTEBEncoder": HFCSEMTEBEncoder, "LocalSTSTask": LocalSTSTask, "ModelMeta": ModelMeta}


def __getattr__(name: str):  # LocalSTSTask, HFCSEMTEBEncoder: built on first access
    if name in ("LocalSTSTask", "HFCSEMTEBEncoder"):
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def mteb_encoder(encoder: SentenceEncoder, meta: dict | None = None):
    """``encoder`` as an MTEB encoder (``EncoderProtocol``); ``meta`` sets fields of its ``ModelMeta``."""
    return _classes()["HFCSEMTEBEncoder"](encoder, meta)


# a Hub repo id's characters (huggingface_hub.utils.validate_repo_id): a part starts and ends with a letter, digit
# or _, and holds only those, - and . (no -- nor ..); mteb's ModelMeta needs org/name, and saves results under
# results/<org>__<name>/<revision>/
def _safe_part(text: str) -> str:
    """``text`` as one part of a Hub repo id (characters outside it become -, then no -- / .., trimmed)."""
    part = re.sub(r"[^\w.-]+", "-", text)
    part = re.sub(r"\.{2,}", ".", re.sub(r"-{2,}", "-", part)).strip(".-")[:96].strip(".-")
    return part or "model"


def mteb_model_name(name_or_path: str, given: str | None = None) -> str:
    """The model's name in MTEB's results (``ModelMeta.name``, ``org/name``): ``given`` (``mteb_model_name``), a
    Hub id as it is, or ``local/<folder name>`` for a local folder (no machine-local path is published; characters a
    Hub repo id does not allow become -, so that the name passes :func:`mteb_name_problem`)."""
    if given:
        return given
    name = str(name_or_path).replace("\\", "/").rstrip("/")
    if Path(name).expanduser().exists() or name.startswith(("/", ".", "~")):
        return f"local/{_safe_part(Path(name).expanduser().resolve().name)}"
    if "/" in name and mteb_name_problem(name) is None:
        return name
    return f"local/{_safe_part(name.rsplit('/', 1)[-1])}"


def check_mteb_model(name: str, revision: str) -> None:
    """An MTEB model name and revision fit to be folders of mteb's results (:func:`mteb_name_problem`,
    :func:`mteb_revision_problem`), else one line naming the problem."""
    for what, value, problem in (("name", name, mteb_name_problem(name)),
                                 ("revision", revision, mteb_revision_problem(revision))):
        if problem:
            raise InputError(f"MTEB model {what} {value!r}: {problem}.")


def model_meta_fields(name: str, revision: str, embed_dim: int | None = None) -> dict:
    """The ``ModelMeta`` fields an MTEB result records for this model: its name and revision (checked:
    :func:`check_mteb_model`) and its embedding size (None: not measured)."""
    check_mteb_model(name, revision)
    return {"name": name, "revision": revision, "embed_dim": embed_dim}


def truncated_model_meta(meta: dict | None, truncate_dim: int) -> dict:
    """``meta`` (:func:`model_meta_fields`) for the embeddings cut to their first ``truncate_dim`` coordinates: that
    size, and the cut as an MTEB experiment (mteb saves a run with ``experiment_kwargs`` under
    ``experiments/<name>/``, beside the full model's results)."""
    return {**(meta or {}), "embed_dim": int(truncate_dim), "experiment_kwargs": {"truncate_dim": int(truncate_dim)}}


def mteb_result_paths(results_dir, tasks: list, meta: dict) -> list[Path]:
    """Where mteb's ``ResultCache(results_dir)`` keeps these tasks' results for the model ``meta`` describes."""
    from mteb.cache import ResultCache

    check_mteb_model(meta.get("name"), meta.get("revision"))
    model_meta = _classes()["ModelMeta"].create_empty(meta)
    cache = ResultCache(results_dir)
    return [cache.get_task_result_path(task.metadata.name, model_meta) for task in tasks]


_TRUNCATE_EXPERIMENT = re.compile(r"truncate_dim_\d+")


def saved_mteb_results(results_dir, tasks: list, meta: dict) -> list[Path]:
    """The result files ``results_dir`` holds of these tasks for the model name and revision of ``meta``: its own
    (``results/<model>/<revision>/<task>.json``) and those of every ``truncate_dim_<d>`` experiment of it, whatever
    the dimensions (another run's ``truncate_dims``), which mteb's loader would read back as the same model's."""
    base = {"name": meta.get("name"), "revision": meta.get("revision")}
    found = [path for path in mteb_result_paths(results_dir, tasks, base) if path.is_file()]
    sample = mteb_result_paths(results_dir, tasks[:1], truncated_model_meta(base, 1))
    experiments = sample[0].parent.parent if sample else None  # results/<model>/<revision>/experiments
    if experiments is not None and experiments.is_dir():
        names = [task.metadata.name for task in tasks]
        for folder in sorted(experiments.iterdir()):
            if folder.is_dir() and _TRUNCATE_EXPERIMENT.fullmatch(folder.name):
                found += [folder / f"{name}.json" for name in names if (folder / f"{name}.json").is_file()]
    return found


def remove_mteb_results(paths: list[Path]) -> None:
    """Remove result files found by :func:`saved_mteb_results`, and an experiment folder they leave without any task
    result (only mteb's ``model_meta.json`` / ``run_settings.jsonl``), which mteb would still list."""
    for path in paths:
        path.unlink(missing_ok=True)
    for folder in dict.fromkeys(path.parent for path in paths):
        if folder.parent.name == "experiments" and _TRUNCATE_EXPERIMENT.fullmatch(folder.name) and folder.is_dir() \
                and not any(f.suffix == ".json" and f.name != "model_meta.json" for f in folder.iterdir()):
            for leftover in folder.iterdir():
                if leftover.is_file() and leftover.name in ("model_meta.json", "run_settings.jsonl"):
                    leftover.unlink()
            if not any(folder.iterdir()):
                folder.rmdir()
                if not any(folder.parent.iterdir()):  # the experiments folder, left empty
                    folder.parent.rmdir()


MTEB_FOLDER_MARK = ".hf_cse_mteb"
def run_mteb_tasks(encoder: SentenceEncoder, tasks: list, output_dir, results_dir=None, meta: dict | None = None,
                   before_writing: Callable[[], None] | None = None) -> tuple[dict[str, float], dict[str, dict]]:
    """Run MTEB ``tasks`` (objects from :func:`get_mteb_tasks` or :class:`LocalSTSTask`) on ``encoder``; MTEB's
    result file of each task goes to ``output_dir/<task>.json``. Returns ``({task: main score x 100}, details)``.

    ``results_dir`` (``mteb_results_dir``): mteb itself also saves the results there, through its own
    ``ResultCache``, as its own runs do (``results/<model>/<revision>/<task>.json``, ``model_meta.json``,
    ``run_settings.jsonl``), the layout of MTEB's results repository; ``meta``: :func:`model_meta_fields`. mteb
    saves each task's as it finishes into a hidden folder of this process inside ``results_dir``
    (:mod:`hf_cse.evaluation.mteb_staging`), whose files are moved into place once every task has run, and which is
    removed then, or on a failure or stop, with what it holds (or, where this process is killed, by the next
    evaluation into ``results_dir``): ``results_dir`` gets the results of all the tasks or none.
    ``before_writing`` is called once the tasks have run, just before the first file is written: the caller's
    earlier results go then."""
    mteb = require_mteb()
    output_dir = Path(output_dir)
    staging = None
    if results_dir is not None:
        from mteb.cache import ResultCache

        meta = meta or {}  # its name and revision become folders of results_dir
        check_mteb_model(meta.get("name") or mteb_model_name(encoder.name), meta.get("revision", "local"))
        Path(results_dir).mkdir(parents=True, exist_ok=True)
        staging = make_staging_folder(Path(results_dir))
    try:
        result = mteb.evaluate(mteb_encoder(encoder, meta), tasks,
                               cache=None if staging is None else ResultCache(staging), co2_tracker=False,
                               show_progress_bar=False, encode_kwargs={"batch_size": encoder.batch_size},
                               overwrite_strategy="always")
        if before_writing is not None:
            before_writing()
        if staging is not None:
            move_staged_results(staging, Path(results_dir))
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / MTEB_FOLDER_MARK).touch()  # marks the folder as run_eval's, so overwrite_output_dir may remove it
    by_name = {task.metadata.name: task for task in tasks}
    scores, details = {}, {}
    for task_result in result.task_results:
        path = output_dir / f"{task_result.task_name}.json"
        task_result.to_disk(path)
        scores[task_result.task_name] = float(task_result.get_score()) * 100.0
        details[task_result.task_name] = {"file": str(path),
                                          **score_facts(by_name.get(task_result.task_name), task_result)}
    return scores, details


def score_facts(task, task_result) -> dict:
    """What names an MTEB task's score (``results.json``'s ``details["mteb"][task]``, read by the model card): the
    task's main metric and type, its data set (``local`` for a :class:`LocalSTSTask`) and revision, and the splits
    and subsets whose main scores ``TaskResult.get_score`` averaged."""
    meta = getattr(task, "metadata", None)
    splits = task_result.scores or {}
    return {"main_score": getattr(meta, "main_score", None), "task_type": getattr(meta, "type", None),
            "dataset": (getattr(meta, "dataset", None) or {}).get("path"),
            "revision": getattr(task_result, "dataset_revision", None), "splits": list(splits),
            "subsets": list(dict.fromkeys(str(entry.get("hf_subset")) for entry_list in splits.values()
                                          for entry in entry_list))}
