"""Pushing a sentence-transformers export to the Hugging Face Hub, with its own error type.

:func:`take_over_hub_push` turns run_unsup.py's ``--push_to_hub`` into a push of the export (checked before
training); :func:`push_export` uploads an export folder. The card names the repo: rendered with it when the export
was made for it, else rendered again from the inputs recorded beside the export (:mod:`hf_cse.export.card`).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from ..errors import CSEError, network_failure
from ..hub_reach import offline_fix, offline_if_unreachable
from .card import CARD_INPUTS_FILE, render_card_for
from .errors import ExportError
from .sources import check_pushable

logger = logging.getLogger(__name__)


class HubPushError(CSEError, RuntimeError):
    """A push to the Hugging Face Hub failed; the message says what to do."""


def check_repo_id(repo_id: str, field: str = "repo_id") -> None:
    """``repo_id`` is a well-formed Hub repo id (``user/name``), checked before any work that a push would end."""
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except ValueError as err:  # huggingface_hub's HFValidationError
        said = str(err).split(": '", 1)[0].rstrip(".")
        raise HubPushError(f"{field} {repo_id!r} is no Hub repo id ({said}); use one like 'username/model-name'."
                           ) from None


def check_can_push(repo_id: str, token: str | None, token_field: str, later: str) -> None:
    """Before the work a push to ``repo_id`` would end (a training, an export), so that it is not found only after:
    the Hub reachable and not switched off, and a token (``token``, given as ``token_field``, or a stored login).
    ``later``: what the user could do instead of pushing now."""
    from huggingface_hub import constants, get_token

    offline_if_unreachable()  # a machine without network cannot push
    if constants.HF_HUB_OFFLINE:
        raise HubPushError(f"push_to_hub {repo_id}: {offline_fix()}, or drop push_to_hub and {later}, with "
                           "hf_cse.export.push_export or the export command's push_to_hub (either names "
                           f"{repo_id} in its card; `hf upload` would not).", fields=("push_to_hub",))
    if not (token or get_token()):
        raise HubPushError(f"push_to_hub {repo_id}: not logged in to the Hugging Face Hub; log in with "
                           f"`huggingface-cli login` (or `hf auth login`), set HF_TOKEN, or pass {token_field}.",
                           fields=("push_to_hub", token_field))


def upload_patterns(out: Path) -> dict[str, list[str]]:
    """What a push of the export in ``out`` uploads and replaces in its repo: the files the export wrote (not a user's
    own files kept beside them in the folder, nor the card's recorded inputs), and in the repo every file an earlier
    export may have left that this one does not write (its modules, weights, ONNX backend: a stale ``onnx/model.onnx``
    would serve other weights); files uploaded in the same commit, the repo's other files and ``.gitattributes``
    stay."""
    from .folders import EXPORT_FILES, export_files

    written = [name for name in export_files(out) if name != CARD_INPUTS_FILE]
    allow = [pattern for name in written for pattern in (name, f"{name}/**")]
    stale = [pattern for name in EXPORT_FILES if name != "README.md" for pattern in (name, f"{name}/**")]
    return {"allow_patterns": allow, "ignore_patterns": [CARD_INPUTS_FILE], "delete_patterns": stale}


def push_export(out_dir, repo_id: str, token: str | None = None, private: bool = False,
                commit_message: str = "Add sentence-transformers model exported by hf_cse",
                revision: str | None = None) -> str:
    """Upload an exported folder to the Hub repo ``repo_id`` (created if needed); returns the repo URL.
    ``revision``: the branch to commit to (created from the default branch if needed; None: the default branch),
    as ``TrainingArguments.hub_revision`` names it."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

    out = Path(out_dir)
    check_repo_id(repo_id)
    if not (out / "modules.json").is_file():
        raise ExportError(f"{out} is not a sentence-transformers export (no modules.json); create it with "
                          "hf_cse.export.to_sentence_transformer first.")
    offline_if_unreachable()  # a machine without network: refused at once, not after the client's timeouts
    if constants.HF_HUB_OFFLINE:
        raise HubPushError(f"cannot push to {repo_id}: {offline_fix()} and retry, or upload the folder later with "
                           f"`hf upload {repo_id} {out}`.")
    login_hint = ("log in with `huggingface-cli login` (or `hf auth login`) or set the HF_TOKEN environment variable "
                  f"to a token with write access to {repo_id}")
    if not render_card_for(out, repo_id, revision):
        logger.warning("%s lacks the model card's recorded inputs (%s or hf_cse_config.json; an export made by an "
                       "older hf_cse): its card is pushed as it is and may name another model id; export again to "
                       "have it name %s", out, CARD_INPUTS_FILE, repo_id)
    api = HfApi()
    try:
        url = api.create_repo(repo_id, token=token, private=private, exist_ok=True)
        repo = getattr(url, "repo_id", None) or repo_id
        if revision:
            api.create_branch(repo, branch=revision, token=token, exist_ok=True)
        api.upload_folder(repo_id=repo, folder_path=str(out), repo_type="model", token=token,
                          commit_message=commit_message, revision=revision or None, **upload_patterns(out))
    except OfflineModeIsEnabled as err:  # switched off meanwhile
        raise HubPushError(f"cannot push to {repo_id}: {offline_fix()} and retry, or upload the folder later with "
                           f"`hf upload {repo_id} {out}`.") from err
    except LocalTokenNotFoundError as err:
        raise HubPushError(f"cannot push to {repo_id}: not logged in to the Hugging Face Hub; {login_hint}.") from err
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status in (401, 403):
            raise HubPushError(f"cannot push to {repo_id}: the Hub refused the credentials (HTTP {status}); "
                               f"{login_hint}.") from err
        raise HubPushError(f"cannot push to {repo_id}: the Hub answered HTTP {status} ({err}).") from err
    except Exception as err:  # connection problems: OSErrors, and the HTTP client's own errors (not OSErrors)
        if not isinstance(err, OSError) and network_failure(err) is None:
            raise
        raise HubPushError(f"cannot push to {repo_id}: {type(err).__name__}: {' '.join(str(err).split())}. The export "
                           f"is kept in {out}: check the network connection and retry, or upload it later with "
                           f"`hf upload {repo_id} {out}`.") from err
    return f"https://huggingface.co/{repo}" + (f"/tree/{revision}" if revision else "")


def take_over_hub_push(training_args, model=None) -> str | None:
    """For ``push_to_hub``: the Hub repo gets the sentence-transformers export (see
    :func:`hf_cse.export.export_after_training`), not the Trainer's raw checkpoints, so the Trainer's own pushing is
    switched off. Returns the repo id (default: the output folder's name, as the Trainer would) after checking,
    before training, that a push can work (and, given the ``model`` to train, that it can be exported:
    :func:`hf_cse.export.sources.check_pushable`)."""
    if not getattr(training_args, "push_to_hub", False):
        return None
    revision = getattr(training_args, "hub_revision", None)
    if revision and re.fullmatch(r"[0-9a-fA-F]{40}", revision):  # a push commits onto a branch, never a commit
        raise HubPushError(f"hub_revision {revision!r} is a commit id, and the export is committed to a branch: name "
                           "a branch (made from the default one if it does not exist).", fields=("hub_revision",))
    repo_id = training_args.hub_model_id or Path(training_args.output_dir).absolute().name
    check_repo_id(repo_id, "hub_model_id" if training_args.hub_model_id else "push_to_hub: the output folder's name")
    check_can_push(repo_id, training_args.hub_token, "hub_token", "push the run's export once trained")
    test_pooler = getattr(getattr(model, "config", None), "test_pooler", None)
    if isinstance(test_pooler, str):
        check_pushable(type(model), test_pooler, repo_id)
    training_args.push_to_hub = False
    return repo_id
