"""apr.toml and apr.lock (issue 20, seed 000 §4.15.4-5): `apr lock` pins every model to
commit, files, sizes and sha256; `apr lock --check` exits 5 when the Hub moved; a name from
apr.toml resolves at its locked revision; `apr tasks` / `apr task NAME`."""
import hashlib
import json
import os

import pytest

from cli_util import apr
from fake_hub import FakeHub
from synthetic_models import write_gguf_model

try:
    import tomllib
except ImportError:     # Python 3.10
    import tomli as tomllib


@pytest.fixture
def project(tmp_path):
    write_gguf_model(tmp_path / "a.gguf", quant="Q8_0", seed=1)
    write_gguf_model(tmp_path / "b.gguf", quant="Q8_0", seed=2)
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "apr.toml").write_text(
        '[models]\nchat = "hf://org/tiny-GGUF:Q8_0"\n\n'
        '[tasks.info]\ndescription = "Show the chat model"\n'
        'run = "apr tensors chat --json"\n')
    with FakeHub() as hub:
        first = hub.add_repo("org/tiny-GGUF", {"tiny-Q8_0.gguf": str(tmp_path / "a.gguf")})
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hf"),
               "HF_HOME": str(tmp_path / "hfhome"), "APR_CACHE": str(tmp_path / "apr"),
               "HF_TOKEN": "", "APR_OFFLINE": "", "HF_HUB_OFFLINE": "",
               "APR_PROJECT": str(folder)}
        yield {"hub": hub, "env": env, "dir": folder, "first": first, "tmp": tmp_path}


def sha256(path):
    with open(str(path), "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_lock_round_trip_and_check(project):
    env, hub, folder = project["env"], project["hub"], project["dir"]
    code, out, err = apr("lock", "--json", env=env)
    assert code == 0, err
    lock = tomllib.loads((folder / "apr.lock").read_text())
    [entry] = lock["models"]
    assert entry["name"] == "chat" and entry["source"] == "hf://org/tiny-GGUF:Q8_0"
    assert entry["revision"] == project["first"] and entry["open"] == "tiny-Q8_0.gguf"
    assert entry["files"] == [{"path": "tiny-Q8_0.gguf",
                               "size": os.path.getsize(project["tmp"] / "a.gguf"),
                               "sha256": sha256(project["tmp"] / "a.gguf")}]
    code, out, err = apr("lock", "--check", "--json", env=env)
    assert code == 0 and json.loads(out) == {"lock": str(folder / "apr.lock"), "ok": True,
                                             "changes": []}
    # the Hub moves on: a new commit with other weights
    second = hub.add_repo("org/tiny-GGUF", {"tiny-Q8_0.gguf": str(project["tmp"] / "b.gguf")})
    code, out, err = apr("lock", "--check", "--json", env=env)
    result = json.loads(out)
    assert code == 5 and not result["ok"]
    assert "chat: revision {} -> {}".format(project["first"], second) in result["changes"]
    assert "chat: files changed" in result["changes"]
    # a name from apr.toml still resolves at the locked revision (the old weights)
    code, out, err = apr("pull", "chat", "--json", env=env)
    assert code == 0, err
    pulled = json.loads(out)
    assert pulled["revision"] == project["first"]
    assert sha256(pulled["path"]) == sha256(project["tmp"] / "a.gguf")
    # ... with no network at all once cached: the locked commit is in the cache
    hub.requests.clear()
    code, out, err = apr("tensors", "chat", "--json", env=env)
    assert code == 0, err
    assert hub.requests == []
    # `apr lock` again pins the new commit, and --check agrees
    assert apr("lock", env=env)[0] == 0
    assert apr("lock", "--check", env=env)[0] == 0
    assert tomllib.loads((folder / "apr.lock").read_text())["models"][0]["revision"] == second


def test_lock_refuses_a_tampered_lock(project):
    env, folder = project["env"], project["dir"]
    assert apr("lock", env=env)[0] == 0
    text = (folder / "apr.lock").read_text()
    good = sha256(project["tmp"] / "a.gguf")
    (folder / "apr.lock").write_text(text.replace(good, "0" * 64))
    code, out, err = apr("pull", "chat", "--json", env=env)
    assert code == 5 and json.loads(out)["error"]["code"] == "E004"


def test_tasks_list_and_run(project):
    env = project["env"]
    code, out, err = apr("tasks", "--json", env=env)
    assert code == 0 and json.loads(out)["tasks"] == {
        "info": {"description": "Show the chat model", "run": "apr tensors chat --json"}}
    code, out, err = apr("task", "info", env=env)
    assert code == 0, err
    direct = apr("tensors", str(project["tmp"] / "a.gguf"), "--json", env=env)[1]
    assert json.loads(out) == json.loads(direct)
    code, out, err = apr("task", "nope", env=env)
    assert code == 2 and "no such task" in err


def test_bad_project_files(project):
    env, folder = project["env"], project["dir"]
    (folder / "apr.toml").write_text('[models]\nchat = "hf://org"\n')
    code, out, err = apr("lock", env=env)
    assert code == 2 and "E011" in err
    (folder / "apr.toml").write_text('[models\n')
    code, out, err = apr("tasks", env=env)
    assert code == 2 and "not valid TOML" in err
