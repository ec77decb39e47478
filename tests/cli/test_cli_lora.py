"""`--lora FILE[:SCALE]` on `apr run` and `apr chat` (in process, SmolLM2 + a GGUF LoRA in
llama.cpp's layout): scale 1 gives the adapted engine's greedy text (the engine
test_lora_llama_cpp.py holds to llama.cpp), scale 0 the plain model's, a spec
without a file is an E011 argument error, and `apr chat --session` with adapters is refused
(E009: a session names its model by the file's sha256 alone)."""
import io
import json
import sys

import pytest

from cli_util import apr
from lora_files import write_gguf_lora

pytestmark = [pytest.mark.native, pytest.mark.real_model]

PROMPT = "Explain what a CPU does."


def run_text(model, *flags):
    code, out, err = apr("run", model, PROMPT, "-n", "6", "--backend", "numba", "--json",
                         *flags)
    assert code == 0, err
    return json.loads(out)["text"]


def test_run_and_chat_with_lora(smollm2_gguf, numba_ready, tmp_path, monkeypatch):
    lora = str(tmp_path / "lora.gguf")
    write_gguf_lora(lora, range(0, 30, 3))
    plain = run_text(smollm2_gguf)
    adapted = run_text(smollm2_gguf, "--lora", lora)
    assert adapted != plain
    assert run_text(smollm2_gguf, "--lora", lora + ":0") == plain
    monkeypatch.setattr(sys, "stdin", io.StringIO(PROMPT + "\n"))   # piped, not a TTY
    code, out, err = apr("chat", smollm2_gguf, "-n", "6", "--backend", "numba", "--lora", lora)
    assert code == 0, err
    assert adapted.strip() in out
    code, _out, err = apr("run", smollm2_gguf, PROMPT, "--lora", ":0.5")
    assert code == 2 and "E011" in err and "--lora" in err
    # a session names its model by the file's sha256 alone: none is kept with adapters
    session = tmp_path / "chat.aprs"
    monkeypatch.setattr(sys, "stdin", io.StringIO(PROMPT + "\n"))
    code, _out, err = apr("chat", smollm2_gguf, "-n", "6", "--backend", "numba", "--lora", lora,
                          "--session", str(session))
    assert code != 0 and "E009" in err and "LoRA" in err, err
    assert not session.exists()
