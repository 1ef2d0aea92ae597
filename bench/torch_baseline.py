"""PyTorch baselines for bench/cuda_bench.sh, on the same checkpoints ferry runs.

Measures, on the GPU, in one process:
  * the device-to-device copy bandwidth and the bf16 matmul rate (the roofline inputs);
  * Hugging Face transformers (eager modules, SDPA attention): prefill tokens/s for one
    prompt, decode tokens/s at several batch sizes with a given context;
  * the same decode under torch.compile (mode "reduce-overhead", a static KV cache);
  * with --encoder, a BERT-style checkpoint instead: sequences/s of one batch
    (--encoder-batch x --encoder-len tokens) in fp16, eager and under torch.compile.
Prints one JSON object. Any part that fails is reported with its error instead of a number.
usage: torch_baseline.py CHECKPOINT [--prompt-lens 512,2048] [--batches 1,8,64] [--context 512]
       torch_baseline.py CHECKPOINT --encoder [--encoder-batch 32] [--encoder-len 128]
"""
import argparse
import json
import time

import torch


def timed(fn, repeats=5, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def device_limits():
    n = 1 << 30  # 1 GiB each way
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = timed(lambda: b.copy_(a), repeats=10)
    copy_gbs = 2 * n / t / 1e9  # read + write
    m = 8192
    x = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    t = timed(lambda: x @ y, repeats=10)
    return {"d2d_copy_gb_s": copy_gbs, "bf16_matmul_tflops": 2 * m ** 3 / t / 1e12}


def hf(checkpoint, prompt_lens, batches, context, compile_decode):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.cuda().eval()
    vocab = model.config.vocab_size
    out = {"prefill": {}, "decode": {}, "decode_compiled": {}}
    with torch.inference_mode():
        for n in prompt_lens:
            ids = torch.randint(10, vocab - 10, (1, n), device="cuda")
            t = timed(lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1), repeats=5)
            out["prefill"][str(n)] = n / t
        for b in batches:
            ids = torch.randint(10, vocab - 10, (b, context), device="cuda")
            try:
                pre = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                cache = pre.past_key_values
                nxt = torch.randint(10, vocab - 10, (b, 1), device="cuda")
                steps = 16
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(steps):
                    r = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                    cache = r.past_key_values
                torch.cuda.synchronize()
                out["decode"][str(b)] = b * steps / (time.perf_counter() - t0)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                out["decode"][str(b)] = f"error: {e}"[:200]
        if compile_decode:
            for b in batches:
                try:
                    out["decode_compiled"][str(b)] = compiled_decode(model, b, context, vocab)
                except Exception as e:  # noqa: BLE001
                    out["decode_compiled"][str(b)] = f"error: {type(e).__name__}: {e}"[:300]
    return out


def compiled_decode(model, batch, context, vocab):
    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=context + 64)
    ids = torch.randint(10, vocab - 10, (batch, context), device="cuda")
    model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(context, device="cuda"),
          logits_to_keep=1)
    step = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    nxt = torch.randint(10, vocab - 10, (batch, 1), device="cuda")
    pos = context

    def one():
        nonlocal pos
        step(input_ids=nxt, past_key_values=cache, use_cache=True,
             cache_position=torch.tensor([pos], device="cuda"))
        pos += 1

    for _ in range(3):  # compile and capture
        one()
    torch.cuda.synchronize()
    steps = 32
    t0 = time.perf_counter()
    for _ in range(steps):
        one()
    torch.cuda.synchronize()
    return batch * steps / (time.perf_counter() - t0)


def encoder(checkpoint, batch, length):
    from transformers import AutoModel
    model = AutoModel.from_pretrained(checkpoint, dtype=torch.float16, attn_implementation="sdpa")
    model = model.cuda().eval()
    ids = torch.randint(10, model.config.vocab_size - 10, (batch, length), device="cuda")
    mask = torch.ones_like(ids)
    out = {"batch": batch, "seq_len": length}
    with torch.inference_mode():
        out["eager_sequences_per_s"] = batch / timed(lambda: model(input_ids=ids, attention_mask=mask), repeats=10)
        try:
            compiled = torch.compile(model, mode="reduce-overhead")
            out["compiled_sequences_per_s"] = batch / timed(lambda: compiled(input_ids=ids, attention_mask=mask),
                                                            repeats=10, warmup=3)
        except Exception as e:  # noqa: BLE001
            out["compiled_sequences_per_s"] = f"error: {type(e).__name__}: {e}"[:300]
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("--prompt-lens", default="512,2048")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--limits-only", action="store_true")
    p.add_argument("--encoder", action="store_true")
    p.add_argument("--encoder-batch", type=int, default=32)
    p.add_argument("--encoder-len", type=int, default=128)
    a = p.parse_args()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if a.encoder:
        try:
            result["encoder"] = encoder(a.checkpoint, a.encoder_batch, a.encoder_len)
        except Exception as e:  # noqa: BLE001
            result["encoder"] = f"error: {type(e).__name__}: {e}"[:300]
        print(json.dumps(result))
        return
    result.update(device_limits())
    if not a.limits_only:
        try:
            result["hf"] = hf(a.checkpoint, [int(x) for x in a.prompt_lens.split(",")],
                              [int(x) for x in a.batches.split(",")], a.context, not a.no_compile)
        except Exception as e:  # noqa: BLE001
            result["hf"] = f"error: {type(e).__name__}: {e}"[:300]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
