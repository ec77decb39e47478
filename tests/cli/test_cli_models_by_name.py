"""Models by name (issue 20): `hf://` references and URLs in every command, pulled through
huggingface_hub into the shared Hugging Face cache from tests/fake_hub.py, verified before
use; offline mode, gated repos, corrupted and interrupted downloads."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from cli_util import apr
from fake_hub import FakeHub
from synthetic_models import write_gguf_model, write_hf_model

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    write_gguf_model(root / "q8.gguf", quant="Q8_0", seed=1)
    write_gguf_model(root / "q4.gguf", quant="Q4_0", seed=2)
    write_hf_model(root / "hf")
    return root


@pytest.fixture(scope="module")
def hub(tiny, smollm2_gguf):
    with FakeHub() as server:
        server.add_repo(SMOL, {"SmolLM2-135M-Instruct.Q4_1.gguf": str(smollm2_gguf),
                               "README.md": b"# SmolLM2\n"})
        server.add_repo("org/tiny-GGUF", {"tiny-Q8_0.gguf": str(tiny / "q8.gguf"),
                                          "tiny-Q4_0.gguf": str(tiny / "q4.gguf"),
                                          "README.md": b"tiny"})
        server.add_repo("org/tiny-hf", {"config.json": str(tiny / "hf" / "config.json"),
                                        "model.safetensors":
                                            str(tiny / "hf" / "model.safetensors")})
        server.add_repo("org/gated", {"tiny-Q8_0.gguf": str(tiny / "q8.gguf")}, gated=True)
        yield server


@pytest.fixture
def env(hub, tmp_path):
    """A fresh HF cache and apr cache per test; the fake hub as HF_ENDPOINT; no token."""
    hub.requests.clear()
    return {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hf"),
            "HF_HOME": str(tmp_path / "hfhome"), "APR_CACHE": str(tmp_path / "apr"),
            "HF_TOKEN": "", "APR_OFFLINE": "", "HF_HUB_OFFLINE": ""}


def pull(env, ref, *extra):
    code, out, err = apr("pull", ref, "--json", *extra, env=env)
    return code, (json.loads(out) if out else json.loads("{}")), err


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_pull_then_run_equals_the_builtin_model(env, hub, smollm2_gguf):
    code, result, err = pull(env, "hf://{}:q4_1".format(SMOL))
    assert code == 0, err
    path = result["path"]
    assert path.startswith(env["HF_HUB_CACHE"]) and path.endswith(".Q4_1.gguf")
    assert os.path.islink(path) and sha256(path) == sha256(smollm2_gguf)
    assert result["files"][0]["sha256"] == sha256(smollm2_gguf)
    args = ["Hello", "-n", "4", "--raw", "--backend", "numpy", "--json"]
    code, out, err = apr("run", "hf://{}".format(SMOL), *args, env=env)
    assert code == 0, err
    code2, out2, err2 = apr("run", str(smollm2_gguf), *args, env=env)
    assert code2 == 0, err2
    assert json.loads(out)["text"] == json.loads(out2)["text"]


def test_pulled_file_is_visible_to_huggingface_hub_offline(env, hub):
    code, result, err = pull(env, "hf://org/tiny-GGUF/tiny-Q8_0.gguf")
    assert code == 0, err
    script = ("from huggingface_hub import hf_hub_download;"
              "print(hf_hub_download('org/tiny-GGUF', 'tiny-Q8_0.gguf'))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ, **dict(env, HF_HUB_OFFLINE="1",
                                                      HF_ENDPOINT="http://127.0.0.1:9")))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == result["path"]


def test_file_from_huggingface_hub_is_used_by_apr_offline(env, hub):
    from huggingface_hub import hf_hub_download
    path = hf_hub_download("org/tiny-GGUF", "tiny-Q4_0.gguf", endpoint=hub.url,
                           cache_dir=env["HF_HUB_CACHE"])
    hub.requests.clear()
    code, result, err = pull(dict(env, APR_OFFLINE="1"), "hf://org/tiny-GGUF:Q4_0")
    assert code == 0, err
    assert result["path"] == path              # the same file: no second copy
    assert hub.requests == []                  # and no network
    code, out, err = apr("inspect", "hf://org/tiny-GGUF:Q4_0", "--json",
                         env=dict(env, APR_OFFLINE="1"))
    assert code == 0, err


def test_quant_selection(env, hub):
    code, result, err = pull(env, "hf://org/tiny-GGUF:q4_0")
    assert code == 0, err
    assert result["path"].endswith("tiny-Q4_0.gguf") and len(result["files"]) == 1
    code, result, err = pull(env, "hf://org/tiny-GGUF:Q5_K_M")
    assert code == 2 and result["error"]["code"] == "E011"
    assert "tiny-Q4_0.gguf, tiny-Q8_0.gguf" in result["error"]["context"]["available"]
    code, result, err = pull(env, "hf://org/tiny-GGUF")         # two GGUFs: ambiguous
    assert code == 2 and "more than one GGUF" in result["error"]["message"]


def test_hf_directory_reference(env, hub):
    code, result, err = pull(env, "hf://org/tiny-hf")
    assert code == 0, err
    assert sorted(f["path"] for f in result["files"]) == ["config.json", "model.safetensors"]
    assert os.path.isdir(result["path"])
    code, out, err = apr("tensors", "hf://org/tiny-hf", "--json", env=env)
    assert code == 0, err
    assert "model.embed_tokens.weight" in out


@pytest.mark.parametrize("command", [["inspect"], ["tensors"], ["validate"],
                                     ["diff", "hf://org/tiny-GGUF:Q8_0"]])
def test_every_command_takes_a_reference(env, hub, tiny, command):
    ref = "hf://org/tiny-GGUF:Q8_0"
    code, out, err = apr(*command, ref, "--json", env=env)
    local = apr(*command[:1], *[str(tiny / "q8.gguf")] * len(command), "--json", env=env)
    assert code == local[0] == 0, err
    by_ref, by_path = json.loads(out), json.loads(local[1])
    if isinstance(by_path, list):               # tensors: the same listing
        assert by_ref == by_path
    else:
        assert by_ref.keys() == by_path.keys()


def test_plain_url_into_the_content_addressed_cache(env, hub, tiny):
    url = "{}/org/tiny-GGUF/resolve/main/tiny-Q8_0.gguf".format(hub.url)
    code, result, err = pull(env, url)
    assert code == 0, err
    digest = sha256(tiny / "q8.gguf")
    assert result["path"] == os.path.join(env["APR_CACHE"], "blobs", "sha256", digest)
    assert result["files"][0]["sha256"] == digest
    hub.requests.clear()
    code, out, err = apr("inspect", url, "--json", env=env)          # cached: no transfer
    assert code == 0, err
    assert hub.requests == []
    bad = "{}/org/tiny-GGUF/resolve/main/tiny-Q4_0.gguf#sha256={}".format(hub.url, "0" * 64)
    code, result, err = pull(env, bad)
    assert code == 5 and result["error"]["code"] == "E004"
    assert os.listdir(os.path.join(env["APR_CACHE"], "downloads")) == []
    assert os.listdir(os.path.join(env["APR_CACHE"], "blobs", "sha256")) == [digest]


def test_gated_repo_needs_a_token(env, hub):
    code, result, err = pull(env, "hf://org/gated")
    assert code == 3 and result["error"]["code"] == "E014"
    assert "HF_TOKEN" in result["error"]["message"]
    code, result, err = pull(dict(env, HF_TOKEN=hub.token), "hf://org/gated")
    assert code == 0, err
    assert result["path"].endswith("tiny-Q8_0.gguf")


def test_corrupted_blob_is_refused_and_not_cached(env, hub, tiny):
    digest = sha256(tiny / "q4.gguf")
    size = os.path.getsize(tiny / "q4.gguf")
    hub.corrupt(digest, b"\x00" * size)
    try:
        code, result, err = pull(env, "hf://org/tiny-GGUF:Q4_0")
    finally:
        hub.corrupted.clear()
    assert code == 5 and result["error"]["code"] == "E004", err
    repo = os.path.join(env["HF_HUB_CACHE"], "models--org--tiny-GGUF")
    leftovers = [os.path.join(b, n) for b, _d, names in os.walk(repo) for n in names
                 if "/refs/" not in os.path.join(b, n)]
    assert leftovers == []                      # no blob, no snapshot link, no .incomplete
    code, result, err = pull(env, "hf://org/tiny-GGUF:Q4_0")
    assert code == 0, err
    assert sha256(result["path"]) == digest


def test_interrupted_download_resumes(env, hub, tiny, smollm2_gguf):
    digest = sha256(smollm2_gguf)
    # huggingface_hub keeps what it wrote in whole 10 MiB chunks before the cut
    hub.cut_after(digest, 25_000_000)
    code, result, err = pull(env, "hf://{}".format(SMOL))
    if code != 0:                               # the client gave up: the next pull resumes
        assert result["error"]["code"] == "E013", err
        code, result, err = pull(env, "hf://{}".format(SMOL))
    assert code == 0, err
    assert sha256(result["path"]) == digest
    ranges = [r["range"] for r in hub.downloads(digest)]
    assert ranges[0] is None and len(ranges) == 2
    resumed_at = int(ranges[1][len("bytes="):-1])
    assert 10 << 20 <= resumed_at <= 25_000_000
    # a plain URL resumes with Range too (apr's own transfer)
    q8 = sha256(tiny / "q8.gguf")
    hub.cut_after(q8, 1000)
    code, result, err = pull(env, "{}/lfs/{}".format(hub.cdn_url, q8))
    assert code == 0, err
    assert sha256(result["path"]) == q8
    assert [r["range"] for r in hub.downloads(q8)] == [None, "bytes=1000-"]


@pytest.mark.parametrize("variable", ["APR_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_hit_and_miss(env, hub, variable):
    assert pull(env, "hf://org/tiny-GGUF:Q8_0")[0] == 0
    hub.requests.clear()
    offline = dict(env, **{variable: "1"})
    code, out, err = apr("inspect", "hf://org/tiny-GGUF:Q8_0", "--json", env=offline)
    assert code == 0, err
    code, out, err = apr("inspect", "hf://org/tiny-GGUF:Q4_0", "--json", env=offline)
    error = json.loads(out)["error"]
    assert code == 3 and error["code"] == "E015"
    assert "hf://org/tiny-GGUF:Q4_0" in error["message"]
    assert hub.requests == []


def test_list_rm_and_cache(env, hub):
    ref = "hf://org/tiny-GGUF:Q8_0"
    code, result, err = pull(env, ref)
    blob = os.path.realpath(result["path"])
    code, out, err = apr("list", "--json", env=env)
    assert [p["name"] for p in json.loads(out)["pulled"]] == [ref]
    code, out, err = apr("cache", "info", "--json", env=env)
    info = json.loads(out)
    assert info["hf_cache"] == env["HF_HUB_CACHE"]
    assert info["pulled"] == {"references": 1, "bytes": os.path.getsize(blob)}
    code, out, err = apr("rm", ref, "--json", env=env)
    assert code == 0 and not os.path.exists(blob) and not os.path.lexists(result["path"])
    assert json.loads(apr("list", "--json", env=env)[1])["pulled"] == []
    pull(env, ref)
    url = "{}/org/tiny-GGUF/resolve/main/tiny-Q4_0.gguf".format(hub.url)
    pull(env, url)
    code, out, err = apr("cache", "clear", "--json", env=env)
    assert code == 0 and sorted(json.loads(out)["removed"]) == sorted([ref, url])
    assert not os.path.exists(blob)
    assert os.listdir(os.path.join(env["APR_CACHE"], "blobs", "sha256")) == []


def test_import_takes_a_reference(env, hub, tmp_path):
    out_file = tmp_path / "tiny.apr"
    code, out, err = apr("import", "hf://org/tiny-GGUF:Q8_0", "-o", out_file, "--json", env=env)
    assert code == 0, err
    assert json.loads(out)["tensors"] > 0 and out_file.is_file()
