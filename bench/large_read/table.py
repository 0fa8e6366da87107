"""The table, log lines and --check problems of bench/large_read/large_read.py."""

WARM_ROWS = ("ext4-warm", "granary-warm", "granary-passthrough-warm", "granary-remount")
COLD_GRANARY_ROWS = ("granary-cold", "granary-passthrough-cold")


def _mibs(r, part):
    p = (r.get("parts") or {}).get(part)
    return p["mib_per_s"] if p and not p["errors"] else None


def _fmt(v, spec):
    return "–" if v is None else format(v, spec)


def _ratio(v, ref):
    return "–" if v is None or not ref else f"{v / ref:.2f}x"


def _engine_notes(r):
    g = r.get("granary") or {}
    out = []
    for key, what in (("admit_skipped", "admissions skipped"),
                      ("admission_waits", "fetches waited for admission"),
                      ("readahead_dropped", "readahead blocks dropped"),
                      ("read_errors", "read errors"), ("origin_errors", "origin errors")):
        if g.get(key):
            out.append(f"{what} {g[key]}")
    if r.get("errors"):
        out.append(f"{r['errors']} files FAILED: {r['first_error']}")
    return out


def epoch_line(r):
    parts = "  ".join(f"{name} {p['mib_per_s']:8.1f} MiB/s" for name, p in r["parts"].items())
    cpu = r.get("daemon_cpu_s_per_gib")
    return (f"  {r['row']:26} {parts}  origin {r['origin_requests']} req "
            f"{r['origin_bytes_ratio'] or 0:.2f}x bytes"
            + (f"  daemon {cpu:.2f} CPU s/GiB" if cpu is not None else "")
            + "".join(f"  {n}" for n in _engine_notes(r)))


def data(c):
    """What the run read, in words."""
    parts = []
    if c["shards"]:
        parts.append(f"{c['shards']} shards x {c['shard_mib']} MiB read by {c['readers']} readers")
    if c["big_mib"]:
        parts.append(f"one {c['big_mib']} MiB file by one reader")
    return ", then ".join(parts)


def markdown(results):
    c = results["config"]
    io = {"read": "read(2)", "mmap": "mmap", "direct": "O_DIRECT read(2)"}[c["io"]]
    where = (f"origin and proxy on CPUs {','.join(map(str, c['origin_cpus']))}, clients on "
             f"{','.join(map(str, c['client_cpus']))}" if c["origin_cpus"]
             else "origin, proxy and clients share every CPU")
    m = results["machine"]
    lines = ["# Large-object streaming reads", "",
             f"    {results['command']}", "",
             f"{data(c)}; {c['read_kib']} KiB per {io}; every file "
             f"verified (size and XXH3-64). Origin {c['origin']} "
             f"({results['tools'].get(c['origin']) or results['tools'].get('moto_server') or '?'}) "
             f"behind s3_delay_proxy; {where}. {m['cores']} cores, {m['memory_gib']} GiB, "
             f"{m['cpu']}, Linux {m['kernel']}; Granary {results['tools'].get('granary', '?')}; "
             f"started {results['started']}, took {results.get('seconds', '?')} s.", "",
             "MiB/s: 2^20 bytes per second over the wall time of the read pass. x get / x ext4w: "
             "against get-stream and ext4-warm of the same run. CPU s/GiB: CPU seconds (user + "
             "system) per GiB read, of the mount daemon (across exactly the epoch) and of the "
             "reader. Origin req / bytes: the proxy's requests and response bytes over the "
             "bytes read. Cached: files completely cached after the cold epoch "
             "(`granary status --json`).", ""]
    big = f"{c['big_mib']} MiB file"
    for delay, d in results["delays"].items():
        rows = d["rows"]
        ref = {name: next((r for r in rows if r.get("row") == name and not r.get("error")), None)
               for name in ("get-stream", "ext4-warm")}
        lines += [f"## Origin delay {delay} per request", "",
                  f"| row | shards MiB/s | x get | x ext4w | {big} MiB/s | x get | x ext4w | "
                  "daemon CPU s/GiB | reader CPU s/GiB | origin req | origin bytes | cached "
                  "| notes |",
                  "|---|" + "---:|" * 11 + "---|"]
        for r in rows:
            if r.get("error"):
                lines.append(f"| {r['row']} |" + " |" * 11 + f" FAILED: {r['error']} |")
                continue
            cells = [r["row"]]
            for part in ("shards", "big"):
                v = _mibs(r, part)
                cells += [_fmt(v, ".0f"),
                          _ratio(v, ref["get-stream"] and _mibs(ref["get-stream"], part)),
                          _ratio(v, ref["ext4-warm"] and _mibs(ref["ext4-warm"], part))]
            cells += [_fmt(r.get("daemon_cpu_s_per_gib"), ".2f"),
                      _fmt(r.get("reader_cpu_s_per_gib"), ".2f"),
                      str(r["origin_requests"]), _fmt(r.get("origin_bytes_ratio"), ".2f") + "x",
                      r.get("cached") or "–",
                      "; ".join(x for x in [r.get("note", "")] + _engine_notes(r) if x)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def problems(results):
    """What --check fails on: a failed row or file, a warm or remount epoch that
    reached the origin, a Granary cold epoch that left files uncached."""
    out = []
    for delay, d in results["delays"].items():
        for r in d["rows"]:
            where = f"{delay} {r['row']}"
            if r.get("error"):
                out.append(f"{where}: {r['error']}")
            elif r.get("errors"):
                out.append(f"{where}: {r['errors']} files failed: {r['first_error']}")
            elif r["row"] in WARM_ROWS and r["origin_requests"]:
                out.append(f"{where}: {r['origin_requests']} origin requests")
            elif r["row"] in COLD_GRANARY_ROWS and r.get("cached") and "100.0%" not in r["cached"]:
                out.append(f"{where}: cached after the cold epoch: {r['cached']}")
    return out
