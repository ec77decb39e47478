"""The `apr` command line: one module per command group, wired in `main.py`."""
