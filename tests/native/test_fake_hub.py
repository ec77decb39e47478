"""tests/fake_hub.py checked with the official `huggingface_hub` client first: the tests of
`hf://` references are only as good as the server they talk to."""
import hashlib
import urllib.request

import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.utils import (EntryNotFoundError, GatedRepoError,
                                   RepositoryNotFoundError, RevisionNotFoundError)

from fake_hub import FakeHub

GGUF = b"GGUF" + bytes(range(256)) * 40
CONFIG = b'{"model_type": "llama"}'


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as server:
        server.add_repo("org/model", {"config.json": CONFIG, "weights/model-Q8_0.gguf": GGUF})
        server.add_repo("org/gated", {"model.gguf": GGUF}, gated=True)
        yield server


def test_model_info_and_tree(hub):
    api = HfApi(endpoint=hub.url)
    info = api.model_info("org/model", files_metadata=True)
    assert info.sha == hub.repos["org/model"].commit
    siblings = {s.rfilename: s for s in info.siblings}
    assert siblings["config.json"].lfs is None and siblings["config.json"].size == len(CONFIG)
    assert siblings["weights/model-Q8_0.gguf"].lfs.sha256 == hashlib.sha256(GGUF).hexdigest()
    tree = {e.path: type(e).__name__ for e in api.list_repo_tree("org/model", recursive=True)}
    assert tree == {"weights": "RepoFolder", "config.json": "RepoFile",
                    "weights/model-Q8_0.gguf": "RepoFile"}
    top = {e.path for e in api.list_repo_tree("org/model")}
    assert top == {"weights", "config.json"}


def test_download_through_redirect_to_another_host(hub, tmp_path):
    path = hf_hub_download("org/model", "weights/model-Q8_0.gguf", endpoint=hub.url,
                           cache_dir=str(tmp_path))
    with open(path, "rb") as handle:
        assert handle.read() == GGUF
    sha = hashlib.sha256(GGUF).hexdigest()
    # the blob is named by the X-Linked-Etag (sha256) and came from the CDN host
    assert path.endswith("weights/model-Q8_0.gguf") and "/snapshots/" in path
    assert (tmp_path / "models--org--model" / "blobs" / sha).is_file()
    cdn = hub.downloads(sha)
    assert cdn and cdn[-1]["host"] == hub.cdn_url.split("//")[1]
    assert hub.cdn_url.split("//")[1] != hub.url.split("//")[1]
    small = hf_hub_download("org/model", "config.json", endpoint=hub.url,
                            cache_dir=str(tmp_path))
    git_sha1 = hashlib.sha1(b"blob %d\0" % len(CONFIG) + CONFIG).hexdigest()
    assert (tmp_path / "models--org--model" / "blobs" / git_sha1).is_file()
    assert open(small, "rb").read() == CONFIG


def test_headers_and_range(hub):
    url = "{}/org/model/resolve/main/weights/model-Q8_0.gguf".format(hub.url)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None
    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open(urllib.request.Request(url, method="HEAD"))
    headers = caught.value.headers
    assert caught.value.code == 302
    assert headers["X-Linked-Etag"] == '"{}"'.format(hashlib.sha256(GGUF).hexdigest())
    assert headers["X-Linked-Size"] == str(len(GGUF))
    assert headers["X-Repo-Commit"] == hub.repos["org/model"].commit
    assert headers["ETag"] and headers["Location"].startswith(hub.cdn_url)
    request = urllib.request.Request(headers["Location"], headers={"Range": "bytes=10-19"})
    with urllib.request.urlopen(request) as response:
        assert response.status == 206 and response.read() == GGUF[10:20]
        assert response.headers["Content-Range"] == "bytes 10-19/{}".format(len(GGUF))


def test_errors_as_the_hub_reports_them(hub, tmp_path):
    kwargs = dict(endpoint=hub.url, cache_dir=str(tmp_path), token=False)
    with pytest.raises(GatedRepoError):
        hf_hub_download("org/gated", "model.gguf", **kwargs)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org/none", "model.gguf", **kwargs)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("org/model", "nope.gguf", **kwargs)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("org/model", "config.json", revision="v9", **kwargs)
    path = hf_hub_download("org/gated", "model.gguf", endpoint=hub.url,
                           cache_dir=str(tmp_path), token=hub.token)
    assert open(path, "rb").read() == GGUF
