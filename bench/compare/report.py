"""Turns the comparison's rows into the targets, the markdown tables and the chart."""
import os
import shutil
import subprocess
import tempfile

CEILING = "origin ceiling (ufs_get)"
LOCAL = "local disk (ext4)"
GRANARY = "Granary mount --load"  # default settings: the row the targets are checked on
COLD_ROWS = ("Granary read-through", GRANARY)  # first epochs fetched from the origin
PEER_PREFIXES = ("s3fs", "rclone")


def _row(rows, path):
    return next((r for r in rows if r["path"] == path and not r["error"]), None)


def _ips(row, col):
    if row is None or row.get(col) is None:
        return None
    return row[col]["images_per_s"]


def _best(rows, col, prefixes=PEER_PREFIXES):
    """(best images/s in column col, its row) among rows whose path starts with prefixes."""
    vals = [(_ips(r, col), r["path"]) for r in rows
            if r["path"].startswith(prefixes) and not r["error"] and _ips(r, col)]
    return max(vals) if vals else (None, None)


def targets(rows):
    """The acceptance targets of the comparison, each with its measured ratio."""
    g = _row(rows, GRANARY)
    g_cold, g_warm = _ips(g, "cold"), _ips(g, "warm")
    ceiling = _ips(_row(rows, CEILING), "cold")
    local_warm = _ips(_row(rows, LOCAL), "warm")
    peer_warm, peer_warm_name = _best(rows, "warm")
    peer_cold, peer_cold_name = _best(rows, "cold")
    out = []

    def add(name, num, den, want, against):
        ratio = num / den if num and den else None
        out.append({"target": name, "ratio": ratio, "want": want, "against": against,
                    "met": None if ratio is None else ratio >= want})

    add("Granary warm / best peer warm", g_warm, peer_warm, 20.0, peer_warm_name)
    add("Granary warm / local disk warm", g_warm, local_warm, 0.8, LOCAL)
    bw, bname = _best(rows, "warm", ("Granary",))
    if bw:
        add(f"best Granary warm ({bname}) / best peer warm", bw, peer_warm, 20.0, peer_warm_name)
        add(f"best Granary warm ({bname}) / local disk warm", bw, local_warm, 0.8, LOCAL)
    add("Granary cold / origin ceiling", g_cold, ceiling, 0.8, CEILING)
    add("Granary cold / best peer cold", g_cold, peer_cold, 3.0, peer_cold_name)
    if ceiling and peer_cold:
        # No client reads a cold epoch faster than the origin serves objects.
        out[-1]["bound"] = ceiling / peer_cold
    # The better of Granary's two first epochs from the origin (read-through
    # or --load; the remount rows' cold column reads a warm cache from disk,
    # the `granary load` row's is the load itself).
    bc, bcname = _best(rows, "cold", COLD_ROWS)
    if bc and bcname != GRANARY:
        add(f"best Granary cold ({bcname}) / origin ceiling", bc, ceiling, 0.8, CEILING)
        add(f"best Granary cold ({bcname}) / best peer cold", bc, peer_cold, 3.0, peer_cold_name)
    return out


def _fmt(v, digits=0):
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def _pair(row, key, digits):
    vals = [row[c][key] if row.get(c) and row[c].get(key) is not None else None
            for c in ("cold", "warm")]
    if vals[1] is None:
        return _fmt(vals[0], digits)
    return f"{_fmt(vals[0], digits)} / {_fmt(vals[1], digits)}"


def delay_table(rows):
    lines = ["| access path | cold img/s | warm img/s | MB/s cold / warm | p99 ms cold / warm "
             "| origin req/image cold / warm | cache CPU ms/image cold / warm |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["error"]:
            lines.append(f"| {r['path']} | failed | | | | {r['error'][:120].replace('|', '/')} | |")
            continue
        errs = sum((r[c] or {}).get("errors", 0) or 0 for c in ("cold", "warm"))
        lines.append(f"| {r['path']} | {_fmt(_ips(r, 'cold'))} | {_fmt(_ips(r, 'warm'))} | "
                     f"{_pair(r, 'mb_per_s', 1)} | {_pair(r, 'p99_ms', 2)} | "
                     f"{_pair(r, 'origin_requests_per_image', 2)} | "
                     f"{_pair(r, 'cache_cpu_ms_per_image', 3)} |"
                     + (f" **{errs} read errors**" if errs else ""))
    return "\n".join(lines)


def targets_table(tg):
    lines = ["| target | measured | wanted | met |", "|---|---:|---:|:---:|"]
    for t in tg:
        met = "–" if t["met"] is None else ("yes" if t["met"] else "**no**")
        against = f" ({t['against']})" if t["against"] else ""
        bound = (f" (the origin ceiling allows at most {t['bound']:.2f}×)"
                 if t.get("bound") else "")
        lines.append(f"| {t['target']}{against}{bound} | {_fmt(t['ratio'], 2)}× | ≥ {t['want']}× "
                     f"| {met} |")
    return "\n".join(lines)


def _cpus(cpus):
    return ",".join(str(x) for x in cpus)


def markdown(results):
    m, c = results["machine"], results["config"]
    out = [f"# Granary comparison, {results['started']}", "",
           f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, "
           f"kernel {m['kernel']}.  ",
           f"Data set: {c['files']:,} ImageNet-like JPEGs, "
           f"{c.get('total_bytes', 0) / 1e6:,.0f} MB; reader: {c['threads']} threads, whole "
           f"files, shuffled.  ",
           f"Origin: {c.get('origin', 'moto')} behind bench/s3_delay_proxy"
           + (f", on CPU {_cpus(c['origin_cpus'])}; every client on CPU {_cpus(c['client_cpus'])}"
              if c.get("origin_cpus") else ", sharing the CPUs with the clients") + ".  ",
           "Tools: " + ", ".join(f"{k} {v}" for k, v in results["tools"].items() if v) + ".  ",
           f"Command: `{results['command']}` ({results.get('seconds', '?')} s).", ""]
    for delay, d in results["delays"].items():
        out += [f"## Origin delay {delay} per request", "", delay_table(d["rows"]), "",
                targets_table(d["targets"]), ""]
        notes = [f"- {r['path']}: {r['note']}" for r in d["rows"] if r["note"]]
        if notes:
            out += ["Notes:", *notes, ""]
    return "\n".join(out)


def chart(results, path):
    """Clustered bars (cold, warm img/s; log scale), one panel per delay. False without gnuplot."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot or not results["delays"]:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, (delay, d) in enumerate(results["delays"].items()):
            dat = os.path.join(tmp, f"d{i}.dat")
            with open(dat, "w") as f:
                for r in d["rows"]:
                    if r["error"]:
                        continue
                    label = r["path"].replace('"', "'").replace("`", "")
                    cold, warm = _ips(r, "cold"), _ips(r, "warm")
                    f.write(f'"{label}" {cold or "NaN"} {warm or "NaN"}\n')
            plots.append(f'set title "origin delay {delay} per request"\n'
                         f'plot "{dat}" using 2:xtic(1) title "cold (first epoch)" lc rgb "#4477aa", '
                         f'"" using 3 title "warm (second epoch)" lc rgb "#ee6677"\n')
        n = len(plots)
        script = (f'set terminal pngcairo noenhanced size 1100,{560 * n} font "sans,10"\n'
                  f'set output "{path}"\n'
                  f'set multiplot layout {n},1\n'
                  'set style data histogram\nset style histogram clustered gap 1\n'
                  'set style fill solid 0.9 border -1\nset logscale y\nset yrange [10:400000]\n'
                  'set ylabel "images/s (log scale)"\nset grid ytics\n'
                  'set xtics rotate by -35 scale 0\nset key top center horizontal\nset bmargin 10\nset rmargin 20\n'
                  + "".join(plots) + "unset multiplot\n")
        out = subprocess.run([gnuplot], input=script, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"compare: gnuplot failed: {out.stderr[-300:]}")
            return False
    return True


def problems(results):
    """What --check fails on: failed rows, read errors, warm Granary epochs that hit the origin."""
    found = []
    for delay, d in results["delays"].items():
        for r in d["rows"]:
            if r["error"]:
                found.append(f"{delay} {r['path']}: {r['error']}")
                continue
            for col in ("cold", "warm"):
                e = r.get(col)
                if e and e.get("errors"):
                    found.append(f"{delay} {r['path']} {col}: {e['errors']} read errors")
            warm = r.get("warm")
            if r["path"].startswith("Granary") and warm and warm.get("origin_requests_per_image"):
                found.append(f"{delay} {r['path']}: warm epoch made "
                             f"{warm['origin_requests_per_image']:.2f} origin requests per image")
            if r["path"] == "Granary fresh remount" and r["cold"] and \
                    r["cold"].get("origin_requests_per_image"):
                found.append(f"{delay} {r['path']}: reads after a remount of a warm cache reached "
                             "the origin")
            if r["path"].startswith("Granary") and r["cold"] and r["cold"].get("files") not in \
                    (None, results["config"]["files"]):
                found.append(f"{delay} {r['path']}: read {r['cold']['files']} of "
                             f"{results['config']['files']} files")
    return found
