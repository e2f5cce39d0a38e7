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


def _parse_row(row: dict, label: str, vs_empty: str, vs_shape: str) -> str:
    if "error" in row:
        return f"| {label} | error: {row['error']} ||||||||"
    kube = ", ".join(row["kubernetes_modules"]) or "none"
    top = ", ".join(row.get("top_imports_ms", []))
    return (
        f"| {label} | {row['cold_ms']} | {row['warm_ms']} | {vs_empty} | {vs_shape} | {row['import_ms']} "
        f"| {row['new_modules']} | {kube} | {top} |"
    )


def _ratio_verdict(rows: list[dict], suffix: str, target: float) -> str:
    """Warm and cold verdicts against one baseline, each with the worst ratio, so a miss shows by how much."""
    parts = []
    for kind in ("warm", "cold"):
        ratios = [r[f"{kind}_{suffix}"] for r in rows if f"{kind}_{suffix}" in r]
        ok = all(x <= target for x in ratios) if ratios else None
        worst = f" (worst {max(ratios)}×)" if ratios else ""
        parts.append(f"{kind} → {_verdict(ok)}{worst}")
    return ", ".join(parts)


def render_parse(result: dict) -> list[str]:
    """Each DAG file next to its same-shape baseline, with both ratios and both verdicts."""
    bytecode = result.get("bytecode", "as the environment has it")
    lines = [
        f"Cold: median of {result.get('cold_runs', 1)} fresh interpreters (Airflow already imported); warm: "
        f"median of the re-parses after each cold one; bytecode {bytecode}. "
        "Same shape: a generated DAG with the file's Params, schedule, default_args and task count (as "
        "`EmptyOperator`s and no-op `@task`s), and none of the project's imports.",
        "",
        "| file | cold parse (ms) | warm parse (ms) | × empty (cold / warm) | × same-shape (cold / warm) "
        "| import self-time (ms) | new modules | kubernetes modules | heaviest direct imports (ms cumulative) |",
        "|---|---|---|---|---|---|---|---|---|",
        _parse_row(result["baseline"], result["baseline"]["file"], "1.0 / 1.0", "–"),
    ]
    for row in result["dags"]:
        vs_empty = f"{row.get('cold_ratio', '–')} / {row.get('warm_ratio', '–')}"
        vs_shape = f"{row.get('cold_vs_shape', '–')} / {row.get('warm_vs_shape', '–')}"
        lines.append(_parse_row(row, row["file"], vs_empty, vs_shape))
        shape = row.get("same_shape")
        if shape is not None:
            shape_vs_empty = "–"
            if "cold_ms" in shape and "cold_ms" in result["baseline"]:
                base = result["baseline"]
                shape_vs_empty = (
                    f"{shape['cold_ms'] / base['cold_ms']:.2f} / {shape['warm_ms'] / base['warm_ms']:.2f}"
                )
            lines.append(_parse_row(shape, "↳ same shape", shape_vs_empty, "1.0 / 1.0"))
    ok = [r for r in result["dags"] if "error" not in r]
    no_kube = all(not r["kubernetes_modules"] for r in ok) if ok else None
    target = result["target_ratio"]
    lines += [
        "",
        f"Target (the issue's): within {target}× of the empty DAG → {_ratio_verdict(ok, 'ratio', target)}.",
        f"What the project adds: within {target}× of the same-shape DAG → "
        f"{_ratio_verdict(ok, 'vs_shape', target)}.",
        f"No kubernetes import at parse time → {_verdict(no_kube)}.",
    ]
    return lines


def render_fanout(results: dict) -> list[str]:
    lines: list[str] = []
    for shape in ("broadcast", "selective"):
        lines += [f"**{shape}**", ""] + _render_fanout_shape(results[shape]) + [""]
    return lines


def _render_fanout_shape(result: dict) -> list[str]:
    target = result["target_p99_ms"]
    server = result["server_fanout"]
    write = result["per_write_all_watchers"]
    delivery = result["per_delivery"]
    return [
        f"Stored: {result['objects_stored']} (loaded over HTTP in {result['load_s']} s); watch streams open: "
        f"{result['watches_open']} (read by {result['reader_processes']} client processes); "
        f"{result['writes']} writes at {result['write_rate_hz']}/s; deliveries {result['deliveries']} of "
        f"{result['deliveries_expected']} expected; kubesim timed {server['events']} writes "
        f"(up to {server['max_deliveries']} streams each) and used {server['process_cpu_s']} s of CPU meanwhile "
        f"({_per_write_ms(server)} ms per write).",
        "",
        "| measure | p50 (ms) | p99 (ms) | max (ms) | target |",
        "|---|---|---|---|---|",
        f"| **kubesim**: commit → last watcher's transport.write (server-side) | {server['p50_ms']} "
        f"| {server['p99_ms']} | {server['max_ms']} "
        f"| p99 < {target} ms: {_verdict(server['p99_ms'] is not None and server['p99_ms'] < target)} |",
        f"| client: write → last watcher read it (all processes) | {write['p50_ms']} | {write['p99_ms']} "
        f"| {write['max_ms']} | p99 < {target} ms: {_verdict(write['p99_ms'] < target)} |",
        f"| client: write → each watcher (per delivery) | {delivery['p50_ms']} | {delivery['p99_ms']} "
        f"| {delivery['max_ms']} | |",
    ]


def _per_write_ms(server: dict) -> str:
    return f"{server['process_cpu_s'] * 1000 / server['events']:.1f}" if server["events"] else "–"


def render_trigger(result: dict) -> list[str]:
    """Per N: requests, streams, latency, CPU and memory of the triggers, the polling baseline as measured
    (or why it was not run), where the time went, why watches were re-opened, and each target's verdict."""
    lines = [
        "| N | watch streams | startup requests | waiting windows (requests / s) | wave requests (watches "
        "re-opened) | resync (req / resync) | trigger requests, 10 sim min | polling requests, 10 sim min "
        "| polling ÷ trigger | detection p50 / p99 / max (ms) | CPU s (startup / +waiting / +waves) "
        "| RSS MiB (imports / startup / peak) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [row for row in result["rows"] if "error" not in row]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"| {row.get('n')} | error: {row['error']} ||||||||||")
            continue
        t, p = row["trigger"], row["polling"]
        windows = ", ".join(f"{w['requests']} / {w['window_s']:g}" for w in t["waiting_windows"])
        polling_10 = p.get("requests_10_sim_min", f"{p.get('derived_10_sim_min')} (derived)")
        latency, cpu = t["detection_latency"], t["cpu_s"]
        lines.append(
            f"| {row['n']} | {t['watch_streams_open_while_waiting']} | {t['startup_requests']} | {windows} "
            f"| {t['wave_requests']} ({t['wave_watches_opened']}) | {t['resync_probe']['requests_per_resync']:g} "
            f"| {t['requests_10_sim_min']} | {polling_10} | {row['polling_over_trigger_10_sim_min']}× "
            f"| {latency['p50_ms']} / {latency['p99_ms']} / {latency['max_ms']} "
            f"| {cpu['startup']} / {cpu['after_waiting']} / {cpu['after_waves']} "
            f"| {t['rss_mib'].get('after_imports', '–')} / {t['rss_mib']['after_startup']} / {t['rss_mib']['peak']} |"
        )
    lines += [
        "",
        "Polling baseline (one process, N pollers, first polls spread over one 10 s interval, window after "
        "one interval of warm-up):",
        "",
        "| N | window s | requests (nominal N × window / 10 s) | achieved | poll period p50 / p99 (s) "
        "| kept 10 s interval | 10 sim min at the achieved rate | CPU-ms per poll | CPU s / peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        p = row["polling"]
        if "skipped" in p:
            lines.append(f"| {row['n']} | not run: {p['skipped']} ||||||||")
            continue
        period = p["poll_period_s"]
        lines.append(
            f"| {row['n']} | {p['window_s']:g} | {p['requests']} ({p['nominal_requests']}) "
            f"| {p['achieved_share']:.0%} | {period['p50_ms']} / {period['p99_ms']} "
            f"| {'yes' if p['kept_interval'] else '**no**'} | {p['requests_10_sim_min']} "
            f"| {p['cpu_ms_per_poll']} | {p['cpu_s']} / {p['peak_rss_mib']} |"
        )
    lines += ["", "Where the time went (wall s / kubesim CPU s per phase):", ""]
    for row in rows:
        phases = ", ".join(f"{name} {v['s']:g} / {v['kubesim_cpu_s']}" for name, v in row["phases"].items())
        lines.append(f"- N = {row['n']}: {phases}")
    lines += ["", "Why the triggers' watch requests ended (logs in " + result.get("log_dir", "?") + "):", ""]
    for row in rows:
        ends: dict[tuple[str, str], int] = {}
        for end in row["trigger"]["watch_ends"]:
            ends[(end["phase"], end["why"])] = ends.get((end["phase"], end["why"]), 0) + 1
        said = "; ".join(f"{count} in {phase}: {why}" for (phase, why), count in ends.items()) or "none"
        warnings = row["trigger"]["log_warnings"]["count"]
        lines.append(f"- N = {row['n']}: {said}; {warnings} WARNING/ERROR lines in the trigger log")
    for row in rows:
        lines += ["", f"Targets at N = {row['n']}:"]
        lines += [f"- {v['target']} → {v['measured']}: {_verdict(v['ok'])}" for v in row["verdicts"]]
    return lines


def render_e2e(result: dict) -> list[str]:
    admission, completion = result["admission_to_task_log"], result["completion_to_sensor_success"]
    peers = "; ".join(
        f"{p['expected_detection_ms']} ms ({p['peer']}, {p['poll_interval_s']} s poll)"
        for p in result["polling_peers"]
    )
    excluded = result["admission_excluded"]
    return [
        f"{result['runs']} manual runs of text_classifier_finetune triggered at once (3 active at a time; single "
        f"queue: one RayJob at a time); {result['finished']} finished, sensor states {result['sensor_states']}; "
        f"Airflow up in {result['airflow_startup_s']} s (metadata DB: {result.get('metadata_database', '?')}); "
        f"the phase took {result['phase_s']} s. "
        f"Admission = {result['admission_event']}.",
        "",
        "| measure | samples | p50 (ms) | p99 (ms) | max (ms) |",
        "|---|---|---|---|---|",
        f"| Kueue admission → the trigger's ADMITTED/RUNNING line in the task log (what the UI shows) "
        f"| {admission['count']} | {admission['p50_ms']} | {admission['p99_ms']} | {admission['max_ms']} |",
        f"| RayJob Complete → sensor task success | {completion['count']} | {completion['p50_ms']} "
        f"| {completion['p99_ms']} | {completion['max_ms']} |",
        "",
        f"Polling peers, expected detection delay alone (half the poll interval; expected, not measured): {peers}; "
        "for completion the same scheduler and worker steps come on top. Admission samples left out: "
        f"{excluded['admitted_before_trigger_waited']} admitted before their trigger was waiting, "
        f"{excluded['no_admission_line']} queued but without an ADMITTED/RUNNING log line.",
    ]


def _series_every(series: list[dict], step_s: float) -> list[dict]:
    """The first sample of every ``step_s`` window, and the last one."""
    picked, next_t = [], 0.0
    for point in series:
        if point["t"] >= next_t:
            picked.append(point)
            next_t = (point["t"] // step_s + 1) * step_s
    if series and picked[-1] is not series[-1]:
        picked.append(series[-1])
    return picked


def render_backfill(result: dict) -> list[str]:
    n, slots = result["runs"], result["worker_slots"]
    create = result["backfill_create"]
    request = (
        f"failed after {create.get('request_s')} s — {create['error']}"
        if create.get("error")
        else f"created in {create.get('request_s')} s, after {create.get('refused_503')} refused attempt(s)"
    )
    submitted = result["all_rayjobs_s"]
    held_after = result["max_slots_held_after_all_deferred"]
    lines = [
        f"`POST /api/v2/backfills` (`max_active_runs` {n}): {n} daily runs of text_classifier_finetune while "
        f"a prod-priority RayJob holds the single queue (nothing is admitted); {slots} worker slots "
        f"(LocalExecutor, `[core] parallelism`); `[scheduler] max_dagruns_per_loop_to_schedule` "
        f"{result.get('max_dagruns_per_loop_to_schedule')} (Airflow's default: 20; see bench/backfill.py); "
        f"metadata DB: {result.get('metadata_database', '?')}; the phase took {result['phase_s']} s. "
        f"Backfill {request}. "
        f"Times count from the first request; component "
        f"restarts: {result['component_restarts'] or 'none'}; samples lost to API errors: "
        f"{result['sample_errors']['count']} {result['sample_errors']['first'] or ''}.",
        "",
        "| measure | measured | target |",
        "|---|---|---|",
        f"| backfill create → {n} RayJobs exist in kubesim | {submitted} s ({result['rayjobs_created']} created) "
        f"| ≤ {result['target_submitted_s']:g} s: "
        f"{_verdict(None if submitted is None else submitted <= result['target_submitted_s'])} |",
        f"| backfill create → {n} sensors deferred | {result['all_deferred_s']} s | |",
        f"| cores busy until then (whole machine, /proc/stat) | {result.get('cores_busy_until_all_deferred')} "
        f"of {result.get('nproc', '?')} | |",
        f"| most task instances `running` / slot holders (`queued` + `running`, one query), whole period "
        f"| {result['max_running']} / {result['max_slots_held']} | ≤ {slots} slots |",
        f"| worker slots held / `wait` running once all {n} sensors deferred "
        f"({result['samples_after_all_deferred']} samples, ~1 s apart) | {held_after} / "
        f"{result['max_running_wait_after_all_deferred']} "
        f"| 0 (deferred sensors hold no slot): {_verdict(None if held_after is None else held_after == 0)} |",
        "",
        f"Polling baseline (expected, not measured): a poke-mode sensor holds its slot while it waits, so {slots} "
        f"waiting sensors would hold all {slots} slots and the remaining submits could not start until "
        "RayJobs finish, which a blocked queue never lets happen.",
        "",
        "| t (s) | sample took (s) | RayJobs | runs running | submit queued / running / success "
        "| wait queued / running / deferred |",
        "|---|---|---|---|---|---|",
    ]
    for p in _series_every(result["series"], 10.0):
        s, w = p["submit"], p["wait"]
        lines.append(
            f"| {p['t']} | {p['took_s']} | {p['rayjobs']} | {p['runs_running']} | {s['queued']} / {s['running']} / {s['success']} "
            f"| {w['queued']} / {w['running']} / {w['deferred']} |"
        )
    return lines


def render_refused(result: dict) -> list[str]:
    """One triggerer under a permanent 403 on watch, next to its polling peer (bench.refused_watch)."""
    t, p = result["trigger"], result["polling"]
    interval = result["degraded_list_interval_s"]
    if p is None:
        peer = f"not run; nominal {result['polling_nominal_per_min']} / min"
    else:
        achieved = round(p["requests"] * 60 / p["window_s"])
        peer = (
            f"{achieved} / min at the rate it achieved ({p['achieved_share']:.0%} of nominal "
            f"{result['polling_nominal_per_min']} / min; kept its 10 s interval: {'yes' if p['kept_interval'] else '**no**'})"
        )
    latency = t["detection_latency"]
    return [
        f"N = {result['n']} RayJobTriggers in one process; every watch of RayJobs and Workloads in their namespace "
        f"answered 403 (lists allowed) for the whole run; the hub lists each every {interval:g} s instead.",
        "",
        "| figure | measured |",
        "|---|---|",
        f"| API requests per minute while waiting ({t['window_s']:g} s window) | {t['waiting_requests_per_min']} "
        f"({t['waiting_requests']} requests: {t['waiting_by_verb']}) |",
        f"| polling peer, N GETs per 10 s | {peer} |",
        f"| startup requests (until both watch loops were refused, plus one interval) | {t['startup_requests']} "
        f"({t['startup_by_verb']}) |",
        f"| watch streams open while waiting / refused watch requests in the whole run | "
        f"{t['watch_streams_open_while_waiting']} / {t['refused_watches']} |",
        f"| waves: triggers fired / requests per minute while N/4 ran at a time | {t['events']} / "
        f"{t['wave_requests_per_min']} ({t['wave_requests']} in {t['waves_s']} s) |",
        f"| detection latency, Complete → TriggerEvent (p50 / p99 / max ms, {t['latency_samples']} samples) | "
        f"{latency['p50_ms']} / {latency['p99_ms']} / {latency['max_ms']} |",
        f"| trigger process CPU s (startup / +waiting / end), peak RSS MiB | {t['cpu_s']['startup']} / "
        f"{t['cpu_s']['after_waiting']} / {t['cpu_s']['end']}, {t['peak_rss_mib']} |",
    ]


def render_triggerers(result: dict) -> list[str]:
    """Three triggerers per N (bench.triggerers): each triggerer's streams, startup, memory and detection,
    the waiting minute, and one triggerer's restart, with each target's verdict."""
    lines = [
        "| N per triggerer (waits) | triggerer | watch streams | startup requests | RSS MiB (imports / "
        "startup / peak) | fired in the waves | detection p50 / p99 / max (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = [row for row in result["rows"] if "error" not in row]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"| {row['n_per_triggerer']} | error: {row['error']} ||||||")
            continue
        for k, t in enumerate(row["per_triggerer"]):
            latency = t["detection_latency"]
            lines.append(
                f"| {row['n_per_triggerer']} ({row['waits']}) | {k} | {t['streams']} | {t['requests']} "
                f"| {t['rss_mib_after_imports']} / {t['rss_mib_after_startup']} / {t['peak_rss_mib']} "
                f"| {t['fired_in_waves']} | {latency['p50_ms']} / {latency['p99_ms']} / {latency['max_ms']} |"
            )
    lines += [
        "",
        "| N per triggerer | watch streams open, all three | requests per minute while waiting | detection "
        "p50 / p99 / max (ms), all three | triggerer 0 restarted: its requests in its first minute (watches "
        "opened; everyone's in that minute) | of which single-object reads | its RayJobs completed while down → fired after its "
        "start, p50 / p99 / max (ms) | restarted: startup s, peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        waves, restart = row["waves"], row["restart"]
        latency, caught = waves["detection_latency"], restart["catch_up"]
        lines.append(
            f"| {row['n_per_triggerer']} | {row['waiting']['streams_open']} "
            f"| {row['waiting']['requests_per_min']} ({row['waiting']['requests']} in {row['waiting']['window_s']:g} s) "
            f"| {latency['p50_ms']} / {latency['p99_ms']} / {latency['max_ms']} ({waves['fired']} events) "
            f"| {restart['requests_first_minute']} ({restart['watches_opened_first_minute']}): "
            f"{restart['first_minute_by_verb']}; everyone's {restart.get('all_requests_first_minute', '–')} "
            f"| {restart['object_reads_first_minute']} "
            f"| {caught['count']} of {restart['its_own_completed_while_down']}: {caught['p50_ms']} / "
            f"{caught['p99_ms']} / {caught['max_ms']} (after its {restart['imports_s']} s of imports: "
            f"{restart['catch_up_after_imports']['p50_ms']} / {restart['catch_up_after_imports']['p99_ms']}) "
            f"| {restart['startup_s']}, {restart['peak_rss_mib']} |"
        )
    lines += [
        "",
        "Detection in two parts, all three (p50 / p99 / max, ms): a raw watch → the triggerer's hub saw it; "
        "the hub → the TriggerEvent:",
        "",
    ]
    for row in rows:
        delivery, own = row["waves"].get("delivery"), row["waves"].get("trigger_part")
        if delivery and own:
            lines.append(
                f"- N = {row['n_per_triggerer']}: {delivery['p50_ms']} / {delivery['p99_ms']} / "
                f"{delivery['max_ms']}; {own['p50_ms']} / {own['p99_ms']} / {own['max_ms']} ({own['count']} events)"
            )
        stalls = [t.get("stalled_in_waves") for t in row["per_triggerer"]]
        if all(stalls):
            lines.append(
                "  - each triggerer's event loop held > 0.1 s in the waves (passes, total s, longest s): "
                + "; ".join(f"{s['count']}, {s['total_s']}, {s['max_s']}" for s in stalls)
            )
    lines += ["", "Where the time went (wall s / kubesim CPU s per phase):", ""]
    for row in rows:
        phases = ", ".join(f"{name} {v['s']:g} / {v['kubesim_cpu_s']}" for name, v in row["phases"].items())
        warnings = sum(t["log_warnings"]["count"] for t in row["per_triggerer"])
        warnings += row["restart"]["log_warnings"]["count"]
        lines.append(
            f"- N = {row['n_per_triggerer']}: {phases}; {warnings} WARNING/ERROR lines in the triggerers' logs"
        )
        for phase, quiet in (
            ("waves_settle", row["waves"].get("quiet_after")),
            ("down", row["restart"].get("quiet_before")),
        ):
            if quiet is False:
                lines.append(
                    f"  - **kubesim was not quiet at the end of {phase}** (no request and no write for 3 s): the "
                    "run went on after the timeout, so that phase's seconds are a lower bound"
                )
    for row in rows:
        lines += ["", f"Targets at N = {row['n_per_triggerer']} per triggerer:"]
        lines += [f"- {v['target']} → {v['measured']}: {_verdict(v['ok'])}" for v in row["verdicts"]]
    return lines


def render_floor(result: dict) -> list[str]:
    """Ours against Airflow's floor (bench.task_end's floor figures)."""
    from bench.task_end import render_floor as floor_table

    return [
        f"{result['runs']} runs of ours (`bench_end_in_triggerer`) and of the floor in one Airflow, started "
        f"in {result['airflow_startup_s']} s.",
        *floor_table(result),
    ]


SECTIONS = (
    ("admission", "Kueue admission cycle (issue 3 §6)", render_admission),
    ("parse", "DAG parse cost (issue 7 §3)", render_parse),
    ("fanout", "kubesim watch fan-out (issue 2 §6)", render_fanout),
    ("trigger", "Trigger scale vs polling (issue 7 §1)", render_trigger),
    ("refused", "Waiting under a permanent 403 on watch", render_refused),
    ("triggerers", "Three triggerers (issue 33)", render_triggerers),
    ("floor", "Complete → task success against Airflow's floor (issue 33)", render_floor),
    ("e2e", "End-to-end latency in Airflow (issue 7 §2)", render_e2e),
    ("backfill", "Backfill throughput (issue 7 §4)", render_backfill),
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
        # §2 and §4 share one Airflow session, started and timed by whichever step runs first.
        elapsed = (
            f"elapsed {section['elapsed_s']} s"
            if section["elapsed_s"] >= 0.1 or "phase_s" not in section
            else f"phase {section['phase_s']} s, in the Airflow session timed above"
        )
        out.append(
            f"\n({elapsed}; load average after "
            f"{', '.join(f'{x:.2f}' for x in section['load_average_after'])})"
        )
    return "\n".join(out)
