#!/usr/bin/env python3
"""Writes a llama-3.2-1B-shaped GGUF file with random weights (hidden 2048, 16 layers, 32
heads of 64, 8 KV heads, FFN 8192, vocabulary 128256, untied head, Llama 3 RoPE scaling)
through llama.cpp's own gguf-py, for benchmarking ferry and llama.cpp on the very same file
(bench/gguf_llamacpp_bench.sh).

The tokenizer is tools/fixtures/make_gguf.py's byte-level BPE vocabulary padded with
placeholder tokens to the model's size: benchmarks feed token ids, not text.

Usage:
  python3 bench/make_bench_gguf.py OUT.gguf --type f32|f16|bf16|q8_0 --gguf-py GGUF_PY_DIR
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "fixtures"))
import make_gguf as fx  # noqa: E402

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 2048, 16, 32, 8, 8192, 128256
HEAD_DIM = HIDDEN // HEADS


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--type", choices=["f32", "f16", "bf16", "q8_0"], default="f16")
    parser.add_argument("--gguf-py", required=True)
    args = parser.parse_args()
    gguf, quants = fx.import_gguf(args.gguf_py)

    fx.HEAD_DIM = HEAD_DIM  # rope_divisors() reads it
    rng = np.random.default_rng(20261202)
    tokens = fx.vocabulary()
    special = len(tokens) - 1
    tokens += [f"<placeholder_{i}>" for i in range(VOCAB - len(tokens))]
    types_ = [gguf.TokenType.NORMAL] * VOCAB
    types_[special] = gguf.TokenType.CONTROL

    writer = gguf.GGUFWriter(args.out, "llama")
    writer.add_name("bench-llama-1b")
    writer.add_vocab_size(VOCAB)
    writer.add_context_length(fx.CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(fx.EPS)
    writer.add_rope_freq_base(fx.THETA)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")  # a name both readers know
    writer.add_token_list(tokens)
    writer.add_token_types(types_)
    writer.add_token_merges([f"{a} {b}" for a, b in fx.MERGES])
    writer.add_bos_token_id(special)
    writer.add_eos_token_id(special)
    writer.add_add_bos_token(False)

    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0}[args.type]

    def add(name, rows, cols):
        w = rng.standard_normal((rows, cols), dtype=np.float32) / np.float32(np.sqrt(cols))
        if args.type == "f32":
            data = w
        elif args.type == "f16":
            data = w.astype(np.float16)
        else:
            data = quants.quantize(w, qtype)
        writer.add_tensor(name, data, raw_dtype=qtype)

    def norm(name):
        writer.add_tensor(name, (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))

    t0 = time.time()
    add("token_embd.weight", VOCAB, HIDDEN)
    norm("output_norm.weight")
    add("output.weight", VOCAB, HIDDEN)
    for l in range(LAYERS):
        p = f"blk.{l}."
        # Random rows need no rotary interleaving: any permutation of random rows is random.
        add(p + "attn_q.weight", HEADS * HEAD_DIM, HIDDEN)
        add(p + "attn_k.weight", KV_HEADS * HEAD_DIM, HIDDEN)
        add(p + "attn_v.weight", KV_HEADS * HEAD_DIM, HIDDEN)
        add(p + "attn_output.weight", HIDDEN, HEADS * HEAD_DIM)
        add(p + "ffn_gate.weight", FFN, HIDDEN)
        add(p + "ffn_up.weight", FFN, HIDDEN)
        add(p + "ffn_down.weight", HIDDEN, FFN)
        norm(p + "attn_norm.weight")
        norm(p + "ffn_norm.weight")
        print(f"layer {l} ready ({time.time() - t0:.0f} s)", flush=True)
    writer.add_tensor("rope_freqs.weight", fx.rope_divisors())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.out}: {os.path.getsize(args.out)} bytes in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
