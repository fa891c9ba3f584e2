"""PromptBERT as sentence-transformers modules (Jiang et al., EMNLP 2022): ``PromptTransformer`` puts each tokenized
text into the template before the encoder runs, ``PromptMaskPooling`` reads the template's ``[MASK]`` and, where
denoising is on, subtracts the template's representation with an empty sentence of the same length.

hf_cse's export copies this file and :mod:`.templates` into the folder, where sentence-transformers loads them
(``SentenceTransformer(folder, trust_remote_code=True)``: it imports no module outside its own without that flag);
they need nothing but torch and sentence-transformers. The template is applied to token ids exactly as hf_cse's
model applies it (:func:`.templates.put_in_template`), so both give the same vectors.
"""

from __future__ import annotations

import json
import os

import torch
from sentence_transformers.base.modules.module import Module
from sentence_transformers.base.modules.transformer import Transformer

from .templates import TemplateIds, ended_with_period, put_in_template

TEMPLATE_FILE = "prompt_template.json"


class PromptTransformer(Transformer):
    """sentence-transformers' Transformer whose input rows are put into a template first (``prompt_template.json``:
    the template's ``prefix`` / ``suffix`` token ids, ``mask_at``, how the tokenizer wraps a sentence, and
    ``end_with_period``: each text ended with a period before it is tokenized, as the authors' evaluation; an export
    written before that key existed edits no text)."""

    template: dict | None = None

    def preprocess(self, inputs, *args, **kwargs) -> dict:
        if self.template and self.template.get("end_with_period"):
            inputs = [ended_with_period(x) if isinstance(x, str) else x for x in inputs]
        return super().preprocess(inputs, *args, **kwargs)

    def forward(self, features: dict, **kwargs) -> dict:
        spec = self.template
        ids = TemplateIds(tuple(spec["prefix"]), tuple(spec["suffix"]), int(spec["mask_at"]))
        t = put_in_template(features["input_ids"], features["attention_mask"], ids, spec["n_lead"], spec["n_trail"],
                            spec["pad"], spec["max_length"])
        features = {k: v for k, v in features.items() if k != "token_type_ids"}  # the template has no segments
        features.update(input_ids=t.input_ids, attention_mask=t.attention_mask)
        features = super().forward(features, **kwargs)
        features.update(prompt_mask_index=t.mask_index, prompt_sentence_length=t.sentence_length)
        return features

    def save(self, output_path: str, *args, **kwargs) -> None:
        super().save(output_path, *args, **kwargs)
        with open(os.path.join(output_path, TEMPLATE_FILE), "w", encoding="utf-8") as f:
            json.dump(self.template, f, indent=2)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token=None, cache_folder=None, revision=None,
             local_files_only: bool = False, **kwargs):
        module = super().load(model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
                              revision=revision, local_files_only=local_files_only, **kwargs)
        path = cls.load_file_path(model_name_or_path, filename=TEMPLATE_FILE, subfolder=subfolder, token=token,
                                  cache_folder=cache_folder, revision=revision, local_files_only=local_files_only)
        with open(path, encoding="utf-8") as f:
            module.template = json.load(f)
        return module


class PromptMaskPooling(Module):
    """``sentence_embedding`` = ``token_embeddings`` at the template's ``[MASK]`` (its last token for a template
    without one), minus ``noise[sentence length]`` when ``noise_rows`` > 0 (template denoising, the table computed at
    export for every sentence length up to the encoder's limit)."""

    config_keys = ["embedding_dimension", "noise_rows"]

    def __init__(self, embedding_dimension: int, noise_rows: int = 0):
        super().__init__()
        self.embedding_dimension = int(embedding_dimension)
        self.noise_rows = int(noise_rows)
        self.register_buffer("noise", torch.zeros(self.noise_rows, self.embedding_dimension))

    def forward(self, features: dict, **kwargs) -> dict:
        tokens, index = features["token_embeddings"], features["prompt_mask_index"]
        embedding = tokens[torch.arange(tokens.shape[0], device=tokens.device), index]
        if self.noise_rows:
            embedding = embedding - self.noise[features["prompt_sentence_length"]].to(embedding.dtype)
        features["sentence_embedding"] = embedding
        return features

    def get_embedding_dimension(self) -> int:
        return self.embedding_dimension

    get_sentence_embedding_dimension = get_embedding_dimension

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
        if self.noise_rows:
            self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token=None, cache_folder=None, revision=None,
             local_files_only: bool = False, **kwargs):
        hub = {"subfolder": subfolder, "token": token, "cache_folder": cache_folder, "revision": revision,
               "local_files_only": local_files_only}
        config = cls.load_config(model_name_or_path, **hub)
        module = cls(**{k: v for k, v in config.items() if k in cls.config_keys})
        if module.noise_rows:
            cls.load_torch_weights(model_name_or_path, model=module, **hub)
        return module
