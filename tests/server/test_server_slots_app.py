"""POST /slots/{id} in-process (Starlette's test client), for what needs no loaded model:
501 without --slot-save-path, the argument checks (slot, action, filename) before anything
is read or written, 503 for save/restore while the model loads, erase of an empty slot."""
import pytest

pytestmark = [pytest.mark.native]

pytest.importorskip("starlette", reason="starlette is a native dependency")
pytest.importorskip("httpx", reason="starlette's test client needs httpx")

from starlette.testclient import TestClient  # noqa: E402

from apr_native.server.app import ServerSettings, create_app  # noqa: E402
from apr_native.server.engine import ServingEngine  # noqa: E402

AUTH = {"Authorization": "Bearer k"}


def client_for(tmp_path, folder=None):
    engine = ServingEngine(str(tmp_path / "never-loaded.gguf"), "m")   # worker never started
    settings = ServerSettings(api_key="k", slot_save_path=folder)
    return TestClient(create_app(engine, settings, manage_engine=False))


def test_without_a_save_folder_the_route_is_not_supported(tmp_path):
    client = client_for(tmp_path)
    got = client.post("/slots/0?action=save", headers=AUTH, json={"filename": "a.bin"})
    assert got.status_code == 501 and got.json()["error"]["code"] == "not_supported"
    assert client.post("/slots/0?action=erase").status_code == 401      # the API key first


def test_arguments_are_checked_before_the_model(tmp_path):
    client = client_for(tmp_path, str(tmp_path))

    def post(path, **body):
        return client.post(path, headers=AUTH, json=body)

    assert post("/slots/16?action=save", filename="a.bin").json()["error"]["code"] == \
        "invalid_slot"                                   # --max-batch 16: slots 0 .. 15
    assert post("/slots/x?action=save", filename="a.bin").status_code == 400
    assert post("/slots/0?action=dump", filename="a.bin").json()["error"]["code"] == \
        "invalid_action"
    for name in ("../a.bin", "a/b.bin", "..", ".a", "", 7):
        got = post("/slots/0?action=restore", filename=name)
        assert got.status_code == 400 and got.json()["error"]["code"] == "invalid_filename"
    got = post("/slots/0?action=save", filename="a.bin")
    assert got.status_code == 503 and got.json()["error"]["code"] == "model_not_ready"
    assert post("/slots/3?action=erase").json() == {"id_slot": 3, "n_erased": 0}
    assert list(tmp_path.iterdir()) == []                # nothing written
