"""Whether the Hugging Face Hub can be reached, asked once, in seconds: without a network huggingface_hub and
datasets retry each file with growing waits (35 s before a command's one line, measured 2026-11-27 with no DNS), and
then load a cached copy anyway. A model named by Hub id is checked with it (:func:`hf_cse.checks.check_model_source`):
not cached, refused at once; cached, read from the cache with the Hub switched off for this process (a log line).
A Hub data set is read the same way (:func:`offline_if_unreachable` before ``datasets.load_dataset``).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import sys
import threading
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

#: why this process switched the Hub off (empty: it did not; the user may have, with HF_HUB_OFFLINE)
_SWITCHED_OFF: list[str] = []

#: the longest wait for the Hub's name and first answer (a slow network is left to the HTTP client's own timeouts)
PROBE_TIMEOUT_S = 5.0
#: with a proxy only the proxy knows whether the Hub answers: no probe then
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "http_proxy", "HTTP_PROXY")


def hub_unreachable() -> str | None:
    """Why the Hub's endpoint (``HF_ENDPOINT``) cannot be reached -- its name does not resolve, the connection is
    refused, or no answer within :data:`PROBE_TIMEOUT_S` -- or None (reached, offline mode on, or a proxy in use).
    Each endpoint is asked once a process."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or any(os.environ.get(name) for name in PROXY_VARIABLES):
        return None
    endpoint = urlsplit(constants.ENDPOINT)
    return _unreachable(endpoint.hostname, endpoint.port or (443 if endpoint.scheme == "https" else 80))


@functools.lru_cache(maxsize=8)
def _unreachable(host: str, port: int) -> str | None:
    failure: list[str] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
        except OSError as err:
            failure.append(" ".join(str(err).split()) or type(err).__name__)

    probe = threading.Thread(target=connect, daemon=True)  # name resolution ignores the socket's timeout
    probe.start()
    probe.join(PROBE_TIMEOUT_S)
    if probe.is_alive():
        return f"{host} gave no answer in {PROBE_TIMEOUT_S:.0f} s"
    return f"{host}: {failure[0]}" if failure else None


def work_offline(reason: str) -> None:
    """Switch the Hub off for this process (and the processes it starts): cached files load at once."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        logger.warning("the Hugging Face Hub cannot be reached (%s): reading Hub models and data sets from the local "
                       "cache only", reason)
        _SWITCHED_OFF.append(reason)
    constants.HF_HUB_OFFLINE = True
    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    datasets_config = sys.modules.get("datasets.config")  # read at its import: set where imported already
    if datasets_config is not None:
        datasets_config.HF_HUB_OFFLINE = datasets_config.HF_DATASETS_OFFLINE = True


def offline_if_unreachable() -> None:
    """Before a Hub download whose failure would be found by retries: switch the Hub off if it cannot be reached."""
    reason = hub_unreachable()
    if reason:
        work_offline(reason)


def is_offline() -> bool:
    """Whether Hub downloads are off in this process (the user's HF_HUB_OFFLINE / HF_DATASETS_OFFLINE, or
    :func:`work_offline`)."""
    from huggingface_hub import constants

    datasets_config = sys.modules.get("datasets.config")
    return bool(constants.HF_HUB_OFFLINE or getattr(datasets_config, "HF_DATASETS_OFFLINE", False))


def offline_fix() -> str:
    """The fix for a Hub file that is not cached while the Hub is off: the network, when this process switched it
    off; the user's HF_HUB_OFFLINE otherwise."""
    if _SWITCHED_OFF:
        return f"the Hub cannot be reached ({_SWITCHED_OFF[0]}): check the network"
    return "the Hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE): unset it"
