"""The sampling a request gets for the fields it leaves out (apr_core/runtime/
sampling_defaults.py), with no server running: a GGUF written by llama.cpp's own gguf-py
(`GGUFWriter.add_sampling_*`, the oracle for key names and value types), a Hugging Face
directory's generation_config.json, the precedence built-in < model table < model <
flags, and the request path (`schemas.chat_request`) that turns them into the sampler.
`apr serve`'s flags for them are refused out of range with one coded line.
"""
import json
import re

import pytest

from apr_core.runtime.sampling import SamplerConfig
from apr_core.runtime.sampling_defaults import (BUILT_IN_VALUES, from_metadata,
                                                read_recommended, resolve)

from synthetic_models import write_hf_model

pytestmark = [pytest.mark.native]


def _gguf_with_recommendation(path):
    """A GGUF carrying every general.sampling.* key apr reads, written by gguf-py."""
    import gguf
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_sampling_temp(0.6)
    writer.add_sampling_top_k(20)
    writer.add_sampling_top_p(0.9)
    writer.add_sampling_min_p(0.1)
    writer.add_sampling_penalty_repeat(1.1)
    writer.add_sampling_penalty_last_n(128)
    writer.add_sampling_xtc_probability(0.25)
    writer.add_sampling_xtc_threshold(0.2)
    writer.add_sampling_mirostat(2)
    writer.add_sampling_mirostat_tau(4.0)
    writer.add_sampling_mirostat_eta(0.2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


GGUF_VALUES = {"temperature": 0.6, "top_k": 20, "top_p": 0.9, "min_p": 0.1,
               "repetition_penalty": 1.1, "penalty_last_n": 128, "xtc_probability": 0.25,
               "xtc_threshold": 0.2, "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2}


def test_gguf_sampling_keys_are_the_models_recommendation(tmp_path):
    found = read_recommended(_gguf_with_recommendation(tmp_path / "m.gguf"))
    assert found.values == GGUF_VALUES          # f32 0.6 reads back as 0.6, not 0.60000002
    assert found.ignored == {}
    assert isinstance(found.values["top_k"], int) and isinstance(found.values["mirostat"], int)


def test_generation_config_json_beside_a_hf_model(tmp_path):
    write_hf_model(tmp_path)
    config = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
              "repetition_penalty": 1.05, "bos_token_id": 1}
    (tmp_path / "generation_config.json").write_text(json.dumps(config))
    expected = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    assert read_recommended(str(tmp_path)).values == expected
    assert read_recommended(str(tmp_path / "model.safetensors")).values == expected


def test_a_hf_model_without_generation_config_recommends_nothing(tmp_path):
    write_hf_model(tmp_path)
    assert read_recommended(str(tmp_path)) == ({}, {})


def test_apr_metadata_carries_both_sources_and_gguf_keys_win():
    metadata = {"gguf": {"kv": {"general.sampling.temp": 0.5}},
                "hf_generation_config": {"temperature": 0.9, "top_p": 0.7}}
    assert from_metadata(metadata).values == {"temperature": 0.5, "top_p": 0.7}


def test_values_the_sampler_refuses_are_reported_not_used():
    found = from_metadata({"general.sampling.top_p": 0.0, "general.sampling.top_k": -1,
                           "general.sampling.min_p": 1.5, "general.sampling.temp": "hot",
                           "general.sampling.mirostat": 7},
                          {"temperature": -1, "repetition_penalty": True})
    assert found.values == {"top_k": 0}         # llama.cpp: top_k <= 0 is off
    assert found.ignored == {"general.sampling.top_p": 0.0, "general.sampling.min_p": 1.5,
                             "general.sampling.temp": "hot", "general.sampling.mirostat": 7,
                             "temperature": -1, "repetition_penalty": True}


def test_precedence_and_sources():
    defaults = resolve({"top_p": 0.8, "temperature": 0.6}, {"temperature": 0.3},
                       table={"temperature": 0.0, "min_p": 0.1})
    assert defaults.values == {"temperature": 0.3, "top_k": 40, "top_p": 0.8, "min_p": 0.1,
                               "repetition_penalty": 1.0}
    assert defaults.report() == {
        "params": {"min_p": 0.1, "repeat_penalty": 1.0, "temperature": 0.3, "top_k": 40,
                   "top_p": 0.8},
        "sources": {"min_p": "model-table", "repeat_penalty": "built-in",
                    "temperature": "flags", "top_k": "built-in", "top_p": "model"}}
    # llama-server's defaults when nobody says anything
    assert BUILT_IN_VALUES == {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
                               "repetition_penalty": 1.0}


def _sampler(body, defaults):
    pytest.importorskip("starlette", reason="the server is a native dependency")
    from apr_native.server.schemas import chat_request
    body = dict({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, **body)
    return chat_request(body, 64, defaults).params.sampler()


def test_a_request_without_sampling_fields_gets_the_defaults(tmp_path):
    defaults = resolve(read_recommended(_gguf_with_recommendation(tmp_path / "m.gguf")).values,
                       {}).values
    assert _sampler({}, defaults) == SamplerConfig(**GGUF_VALUES)
    # the built-in defaults alone: llama-server's, not an unfiltered temperature 1.0
    assert _sampler({}, resolve({}, {}).values) == SamplerConfig(
        temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)


def test_fields_a_request_sends_win_over_the_defaults(tmp_path):
    defaults = dict(GGUF_VALUES)
    sent = _sampler({"temperature": 0.3, "repeat_penalty": 1.2, "repeat_last_n": 8,
                     "top_k": 5}, defaults)
    assert sent == SamplerConfig(**dict(GGUF_VALUES, temperature=0.3, repetition_penalty=1.2,
                                        penalty_last_n=8, top_k=5))
    assert _sampler({"repetition_penalty": 1.3}, defaults).repetition_penalty == 1.3  # vLLM's
    greedy = _sampler({"temperature": 0}, defaults)
    assert greedy.temperature == 0.0 and greedy.top_p == 1.0


@pytest.mark.parametrize("flag, value, message", [
    ("--temp", "3", "--temp 3.0 is out of range: it takes 0.0 to 2.0"),
    ("--temp", "-0.5", "--temp -0.5 is out of range: it takes 0.0 to 2.0"),
    ("--top-p", "1.5", "--top-p 1.5 is out of range: it takes 0.0 to 1.0"),
    ("--top-k", "-1", "--top-k -1 is out of range: it takes 0 to 1048576"),
    ("--min-p", "2", "--min-p 2.0 is out of range: it takes 0.0 to 1.0"),
    ("--repeat-penalty", "0", "--repeat-penalty 0.0 is out of range: it takes 0.01 to 10.0"),
    ("--port", "0", "--port 0 is out of range: it takes 1 to 65535"),
    ("--max-batch", "999", "--max-batch 999 is out of range: it takes 1 to 256"),
])
def test_serve_flags_out_of_range_are_one_coded_line(capsys, flag, value, message):
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    from apr_native.cli.main import main
    assert main(["serve", "demo", flag, value]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "E011" in err and message in err


def test_serve_help_states_every_default(capsys):
    from apr_native.cli.main import main
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    options = out[out.index("options:"):]
    # one entry per option: from its "  -flag" line to the next one
    entries = [" ".join(entry.split()) for entry in re.split(r"\n  (?=-)", options)[1:]]
    assert len(entries) > 30
    for entry in entries:
        assert "default" in entry or entry.startswith("-h, --help"), entry
    for shown in ("--port PORT TCP port to listen on (default: 8080)",
                  "(default: the model's recommendation, else 0.8)",
                  "(default: the model's recommendation, else 40)",
                  "(default: the model's recommendation, else 0.95)",
                  "(default: the model's recommendation, else 0.05)",
                  "(default: the model's recommendation, else 1.0)",
                  "or off (default: text)"):
        assert any(shown in entry for entry in entries), shown
