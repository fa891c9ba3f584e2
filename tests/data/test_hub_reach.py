"""A Hub model id when the Hub cannot be reached: refused at once when not cached, read from the cache when it is
(no minute of huggingface_hub's retries either way)."""

from __future__ import annotations

import logging
import os
import socket

import datasets
import pytest
from huggingface_hub import constants

from hf_cse import hub_reach
from hf_cse.checks import InputError, check_model_source
from hf_cse.data import DataError, load_train_dataset
from hf_cse.hub_reach import hub_unreachable


@pytest.fixture
def online(monkeypatch):
    """The Hub switched on (the tests run with HF_HUB_OFFLINE=1), no proxy; put back afterwards."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    monkeypatch.setattr(hub_reach, "_SWITCHED_OFF", [])
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    for name in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _closed_port() -> int:
    with socket.socket() as sock:  # a port nothing listens on once closed: the connection is refused at once
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_endpoint_that_refuses_is_unreachable_and_one_that_answers_is_not(online):
    online.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    assert "127.0.0.1" in hub_unreachable()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        online.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert hub_unreachable() is None
    online.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # only the proxy knows: no judgement
    online.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    assert hub_unreachable() is None


def test_an_uncached_hub_id_is_refused_at_once_naming_the_network(online, tmp_path):
    online.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    online.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(InputError, match=r"org/encoder is not a local folder, and the Hugging Face Hub cannot be "
                                         r"reached \(127\.0\.0\.1: .*\) and no copy of it is cached here.*check the "
                                         "network"):
        check_model_source("org/encoder")
    assert not constants.HF_HUB_OFFLINE


def test_a_cached_hub_id_is_read_offline_with_one_log_line(online, tmp_path, caplog):
    online.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    cache = tmp_path / "hub"
    snapshot = cache / "models--org--encoder" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--org--encoder" / "refs").mkdir()
    (cache / "models--org--encoder" / "refs" / "main").write_text("0" * 40)
    online.setattr(constants, "HF_HUB_CACHE", str(cache))
    with caplog.at_level(logging.WARNING, logger="hf_cse.hub_reach"):
        check_model_source("org/encoder")
    assert constants.HF_HUB_OFFLINE and os.environ["HF_HUB_OFFLINE"] == "1"
    assert "cannot be reached" in caplog.text and "from the local cache only" in caplog.text


def test_a_hub_data_set_with_the_hub_unreachable_is_refused_naming_the_network(online, tmp_path):
    online.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    online.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    online.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    with pytest.raises(DataError, match=r"dataset_name org/sentences: cannot read it from the Hugging Face Hub .*the "
                                        r"Hub cannot be reached \(127\.0\.0\.1: .*\): check the network"):
        load_train_dataset(dataset_name="org/sentences")
    assert datasets.config.HF_DATASETS_OFFLINE and constants.HF_HUB_OFFLINE  # switched off, so no retries


def test_offline_by_the_user_the_fix_names_the_setting(online):
    online.setattr(constants, "HF_HUB_OFFLINE", True)
    assert hub_reach.offline_fix() == "the Hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE): unset it"


@pytest.mark.parametrize("pairs", [False, True], ids=["sentences", "pairs"])
def test_a_streamed_hub_data_set_offline_is_refused_as_one_read_in_memory(pairs):
    """Streamed, a Hub data set that the Hub (switched off by the user's HF_HUB_OFFLINE, as in the tests) cannot give
    was refused by the command line's network line: "HF_HUB_OFFLINE=1 then skips the Hub" (the cause, not the fix)
    and "what was saved so far is kept" before anything ran, naming no setting."""
    from types import SimpleNamespace

    from hf_cse.cli.arguments import StreamingArguments
    from hf_cse.streaming import load_pair_stream, load_training_text

    data = SimpleNamespace(train_file=None, dataset_name="org/sentences", dataset_config_name=None,
                           text_column=None, pair_column="positive" if pairs else None, negative_column=None)
    with pytest.raises(DataError) as in_memory:
        load_train_dataset(dataset_name="org/sentences")
    with pytest.raises(DataError) as streamed:
        load_pair_stream(data) if pairs else load_training_text(StreamingArguments(streaming=True), data, seed=0)
    assert str(streamed.value) == str(in_memory.value)
    assert str(streamed.value).startswith("dataset_name org/sentences: cannot read it from the Hugging Face Hub")
    assert "unset it, or give a local train_file" in str(streamed.value)
