// ONNX Runtime (the official onnxruntime-node npm package, CPU execution provider) as the
// encoder peer of bench/ort_encoder_bench.sh.
//
//   node ort_encoder_run.mjs MODEL.onnx bench BATCH SEQ_LEN THREADS REPEATS
//       one warm-up run, then REPEATS timed runs of one BATCH x SEQ_LEN batch of random
//       token ids (no padding); prints JSON: median, min and max sequences/s.
//   node ort_encoder_run.mjs MODEL.onnx logits THREADS < ids.json
//       ids.json: a list of token-id lists; prints their logits as JSON (one run each),
//       so the graph can be checked against ferry's own outputs.
import { createRequire } from "node:module";
import fs from "node:fs";

const require = createRequire(process.env.ORT_NODE_MODULES ? `${process.env.ORT_NODE_MODULES}/` : import.meta.url);
const ort = require("onnxruntime-node");

const [model, mode, ...rest] = process.argv.slice(2);

async function session(threads) {
  return ort.InferenceSession.create(model, {
    executionProviders: ["cpu"],
    graphOptimizationLevel: "all",
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: "sequential",
  });
}

function feeds(rows) {
  const batch = rows.length;
  const seq = rows[0].length;
  const ids = new BigInt64Array(batch * seq);
  rows.forEach((r, b) => r.forEach((v, s) => { ids[b * seq + s] = BigInt(v); }));
  const ones = new BigInt64Array(batch * seq).fill(1n);
  const zeros = new BigInt64Array(batch * seq);
  return {
    input_ids: new ort.Tensor("int64", ids, [batch, seq]),
    attention_mask: new ort.Tensor("int64", ones, [batch, seq]),
    token_type_ids: new ort.Tensor("int64", zeros, [batch, seq]),
  };
}

if (mode === "bench") {
  const [batch, seq, threads, repeats] = rest.map(Number);
  const s = await session(threads);
  // Random ids from the vocabulary's ordinary range, [CLS] first and [SEP] last.
  let state = 12345;
  const rand = () => { state = (state * 1103515245 + 12345) % 2147483648; return state; };
  const rows = Array.from({ length: batch }, () =>
    Array.from({ length: seq }, (_, i) => (i === 0 ? 101 : i === seq - 1 ? 102 : 1000 + (rand() % 28000))));
  const f = feeds(rows);
  await s.run(f);
  const rates = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    await s.run(f);
    const sec = Number(process.hrtime.bigint() - t0) / 1e9;
    rates.push(batch / sec);
  }
  rates.sort((a, b) => a - b);
  const median = rates.length % 2 ? rates[(rates.length - 1) / 2]
    : (rates[rates.length / 2 - 1] + rates[rates.length / 2]) / 2;
  console.log(JSON.stringify({ ort: ort.env.versions?.common ?? "", batch, seq, threads,
    median_seq_per_s: median, min: rates[0], max: rates[rates.length - 1] }));
} else if (mode === "logits") {
  const threads = Number(rest[0] ?? 1);
  const s = await session(threads);
  const all = JSON.parse(fs.readFileSync(0, "utf8"));
  const out = [];
  for (const row of all) {
    const r = await s.run(feeds([row]));
    out.push(Array.from(r.logits.data));
  }
  console.log(JSON.stringify(out));
} else {
  console.error("usage: ort_encoder_run.mjs MODEL.onnx bench BATCH SEQ THREADS REPEATS | logits THREADS");
  process.exit(2);
}
