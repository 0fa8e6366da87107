"""results.md of an MLPerf Storage run: one table of this machine's results
per workload and path, and the published single-client results for context.
Pure functions of the results dict the driver builds."""
from bench.mlperf_storage.workloads import PUBLISHED, WORKLOADS


def _num(v, fmt):
    return "–" if v is None else format(v, fmt)


def _pct(v):
    return "–" if v is None else f"{100 * v:.1f} %"


def results_table(results):
    bar = {w: f"{100 * WORKLOADS[w].au_bar:.0f} %" for w in WORKLOADS}
    lines = ["| workload (AU bar) | path | accelerators | AU at that count | GiB/s per client "
             "| GiB/s per client core | samples/s | note |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for wname, wl in results["workloads"].items():
        for pname, p in wl["paths"].items():
            if p.get("error") and not p.get("trials"):
                lines.append(f"| {wname} ({bar[wname]}) | {pname} | – | – | – | – | – | "
                             f"{p['error']} |")
                continue
            shown = p.get("shown") or {}
            note = "; ".join(x for x in (p.get("note"), _run_figures(shown), p.get("limit"),
                                         p.get("error")) if x)
            lines.append(
                f"| {wname} ({bar[wname]}) | {pname} | {p['accelerators']} "
                f"| {_pct(shown.get('au'))} "
                f"| {_num(shown.get('gib_per_s'), '.3f')} "
                f"| {_num(shown.get('gib_per_core'), '.3f')} "
                f"| {_num(shown.get('samples_per_s'), ',.0f')} | {note} |")
    return "\n".join(lines)


def _run_figures(run):
    """The figures only some paths have (a cluster's), for the note; "" when none."""
    out = []
    if run.get("peer_share") is not None:
        out.append(f"{run['peer_bytes'] / 2**30:.2f} GiB from peers "
                   f"({100 * run['peer_share']:.0f} % of the bytes read)")
    if run.get("peer_fallbacks"):
        out.append(f"{run['peer_fallbacks']:.0f} blocks from the origin instead of a peer "
                   "(peer timed out or failed)")
    if run.get("gib_per_client_node_core") is not None:
        out.append(f"GiB/s per client core with node 0's daemon alone "
                   f"{run['gib_per_client_node_core']:.3f}")
    return "; ".join(out)


def published_table(accelerator):
    names = list(WORKLOADS)
    lines = ["| single client, H100 | " + " | ".join(names) + " |",
             "|---|" + "---:|" * len(names)]
    for system, counts in PUBLISHED:
        lines.append(f"| {system} (published) | "
                     + " | ".join(str(counts.get(n, "–")) for n in names) + " |")
    demand = [WORKLOADS[n].demand_bytes_per_s(accelerator) * WORKLOADS[n].au_bar / 2**30
              for n in names]
    lines.append(f"| GiB/s one {accelerator.upper()} reads at the AU bar (from DLIO's config) | "
                 + " | ".join(f"{d:.3f}" for d in demand) + " |")
    return "\n".join(lines)


def markdown(results):
    c = results["config"]
    m = results["machine"]
    head = [f"# MLPerf Storage (DLIO) training workloads on {m['cores']} cores, "
            f"{m['memory_gib']} GiB ({results['started']}, load average "
            f"{m.get('load_average', 0):.1f} at the start)", "",
            f"Command: `{results['command']}`", "",
            f"Accelerator: {c['accelerator'].upper()}; origin: {c['origin']}"
            + (f" on CPUs {c['origin_cpus']}, clients on {c['client_cpus']}"
               if c['origin_cpus'] else "")
            + f"; data CRCs checked on every read: {'yes' if c['verify'] else 'no'}.", ""]
    for wname, wl in results["workloads"].items():
        head.append(f"- {wname}: {wl['files']} files, {wl['bytes'] / 2**30:.2f} GiB "
                    f"({wl['size_rule']})")
    body = ["", "Accelerators: the most whose AU held the bar (doubling, then bisecting, "
            f"up to {c['max_accelerators']}); the figures are those of that run (of the "
            "1-accelerator run when none held it). GiB/s per client core: bytes read per "
            "CPU-second of the readers and the path's own processes (FUSE daemon; for "
            "the granary-cluster paths, all three nodes' daemons).", "",
            results_table(results), "",
            "Published single-client MLPerf Storage results, for context (accelerators at "
            "the AU bar):", "", published_table("h100"), ""]
    return "\n".join(head + body)
