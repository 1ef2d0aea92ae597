#!/usr/bin/env python3
"""Summarizes one bench/qos_bench.sh ladder: static-top, static-bottom and QoS under the same
1x -> 3x -> 1x burst, per tier: SLO attainment (whole run and during the burst), goodput, the
share of output tokens served by each variant, and the quality-weighted goodput (each good
request weighted by its variant's teacher-forced agreement with the top variant, from
`ferry eval compare`). Writes TAG-summary.md and, when matplotlib is there, TAG-timeline.png:
the request rate, the active variant with the controller's pressure, and p95 TTFT per tier.

usage: bench/qos_report.py OUT_DIR TAG
  reads OUT_DIR/TAG-meta.json, TAG-{static-top,static-bottom,qos}.json (ferry bench serve
  --json --save-requests), TAG-quality.json (ferry eval compare) and TAG-timeline.jsonl
  ("UNIX_SECONDS {GET /admin/qos/MODEL}" per line).
"""
import json
import math
import os
import sys

BIN_S = 5.0
CONFIGS = ["static-top", "static-bottom", "qos"]


def load(path):
    with open(path) as f:
        return json.load(f)


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    pos = q / 100.0 * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def slo_of(run, tier):
    for t in run.get("tiers", []):
        if t["tier"] == tier:
            return t["slo"]
    return run["config"]["slo"]


def meets(r, slo):
    if not r["success"]:
        return False
    ttft = r["ttft_ms"] if r["ttft_ms"] is not None else r["e2e_ms"]
    if slo.get("ttft_ms") is not None and ttft > slo["ttft_ms"]:
        return False
    if slo.get("tpot_ms") is not None and (r["tpot_ms"] or 0) > slo["tpot_ms"]:
        return False
    if slo.get("e2e_ms") is not None and r["e2e_ms"] > slo["e2e_ms"]:
        return False
    return True


def summarize(meta, name, run, quality):
    """One config's numbers: per tier and in total."""
    duration = sum(p["duration_s"] for p in meta["schedule"])
    burst = meta["burst_phase"]
    static_variant = {"static-top": meta["top"], "static-bottom": meta["bottom"]}.get(name)
    out = {"tiers": {}, "total_good": 0, "weighted_good": 0.0, "failed": 0, "requests": 0}
    for tier in meta["tiers"]:
        slo = slo_of(run, tier)
        mine = [r for r in run["requests"] if r["tier"] == tier]
        good = [r for r in mine if meets(r, slo)]
        in_burst = [r for r in mine if r["phase"] == burst]
        good_burst = [r for r in in_burst if meets(r, slo)]
        tokens = {}
        for r in mine:
            if r["success"]:
                v = r["variant"] or static_variant or "?"
                tokens[v] = tokens.get(v, 0) + r["output_tokens"]
        total_tokens = sum(tokens.values()) or 1
        weighted = sum(quality.get(r["variant"] or static_variant, 0.0) for r in good)
        ttft_burst = [r["ttft_ms"] for r in in_burst if r["success"] and r["ttft_ms"] is not None]
        out["tiers"][tier] = {
            "requests": len(mine),
            "failed": sum(1 for r in mine if not r["success"]),
            "attainment": len(good) / len(mine) if mine else float("nan"),
            "attainment_burst": len(good_burst) / len(in_burst) if in_burst else float("nan"),
            "goodput": len(good) / duration,
            "ttft_p95_burst": percentile(ttft_burst, 95),
            "token_share": {v: n / total_tokens for v, n in sorted(tokens.items())},
        }
        out["total_good"] += len(good)
        out["weighted_good"] += weighted
        out["failed"] += sum(1 for r in mine if not r["success"])
        out["requests"] += len(mine)
    out["goodput"] = out["total_good"] / duration
    out["weighted_goodput"] = out["weighted_good"] / duration
    return out


def fmt_pct(x):
    return "-" if x != x else f"{100 * x:.1f} %"


def mean(values):
    values = [v for v in values if v == v]
    return sum(values) / len(values) if values else float("nan")


def across(rounds, fmt, get):
    """The mean over rounds, with each round's value when there are several."""
    values = [get(r) for r in rounds]
    text = fmt(mean(values))
    if len(values) > 1:
        text += " (" + " / ".join(fmt(v) for v in values) + ")"
    return text


def write_summary(out_dir, tag, meta, results, quality, quality_raw, loads):
    lines = [f"### {meta['title']}", ""]
    lines.append(f"Schedule {meta['schedule_text']} (1x = {meta['rate']:.3g} req/s, from a measured capacity of "
                 f"{meta['capacity']:.3g} req/s for {meta['top']} alone), tiers "
                 + ", ".join(f"{t} {s:g}" for t, s in zip(meta["tiers"], meta["shares"]))
                 + f"; {meta['input_len']} prompt / {meta['output_len']} output tokens; "
                 + "; ".join(f"{t} SLO TTFT {meta['slo'][t]['ttft_ms']:g} ms, TPOT {meta['slo'][t]['tpot_ms']:g} ms"
                             for t in meta["tiers"])
                 + f"; QoS window {meta['window_s']:g} s, dwell {meta['min_dwell_s']:g} s.")
    if len(next(iter(results.values()))) > 1:
        lines.append(f"{len(next(iter(results.values())))} rounds in alternating order; each cell is the mean, the "
                     "rounds' own values in parentheses. Load average (1 min) at the start of each run: "
                     + "; ".join(f"{name} {' / '.join(loads[name])}" for name in CONFIGS) + ".")
    lines.append("")
    lines.append(f"Quality ({meta['bottom']} vs {meta['top']}, `ferry eval compare`): teacher-forced top-1 "
                 f"agreement {quality[meta['bottom']]:.4f}, mean free-running common prefix "
                 f"{quality_raw.get('mean_prefix_match', float('nan')):.1f} of {quality_raw.get('steps', '?')} tokens, "
                 f"max |logit error| / max |logit| {quality_raw.get('max_abs_error_rel', float('nan')):.4f}. "
                 f"Startup probe ({meta['bottom']} time / {meta['top']} time for the same work): "
                 f"{meta.get('probe_ratio', 'n/a')}.")
    lines.append("")
    header = ("| config | tier | requests | failed | in SLO (run) | in SLO (burst) | TTFT p95 in burst (ms) | "
              "goodput (req/s) | output tokens by variant |")
    lines += [header, "|" + "---|" * 9]
    for name in CONFIGS:
        rs = results[name]
        for tier in meta["tiers"]:
            ts = [r["tiers"][tier] for r in rs]
            variants = sorted({v for t in ts for v in t["token_share"]})
            share = ", ".join(f"{v} {100 * mean([t['token_share'].get(v, 0.0) for t in ts]):.0f} %" for v in variants)
            lines.append(
                f"| {name} | {tier} | {ts[0]['requests']} | {sum(t['failed'] for t in ts)} | "
                f"{across(ts, fmt_pct, lambda t: t['attainment'])} | {across(ts, fmt_pct, lambda t: t['attainment_burst'])} | "
                f"{across(ts, lambda v: '-' if v != v else f'{v:.0f}', lambda t: t['ttft_p95_burst'])} | "
                f"{across(ts, lambda v: f'{v:.2f}', lambda t: t['goodput'])} | {share} |")
    lines += ["", "| config | goodput, all tiers (req/s) | quality-weighted goodput (req/s) | failed |", "|---|---|---|---|"]
    for name in CONFIGS:
        rs = results[name]
        lines.append(f"| {name} | {across(rs, lambda v: f'{v:.2f}', lambda r: r['goodput'])} | "
                     f"{across(rs, lambda v: f'{v:.2f}', lambda r: r['weighted_goodput'])} | "
                     f"{sum(r['failed'] for r in rs)} |")
    q = {k: mean([r[k] for r in results["qos"]]) for k in ("goodput", "weighted_goodput")}
    top = {k: mean([r[k] for r in results["static-top"]]) for k in ("goodput", "weighted_goodput")}
    bottom = {k: mean([r[k] for r in results["static-bottom"]]) for k in ("goodput", "weighted_goodput")}
    gold = meta["tiers"][0]
    gold_burst = min(r["tiers"][gold]["attainment_burst"] for r in results["qos"])
    best_static = max(top["goodput"], bottom["goodput"])
    goals = [
        (f"{gold} >= 99 % within its SLO during the burst (QoS, worst round)", gold_burst >= 0.99, fmt_pct(gold_burst)),
        ("QoS goodput >= 90 % of the best static variant", best_static > 0 and q["goodput"] >= 0.9 * best_static,
         f"{q['goodput']:.2f} vs {best_static:.2f} ({(q['goodput'] / best_static * 100) if best_static else 0:.0f} %)"),
        ("QoS quality-weighted goodput > static-bottom's", q["weighted_goodput"] > bottom["weighted_goodput"],
         f"{q['weighted_goodput']:.2f} vs {bottom['weighted_goodput']:.2f}"),
    ]
    lines += ["", "| goal | met | measured |", "|---|---|---|"]
    for text, ok, value in goals:
        lines.append(f"| {text} | {'yes' if ok else 'no'} | {value} |")
    switches = meta.get("switches", [])
    if switches:
        lines += ["", "QoS switches in round 1 (seconds from the start of the run): "
                  + "; ".join(f"{s['t']:.0f} s {s['from']} -> {s['to']} ({s['code']})" for s in switches) + "."]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, f"{tag}-summary.md"), "w") as f:
        f.write(text)
    return text


def timeline(out_dir, tag, started):
    """(t, active variant, pressure, signal) from the admin poller, and the switch decisions."""
    points, switches, seen = [], [], set()
    path = os.path.join(out_dir, f"{tag}-timeline.jsonl")
    if not os.path.exists(path):
        return points, switches
    with open(path) as f:
        for line in f:
            stamp, _, body = line.strip().partition(" ")
            try:
                j = json.loads(body)
            except ValueError:
                continue
            t = float(stamp) - started
            points.append((t, j["active"], j["signals"]["pressure"], j["signals"]["pressure_signal"]))
            for d in j.get("decisions", []):
                key = (d["unix_ms"], d["kind"], d.get("to", ""))
                if d["kind"] == "switch" and key not in seen:
                    seen.add(key)
                    switches.append({"t": d["unix_ms"] / 1000.0 - started, "from": d["from"], "to": d["to"],
                                     "code": d["code"], "reason": d["reason"]})
    switches.sort(key=lambda s: s["t"])
    return points, switches


def plot(out_dir, tag, meta, runs, points):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no plot (run `python3 bench/qos_report.py {out_dir} {tag}` where it is)")
        return None
    duration = sum(p["duration_s"] for p in meta["schedule"])
    nbins = int(math.ceil(duration / BIN_S))
    fig, (ax_rate, ax_var, ax_ttft) = plt.subplots(3, 1, figsize=(10, 9), sharex=True,
                                                    gridspec_kw={"height_ratios": [1, 1, 1.4]})
    q = runs["qos"]
    # 1. Arrivals per second, by tier, and the schedule.
    for tier in meta["tiers"]:
        counts = [0] * nbins
        for r in q["requests"]:
            if r["tier"] == tier:
                counts[min(int(r["scheduled_s"] // BIN_S), nbins - 1)] += 1
        ax_rate.step([i * BIN_S for i in range(nbins)], [c / BIN_S for c in counts], where="post", label=tier)
    xs, ys, t = [], [], 0.0
    for p in meta["schedule"]:
        xs += [t, t + p["duration_s"]]
        ys += [p["rate"], p["rate"]]
        t += p["duration_s"]
    ax_rate.plot(xs, ys, "k--", linewidth=1, label="schedule")
    ax_rate.set_ylabel("requests/s")
    ax_rate.legend(loc="upper right", fontsize=8)
    ax_rate.set_title(meta["title"])
    # 2. The active variant and the pressure the controller acted on.
    ladder = meta["ladder"]
    if points:
        ts = [p[0] for p in points]
        ax_var.step(ts, [ladder.index(p[1]) if p[1] in ladder else -1 for p in points], where="post",
                    color="tab:red", label="active variant")
        ax_p = ax_var.twinx()
        pressures = [min(p[2], 5.0) for p in points]  # clipped: past a few times the target, the shape matters less
        ax_p.plot(ts, pressures, color="tab:gray", linewidth=1)
        ax_p.axhline(meta["downgrade_above"], color="tab:gray", linestyle=":", linewidth=1)
        ax_p.axhline(meta["upgrade_below"], color="tab:gray", linestyle="--", linewidth=1)
        ax_p.set_ylim(0, max(1.2, max(pressures) * 1.1))
        ax_p.set_ylabel("pressure (grey; 1 = at target)")
    ax_var.set_yticks(range(len(ladder)))
    ax_var.set_yticklabels(ladder)
    ax_var.set_ylim(len(ladder) - 0.5, -0.5)
    ax_var.set_ylabel("active variant")
    # 3. p95 TTFT per bin by tier (QoS solid, static-top dashed for comparison).
    for name, style in (("qos", "-"), ("static-top", "--")):
        for k, tier in enumerate(meta["tiers"]):
            per_bin = [[] for _ in range(nbins)]
            for r in runs[name]["requests"]:
                if r["tier"] == tier and r["success"] and r["ttft_ms"] is not None:
                    per_bin[min(int(r["start_s"] // BIN_S), nbins - 1)].append(r["ttft_ms"])
            xs = [i * BIN_S + BIN_S / 2 for i in range(nbins) if per_bin[i]]
            ys = [percentile(v, 95) for v in per_bin if v]
            ax_ttft.plot(xs, ys, style, color=f"C{k}", label=f"{tier} ({name})")
        for k, tier in enumerate(meta["tiers"]):
            ax_ttft.axhline(meta["slo"][tier]["ttft_ms"], color=f"C{k}", linestyle=":", linewidth=1)
    ax_ttft.set_yscale("log")
    ax_ttft.set_ylabel("p95 TTFT (ms)")
    ax_ttft.set_xlabel("seconds")
    ax_ttft.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir, f"{tag}-timeline.png")
    fig.savefig(path, dpi=110)
    return path


def main():
    out_dir, tag = sys.argv[1], sys.argv[2]
    meta = load(os.path.join(out_dir, f"{tag}-meta.json"))
    rounds = int(meta.get("rounds", 1))

    def run_file(name, r):
        return os.path.join(out_dir, f"{tag}-{name}.json" if r == 1 else f"{tag}-{name}-r{r}.json")

    def load_avg(name, r):
        path = run_file(name, r)[:-len(".json")] + ".load"
        return open(path).read().split()[0] if os.path.exists(path) else "?"

    runs = {name: [load(run_file(name, r)) for r in range(1, rounds + 1)] for name in CONFIGS}
    loads = {name: [load_avg(name, r) for r in range(1, rounds + 1)] for name in CONFIGS}
    quality_raw = load(os.path.join(out_dir, f"{tag}-quality.json"))
    quality = {meta["top"]: 1.0, meta["bottom"]: quality_raw["teacher_forced_agreement"]}
    points, switches = timeline(out_dir, tag, runs["qos"][0]["started_unix_s"])
    meta["switches"] = switches
    results = {name: [summarize(meta, name, run, quality) for run in runs[name]] for name in CONFIGS}
    text = write_summary(out_dir, tag, meta, results, quality, quality_raw, loads)
    png = plot(out_dir, tag, meta, {name: runs[name][0] for name in CONFIGS}, points)
    if png:
        note = f"\nTimeline of round 1 (rate, active variant and pressure, p95 TTFT per tier): `{os.path.basename(png)}`.\n"
        text += note
        with open(os.path.join(out_dir, f"{tag}-summary.md"), "a") as f:
            f.write(note)
    with open(os.path.join(out_dir, f"{tag}-results.json"), "w") as f:
        json.dump({"meta": meta, "results": results, "quality": quality}, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
