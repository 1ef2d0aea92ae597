#!/usr/bin/python3
"""Write a BERT sequence classifier checkpoint (ferry's or transformers' safetensors, fp32)
as the ONNX graph ONNX Runtime's own transformer optimizer makes of BERT, for an encoder
peer benchmark (bench/ort_encoder_bench.sh).

The graph uses ONNX Runtime's fused CPU operators (com.microsoft domain):
EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu. With --int8 the
linear layers become what `onnxruntime.quantization.quantize_dynamic` produces with
per-channel weights (each output column's int8 scale, activations quantized per call):
QAttention after DynamicQuantizeLinear for q/k/v, DynamicQuantizeMatMul for the others.
The embeddings, layer norms, pooler and classifier stay fp32 (as ferry's int8 engines
keep them).

Needs python3-onnx (Debian) and numpy. Usage:
  ort_bert_onnx.py CHECKPOINT_DIR OUT.onnx [--int8]
"""
import json
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        data = f.read()
    tensors = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            sys.exit(f"{name}: {meta['dtype']}; write the checkpoint with --dtype fp32")
        begin, end = meta["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(meta["shape"])
    del base
    return tensors


def quantize_columns(w_kn):
    """Symmetric int8 per output column of a [K, N] weight; returns (int8 [K, N], scale [N])."""
    amax = np.abs(w_kn).max(axis=0)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w_kn / scale), -127, 127).astype(np.int8)
    return q, scale


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    int8 = "--int8" in sys.argv
    if len(args) != 2:
        sys.exit(__doc__)
    ckpt, out = args
    cfg = json.load(open(f"{ckpt}/config.json"))
    t = load_safetensors(f"{ckpt}/model.safetensors")
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    layers = cfg["num_hidden_layers"]
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    if cfg.get("hidden_act", "gelu") != "gelu":
        sys.exit("only hidden_act gelu (erf) is written")
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in t else ""

    inits = []
    nodes = []

    def init(name, array):
        inits.append(numpy_helper.from_array(np.require(array, requirements="C"), name))
        return name

    def w(name):
        return t[prefix + name] if prefix + name in t else t[name]

    def linear(x, weight_oi, bias, name):
        """x [.., K] times weight [N, K]^T plus bias: MatMul + (bias left to the caller) in
        fp32, DynamicQuantizeMatMul with the bias fused in int8."""
        w_kn = weight_oi.T.astype(np.float32)
        if int8:
            q, scale = quantize_columns(w_kn)
            y = f"{name}_out"
            nodes.append(helper.make_node(
                "DynamicQuantizeMatMul",
                [x, init(f"{name}_w", q), init(f"{name}_ws", scale), "",
                 init(f"{name}_b", bias) if bias is not None else ""],
                [y], domain=MS, name=name))
            return y, True
        y = f"{name}_mm"
        nodes.append(helper.make_node("MatMul", [x, init(f"{name}_w", w_kn)], [y], name=name))
        return y, False

    nodes.append(helper.make_node(
        "Cast", ["input_ids"], ["ids32"], to=TensorProto.INT32))
    nodes.append(helper.make_node(
        "Cast", ["token_type_ids"], ["seg32"], to=TensorProto.INT32))
    nodes.append(helper.make_node(
        "Cast", ["attention_mask"], ["mask32"], to=TensorProto.INT32))
    nodes.append(helper.make_node(
        "EmbedLayerNormalization",
        ["ids32", "seg32",
         init("word_emb", w("embeddings.word_embeddings.weight")),
         init("pos_emb", w("embeddings.position_embeddings.weight")),
         init("seg_emb", w("embeddings.token_type_embeddings.weight")),
         init("emb_ln_g", w("embeddings.LayerNorm.weight")),
         init("emb_ln_b", w("embeddings.LayerNorm.bias")),
         "mask32"],
        ["h0", "mask_index"], domain=MS, epsilon=eps, name="embed"))

    h = "h0"
    for i in range(layers):
        p = f"encoder.layer.{i}."
        qkv_w = np.concatenate([w(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")])
        qkv_b = np.concatenate([w(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
        if int8:
            q, scale = quantize_columns(qkv_w.T.astype(np.float32))
            nodes.append(helper.make_node(
                "DynamicQuantizeLinear", [h], [f"l{i}_xq", f"l{i}_xs", f"l{i}_xz"], name=f"l{i}_quant"))
            nodes.append(helper.make_node(
                "QAttention",
                [f"l{i}_xq", init(f"l{i}_qkv_w", q), init(f"l{i}_qkv_b", qkv_b), f"l{i}_xs",
                 init(f"l{i}_qkv_ws", scale), "mask_index", f"l{i}_xz"],
                [f"l{i}_attn"], domain=MS, num_heads=heads, name=f"l{i}_attention"))
        else:
            nodes.append(helper.make_node(
                "Attention",
                [h, init(f"l{i}_qkv_w", np.ascontiguousarray(qkv_w.T)), init(f"l{i}_qkv_b", qkv_b),
                 "mask_index"],
                [f"l{i}_attn"], domain=MS, num_heads=heads, name=f"l{i}_attention"))

        def skip_ln(x, skip, ln, bias, fused_bias, out_name):
            ins = [x, skip, init(f"{out_name}_g", w(ln + ".weight")), init(f"{out_name}_be", w(ln + ".bias"))]
            if not fused_bias:
                ins.append(init(f"{out_name}_bias", bias))
            nodes.append(helper.make_node(
                "SkipLayerNormalization", ins, [out_name], domain=MS, epsilon=eps, name=out_name))
            return out_name

        y, fused = linear(f"l{i}_attn", w(p + "attention.output.dense.weight"),
                          w(p + "attention.output.dense.bias"), f"l{i}_o")
        h1 = skip_ln(y, h, p + "attention.output.LayerNorm", w(p + "attention.output.dense.bias"),
                     fused, f"l{i}_h1")
        y, fused = linear(h1, w(p + "intermediate.dense.weight"),
                          None, f"l{i}_up")
        nodes.append(helper.make_node(
            "BiasGelu", [y, init(f"l{i}_up_bias", w(p + "intermediate.dense.bias"))], [f"l{i}_gelu"],
            domain=MS, name=f"l{i}_gelu"))
        y, fused = linear(f"l{i}_gelu", w(p + "output.dense.weight"), w(p + "output.dense.bias"), f"l{i}_down")
        h = skip_ln(y, h1, p + "output.LayerNorm", w(p + "output.dense.bias"), fused, f"l{i}_h2")

    # Pooler ([CLS] row, dense, tanh) and classifier, fp32 as in ferry's engines.
    nodes.append(helper.make_node("Gather", [h, init("cls_index", np.array(0, dtype=np.int64))],
                                  ["cls"], axis=1))
    nodes.append(helper.make_node("Gemm", ["cls", init("pool_w", w("pooler.dense.weight")),
                                           init("pool_b", w("pooler.dense.bias"))], ["pool_lin"], transB=1))
    nodes.append(helper.make_node("Tanh", ["pool_lin"], ["pooled"]))
    nodes.append(helper.make_node("Gemm", ["pooled", init("cls_w", t["classifier.weight"]),
                                           init("cls_b", t["classifier.bias"])], ["logits"], transB=1))

    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        nodes, "bert",
        [helper.make_tensor_value_info(n, TensorProto.INT64, dims)
         for n in ("input_ids", "attention_mask", "token_type_ids")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", len(t["classifier.bias"])])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid(MS, 1)],
                              producer_name="ferry-bench")
    model.ir_version = 8
    onnx.save_model(model, out, save_as_external_data=False)
    print(f"wrote {out} ({'int8' if int8 else 'fp32'}, {layers} layers)")


if __name__ == "__main__":
    main()
