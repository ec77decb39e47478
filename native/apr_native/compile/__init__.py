"""`apr compile` targets: a model and apr_core packed into something that runs elsewhere.

One module per target, each with a `build(model_path, output, ...)` function:

    pyz.py      a Python zipapp: `python model.pyz "prompt"` with only numpy installed
    worker.py   a Cloudflare Python Worker bundle (a directory): POST /v1/completions
    web.py      a static web site: the browser shell, Pyodide and the model's shards

`TARGETS` lists every target the command accepts; those without a module here are not
built yet (the command says so with E009).
"""
from __future__ import annotations

TARGETS = ("pyz", "web", "worker")
# target -> module of this package that builds it
BUILDERS = {"pyz": "pyz", "web": "web", "worker": "worker"}

__all__ = ["TARGETS", "BUILDERS"]
