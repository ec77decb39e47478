"""What the inspection commands read from a model besides tensors: its metadata in APR form
(whatever the format), vocabulary, header fields and family (architecture)."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from apr_core.errors import AprError
from apr_core.formats.gguf_lazy import GGUFArray
from apr_core.formats.logical import apr_metadata
from apr_core.tensor import ModelFile

# Top-level APR metadata keys and the GGUF `general.*` keys that say the same thing.
META_ALIASES = {
    "name": ("name", "general.name"),
    "license": ("license", "general.license"),
    "model_card": ("model_card", "general.description"),
    # Where the weights come from (not the container they were converted from).
    "provenance": ("provenance", "source", "source_url", "general.source.url",
                   "general.source.huggingface.repository", "general.url",
                   "general.repo_url", "general.organization", "general.base_model.0.name"),
}


def metadata(model: ModelFile, source: Any = None, lazy: bool = False) -> Dict[str, Any]:
    """The model's metadata as APR holds it (GGUF KV under "gguf", SafeTensors restored,
    a HF directory's config.json / tokenizer.json when `source` is its path). `lazy`: a
    GGUF vocabulary stays undecoded (`gguf_lazy.GGUFArray`), for header-only readers."""
    return apr_metadata(model, source, lazy=lazy)


def gguf_kv(meta: Dict[str, Any]) -> Dict[str, Any]:
    block = meta.get("gguf")
    return block.get("kv", {}) if isinstance(block, dict) else {}


def meta_value(meta: Dict[str, Any], key: str) -> Any:
    """A well-known metadata value (`name`, `license`, ...) from APR or GGUF keys, or None."""
    kv = gguf_kv(meta)
    for alias in META_ALIASES.get(key, (key,)):
        for table in (meta, kv):
            value = table.get(alias)
            if value not in (None, "", [], {}):
                return value
    return None


def vocab_tokens(meta: Dict[str, Any]) -> Optional[List[str]]:
    """The vocabulary as a list of token strings (id order), or None when the file has none."""
    tokens = gguf_kv(meta).get("tokenizer.ggml.tokens")
    if isinstance(tokens, (list, GGUFArray)):
        return [str(t) for t in tokens]
    hf_tokenizer = meta.get("hf_tokenizer")
    holders = [meta, meta.get("tokenizer"),
               hf_tokenizer.get("model") if isinstance(hf_tokenizer, dict) else None]
    for holder in [h for h in holders if isinstance(h, dict)]:
        vocab = holder.get("vocab")
        if isinstance(vocab, list):
            return [str(t) for t in vocab]
        if isinstance(vocab, dict):   # token -> id
            return [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    return None


def vocab_size(meta: Dict[str, Any]) -> Optional[int]:
    """How many tokens the vocabulary holds, without decoding it; else the declared size."""
    tokens = gguf_kv(meta).get("tokenizer.ggml.tokens")
    if isinstance(tokens, (list, GGUFArray)):
        return len(tokens)
    found = vocab_tokens(meta) if "gguf" not in meta else None
    return len(found) if found is not None else declared_vocab_size(meta)


def declared_vocab_size(meta: Dict[str, Any]) -> Optional[int]:
    """n_vocab as the metadata states it (APR architecture table, `<arch>.vocab_size`, or a
    HF directory's config.json)."""
    arch = meta.get("architecture")
    if isinstance(arch, dict) and isinstance(arch.get("n_vocab"), int):
        return arch["n_vocab"]
    kv = gguf_kv(meta)
    value = kv.get("{}.vocab_size".format(kv.get("general.architecture")))
    hf_config = meta.get("hf_config")
    if value is None and isinstance(hf_config, dict):
        value = hf_config.get("vocab_size")
    return value if isinstance(value, int) else None


def family(model: ModelFile, meta: Dict[str, Any]) -> Optional[Any]:
    """(Family, ModelConfig) from the model-family contracts, or None when none fits."""
    from apr_core.model.config import config_from_apr
    try:
        config = config_from_apr(meta, model.tensors)
    except AprError:
        return None
    from apr_core.model.families import Family, contracts
    return Family(config.arch, contracts()[config.arch]), config


def header_fields(model: ModelFile, path: str) -> Dict[str, Any]:
    """The container's own header: what `inspect --header` shows."""
    out: Dict[str, Any] = {"format": model.format,
                           "file_size": os.path.getsize(path) if os.path.isfile(path) else None}
    header = getattr(model, "header", None)
    if header is not None:           # APR v2
        from apr_core.formats.flags import flag_names
        out.update(magic=header.magic.decode("latin-1"),
                   version="{}.{}".format(header.version_major, header.version_minor),
                   header_size=32, flags=flag_names(header.flags),
                   metadata_offset=header.metadata_offset, metadata_size=header.metadata_size,
                   index_offset=header.index_offset, index_size=header.index_size,
                   data_offset=header.data_offset, alignment=model.alignment,
                   checksum="0x{:08X}".format(model.footer.crc32))
    elif model.format == "gguf":
        out.update(version=model.version, alignment=model.alignment,
                   kv_count=len(model.header_metadata), data_offset=model.data_offset)
    elif hasattr(model, "header_size"):  # SafeTensors
        out.update(header_size=model.header_size, data_offset=model.data_start)
    for key in ("flags", "shard_files"):
        if key not in out and hasattr(model, key):
            value = getattr(model, key)
            if key == "flags":
                from apr_core.formats.flags import flag_names
                value = flag_names(value)
            out[key] = value
    return out
