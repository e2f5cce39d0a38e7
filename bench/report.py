"""Render one run's results as the Markdown tables of bench/README.md: each figure next to its target."""

from __future__ import annotations


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**missed**")


def _failed(section: dict | None) -> str | None:
    if section is None:
        return "not run"
    return section.get("error")


def render_admission(result: dict) -> list[str]:
    lines = [
        f"Setup: {result['setup']}; median of repeated `schedule_cycle` calls.",
        "",
        "| pending n | cycle median (ms) | cycle min (ms) | decisions |",
        "|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['pending']} | {row['median_ms']} | {row['min_ms']} | {row['decisions']} |")
    lines += ["", "| growth | measured ratio | n log n ratio |", "|---|---|---|"]
    for g in result["growth"]:
        lines.append(f"| {g['from']} → {g['to']} | {g['measured_ratio']} | {g['n_log_n_ratio']} |")
    at_1000 = result["cycle_ms_at_1000"]
    worst = all(g["measured_ratio"] <= g["n_log_n_ratio"] for g in result["growth"])
    lines += [
        "",
        f"Target: < {result['target_ms']} ms at n = 1000 → {at_1000} ms, "
        f"{_verdict(at_1000 is not None and at_1000 < result['target_ms'])}; "
        f"growth no worse than n log n → {_verdict(worst)}.",
    ]
    if result.get("deep_queue"):
        lines += [
            "",
            "Not a target, but what the controller pays for a deep single queue: `schedule()` (cycles to "
            "quiescence) over ONE full ClusterQueue without preemption, each head parked in turn:",
            "",
            "| pending n | schedule() (s) |",
            "|---|---|",
        ]
        lines += [f"| {row['pending']} | {row['schedule_s']} |" for row in result["deep_queue"]]
    return lines


def render_parse(result: dict) -> list[str]:
    base = result["baseline"]
    lines = [
        "| file | cold parse (ms) | warm parse (ms) | × empty (cold / warm) | import self-time (ms) "
        "| new modules | kubernetes modules | heaviest direct imports (ms cumulative) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in [base, *result["dags"]]:
        if "error" in row:
            lines.append(f"| {row['file']} | error: {row['error']} |||||||")
            continue
        ratio = f"{row.get('cold_ratio', 1.0)} / {row.get('warm_ratio', 1.0)}"
        kube = ", ".join(row["kubernetes_modules"]) or "none"
        top = ", ".join(row.get("top_imports_ms", []))
        lines.append(
            f"| {row['file']} | {row['cold_ms']} | {row['warm_ms']} | {ratio} | {row['import_ms']} "
            f"| {row['new_modules']} | {kube} | {top} |"
        )
    ok = [r for r in result["dags"] if "error" not in r]
    within = all(r["warm_ratio"] <= result["target_ratio"] for r in ok) if ok else None
    no_kube = all(not r["kubernetes_modules"] for r in ok) if ok else None
    lines += [
        "",
        f"Target: within {result['target_ratio']}× of the empty DAG (warm) → {_verdict(within)}; "
        f"no kubernetes import at parse time → {_verdict(no_kube)}.",
    ]
    return lines


def render_fanout(results: dict) -> list[str]:
    lines: list[str] = []
    for shape in ("broadcast", "selective"):
        lines += [f"**{shape}**", ""] + _render_fanout_shape(results[shape]) + [""]
    return lines


def _render_fanout_shape(result: dict) -> list[str]:
    write = result["per_write_all_watchers"]
    delivery = result["per_delivery"]
    return [
        f"Stored: {result['objects_stored']} (loaded over HTTP in {result['load_s']} s); watch streams open: "
        f"{result['watches_open']}; {result['writes']} writes at {result['write_rate_hz']}/s; "
        f"deliveries {result['deliveries']} of {result['deliveries_expected']} expected.",
        "",
        "| measure | p50 (ms) | p99 (ms) | max (ms) | target |",
        "|---|---|---|---|---|",
        f"| write → last of its watchers | {write['p50_ms']} | {write['p99_ms']} | {write['max_ms']} "
        f"| p99 < {result['target_p99_ms']} ms: {_verdict(write['p99_ms'] < result['target_p99_ms'])} |",
        f"| write → each watcher (per delivery) | {delivery['p50_ms']} | {delivery['p99_ms']} "
        f"| {delivery['max_ms']} | |",
    ]


def render_trigger(result: dict) -> list[str]:
    lines = [
        "| N | watch streams | startup requests | waiting windows (requests / window s) | wave requests "
        "| resync cost (req / trigger / resync) | trigger requests, 10 sim min | polling requests, 10 sim min "
        "| polling ÷ trigger | detection p50 / p99 (ms) | CPU s (startup / +waiting / +waves) "
        "| RSS MiB (startup / peak) | polling CPU s / peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"| {row.get('n')} | error: {row['error']} |||||||||||")
            continue
        t, p = row["trigger"], row["polling"]
        windows = ", ".join(f"{w['requests']} / {w['window_s']:g}" for w in t["waiting_windows"])
        cpu = t["cpu_s"]
        lines.append(
            f"| {row['n']} | {t['watch_streams_open_while_waiting']} | {t['startup_requests']} | {windows} "
            f"| {t['wave_requests']} | {t['resync_probe']['requests_per_trigger_per_resync']} "
            f"| {t['requests_10_sim_min']} | {p['requests_10_sim_min']} | {row['polling_over_trigger_10_sim_min']}× "
            f"| {t['detection_latency']['p50_ms']} / {t['detection_latency']['p99_ms']} "
            f"| {cpu['startup']} / {cpu['after_waiting']} / {cpu['after_waves']} "
            f"| {t['rss_mib']['after_startup']} / {t['rss_mib']['peak']} | {p['cpu_s']} / {p['peak_rss_mib']} |"
        )
    at_1000 = next((r for r in result["rows"] if r.get("n") == 1000 and "error" not in r), None)
    if at_1000:
        t = at_1000["trigger"]
        lines += [
            "",
            "Targets at N = 1000:",
            f"- ≤ 4 open watch streams → {t['watch_streams_open_while_waiting']}: "
            f"{_verdict(t['watch_streams_open_while_waiting'] <= 4)}",
            f"- ≥ 50× fewer requests than polling over 10 simulated minutes → "
            f"{at_1000['polling_over_trigger_10_sim_min']}×: {_verdict(None if at_1000['polling_over_trigger_10_sim_min'] is None else at_1000['polling_over_trigger_10_sim_min'] >= 50)}",
            f"- p99 detection latency < 250 ms → {t['detection_latency']['p99_ms']} ms: "
            f"{_verdict(t['detection_latency']['p99_ms'] < 250)}",
            f"- RSS < 250 MiB → peak {t['rss_mib']['peak']} MiB: {_verdict(t['rss_mib']['peak'] < 250)}",
        ]
    return lines


def render_e2e(result: dict) -> list[str]:
    latency = result["completion_to_sensor_success"]
    return [
        f"{result['runs']} runs of text_classifier_finetune triggered at once (single queue: one RayJob at a "
        f"time); {result['finished']} finished, sensor states {result['sensor_states']}; Airflow up in "
        f"{result['airflow_startup_s']} s.",
        "",
        "| measure | samples | p50 (ms) | p99 (ms) | max (ms) | polling peer |",
        "|---|---|---|---|---|---|",
        f"| RayJob Complete → sensor task success | {latency['count']} | {latency['p50_ms']} "
        f"| {latency['p99_ms']} | {latency['max_ms']} | + {result['polling_expected_detection_ms']} ms expected "
        "detection delay (half a 10 s poll) before the same scheduling |",
        "| Kueue admission → task state change | n/a | | | | no task changes state on admission (by design) |",
    ]


SECTIONS = (
    ("admission", "Kueue admission cycle (issue 3 §6)", render_admission),
    ("parse", "DAG parse cost (issue 7 §3)", render_parse),
    ("fanout", "kubesim watch fan-out (issue 2 §6)", render_fanout),
    ("trigger", "Trigger scale vs polling (issue 7 §1)", render_trigger),
    ("e2e", "End-to-end latency in Airflow (issue 7 §2)", render_e2e),
)


def render(results: dict) -> str:
    m = results["machine"]
    out = [
        f"Profile `{results['profile']}`, started {results['started']}; machine: nproc {m['nproc']}, "
        f"{m['cpu']}, {m['memory']} RAM, Python {m['python']}, load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['load_average_at_start'])}."
    ]
    for key, title, renderer in SECTIONS:
        section = results.get(key)
        out += ["", f"### {title}", ""]
        problem = _failed(section)
        if problem:
            out.append(f"Not measured: {problem}")
            continue
        out += renderer(section)
        out.append(
            f"\n(elapsed {section['elapsed_s']} s; load average after "
            f"{', '.join(f'{x:.2f}' for x in section['load_average_after'])})"
        )
    return "\n".join(out)
