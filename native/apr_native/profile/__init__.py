"""`apr profile`'s machinery: where a model's time goes, op by op and layer by layer, and
how close each op comes to this machine's roofline.

    timing.py        ProfilingKernels: a model's kernels behind timing proxies (Recorder)
    costs.py         THE table of bytes moved and FLOPs per kernel call
    roofline.py      the measured bandwidth and peak (cached per machine), verdicts
    runner.py        warm-up, plain and profiled runs of a prefill and a decode
    report.py        calls -> rows per op kind and layer, phase totals
    chrome_trace.py  the Chrome / Perfetto trace file
"""
