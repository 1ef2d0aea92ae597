"""Turns bench/cuda_bench.sh results (ferry.jsonl, torch.jsonl, limits) into the tables of
docs/performance.md: decode against torch.compile and the roofline, prefill against HF eager
and the measured matmul peak, the engine variants, and bert-base.

The roofline inputs are the highest copy bandwidth and bf16 matmul rate measured in the
same runs (the more demanding yardstick). Roofline step = (linear weights in bf16 + the KV
cache of every sequence at 512 tokens of context) / copy bandwidth.
usage: bench/cuda_table.py RESULTS_DIR   (ferry.jsonl, torch.jsonl, limits.jsonl)
"""
import json
import sys
from pathlib import Path

# Shapes of the presets (ferry make-checkpoint): linear weights, KV bytes per token (bf16),
# flops per token of the linear layers (2 x non-embedding parameters).
SHAPES = {
    "llama-3.2-1b": {"weights": 2.4715e9, "kv_token": 16 * 8 * 64 * 2 * 2, "flops": 1.95e9},
    "llama-3-8b": {"weights": 15.01e9, "kv_token": 32 * 8 * 128 * 2 * 2, "flops": 13.96e9},
}
CONTEXT = 512


def load(path):
    """JSON lines (or one JSON object per file); [] when the file is not there."""
    if not path.exists():
        return []
    text = path.read_text().strip()
    if text.startswith("{") and "\n{" not in text:
        return [json.loads(text)]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def main():
    d = Path(sys.argv[1])
    ferry, torch_runs = load(d / "ferry.jsonl"), load(d / "torch.jsonl")
    limits = load(d / "limits.jsonl") + load(d / "limits.json")
    all_limits = limits + [t for t in torch_runs if "d2d_copy_gb_s" in t]
    bw = max(x["d2d_copy_gb_s"] for x in all_limits) * 1e9
    peak = max(x["bf16_matmul_tflops"] for x in all_limits) * 1e12
    print(f"copy bandwidth {bw / 1e9:,.0f} GB/s, bf16 matmul {peak / 1e12:,.0f} TFLOP/s\n")

    def pick(model, variant, prompt=None):
        for r in ferry:
            if r["model"] == model and r["variant"] == variant and (prompt is None or r.get("prefill_tokens") == prompt):
                return r
        return None

    print("| model | batch | ferry tok/s (step ms) | eager steps | torch.compile | HF eager | ferry / compile | "
          "roofline step (ms) | ferry vs roofline |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model, shape in SHAPES.items():
        t = next((x["hf"] for x in torch_runs if x.get("model") == model and "hf" in x), None)
        r = pick(model, "checkpoint-bf16", 2048) or pick(model, "checkpoint-bf16")
        e = pick(model, "checkpoint-bf16-eager")
        if r is None or t is None:
            continue
        for dec in r["decode"]:
            b = dec["batch"]
            roof = (shape["weights"] + b * CONTEXT * shape["kv_token"]) / bw * 1e3
            comp = t["decode_compiled"][str(b)]
            eager = next(x for x in e["decode"] if x["batch"] == b)["tokens_per_s"] if e else float("nan")
            print(f"| {model} | {b} | {dec['tokens_per_s']:,.0f} ({dec['step_ms']:.2f}) | {eager:,.0f} | {comp:,.0f} | "
                  f"{t['decode'][str(b)]:,.0f} | {dec['tokens_per_s'] / comp:.2f}x | {roof:.2f} | "
                  f"{roof / dec['step_ms']:.0%} |")
    print("\n| model | prompt | ferry tok/s | HF eager | ferry / eager | matmul rate vs peak |")
    print("|---|---|---|---|---|---|")
    for model, shape in SHAPES.items():
        t = next((x["hf"] for x in torch_runs if x.get("model") == model and "hf" in x), None)
        for prompt in (512, 2048):
            r = pick(model, "checkpoint-bf16", prompt)
            if r is None or t is None:
                continue
            tps = r["prefill_tokens_per_s"]
            print(f"| {model} | {prompt} | {tps:,.0f} | {t['prefill'][str(prompt)]:,.0f} | "
                  f"{tps / t['prefill'][str(prompt)]:.2f}x | {tps * shape['flops'] / peak:.0%} |")
    for model in SHAPES:
        engines = [r for r in ferry if r["model"] == model and r["variant"].startswith("engine-")]
        if not engines:
            continue
        base = next((r for r in engines if r["variant"] == "engine-bf16" and "binary" not in r), None)
        batches = " / ".join(f"b{x['batch']}" for x in engines[0]["decode"])
        print(f"\n| {model} engine | binary | build s | decode {batches} tok/s | vs bf16 engine | "
              "prefill 2048 tok/s | vs baseline binary |")
        print("|---|---|---|---|---|---|---|")
        for r in engines:
            tps = [x["tokens_per_s"] for x in r["decode"]]
            rel = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(r["decode"], base["decode"])] if base else []
            other = None
            if "binary" not in r:
                other = next((x for x in engines if x["variant"] == r["variant"] and x.get("binary") == "baseline"), None)
            vs = ""
            if other:
                vs = " / ".join(f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}x" for a, b in zip(r["decode"], other["decode"]))
                vs += f"; prefill {r['prefill_tokens_per_s'] / other['prefill_tokens_per_s']:.2f}x"
            print(f"| {r['variant'][7:]} | {r.get('binary', 'this')} | {r.get('build_s', '')} | "
                  f"{' / '.join(f'{x:,.0f}' for x in tps)} | {' / '.join(f'{x:.2f}x' for x in rel)} | "
                  f"{r['prefill_tokens_per_s']:,.0f} | {vs} |")
    enc = next((x["encoder"] for x in torch_runs if x.get("model") == "bert-base"), None)
    if enc:
        print("\n| bert-base 32 x 128 | sequences/s | vs torch.compile | vs HF eager |")
        print("|---|---|---|---|")
        for r in ferry:
            if r["model"] == "bert-base":
                s = r["sequences_per_s"]
                print(f"| ferry {r['variant']} | {s:,.0f} | {s / enc['compiled_sequences_per_s']:.2f}x | "
                      f"{s / enc['eager_sequences_per_s']:.2f}x |")
        print(f"| torch.compile fp16 | {enc['compiled_sequences_per_s']:,.0f} | | |")
        print(f"| HF eager fp16 (SDPA) | {enc['eager_sequences_per_s']:,.0f} | | |")


if __name__ == "__main__":
    main()
