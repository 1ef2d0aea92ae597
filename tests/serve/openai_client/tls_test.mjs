// The openai npm client over HTTPS (the certificate is trusted through NODE_EXTRA_CA_CERTS):
// listing models, a whole completion and a streamed one. Exits non-zero on failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.FERRY_BASE_URL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const ids = [];
for await (const m of client.models.list()) ids.push(m.id);
assert.deepEqual(ids, ['kjv-decoder']);
const whole = await client.completions.create({ model: 'kjv-decoder', prompt: 'In the beginning', max_tokens: 8, temperature: 0 });
assert.equal(whole.usage.completion_tokens, 8);
let streamed = '';
const stream = await client.completions.create({
  model: 'kjv-decoder', prompt: 'In the beginning', max_tokens: 8, temperature: 0, stream: true,
});
for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? '';
assert.equal(streamed, whole.choices[0].text);
console.log(`ok - openai client over https (${process.env.FERRY_BASE_URL})`);
