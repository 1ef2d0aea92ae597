// ferry's server driven by the official openai npm client: completions and chat completions
// with and without streaming, embeddings (the client's default base64 encoding and floats),
// model listing, and the client's typed errors for bad requests. Exits non-zero on the first
// failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.FERRY_BASE_URL;
const client = new OpenAI({ baseURL, apiKey: 'not-needed-on-loopback', maxRetries: 0, timeout: 60000 });

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    console.error(`not ok - ${name}: ${e.stack ?? e}`);
    process.exitCode = 1;
  }
}

const prompt = 'And the LORD said unto';

await check('models.list lists both demo models', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids.sort(), ['kjv-classifier', 'kjv-decoder']);
});

let wholeText = '';
await check('completions.create (no streaming)', async () => {
  const r = await client.completions.create({ model: 'kjv-decoder', prompt, max_tokens: 20, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.usage.completion_tokens, 20);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 20);
  wholeText = r.choices[0].text;
});

await check('completions.create (streaming) matches the whole response', async () => {
  const stream = await client.completions.create({
    model: 'kjv-decoder', prompt, max_tokens: 20, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let chunks = 0;
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks > 5, `only ${chunks} chunks`);
  assert.equal(text, wholeText);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 20);
});

await check('completions with token-id prompt, stop, logprobs, n', async () => {
  const r = await client.completions.create({
    model: 'kjv-decoder', prompt: [5, 17, 42, 99], max_tokens: 8, temperature: 0.7, seed: 3, n: 2, logprobs: 2,
  });
  assert.equal(r.choices.length, 2);
  assert.equal(r.choices[0].logprobs.tokens.length, r.usage.completion_tokens / 2);
  assert.equal(Object.keys(r.choices[0].logprobs.top_logprobs[0]).length <= 2, true);
});

await check('a stream aborted by the client is cancelled on the server', async () => {
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model: 'kjv-decoder', prompt, max_tokens: 400, temperature: 0, stream: true, ignore_eos: true },
    { signal: controller.signal });
  let n = 0;
  try {
    for await (const _ of stream) {
      if (++n === 3) controller.abort();
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', `unexpected ${e}`);
  }
  assert.ok(n < 400, `the stream ran to the end (${n} chunks)`);
  // The server notices the hang-up and frees the sequence (admin status; no-auth mode is admin).
  const statusUrl = baseURL.replace(/\/v1$/, '/admin/status');
  let decoder = null;
  for (let i = 0; i < 200; i++) {
    const s = await (await fetch(statusUrl)).json();
    decoder = s.models.find((m) => m.id === 'kjv-decoder').batcher;
    if (decoder.running === 0 && decoder.kv_free_blocks === decoder.kv_blocks) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(decoder.running, 0);
  assert.equal(decoder.kv_free_blocks, decoder.kv_blocks);
});

const messages = [
  { role: 'system', content: 'The first book of Moses.' },
  { role: 'user', content: 'In the beginning God created the heaven and the earth.' },
];
let chatText = '';
await check('chat.completions.create (no streaming)', async () => {
  const r = await client.chat.completions.create({ model: 'kjv-decoder', messages, max_tokens: 20, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.usage.completion_tokens, 20);
  chatText = r.choices[0].message.content;
});

await check('chat.completions.create (streaming) matches the whole message', async () => {
  const stream = await client.chat.completions.create({
    model: 'kjv-decoder', messages, max_completion_tokens: 20, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let role = null;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(text, chatText);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 20);
});

await check('chat.completions.create with logprobs, n, seed and penalties', async () => {
  const r = await client.chat.completions.create({
    model: 'kjv-decoder', messages, max_tokens: 8, temperature: 0.8, seed: 5, n: 2, logprobs: true,
    top_logprobs: 2, presence_penalty: 0.4, frequency_penalty: 0.2, logit_bias: { '5': -100 },
  });
  assert.equal(r.choices.length, 2);
  for (const c of r.choices) {
    assert.equal(c.logprobs.content.length, 8);
    assert.equal(c.logprobs.content.map((t) => t.token).join(''), c.message.content);
  }
});

await check('chat errors are typed: an image part is a 400', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: 'kjv-decoder', max_tokens: 4,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AA' } }] }],
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_content');
});

await check('embeddings.create (default base64 encoding)', async () => {
  const r = await client.embeddings.create({ model: 'kjv-classifier', input: ['In the beginning', 'Jesus wept.'] });
  assert.equal(r.data.length, 2);
  assert.equal(r.data[0].embedding.length, 256);
  const norm = Math.sqrt(r.data[0].embedding.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
});

await check('embeddings.create (float) equals base64', async () => {
  const a = await client.embeddings.create({ model: 'kjv-classifier', input: 'Jesus wept.', encoding_format: 'float' });
  const b = await client.embeddings.create({ model: 'kjv-classifier', input: 'Jesus wept.' });
  assert.equal(a.data[0].embedding.length, 256);
  for (let i = 0; i < 256; i++) assert.ok(Math.abs(a.data[0].embedding[i] - b.data[0].embedding[i]) < 1e-6);
  assert.ok(a.usage.prompt_tokens > 0);
});

await check('typed errors: 404 unknown model, 400 bad argument', async () => {
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(
    client.completions.create({ model: 'kjv-decoder', prompt: 'x', max_tokens: 1, temperature: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /temperature/.test(e.message));
  await assert.rejects(
    client.completions.create({ model: 'kjv-decoder', prompt: 'x', max_tokens: 100000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
});

await check('concurrent streams', async () => {
  const runs = await Promise.all(Array.from({ length: 16 }, async (_, i) => {
    const s = await client.completions.create(
      { model: 'kjv-decoder', prompt: `${prompt} ${i}`, max_tokens: 12, temperature: 0, stream: true });
    let t = '';
    for await (const c of s) t += c.choices[0]?.text ?? '';
    return t;
  }));
  assert.equal(runs.length, 16);
  for (const t of runs) assert.ok(t.length > 0);
});
