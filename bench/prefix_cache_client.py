#!/usr/bin/env python3
"""Client of bench/prefix_cache_bench.sh: N concurrent chats that share one long system
prompt, sent at once to a running `ferry serve`, each streamed with greedy decoding.

Measures each chat's time to first token (TTFT: the first streamed chunk that carries a
generated token) and records the generated token ids, so that two runs (prefix cache on and
off) can be compared for identical outputs. Standard library only.

usage: prefix_cache_client.py --url URL --model NAME --out FILE.json
         [--chats 64] [--system-tokens 1000] [--max-tokens 16] [--timeout 1800]
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("And God said Let there be light and there was light And God saw the light that it was good "
         "and God divided the light from the darkness And God called the light Day and the darkness he "
         "called Night And the evening and the morning were the first day").split()


def post(url, path, body, timeout):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: HTTP {r.status}: {data[:300]!r}")
    return json.loads(data)


def system_prompt(url, model, tokens, timeout):
    """Words until the rendered system message alone is about `tokens` tokens long."""
    words = []
    i = 0
    while True:
        text = " ".join(words)
        n = post(url, "/tokenize", {"model": model, "messages": [{"role": "system", "content": text}]}, timeout)["count"]
        if n >= tokens:
            return text, n
        step = max(1, (tokens - n) // 2)
        for _ in range(step):
            words.append(WORDS[i % len(WORDS)])
            i += 1


def one_chat(url, model, system, index, max_tokens, timeout, barrier, result):
    body = {"model": model, "stream": True, "temperature": 0, "max_tokens": max_tokens, "ignore_eos": True,
            "return_token_ids": True,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": f"Question {index}: what came on day {index % 7 + 1}?"}]}
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    payload = json.dumps(body)
    barrier.wait()
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", payload, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        result[index] = {"error": f"HTTP {r.status}: {r.read()[:300]!r}"}
        return
    ttft = None
    ids = []
    text = ""
    for raw in r:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        for c in chunk.get("choices", []):
            got = c.get("token_ids") or []
            if got and ttft is None:
                ttft = time.perf_counter() - t0
            ids.extend(got)
            text += c.get("delta", {}).get("content") or ""
    e2e = time.perf_counter() - t0
    conn.close()
    result[index] = {"ttft_s": ttft, "e2e_s": e2e, "token_ids": ids, "text": text}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--chats", type=int, default=64)
    ap.add_argument("--system-tokens", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=1800)
    a = ap.parse_args()
    system, n = system_prompt(a.url, a.model, a.system_tokens, a.timeout)
    print(f"system prompt: {n} tokens; {a.chats} chats at once", file=sys.stderr, flush=True)
    barrier = threading.Barrier(a.chats)
    result = [None] * a.chats
    threads = [threading.Thread(target=one_chat, args=(a.url, a.model, system, i, a.max_tokens, a.timeout,
                                                         barrier, result)) for i in range(a.chats)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    errors = [r["error"] for r in result if r is None or "error" in r]
    if errors:
        print("errors:", errors[:3], file=sys.stderr)
        sys.exit(1)
    ttfts = sorted(r["ttft_s"] for r in result)
    summary = {
        "system_prompt_tokens": n, "chats": a.chats, "max_tokens": a.max_tokens, "wall_s": wall,
        "ttft_p50_s": statistics.median(ttfts), "ttft_p90_s": ttfts[int(0.9 * (len(ttfts) - 1))],
        "ttft_max_s": ttfts[-1], "e2e_p50_s": statistics.median(r["e2e_s"] for r in result),
        "chats_out": result,
    }
    with open(a.out, "w") as f:
        json.dump(summary, f)
    print(f"TTFT p50 {summary['ttft_p50_s'] * 1000:.0f} ms, p90 {summary['ttft_p90_s'] * 1000:.0f} ms, "
          f"wall {wall:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
