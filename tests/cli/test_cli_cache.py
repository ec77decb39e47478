"""Configuration (`APR_CONFIG` / config.toml), the model cache (`APR_CACHE`, `apr list`,
`apr rm`), `APR_COLOR` and `APR_LOG_LEVEL` (seed 000 §8, appendix B)."""
import json
import os

import pytest

import synthetic_models as sm
from cli_util import apr

pytestmark = pytest.mark.native


def test_import_to_cache_list_rm_and_cache_hit(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    env = {"APR_CACHE": str(tmp_path / "cache")}
    code, out, err = apr("import", src, "--json", env=env)
    assert code == 0, err
    result = json.loads(out)
    cached = tmp_path / "cache" / "models" / "m.apr"
    assert result["output"] == str(cached) and cached.is_file()
    stamp = cached.stat().st_mtime_ns
    code, out, _ = apr("import", src, "--json", env=env)
    assert code == 0 and json.loads(out)["cached"] is True
    assert cached.stat().st_mtime_ns == stamp          # nothing rewritten
    code, out, _ = apr("list", "--json", env=env)
    assert [m["name"] for m in json.loads(out)["models"]] == ["m.apr"]
    code, _, err = apr("rm", "../m.gguf", env=env)
    assert code == 2 and os.path.exists(src)
    code, _, _ = apr("rm", "m", env=env)
    assert code == 0 and not cached.exists()
    code, _, err = apr("rm", "m", env=env)
    assert code == 3


def test_config_output_format_json(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[defaults]\noutput_format = "json"\n')
    code, out, _ = apr("oracle", "--family", "llama", env={"APR_CONFIG": str(config)})
    assert code == 0 and json.loads(out)["family"] == "llama"
    code, out, _ = apr("oracle", "--family", "llama", env={"APR_CONFIG": str(tmp_path / "none")})
    assert code == 0 and not out.startswith("{")
    config.write_text("[defaults\nbroken")
    code, _, err = apr("oracle", "--family", "llama", env={"APR_CONFIG": str(config)})
    assert code == 2 and "not valid TOML" in err


def test_color_and_log_level(monkeypatch, tmp_path):
    from apr_native import config
    monkeypatch.setenv("APR_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("APR_COLOR", "always")
    assert config.color_enabled(False) is True
    monkeypatch.setenv("APR_COLOR", "never")
    assert config.color_enabled(True) is False
    monkeypatch.setenv("APR_COLOR", "auto")
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert config.color_enabled(True) is True and config.color_enabled(False) is False
    (tmp_path / "c.toml").write_text('[defaults]\ncolor = false\nlog_level = "warning"\n')
    monkeypatch.setenv("APR_CONFIG", str(tmp_path / "c.toml"))
    assert config.color_enabled(True) is False
    monkeypatch.delenv("APR_LOG_LEVEL", raising=False)
    assert config.log_level() == "warning"
    monkeypatch.setenv("APR_LOG_LEVEL", "DEBUG")
    assert config.log_level() == "debug"


def test_debug_log_level_shows_the_traceback(tmp_path):
    code, _, err = apr("import", str(tmp_path / "missing.gguf"), "-o", str(tmp_path / "x.apr"))
    assert code == 3 and "Traceback" not in err
    code, _, err = apr("import", str(tmp_path / "missing.gguf"), "-o", str(tmp_path / "x.apr"),
                       env={"APR_LOG_LEVEL": "debug"})
    assert code == 3 and "Traceback" in err
