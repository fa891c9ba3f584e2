"""Evaluation tasks read from the Hugging Face Hub (``source="hub"``) through ``datasets``: which data set stands
for which SentEval task, and loading one split of it."""

from __future__ import annotations

from ..errors import CSEError
from ..hub_reach import is_offline, offline_fix, offline_if_unreachable
from .rowcheck import DATA_SETTINGS, SentEvalDataError

# Hub data sets used by source="hub" (repo id, config, {our split: hub split(s)}, column names).
# They were chosen to match SentEval's sets as closely as the Hub allows; the ones that differ are noted.
# Override an entry by assigning to HUB_DATASETS[task] before loading.
HUB_DATASETS: dict[str, dict] = {
    "STS12": {"repo": "mteb/sts12-sts", "splits": {"test": ["test"]}},
    "STS13": {"repo": "mteb/sts13-sts", "splits": {"test": ["test"]}},
    "STS14": {"repo": "mteb/sts14-sts", "splits": {"test": ["test"]}},
    "STS15": {"repo": "mteb/sts15-sts", "splits": {"test": ["test"]}},
    "STS16": {"repo": "mteb/sts16-sts", "splits": {"test": ["test"]}},
    "STSBenchmark": {
        "repo": "mteb/stsbenchmark-sts",
        "splits": {"train": ["train"], "dev": ["validation"], "test": ["test"]},
    },
    # SICK with SentEval's train / trial (= dev) / test split (mteb/sickr-sts is the whole of SICK).
    "SICKRelatedness": {
        "repo": "RobZamp/sick",
        "splits": {"train": ["train"], "dev": ["validation"], "test": ["test"]},
        "columns": ("sentence_A", "sentence_B", "relatedness_score"),
    },
    "MR": {
        "repo": "cornell-movie-review-data/rotten_tomatoes",
        "splits": {"all": ["train", "validation", "test"]},
    },
    "CR": {"repo": "SetFit/SentEval-CR", "splits": {"all": ["train", "test"]}},
    "SUBJ": {"repo": "SetFit/subj", "splits": {"all": ["train", "test"]}},
    "MPQA": {"repo": "SetFit/mpqa", "splits": {"all": ["train", "test"]}},
    # Sentence-level SST-2 (6,920 train sentences); SentEval trains on the 67,349 phrase-level set.
    "SST2": {"repo": "SetFit/sst2", "splits": {"train": ["train"], "dev": ["validation"], "test": ["test"]}},
    "TREC": {
        "repo": "CogComp/trec",
        "splits": {"train": ["train"], "test": ["test"]},
        "columns": ("text", "coarse_label"),
    },
    # SentEval's MRPC train (4,076 pairs) = GLUE train + validation.
    "MRPC": {
        "repo": "SetFit/mrpc",
        "splits": {"train": ["train", "validation"], "test": ["test"]},
        "columns": ("text1", "text2", "label"),
    },
}


def hub_load(task: str, split: str):
    """Rows of a Hub data set for one of our splits (several Hub splits are concatenated)."""
    try:
        import datasets
    except ImportError as err:  # pragma: no cover
        raise CSEError("senteval_source hub needs the `datasets` package (pip install datasets).") from err
    spec = HUB_DATASETS[task]
    if split not in spec["splits"]:
        raise CSEError(
            f"{task}: split {split!r} is not available from the Hub data set {spec['repo']} "
            f"(available: {', '.join(spec['splits'])})."
        )
    offline_if_unreachable()
    try:
        parts = [
            datasets.load_dataset(spec["repo"], spec.get("config"), split=hub_split)
            for hub_split in spec["splits"][split]
        ]
    except ConnectionError as err:  # offline, or the Hub unreachable
        fix = offline_fix() if is_offline() else "check the network connection"
        raise SentEvalDataError(
            f"{task}: cannot read the Hub data set {spec['repo']}: {fix}, or read SentEval's "
            "files from a folder: senteval_data_dir DIR with senteval_source local.", fields=DATA_SETTINGS
        ) from err
    return datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]
