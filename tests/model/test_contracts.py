"""Model-family contracts: the packaged JSON equals contracts/*.yaml, and every contract is
well formed and satisfies the algebraic invariants of seed 004 §16."""
import importlib.util
import math
import os
import subprocess
import sys

import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.model.families import SOURCES, contracts, eval_dim, family_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPECTED = {"llama", "qwen2", "mistral", "gpt2", "gemma3"}


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_contracts", os.path.join(ROOT, "scripts", "gen_contracts.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_packaged_json_matches_the_yaml_sources():
    pytest.importorskip("yaml")
    gen = _generator()
    with open(gen.JSON_PATH, encoding="utf-8") as handle:
        assert handle.read() == gen.render(gen.load_yaml_contracts()), \
            "apr_core/data/contracts.json is stale: run scripts/gen_contracts.py"


def test_contracts_load_without_pyyaml():
    code = ("import sys; sys.modules['yaml'] = None\n"
            "from apr_core.model.families import contracts\n"
            "print(sorted(contracts()))")
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=ROOT),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    assert done.returncode == 0, done.stderr
    assert set(eval(done.stdout)) == EXPECTED


@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_contract_is_well_formed(family):
    contract = contracts()[family]
    assert contract["family"] == family
    for source, archs in contract["architectures"].items():
        assert source in SOURCES
        for arch in archs:
            assert family_for(arch, source).name == family
        assert source in contract["rope_style"] and source in contract["norm_weight_offset"]
        assert contract["tensors"]["global"]["embedding"].get(source)
    for scope in ("global", "layer"):
        for role, entry in contract["tensors"][scope].items():
            assert entry["shape"], role
            for source in SOURCES:
                name = entry.get(source)
                if name is not None:
                    assert ("{i}" in name) == (scope == "layer"), (role, name)


@pytest.mark.parametrize("family,variant", [(f, v) for f in sorted(EXPECTED)
                                            for v in sorted(contracts()[f]["size_variants"])])
def test_size_variants_satisfy_the_invariants(family, variant):
    """Seed 004 §16.2, L1-L5 (the Gemma head_dim bound included)."""
    v = contracts()[family]["size_variants"][variant]
    h, n_h, n_kv, d_k = v["hidden_dim"], v["num_heads"], v["num_kv_heads"], v["head_dim"]
    assert min(h, v["num_layers"], n_h, n_kv, v["vocab_size"]) > 0
    assert h % n_h == 0 and n_h % n_kv == 0 and n_kv <= n_h
    assert h // n_h <= d_k <= 2 * (h // n_h)
    assert v["intermediate_dim"] > h
    constraints = contracts()[family]["constraints"]
    if constraints["positions"] == "rope":
        assert d_k % 2 == 0 and v["max_position_embeddings"] > 0
        assert math.isfinite(v["rope_theta"]) and v["rope_theta"] > 0
    if "rms_norm_eps" in v:
        assert 0 < v["rms_norm_eps"] < 1
    activation = {"swiglu": "silu", "geglu": "gelu_tanh", "gelu": "gelu_tanh"}
    assert activation[constraints["mlp_type"]] == constraints["activation"]


def test_unknown_architecture_is_unsupported():
    with pytest.raises(AprError) as err:
        family_for("mamba", "gguf")
    assert err.value.code is ErrorCode.UNSUPPORTED and "llama" in err.value.context["known"]


def test_dim_expressions():
    dims = {"q_dim": 8, "kv_dim": 2, "d_model": 4}
    assert eval_dim("q_dim+2*kv_dim", dims) == 12
    assert eval_dim("3*d_model", dims) == 12
    with pytest.raises(AprError):
        eval_dim("n_experts", dims)
