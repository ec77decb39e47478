"""The sampling a server request gets for the fields it leaves out.

Clients such as the official `openai` package send no `temperature` unless told, so the
server must pick one. Like vLLM and ollama it takes the model's own recommendation (the
GGUF `general.sampling.*` keys llama.cpp's converter writes, or `generation_config.json`
beside a Hugging Face model), else what apr's table of built-in models recommends for a
file that carries none, else llama-server's defaults; the operator's flags
(`apr serve --temp 0.7 ...`) override them all.

    defaults = resolve(read_recommended("model.gguf").values, flags={"temperature": 0.7})
    defaults.values     # {"temperature": 0.7, "top_k": 40, "top_p": 0.95, ...}
    defaults.sources    # {"temperature": "flags", "top_k": "built-in", ...}

Keys are `SamplerConfig` fields throughout; `sampler_options.BY_FIELD[f].request` gives
the request (llama-server) name a report shows.
"""
from __future__ import annotations

import math
import os
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

from ..errors import AprError
from .sampler_options import BY_FIELD
from .sampling import SamplerConfig

# Where a default came from, lowest precedence first: llama-server's values, apr's table
# of built-in models, the model's own files, the operator's flags.
BUILT_IN, MODEL_TABLE, MODEL, FLAGS = "built-in", "model-table", "model", "flags"

# llama-server's defaults (common_params_sampling): what a request gets when neither the
# model nor the operator says otherwise. A repeat penalty of 1.0 is off.
BUILT_IN_VALUES: Dict[str, Any] = {"temperature": 0.8, "top_k": 40, "top_p": 0.95,
                                   "min_p": 0.05, "repetition_penalty": 1.0}

# THE table of model recommendations: SamplerConfig field -> (GGUF key, as llama.cpp's
# LLAMA_MODEL_META_KEY_SAMPLING_* and gguf-py's Keys.General.SAMPLING_* name it;
# generation_config.json names: transformers' first, then gguf-py's converter's).
MODEL_KEYS: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    ("temperature", "general.sampling.temp", ("temperature",)),
    ("top_k", "general.sampling.top_k", ("top_k",)),
    ("top_p", "general.sampling.top_p", ("top_p",)),
    ("min_p", "general.sampling.min_p", ("min_p",)),
    ("repetition_penalty", "general.sampling.penalty_repeat",
     ("repetition_penalty", "penalty_repeat")),
    ("penalty_last_n", "general.sampling.penalty_last_n", ("penalty_last_n",)),
    ("xtc_probability", "general.sampling.xtc_probability", ("xtc_probability",)),
    ("xtc_threshold", "general.sampling.xtc_threshold", ("xtc_threshold",)),
    ("mirostat", "general.sampling.mirostat", ("mirostat",)),
    ("mirostat_tau", "general.sampling.mirostat_tau", ("mirostat_tau",)),
    ("mirostat_eta", "general.sampling.mirostat_eta", ("mirostat_eta",)),
)

GENERATION_CONFIG = "generation_config.json"


class Recommended(NamedTuple):
    """A model's recommended sampling: usable `values` by field, and the `ignored`
    entries (key -> value) that were not a number in the sampler's range."""

    values: Dict[str, Any]
    ignored: Dict[str, Any]


class SamplingDefaults(NamedTuple):
    """The effective defaults by field, and for each where it came from."""

    values: Dict[str, Any]
    sources: Dict[str, str]

    def report(self) -> Dict[str, Dict[str, Any]]:
        """{"params": {request name: value}, "sources": {request name: source}}."""
        names = {f: BY_FIELD[f].request for f in self.values}
        return {"params": {names[f]: v for f, v in sorted(self.values.items())},
                "sources": {names[f]: s for f, s in sorted(self.sources.items())}}


def _usable(field: str, raw: Any) -> Optional[Any]:
    """`raw` as the field's type when the sampler accepts it, else None."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    if not math.isfinite(raw):
        return None
    if BY_FIELD[field].kind is int:
        if raw != int(raw):
            return None
        value: Any = int(raw)
        if field == "top_k" and value < 0:      # llama.cpp: top_k <= 0 is off
            value = 0
    else:
        # GGUF stores f32: 0.95 reads back as 0.949999988; seven digits is all f32 holds
        value = float("%.7g" % raw)
        if field == "temperature" and value < 0:
            return None
    try:
        SamplerConfig(**{field: value})
    except AprError:
        return None
    return value


def from_metadata(metadata: Mapping[str, Any],
                  generation_config: Optional[Mapping[str, Any]] = None) -> Recommended:
    """The recommendation in a model file's metadata (GGUF keys at the top level, or in
    the GGUF block an APR file carries) and in a generation config (given, or the one an
    APR file converted from a HF directory carries); the GGUF keys win where both say."""
    gguf_block = metadata.get("gguf")
    kv = gguf_block["kv"] if isinstance(gguf_block, dict) and \
        isinstance(gguf_block.get("kv"), dict) else metadata
    if generation_config is None:
        generation_config = metadata.get("hf_generation_config")
    if not isinstance(generation_config, dict):
        generation_config = {}
    values: Dict[str, Any] = {}
    ignored: Dict[str, Any] = {}
    for field, gguf_key, config_names in MODEL_KEYS:
        found = [(name, generation_config[name]) for name in config_names
                 if generation_config.get(name) is not None][:1]
        if kv.get(gguf_key) is not None:
            found.append((gguf_key, kv[gguf_key]))
        for key, raw in found:                  # later (GGUF) overrides earlier
            value = _usable(field, raw)
            if value is None:
                ignored[key] = raw
            else:
                values[field] = value
    return Recommended(values, ignored)


def read_recommended(path: str) -> Recommended:
    """The recommendation of the model at `path`: its metadata, plus the
    generation_config.json of a Hugging Face directory (or of the one holding a
    SafeTensors file)."""
    from ..formats.hf_dir import hf_directory
    from ..formats.open import INDEX_SUFFIX, open_model
    from ..json_files import read_json_file
    generation_config = None
    if os.path.isdir(path) or path.endswith((".safetensors", INDEX_SUFFIX)):
        directory = hf_directory(path)
        config_path = os.path.join(directory, GENERATION_CONFIG) if directory else ""
        if config_path and os.path.isfile(config_path):
            generation_config = read_json_file(config_path, GENERATION_CONFIG)
    if os.path.isdir(path):
        return from_metadata({}, generation_config)
    with open_model(path, verify=False) as model_file:
        metadata = model_file.metadata if isinstance(model_file.metadata, dict) else {}
        return from_metadata(metadata, generation_config)


def resolve(model: Mapping[str, Any], flags: Mapping[str, Any],
            table: Optional[Mapping[str, Any]] = None) -> SamplingDefaults:
    """Built-in values, under the model table's (`table`), under the model's own, under
    the operator's flags."""
    values: Dict[str, Any] = {}
    sources: Dict[str, str] = {}
    for source, layer in ((BUILT_IN, BUILT_IN_VALUES), (MODEL_TABLE, table or {}),
                          (MODEL, model), (FLAGS, flags)):
        for field, value in layer.items():
            values[field] = value
            sources[field] = source
    return SamplingDefaults(values, sources)


__all__ = ["BUILT_IN", "BUILT_IN_VALUES", "FLAGS", "GENERATION_CONFIG", "MODEL", "MODEL_KEYS",
           "MODEL_TABLE", "Recommended", "SamplingDefaults", "from_metadata", "read_recommended", "resolve"]
