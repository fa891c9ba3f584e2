"""The ONNX form of an export (``hf-cse-export --backend onnx``): the Transformer module of the sentence-transformers
folder written as ``onnx/model.onnx``, where sentence-transformers' ``backend="onnx"`` looks for it (its loader reads
``<folder>/onnx/model.onnx`` through optimum's ``ORTModelForFeatureExtraction``: inputs ``input_ids``,
``attention_mask`` and, for encoders with segment embeddings, ``token_type_ids``; output ``last_hidden_state``; batch
and sequence length free). ``quantize="int8"`` adds ONNX Runtime's dynamic int8 quantisation of it,
``onnx/model_qint8_quantized.onnx`` (the name sentence-transformers' ``export_dynamic_quantized_onnx_model`` gives a
custom int8 configuration; run it with ``OnnxEncoder(folder, file_name="onnx/model_qint8_quantized.onnx")``).

Why not sentence-transformers' own backend export: it goes through optimum's ONNX exporter (``optimum-onnx``), whose
releases require transformers < 4.58 while hf_cse runs on transformers 5 (so that loader, which needs optimum too,
does not run beside hf_cse today: :class:`OnnxEncoder` runs the folder); the graph here is torch's ONNX export of
the same module with the same input and output names, checked by :class:`OnnxEncoder` against the PyTorch export.

:class:`OnnxEncoder` runs such a folder on ONNX Runtime with numpy (tokenizers' fast tokenizer, the folder's own
Pooling and Normalize modules): the export's check, and a server that needs no PyTorch in its encode path.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..embedding_shape import truncated_and_normalized, unit_rows
from ..encoders import encoder_max_length, own_max_seq_length, pooling_modes
from .errors import ExportError

ONNX_FILE = "onnx/model.onnx"
INT8_FILE = "onnx/model_qint8_quantized.onnx"
#: the export's backends (``backend``); OpenVINO is not offered: optimum-intel does not import on transformers 5
BACKENDS = ("torch", "onnx")
QUANTIZATIONS = ("int8",)
#: the packages the ONNX export needs (import name -> pip name)
ONNX_PACKAGES = {"onnx": "onnx", "onnxruntime": "onnxruntime"}
#: why sentence-transformers' ONNX backend is not the way to run the export here (the card's ONNX row)
ST_ONNX_LOADER = "needs optimum-onnx, which does not install beside transformers 5 today"
#: the embeddings of the ONNX model must match the PyTorch export's this closely (min cosine)
MIN_COSINE = 0.9999


def check_onnx_backend(backend: str, quantize: str | None = None) -> None:
    """One line before any work: an unknown backend or quantisation, or a missing package."""
    if backend not in BACKENDS:
        raise ExportError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}.")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ExportError(f"quantize {quantize!r}: choose one of {', '.join(QUANTIZATIONS)}.", fields=("quantize",))
    if quantize is not None and backend != "onnx":
        raise ExportError(f"quantize {quantize} quantises the ONNX model: add backend onnx (the backend is {backend}).",
                          fields=("quantize", "backend"))
    if backend == "onnx":
        missing = [pip for name, pip in ONNX_PACKAGES.items() if importlib.util.find_spec(name) is None]
        if missing:
            raise ExportError(f"backend onnx needs {' and '.join(missing)}: pip install 'hf_cse[onnx]' (or pip "
                              f"install {' '.join(missing)}).", fields=("backend",))


def write_onnx(folder: Path, quantize: str | None = None) -> list[Path]:
    """``onnx/model.onnx`` (and the int8 file with ``quantize``) of the sentence-transformers folder ``folder``,
    whose Transformer module sits at its top level (as :func:`hf_cse.export.modules.write_modules` writes it)."""
    import torch
    from transformers import AutoConfig, AutoModel

    from ..encoders import takes_token_type_ids, without_pooler_kwargs
    from ..models.loading import encoder_class_of, without_load_reports

    config = AutoConfig.from_pretrained(str(folder))
    encoder_class = encoder_class_of(config)
    with without_load_reports():  # the folder's pooler layer (fill_unused_pooler) is left out of the graph
        encoder = AutoModel.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager",
                                            **(without_pooler_kwargs(encoder_class) if encoder_class else {})).eval()
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_token_type_ids(encoder.config) else [])

    class _LastHiddenState(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return self.model(**dict(zip(names, inputs, strict=True))).last_hidden_state

    example = torch.tensor([[2, 7, 8, 3, 0], [2, 9, 10, 11, 3]])
    inputs = (example, (example != 0).long()) + ((torch.zeros_like(example),) if len(names) == 3 else ())
    path = folder / ONNX_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    free = {0: "batch_size", 1: "sequence_length"}
    # the wrapper in eval mode: torch's export restores the module's mode afterwards, recursively
    torch.onnx.export(_LastHiddenState(encoder).eval(), inputs, str(path), input_names=names,
                      output_names=["last_hidden_state"], dynamic_axes={n: free for n in [*names, "last_hidden_state"]},
                      opset_version=17, dynamo=False)
    _check_same_hidden_states(encoder, folder, path, names)
    written = [path]
    if quantize == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(path), str(folder / INT8_FILE), weight_type=QuantType.QInt8)
        written.append(folder / INT8_FILE)
    return written


def describe_onnx(files: list[str]) -> str | None:
    """The card's line on the ONNX files (None without them)."""
    if not files:
        return None
    line = (f"`{files[0]}` (ONNX Runtime): `hf_cse.export.onnx.OnnxEncoder(folder)` runs it; it is laid out for "
            f"`SentenceTransformer(..., backend=\"onnx\")` too, whose loader {ST_ONNX_LOADER}")
    if len(files) > 1:
        line += f"; `{files[1]}`, its dynamic int8 quantisation: `OnnxEncoder(folder, file_name=\"{files[1]}\")`"
    return line


def _check_export_folder(folder: Path) -> None:
    """``folder`` is a sentence-transformers export, or one line saying what it is."""
    if not folder.is_dir():
        raise ExportError(f"{folder}: no such folder; give a sentence-transformers export written with backend onnx.")
    if not (folder / "modules.json").is_file():
        raise ExportError(f"{folder} is not a sentence-transformers export (no modules.json): export the checkpoint "
                          "with backend onnx first (hf_cse.export.to_sentence_transformer, or the export command).")


def _check_onnx_file(folder: Path, file_name: str) -> None:
    """The export ``folder`` holds ``file_name`` (``onnx/model.onnx``), or one line naming the ONNX files it has."""
    if not (folder / file_name).is_file():
        found = sorted(str(p.relative_to(folder)) for p in folder.glob("onnx/*.onnx"))
        raise ExportError(f"{folder} has no {file_name}" + (f" (it has {', '.join(found)})" if found else
                          ": it was exported without backend onnx; export it again with backend onnx") + ".")


def _checked_truncate_dim(truncate_dim) -> int | None:
    if truncate_dim is not None and (isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int)
                                     or truncate_dim < 1):
        raise ExportError(f"truncate_dim must be a whole number >= 1 (or None for the whole embedding); got "
                          f"{truncate_dim!r}.")
    return truncate_dim


class OnnxEncoder:
    """A sentence-transformers folder with an ONNX model, run on ONNX Runtime: the folder's tokenizer
    (``tokenizer.json``), its truncation length (the one ``SentenceTransformer(folder)`` serves,
    :func:`hf_cse.encoders.own_max_seq_length`), lower-casing and default prompt, its Pooling mode and Normalize
    module. Dense
    modules (a kept projection head) are not run here: refused. ``truncate_dim`` (here or per :meth:`encode`) keeps
    the embeddings' leading values, as ``SentenceTransformer(..., truncate_dim=...)`` does (a Matryoshka model's
    card lists the dimensions it was trained at)."""

    POOLING = ("cls", "mean", "max", "lasttoken")

    def __init__(self, folder, file_name: str = ONNX_FILE, threads: int | None = None,
                 truncate_dim: int | None = None):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        folder = Path(folder).expanduser()
        _check_export_folder(folder)
        self.truncate_dim = _checked_truncate_dim(truncate_dim)
        modules = json.loads((folder / "modules.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        unknown = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
        if unknown:
            raise ExportError(f"{folder}: OnnxEncoder runs Transformer, Pooling and Normalize modules; this folder "
                              f"also has {', '.join(unknown)}. Load it with SentenceTransformer({str(folder)!r}) "
                              "(PyTorch).")
        _check_onnx_file(folder, file_name)
        self.pooling = _pooling_mode(json.loads((folder / modules[kinds.index("Pooling")]["path"] / "config.json")
                                                .read_text()))
        self.normalize = "Normalize" in kinds
        #: the served length, as SentenceTransformer(folder) reads it; else the encoder's positions (None: no limit)
        self.max_length = own_max_seq_length(str(folder)) or encoder_max_length(
            json.loads((folder / "config.json").read_text()))
        # sentence-transformers 6 writes lower-casing into tokenizer.json (its normaliser); older exports said it here
        settings = json.loads((folder / "sentence_bert_config.json").read_text())
        self.lower = bool(settings.get("do_lower_case"))
        st_config = folder / "config_sentence_transformers.json"
        st_config = json.loads(st_config.read_text()) if st_config.is_file() else {}
        #: the default prompt (the model config's ``prompt``), prepended as sentence-transformers' encode does
        self.prompt = (st_config.get("prompts") or {}).get(st_config.get("default_prompt_name") or "", "")
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        if self.max_length is not None:
            self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()  # a tokenizer.json may pad to a fixed length; the batches are padded here
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(folder / file_name), options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.name = str(folder)

    def encode(self, sentences: Sequence[str], batch_size: int = 64, truncate_dim: int | None = None,
               normalize_embeddings: bool = False, show_progress_bar: bool | None = None) -> np.ndarray:
        """float32 ``(N, dim)`` embeddings (batches sorted by length, as sentence-transformers does), cut to
        ``truncate_dim`` (default: the encoder's) after the folder's own Normalize, then L2-normalised with
        ``normalize_embeddings``, in sentence-transformers' order. ``show_progress_bar`` is taken and ignored (no bar
        here), so that code written for ``SentenceTransformer.encode`` runs; any other option is refused by Python."""
        truncate_dim = _checked_truncate_dim(truncate_dim) or self.truncate_dim
        texts = [self.prompt + s for s in sentences]
        texts = [t.lower() for t in texts] if self.lower else texts
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out: np.ndarray | None = None
        for start in range(0, len(texts), batch_size):
            idx = order[start:start + batch_size]
            encodings = self.tokenizer.encode_batch([texts[i] for i in idx])
            length = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(idx), length), np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for row, e in enumerate(encodings):
                ids[row, :len(e.ids)], mask[row, :len(e.ids)], types[row, :len(e.ids)] = e.ids, 1, e.type_ids
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            hidden = self.session.run(None, {n: feed[n] for n in self.input_names})[0]
            emb = self._pool(hidden.astype(np.float32), mask)
            if out is None:
                out = np.empty((len(texts), emb.shape[1]), np.float32)
            out[idx] = emb
        if out is None:
            return np.zeros((0, 0), np.float32)
        if self.normalize:
            out = unit_rows(out)
        return truncated_and_normalized(out, truncate_dim, normalize_embeddings)

    def _pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.pooling == "cls":
            return hidden[:, 0]
        if self.pooling == "lasttoken":
            return hidden[np.arange(len(hidden)), mask.sum(1) - 1]
        if self.pooling == "max":
            return np.where(mask[..., None] > 0, hidden, -np.inf).max(1)
        return (hidden * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)


def _pooling_mode(config: dict) -> str:
    """The Pooling module's one mode, from its config (:func:`hf_cse.encoders.pooling_modes` reads its forms)."""
    modes = pooling_modes(config)
    mode = modes[0] if len(modes) == 1 else "+".join(modes) or None
    if mode not in OnnxEncoder.POOLING:
        raise ExportError(f"OnnxEncoder pools by cls, mean, max or lasttoken; this folder's Pooling is {mode!r}.")
    return mode


def _check_same_hidden_states(encoder, folder: Path, path: Path, names: list[str]) -> float:
    """The ONNX graph against the PyTorch module on the probe sentences (padded together): the smallest cosine of a
    real token's hidden state; below :data:`MIN_COSINE` is an :class:`ExportError` (nothing is committed)."""
    import onnxruntime as ort
    import torch
    from transformers import AutoTokenizer

    from .verify import PROBE_SENTENCES

    batch = AutoTokenizer.from_pretrained(str(folder))(list(PROBE_SENTENCES), padding=True, return_tensors="pt")
    batch = {n: batch[n] if n in batch else torch.zeros_like(batch["input_ids"]) for n in names}
    with torch.no_grad():
        want = encoder(**batch).last_hidden_state.numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {n: t.numpy() for n, t in batch.items()})[0]
    real = batch["attention_mask"].numpy().astype(bool)
    a, b = got[real], want[real]
    cos = float((np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())
    if cos < MIN_COSINE:
        raise ExportError(f"export check failed: {path.name} computes hidden states that differ from the PyTorch "
                          f"module's (min cosine {cos:.6f} < {MIN_COSINE}). This is a bug in hf_cse.export; nothing "
                          "was written.")
    return cos
