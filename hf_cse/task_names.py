"""The names the evaluation command's ``tasks`` accepts, and its parsing: light (no torch), so that a mistyped task
is refused when the command starts, and one home for the task names (scripts, reports, plots and model cards import
them through :mod:`hf_cse.evaluation.data`).

* groups: ``sts`` (the 7 STS tasks), ``transfer`` (the 7 SentEval transfer tasks), ``geometry``
  (alignment + uniformity), ``retrieval`` (DiffCSE's STS-B retrieval), ``all`` (everything);
* single tasks: ``STS12`` ... ``STS16``, ``STSBenchmark``, ``SICKRelatedness``, ``MR``, ``CR``, ``SUBJ``,
  ``MPQA``, ``SST2``, ``TREC``, ``MRPC`` (case-insensitive; the other names of :data:`ALIASES` also work:
  ``STSB``/``STS-B``, ``SICK-R``/``SICKR``/``SICK``, ``SST``/``SST-2``);
* from the first ``mteb:`` on, MTEB task names (:func:`split_mteb_tasks`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from .checks import InputError
from .errors import CSEError

STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")
STS_DEV_TASKS = ("STSBenchmark", "SICKRelatedness")  # the STS sets with a dev split
STS_TASKS = STS_YEARS + STS_DEV_TASKS
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
ALL_TASKS = STS_TASKS + TRANSFER_TASKS

GROUPS = {
    "sts": STS_TASKS,
    "transfer": TRANSFER_TASKS,
    "geometry": ("geometry",),
    "retrieval": ("retrieval",),
    "all": STS_TASKS + TRANSFER_TASKS + ("geometry", "retrieval"),
}
#: other names of single tasks (lower case): a typo's suggestion is the task's own name (:func:`parse_tasks`)
ALIASES = {
    "sts-b": "STSBenchmark",
    "stsb": "STSBenchmark",
    "sick-r": "SICKRelatedness",
    "sickr": "SICKRelatedness",
    "sick": "SICKRelatedness",
    "sst": "SST2",
    "sst-2": "SST2",
}
MTEB_PREFIX = "mteb:"


def valid_task_names() -> list[str]:
    return list(GROUPS) + list(STS_TASKS) + list(TRANSFER_TASKS)


def task_aliases() -> str:
    """The other names of tasks, as the tasks' help shows them: ``STS-B/STSB = STSBenchmark, ...``."""
    by_task: dict[str, list[str]] = {}
    for alias, task in ALIASES.items():
        by_task.setdefault(task, []).append(alias.upper())
    return ", ".join(f"{'/'.join(names)} = {task}" for task, names in by_task.items())


def parse_tasks(spec: str | Sequence[str]) -> list[str]:
    """Expand a task spec (``"sts,transfer"``, ``["STS12", "MR"]``...) into task names (order kept, duplicates
    dropped)."""
    items = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in str(s).split(",")]
    canonical = {t.lower(): t for t in STS_TASKS + TRANSFER_TASKS}
    out: list[str] = []
    for raw in items:
        name = raw.strip()
        if not name:
            continue
        key = name.lower()
        if key in GROUPS:
            expanded = GROUPS[key]
        elif key in ALIASES:
            expanded = (ALIASES[key],)
        elif key in canonical:
            expanded = (canonical[key],)
        else:
            close = difflib.get_close_matches(key, [*canonical, *GROUPS, *ALIASES], n=1)
            meant = {**canonical, **ALIASES}.get(close[0], close[0]) if close else None  # an alias: its task
            guess = f" (did you mean {meant!r}?)" if meant else ""
            raise CSEError(f"Unknown task {name!r}{guess}. Valid tasks: {', '.join(valid_task_names())}.")
        out += [t for t in expanded if t not in out]
    if not out:
        raise CSEError(f"No task given. Valid tasks: {', '.join(valid_task_names())}.")
    return out


def split_mteb_tasks(spec: str) -> tuple[str, list[str]]:
    """``"sts,mteb:STS22,Banking77Classification"`` -> ``("sts", ["STS22", "Banking77Classification"])``: the
    items from the first ``mteb:`` on are MTEB task names; ``none`` alone means no hf_cse task. A spec naming nothing
    (an empty variable: it ran as ``none``) and ``none`` beside tasks (dropped without a word) are refused."""
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise InputError(f"tasks={spec!r} names no task (an empty variable?): name the tasks (e.g. sts), or none to "
                         "score only your own pairs.")
    if len(items) > 1 and any(s.lower() == "none" for s in items):
        raise InputError(f"tasks={spec!r}: none means no task, beside other tasks; leave none out, or give it alone.")
    first = next((i for i, s in enumerate(items) if s.lower().startswith(MTEB_PREFIX)), len(items))
    names = [s[len(MTEB_PREFIX):].strip() if s.lower().startswith(MTEB_PREFIX) else s for s in items[first:]]
    if any(not n for n in names):
        raise InputError(f"tasks={spec!r}: 'mteb:' must be followed by an MTEB task name, e.g. mteb:STS22.")
    ours = [s for s in items[:first] if s.lower() != "none"]
    return ",".join(ours), list(dict.fromkeys(names))


def tasks_of(spec: str) -> tuple[list[str], list[str]]:
    """``spec``'s hf_cse tasks (:func:`parse_tasks`) and MTEB tasks."""
    ours, mteb_tasks = split_mteb_tasks(spec)
    return (parse_tasks(ours) if ours else []), mteb_tasks


_NAME_PART = re.compile(r"\w(?:[\w.-]{0,94}\w)?")


def mteb_name_problem(name: str) -> str | None:
    """What makes ``name`` unfit as an MTEB model name (``org/name``, each part as a Hub repo id allows), or None."""
    parts = str(name).split("/")
    if len(parts) != 2 or not all(parts):
        return "it must be org/name (two non-empty parts, one /), e.g. my-org/my-model"
    if any(not _NAME_PART.fullmatch(part) for part in parts) or "--" in name or ".." in name:
        return ("each of its parts may hold only letters, digits, _, - and . (as a Hub repo id), start and end with "
                "a letter, digit or _, have no -- or .., and be at most 96 characters")
    return None


def mteb_revision_problem(revision: str) -> str | None:
    """What makes ``revision`` unfit as an MTEB model revision (one folder name in mteb's results), or None."""
    revision = str(revision)
    if not revision.strip():
        return "it is empty; give one (e.g. the model's Hub commit, or local)"
    if any(c in revision for c in "/\\") or ".." in revision or revision == "." or revision != revision.strip() \
            or not revision.isprintable():
        return ("it must be one folder name: no / or \\, no .., no surrounding spaces or control characters "
                "(e.g. the model's Hub commit, or r1)")
    return None
