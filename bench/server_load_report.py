"""bench/server_load.py's report: the table per concurrency level, the ratios between
the servers and against one stream, and its JSON (NaN as null)."""

SERVERS = ("apr", "llama-server", "llama-cpp-python")


def ratio(a, b):
    return a / b if a and b else float("nan")


def finite(value):
    """`value` with NaN as None, so that --json writes standard JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def print_tables(by, levels, args):
    for clients in levels:
        print("\n{} concurrent stream{} x {} max tokens".format(
            clients, "s" if clients > 1 else "", args.max_tokens))
        print("{:<16} | {:>9} | {:>14} | {:>6} | {:>8} | {:>8} | {:>19} | {:>8}".format(
            "server", "agg tok/s", "tokens (min/1)", "wall s", "TTFT p50", "TTFT p99",
            "errors (incomplete)", "peak RSS"))
        for name in SERVERS:
            r = by.get((name, clients))
            if r is None:
                print("{:<16} | {:>9}".format(name, "-"))
                continue
            print("{:<16} | {:>9.1f} | {:>14} | {:>6.1f} | {:>7.2f}s | {:>7.2f}s | {:>19} | "
                  "{:>5.0f} MB".format(
                      name, r["tok_s"], "{}{} ({})".format(
                          r["tokens"], "" if r["usage_reported"] else "*",
                          r["min_stream_tokens"]),
                      r["wall_s"], r["ttft_p50_s"], r["ttft_p99_s"],
                      "{} ({})".format(r["errors"], r["incomplete"]), r["rss_peak_mb"]))
        apr = by.get(("apr", clients), {}).get("tok_s")
        print("apr/llama-server x{:.2f}, apr/llama-cpp-python x{:.2f}".format(
            ratio(apr, by.get(("llama-server", clients), {}).get("tok_s")),
            ratio(apr, by.get(("llama-cpp-python", clients), {}).get("tok_s"))))
    if any(not r["usage_reported"] for r in by.values()):
        print("* no usage reported (stream_options ignored): content chunks counted")


def summary(by, levels, run_tok_s):
    """The ratios, printed and returned."""
    ratios = {}
    print()
    for name in SERVERS:
        single = by.get((name, 1), {}).get("tok_s")
        scaling = {c: ratio(by.get((name, c), {}).get("tok_s"), single)
                   for c in levels if c > 1}
        if single and scaling:
            ratios[name + " C streams / 1 stream"] = scaling
            print("{} C streams / 1 stream (agg tok/s): {}".format(name, ", ".join(
                "{}: x{:.2f}".format(c, s) for c, s in scaling.items())))
    for clients in levels:
        apr = by.get(("apr", clients), {}).get("tok_s")
        for peer in SERVERS[1:]:
            ratios["apr/{} x{}".format(peer, clients)] = ratio(
                apr, by.get((peer, clients), {}).get("tok_s"))
    serve_decode = by.get(("apr", 1), {}).get("decode_tok_s")
    if serve_decode and run_tok_s:
        ratios["apr serve 1 stream / apr run (decode)"] = ratio(serve_decode, run_tok_s)
        print("apr serve 1 stream decode {:.2f} tok/s / apr run decode {:.2f} tok/s: "
              "x{:.2f}".format(serve_decode, run_tok_s, ratio(serve_decode, run_tok_s)))
    return ratios
