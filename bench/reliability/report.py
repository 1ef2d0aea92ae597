#!/usr/bin/env python3
"""Summaries and goal checks for overload.sh and soak.sh: OUT_DIR/summary.json and
summary.md. Exit status 1 when a goal is missed."""
import argparse
import glob
import json
import os


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def rss_series(out):
    rows = []
    with open(os.path.join(out, "rss.txt")) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                rows.append((float(parts[0]), int(parts[1])))
    return rows


def write(out, summary, goals):
    summary["goals"] = goals
    summary["all_goals_met"] = all(g["met"] for g in goals)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    lines = ["| goal | measured | met |", "|---|---|---|"]
    for g in goals:
        lines.append(f"| {g['goal']} | {g['measured']} | {'yes' if g['met'] else '**no**'} |")
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(json.dumps(summary, indent=2))
    print("\n".join(lines))
    return 0 if summary["all_goals_met"] else 1


def overload(a):
    run = json.load(open(os.path.join(a.out, "overload.json")))
    reqs = run.get("requests", [])
    refused = [r for r in reqs if r["http_status"] == 429]
    admitted = [r for r in reqs if r["success"]]
    other = [r for r in reqs if not r["success"] and r["http_status"] != 429]
    good = [r for r in admitted if r["ttft_ms"] is not None and r["ttft_ms"] <= a.slo_ttft_ms]
    probes = [l.split() for l in open(os.path.join(a.out, "probes.txt")) if l.strip()]
    probe_429 = [p for p in probes if p[0] == "429"]
    rss = rss_series(a.out)
    idle = json.loads(a.idle) if a.idle else {}
    s = {
        "capacity_rps": a.capacity, "offered_rps": a.rate, "duration_s": run["duration_s"],
        "requests": len(reqs), "admitted": len(admitted), "refused_429": len(refused), "other_failures": len(other),
        "other_failure_classes": sorted({r["error_class"] for r in other}),
        "refusal_ms_p50": pct([r["e2e_ms"] for r in refused], 50),
        "refusal_ms_p99": pct([r["e2e_ms"] for r in refused], 99),
        "admitted_ttft_ms_p50": pct([r["ttft_ms"] for r in admitted if r["ttft_ms"] is not None], 50),
        "admitted_ttft_ms_p99": pct([r["ttft_ms"] for r in admitted if r["ttft_ms"] is not None], 99),
        "admitted_within_slo": len(good) / len(admitted) if admitted else None,
        "output_tok_s": run["output_throughput"],
        "probes": len(probes), "probe_429": len(probe_429), "probe_429_with_retry_after": sum(int(p[1]) for p in probe_429),
        "rss_kb_min": min((r for _, r in rss), default=None), "rss_kb_max": max((r for _, r in rss), default=None),
        "rss_kb_last": rss[-1][1] if rss else None, "idle_after": idle, "same_greedy_output": a.same_output == 1,
        "server_alive": a.alive == 1,
    }
    first_half = [r for t, r in rss if t <= rss[-1][0] / 2] if rss else []
    bounded = bool(rss) and s["rss_kb_max"] <= 1.10 * max(first_half or [s["rss_kb_max"]])
    goals = [
        {"goal": "no crash", "measured": "alive" if s["server_alive"] else "DIED", "met": s["server_alive"]},
        {"goal": "refusals are 429 + Retry-After", "measured":
            f"{len(refused)} refused, {len(other)} other failures; probes {s['probe_429_with_retry_after']}/{len(probe_429)} with Retry-After",
         "met": len(other) == 0 and s["probe_429_with_retry_after"] == len(probe_429)},
        {"goal": "refusal p99 < 50 ms", "measured": f"{s['refusal_ms_p99']:.1f} ms" if refused else "no refusals",
         "met": (not refused) or s["refusal_ms_p99"] < 50},
        {"goal": ">= 99% of admitted within TTFT SLO", "measured":
            f"{100 * s['admitted_within_slo']:.2f}% of {len(admitted)} (SLO {a.slo_ttft_ms:.0f} ms)" if admitted else "none admitted",
         "met": bool(admitted) and s["admitted_within_slo"] >= 0.99},
        {"goal": "RSS bounded (max <= 1.1 x max of the first half)", "measured":
            f"{s['rss_kb_min']}..{s['rss_kb_max']} kB", "met": bounded},
        {"goal": "idle afterwards, every KV block free", "measured": json.dumps(idle),
         "met": idle.get("running") == 0 and idle.get("waiting") == 0 and idle.get("kv") == 0},
        {"goal": "greedy output unchanged", "measured": str(s["same_greedy_output"]), "met": s["same_greedy_output"]},
    ]
    return write(a.out, s, goals)


def soak(a):
    windows = []
    for path in sorted(glob.glob(os.path.join(a.out, "window-*.json")), key=lambda p: int(p.split("-")[-1][:-5])):
        w = json.load(open(path))
        windows.append({"label": w["options"].get("label", path) if "options" in w else path, "requests": w["num_requests"],
                        "failed": w["failed"], "failures": w["failures"], "ttft_p99": w["ttft_ms"].get("p99"),
                        "e2e_p99": w["e2e_ms"].get("p99"), "e2e_p50": w["e2e_ms"].get("p50")})
    rss = rss_series(a.out)
    warm_end = a.window
    after_warm = [r for t, r in rss if t >= warm_end]
    base = after_warm[0] if after_warm else None
    growth = (rss[-1][1] / base - 1) if base else None
    errors = sum(w["failed"] for w in windows)
    first, last = (windows[0], windows[-1]) if windows else (None, None)
    drift_e2e = (last["e2e_p99"] / first["e2e_p99"] - 1) if windows and first["e2e_p99"] else None
    drift_ttft = (last["ttft_p99"] / first["ttft_p99"] - 1) if windows and first["ttft_p99"] else None
    idle = json.loads(a.idle) if a.idle else {}
    drops = json.load(open(os.path.join(a.out, "disconnects.json"))) if os.path.exists(os.path.join(a.out, "disconnects.json")) else {}
    s = {"capacity_rps": a.capacity, "rate_rps": a.rate, "windows": windows, "rss_kb_after_first_window": base,
         "rss_kb_last": rss[-1][1] if rss else None, "rss_growth": growth, "errors": errors, "disconnects": drops,
         "p99_e2e_drift": drift_e2e, "p99_ttft_drift": drift_ttft, "idle_after": idle,
         "same_greedy_output": a.same_output == 1, "server_alive": a.alive == 1}
    goals = [
        {"goal": "no crash", "measured": "alive" if s["server_alive"] else "DIED", "met": s["server_alive"]},
        {"goal": "RSS growth <= 2% after the first window", "measured":
            f"{100 * growth:+.2f}% ({base} -> {s['rss_kb_last']} kB)" if growth is not None else "n/a",
         "met": growth is not None and growth <= 0.02},
        {"goal": "0 leaked KV blocks", "measured": json.dumps(idle), "met": idle.get("kv") == 0 and idle.get("running") == 0},
        {"goal": "0 errors", "measured": str(errors), "met": errors == 0},
        {"goal": "p99 drift <= 10% (first vs last window)", "measured":
            f"e2e {100 * drift_e2e:+.1f}%, TTFT {100 * drift_ttft:+.1f}%" if drift_e2e is not None and drift_ttft is not None else "n/a",
         "met": drift_e2e is not None and drift_e2e <= 0.10},
        {"goal": "greedy output unchanged", "measured": str(s["same_greedy_output"]), "met": s["same_greedy_output"]},
    ]
    return write(a.out, s, goals)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["overload", "soak"])
    p.add_argument("out")
    p.add_argument("--alive", type=int, default=1)
    p.add_argument("--idle", default="")
    p.add_argument("--same-output", type=int, default=0)
    p.add_argument("--capacity", type=float, default=0)
    p.add_argument("--rate", type=float, default=0)
    p.add_argument("--slo-ttft-ms", type=float, default=3000)
    p.add_argument("--window", type=float, default=300)
    a = p.parse_args()
    raise SystemExit(overload(a) if a.mode == "overload" else soak(a))


if __name__ == "__main__":
    main()
