// ferry's server driven by the official openai npm client: completions and chat completions
// with and without streaming, embeddings (the client's default base64 encoding and floats),
// model listing, and the client's typed errors for bad requests. Exits non-zero on the first
// failure.
import assert from 'node:assert/strict';
import { File as BufferFile } from 'node:buffer';
import OpenAI from 'openai';

// File uploads need a global File, which Node 18 (Debian 12's nodejs) has only in node:buffer.
if (typeof globalThis.File === 'undefined' && BufferFile !== undefined) globalThis.File = BufferFile;

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

// Structured outputs. The demo decoder never writes JSON by itself; under a schema every
// answer must parse and satisfy it (checked here by hand, independently of the server).
const verseSchema = {
  type: 'object',
  properties: {
    book: { enum: ['Genesis', 'Exodus'] },
    chapter: { type: 'integer', minimum: 1, maximum: 50 },
    summary: { type: 'string', maxLength: 20 },
    tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 2 },
  },
  required: ['book', 'chapter', 'summary'],
  additionalProperties: false,
};

function checkVerse(text) {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).filter((k) => !['book', 'chapter', 'summary', 'tags'].includes(k)), []);
  assert.ok(['Genesis', 'Exodus'].includes(v.book), text);
  assert.ok(Number.isInteger(v.chapter) && v.chapter >= 1 && v.chapter <= 50, text);
  assert.ok(typeof v.summary === 'string' && [...v.summary].length <= 20, text);
  if (v.tags !== undefined) {
    assert.ok(Array.isArray(v.tags) && v.tags.length <= 2, text);
    for (const t of v.tags) assert.ok(typeof t === 'string' && [...t].length <= 6, text);
  }
  // Properties in the schema's order.
  const order = Object.keys(v);
  assert.deepEqual(order, ['book', 'chapter', 'summary', 'tags'].filter((k) => k in v));
  return v;
}

const verseFormat = { type: 'json_schema', json_schema: { name: 'verse', schema: verseSchema, strict: true } };

await check('chat response_format json_schema (no streaming, n=3, sampled)', async () => {
  const r = await client.chat.completions.create({
    model: 'kjv-decoder', messages, max_tokens: 200, temperature: 1.0, seed: 5, n: 3, response_format: verseFormat,
  });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) {
    checkVerse(c.message.content);
    assert.equal(c.finish_reason, 'stop');
  }
});

await check('chat response_format json_schema (streaming) parses and validates', async () => {
  const stream = await client.chat.completions.create({
    model: 'kjv-decoder', messages, max_tokens: 200, temperature: 0.8, seed: 9, stream: true,
    response_format: verseFormat,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  checkVerse(text);
  assert.equal(finish, 'stop');
});

await check('chat response_format json_object gives a JSON object', async () => {
  const r = await client.chat.completions.create({
    model: 'kjv-decoder', messages, max_tokens: 120, temperature: 0, response_format: { type: 'json_object' },
  });
  const c = r.choices[0];
  // Greedy may run out of tokens inside a free string; when it stops, it is an object.
  if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.message.content), 'object');
  assert.ok(c.message.content.startsWith('{'), c.message.content);
});

await check('completions response_format json_schema (no streaming and streaming)', async () => {
  const r = await client.completions.create({
    model: 'kjv-decoder', prompt, max_tokens: 200, temperature: 0.7, seed: 3, response_format: verseFormat,
  });
  checkVerse(r.choices[0].text);
  const stream = await client.completions.create({
    model: 'kjv-decoder', prompt, max_tokens: 200, temperature: 0.7, seed: 3, stream: true,
    response_format: verseFormat,
  });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
});

await check('structured_outputs regex and choice, guided_choice', async () => {
  const r = await client.completions.create({
    model: 'kjv-decoder', prompt, max_tokens: 40, temperature: 1.0, seed: 1,
    structured_outputs: { regex: '(Moses|Aaron|Joshua), son of [A-Z][a-z]{2,8}' },
  });
  assert.match(r.choices[0].text, /^(Moses|Aaron|Joshua), son of [A-Z][a-z]{2,8}$/);
  const c = await client.chat.completions.create({
    model: 'kjv-decoder', messages, max_tokens: 10, structured_outputs: { choice: ['light', 'darkness'] },
  });
  assert.ok(['light', 'darkness'].includes(c.choices[0].message.content));
  const g = await client.completions.create({
    model: 'kjv-decoder', prompt, max_tokens: 10, guided_choice: ['yea', 'nay'],
  });
  assert.ok(['yea', 'nay'].includes(g.choices[0].text));
});

await check('structured_outputs grammar', async () => {
  const grammar = 'root ::= "(" item (", " item){0,2} ")"\nitem ::= [a-z]{1,6}\n';
  const r = await client.completions.create({
    model: 'kjv-decoder', prompt, max_tokens: 40, temperature: 0.9, seed: 2, structured_outputs: { grammar },
  });
  assert.match(r.choices[0].text, /^\([a-z]{1,6}(, [a-z]{1,6}){0,2}\)$/);
});

await check('tool_choice named and required give tool calls with valid arguments', async () => {
  const tools = [
    { type: 'function', function: { name: 'find_verse', parameters: {
      type: 'object', properties: { book: { enum: ['Genesis', 'Exodus'] }, chapter: { type: 'integer', minimum: 1, maximum: 50 } },
      required: ['book', 'chapter'] } } },
    { type: 'function', function: { name: 'count', parameters: {
      type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['n'] } } },
  ];
  // The demo's own template refuses tools; this one lists them.
  const chat_template = '{% for t in tools %}{{ t.function.name }}\n{% endfor %}{% for m in messages %}{{ m.content }}\n{% endfor %}';
  const named = await client.chat.completions.create({
    model: 'kjv-decoder', messages, max_tokens: 80, temperature: 0.5, seed: 4, tools, chat_template,
    tool_choice: { type: 'function', function: { name: 'find_verse' } },
  });
  const call = named.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'find_verse');
  const args = JSON.parse(call.function.arguments);
  assert.ok(['Genesis', 'Exodus'].includes(args.book) && Number.isInteger(args.chapter));
  assert.equal(named.choices[0].finish_reason, 'tool_calls');
  const required = await client.chat.completions.create({
    model: 'kjv-decoder', messages, max_tokens: 80, temperature: 0.5, seed: 6, tools, tool_choice: 'required', chat_template,
    parallel_tool_calls: false,
  });
  const rc = required.choices[0].message.tool_calls;
  assert.equal(rc.length, 1);
  assert.ok(['find_verse', 'count'].includes(rc[0].function.name));
  JSON.parse(rc[0].function.arguments);
});

await check('structured-output errors are typed 400s naming what is unsupported', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: 'kjv-decoder', messages, max_tokens: 5,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'number', multipleOf: 3 } } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && /multipleOf/.test(e.message));
  await assert.rejects(
    client.completions.create({ model: 'kjv-decoder', prompt, max_tokens: 5, structured_outputs: { regex: '(a)\\1' } }),
    (e) => e instanceof OpenAI.BadRequestError && /backreference/.test(e.message));
  await assert.rejects(
    client.completions.create({
      model: 'kjv-decoder', prompt, max_tokens: 5, guided_regex: 'a+', guided_choice: ['a'],
    }),
    (e) => e instanceof OpenAI.BadRequestError);
  // The server is still fine.
  const ok = await client.completions.create({ model: 'kjv-decoder', prompt, max_tokens: 3, guided_regex: 'a+' });
  assert.match(ok.choices[0].text, /^a+$/);
});

await check('files and batches: upload (expires_after), create, validating, poll, results equal online, list, cancel', async () => {
  const lines = [0, 1, 2, 3].map((i) => JSON.stringify({
    custom_id: `req-${i}`, method: 'POST', url: '/v1/completions',
    body: { model: 'kjv-decoder', prompt: `${prompt} ${i}`, max_tokens: 6, temperature: 0 },
  }));
  const file = await client.files.create({
    file: await OpenAI.toFile(Buffer.from(lines.join('\n') + '\n'), 'batch.jsonl'), purpose: 'batch',
    expires_after: { anchor: 'created_at', seconds: 3600 },
  });
  assert.equal(file.object, 'file');
  assert.equal(file.expires_at, file.created_at + 3600);
  // OpenAI's bounds on the expiry: the client's typed 400.
  await assert.rejects(client.files.create({
    file: await OpenAI.toFile(Buffer.from(lines[0] + '\n'), 'short.jsonl'), purpose: 'batch',
    expires_after: { anchor: 'created_at', seconds: 60 },
  }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'expires_after[seconds]');
  assert.equal(file.purpose, 'batch');
  assert.equal((await client.files.retrieve(file.id)).filename, 'batch.jsonl');
  let batch = await client.batches.create({
    input_file_id: file.id, endpoint: '/v1/completions', completion_window: '24h', metadata: { run: 'client-test' },
    output_expires_after: { anchor: 'created_at', seconds: 7200 },
  });
  assert.equal(batch.object, 'batch');
  assert.equal(batch.status, 'validating');  // the input file is checked against the batch next
  assert.equal(batch.expires_at, batch.created_at + 86400);
  const deadline = Date.now() + 120000;
  while (!['completed', 'failed', 'cancelled', 'expired'].includes(batch.status) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    batch = await client.batches.retrieve(batch.id);
  }
  assert.equal(batch.status, 'completed');
  assert.equal(batch.request_counts.total, 4);
  assert.equal(batch.request_counts.completed, 4);
  assert.ok(batch.in_progress_at >= batch.created_at);
  const outputFile = await client.files.retrieve(batch.output_file_id);
  assert.equal(outputFile.expires_at, outputFile.created_at + 7200);
  assert.equal(batch.metadata.run, 'client-test');
  const text = await (await client.files.content(batch.output_file_id)).text();
  const results = text.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(results.map((r) => r.custom_id).sort(), ['req-0', 'req-1', 'req-2', 'req-3']);
  for (const r of results) {
    assert.equal(r.response.status_code, 200);
    const i = Number(r.custom_id.slice(4));
    const online = await client.completions.create({ model: 'kjv-decoder', prompt: `${prompt} ${i}`, max_tokens: 6, temperature: 0 });
    assert.equal(r.response.body.choices[0].text, online.choices[0].text);
  }
  const listed = [];
  for await (const b of client.batches.list({ limit: 2 })) listed.push(b.id);
  assert.ok(listed.includes(batch.id));
  // A finished batch cannot be cancelled: the client's typed 409.
  await assert.rejects(client.batches.cancel(batch.id), (e) => e instanceof OpenAI.ConflictError);
  // A long batch cancelled at once ends cancelled, with its requests accounted for.
  const many = Array.from({ length: 64 }, (_, i) => JSON.stringify({
    custom_id: `c-${i}`, method: 'POST', url: '/v1/completions',
    body: { model: 'kjv-decoder', prompt: `${prompt} ${i}`, max_tokens: 32, temperature: 0 },
  }));
  const f2 = await client.files.create({ file: await OpenAI.toFile(Buffer.from(many.join('\n')), 'many.jsonl'), purpose: 'batch' });
  const b2 = await client.batches.create({ input_file_id: f2.id, endpoint: '/v1/completions', completion_window: '24h' });
  let c = await client.batches.cancel(b2.id);
  assert.ok(['cancelling', 'cancelled'].includes(c.status));
  while (c.status !== 'cancelled' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    c = await client.batches.retrieve(b2.id);
  }
  assert.equal(c.status, 'cancelled');
  assert.ok(c.request_counts.completed < 64);
  await assert.rejects(client.batches.retrieve('batch_nope'), (e) => e instanceof OpenAI.NotFoundError);
  const deleted = await client.files.delete(file.id);
  assert.equal(deleted.deleted, true);
});
