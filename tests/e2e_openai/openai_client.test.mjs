// Acceptance: the real `actorllm serve` (stories260K, --api-key) driven by the official `openai` npm client (major 6),
// streamed and not. Every response body and every stream chunk is validated against the official OpenAI schemas
// (../shared/openai/openai-schemas-subset.json); the greedy outputs must equal the reference's golden continuations
// (../shared/models/stories260K/reference/expected_outputs.json) exactly.
//
//   ACTORLLM_BIN=build/actorllm node --test tests/e2e_openai      (ctest: "e2e_openai:openai npm client")
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { execFileSync } from 'node:child_process';
import OpenAI, { NotFoundError, BadRequestError, AuthenticationError } from 'openai';
import { Server, modelDir, repoRoot } from './server.mjs';
import { assertSchema, printTally } from './schemas.mjs';

const API_KEY = 'e2e-openai-key';
const MODEL = 'stories';
const reference = JSON.parse(fs.readFileSync(path.join(modelDir, 'reference', 'expected_outputs.json'), 'utf8'));
const [golden, golden2] = reference.prompts; // "Once upon a time" (64 tokens), "Lily and Tom went to the park to" (32)
const chatExample = reference.chat_template_example; // messages and the template's rendering

let server;
let client;

before(async () => {
  server = await new Server(['--served-model-name', MODEL, '--api-key', API_KEY]).start();
  client = new OpenAI({ apiKey: API_KEY, baseURL: `${server.baseURL}/v1`, maxRetries: 0, timeout: 30000 });
});

after(async () => {
  if (server && !server.exit) await server.stop();
  process.stderr.write(`\n${printTally()}\n`);
});

// ---- helpers ---------------------------------------------------------------------------------------------------

/** All chunks of a client stream, in order. */
async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

/**
 * A streamed completions chunk. The schema says streamed and non-streamed completions share CreateCompletionResponse's
 * shape, and there `choices[].finish_reason` is a non-null enum; but a chunk before the last one has no finish
 * reason yet and (as OpenAI's own API does) sends `"finish_reason": null`. A chunk whose choices all carry a finish
 * reason (and the usage-only chunk) must validate against CreateCompletionResponse unchanged; a chunk with a null
 * finish reason must validate once that one field is read as the stream's "not finished yet".
 */
function assertCompletionChunk(chunk, what) {
  const pending = chunk.choices.filter((c) => c.finish_reason === null);
  if (pending.length === 0) return assertSchema('CreateCompletionResponse', chunk, what);
  assert.ok(pending.every((c) => 'finish_reason' in c), `${what}: finish_reason must be present`);
  const asFinal = { ...chunk, choices: chunk.choices.map((c) => (c.finish_reason === null ? { ...c, finish_reason: 'length' } : c)) };
  return assertSchema(
    'CreateCompletionResponse',
    asFinal,
    `${what} (finish_reason null: not finished yet)`,
    'CreateCompletionResponse (stream chunk before the last: finish_reason null)',
  );
}

async function rawFetch(route, { method = 'GET', body, key = API_KEY } = {}) {
  const headers = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (key) headers.authorization = `Bearer ${key}`;
  const r = await fetch(`${server.baseURL}${route}`, {
    method,
    headers,
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.status, headers: r.headers, text, json };
}

async function tokenize(body) {
  const r = await rawFetch('/tokenize', { method: 'POST', body });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

/** Runs `fn`, expects it to throw `cls` with `status`; returns the error. */
async function expectApiError(fn, cls, status) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.status, status);
    assertSchema('Error', e.error, `${cls.name} error object`);
    return e;
  }
  assert.fail(`expected ${cls.name} (${status}), the call succeeded`);
}

// ---- completions -----------------------------------------------------------------------------------------------

test('completions, temperature 0, not streamed: the golden continuation exactly', async () => {
  for (const g of [golden, golden2]) {
    const r = await client.completions.create({
      model: MODEL,
      prompt: g.prompt,
      max_tokens: g.greedy_output_ids.length,
      temperature: 0,
    });
    assertSchema('CreateCompletionResponse', r);
    assert.equal(r.object, 'text_completion');
    assert.equal(r.model, MODEL);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].text, g.greedy_output_text);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.choices[0].logprobs, null);
    assert.deepEqual(r.usage, {
      prompt_tokens: g.prompt_ids.length,
      completion_tokens: g.greedy_output_ids.length,
      total_tokens: g.prompt_ids.length + g.greedy_output_ids.length,
    });
  }
});

test('completions, temperature 0, streamed: the chunks concatenate to the golden continuation', async () => {
  for (const g of [golden, golden2]) {
    const chunks = await collect(
      await client.completions.create({
        model: MODEL,
        prompt: g.prompt,
        max_tokens: g.greedy_output_ids.length,
        temperature: 0,
        stream: true,
      }),
    );
    assert.ok(chunks.length > 1, 'streamed in more than one chunk');
    chunks.forEach((c, i) => assertCompletionChunk(c, `chunk ${i}`));
    assert.equal(new Set(chunks.map((c) => c.id)).size, 1, 'every chunk has the same id');
    assert.ok(chunks.every((c) => c.usage === undefined || c.usage === null), 'no usage without include_usage');
    assert.equal(chunks.map((c) => c.choices.map((ch) => ch.text).join('')).join(''), g.greedy_output_text);
    const finishes = chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason));
    assert.deepEqual(finishes.filter((f) => f !== null), ['length'], 'one finish reason');
    assert.equal(finishes.at(-1), 'length', 'on the last chunk');
  }
});

test('completions streamed with stream_options.include_usage: the last chunk has usage and choices []', async () => {
  const chunks = await collect(
    await client.completions.create({
      model: MODEL,
      prompt: golden.prompt,
      max_tokens: 16,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    }),
  );
  chunks.forEach((c, i) => assertCompletionChunk(c, `chunk ${i}`));
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, { prompt_tokens: 5, completion_tokens: 16, total_tokens: 21 });
  for (const c of chunks.slice(0, -1)) {
    assert.ok(c.usage === undefined || c.usage === null, 'usage only on the last chunk');
    assert.equal(c.choices.length, 1);
  }
  const text = chunks.map((c) => c.choices.map((ch) => ch.text).join('')).join('');
  assert.ok(golden.greedy_output_text.startsWith(text) && text.length > 20, text);
});

test('completions logprobs: tokens, token_logprobs, top_logprobs, text_offset; streamed the same', async () => {
  const req = { model: MODEL, prompt: golden.prompt, max_tokens: 8, temperature: 0, logprobs: 3 };
  const r = await client.completions.create(req);
  assertSchema('CreateCompletionResponse', r);
  const { text, logprobs } = r.choices[0];
  assert.ok(logprobs, 'logprobs present');
  assert.equal(logprobs.tokens.length, 8);
  assert.equal(logprobs.token_logprobs.length, 8);
  assert.equal(logprobs.top_logprobs.length, 8);
  assert.equal(logprobs.text_offset.length, 8);
  for (let i = 0; i < 8; ++i) {
    const top = logprobs.top_logprobs[i];
    const n = Object.keys(top).length;
    assert.ok(n >= 1 && n <= 4, `top_logprobs[${i}] has ${n} entries`);
    assert.ok(logprobs.token_logprobs[i] <= 0);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Object.values(top).every((lp) => lp <= logprobs.token_logprobs[i] + 1e-5), JSON.stringify(top));
  }
  assert.equal(logprobs.text_offset[0], 0);
  assert.ok(logprobs.text_offset.every((o, i) => i === 0 || o >= logprobs.text_offset[i - 1]), 'text_offset grows');

  const chunks = await collect(await client.completions.create({ ...req, stream: true }));
  chunks.forEach((c, i) => assertCompletionChunk(c, `logprobs chunk ${i}`));
  const streamed = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.logprobs?.tokens ?? []));
  assert.deepEqual(streamed, logprobs.tokens);
  const streamedLp = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.logprobs?.token_logprobs ?? []));
  streamedLp.forEach((lp, i) => assert.ok(Math.abs(lp - logprobs.token_logprobs[i]) < 1e-4));
  // Each token is its text as it appears in the output (a SentencePiece "▁" is a space): they add up to the text.
  assert.equal(logprobs.tokens.join(''), text, 'logprobs.tokens concatenate to the choice text');
  logprobs.tokens.forEach((t, i) => assert.ok(text.startsWith(t, logprobs.text_offset[i]), `text_offset[${i}]`));
});

test("lm-evaluation-harness's loglikelihood request: echo, logprobs 1, max_tokens 0 scores the prompt alone", async () => {
  // The golden prompt and the first 12 tokens of its greedy continuation, as ids: each continuation token is the
  // model's top choice at its position, and the first one's logprob is the reference's first-step log-softmax.
  const ids = [...golden.prompt_ids, ...golden.greedy_output_ids.slice(0, 12)];
  const r = await client.completions.create({ model: MODEL, prompt: ids, echo: true, logprobs: 1, max_tokens: 0, temperature: 0 });
  const choice = r.choices[0];
  const { logprobs } = choice;
  assert.equal(logprobs.tokens.length, ids.length);
  assert.equal(logprobs.token_logprobs[0], null); // the first token has no context (vLLM writes null, as here)
  assert.equal(logprobs.top_logprobs[0], null);
  assert.equal(logprobs.tokens.join(''), choice.text, 'the prompt alone: no generated text');
  assert.equal(r.usage.completion_tokens, 0);
  assert.equal(r.usage.prompt_tokens, ids.length);
  const logits = golden.first_step_logits;
  const max = Math.max(...logits);
  const logZ = max + Math.log(logits.reduce((s, v) => s + Math.exp(v - max), 0));
  const first = golden.prompt_ids.length; // the first continuation token
  assert.ok(Math.abs(logprobs.token_logprobs[first] - (logits[ids[first]] - logZ)) < 1e-4, `${logprobs.token_logprobs[first]}`);
  for (let i = first; i < ids.length; ++i) {
    const top = Object.values(logprobs.top_logprobs[i]);
    assert.ok(top.every((lp) => lp <= logprobs.token_logprobs[i] + 1e-5), `greedy token ${i} is the top one`);
  }
  // prompt_logprobs (vLLM's field): null first, then {id: {logprob, rank, decoded_token}} with the prompt token.
  assert.equal(choice.prompt_logprobs.length, ids.length);
  assert.equal(choice.prompt_logprobs[0], null);
  for (let i = 1; i < ids.length; ++i) {
    const entry = choice.prompt_logprobs[i][String(ids[i])];
    assert.ok(entry, `prompt_logprobs[${i}] holds the prompt token`);
    assert.ok(Math.abs(entry.logprob - logprobs.token_logprobs[i]) < 1e-6);
    if (i >= first) assert.equal(entry.rank, 1);
  }
  // Streamed, the prompt's logprobs would come with the whole response only: refused by name.
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: ids, echo: true, logprobs: 1, max_tokens: 1, stream: true }),
    (e) => e instanceof BadRequestError && e.param === 'echo',
  );
});

test('completions n=2: two choices, indices 0 and 1; streamed choices carry their index', async () => {
  const req = { model: MODEL, prompt: golden.prompt, max_tokens: 12, temperature: 1, seed: 11, n: 2 };
  const r = await client.completions.create(req);
  assertSchema('CreateCompletionResponse', r);
  assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
  assert.ok(r.choices.every((c) => c.text.length > 0 && c.finish_reason));
  assert.equal(r.usage.completion_tokens, r.choices.length * 12);

  const chunks = await collect(await client.completions.create({ ...req, stream: true }));
  chunks.forEach((c, i) => assertCompletionChunk(c, `n=2 chunk ${i}`));
  const byIndex = [0, 1].map((i) =>
    chunks.flatMap((c) => c.choices.filter((ch) => ch.index === i).map((ch) => ch.text)).join(''),
  );
  assert.ok(byIndex.every((t) => t.length > 0), JSON.stringify(byIndex));
  for (const i of [0, 1]) {
    const fins = chunks.flatMap((c) => c.choices.filter((ch) => ch.index === i && ch.finish_reason));
    assert.equal(fins.length, 1, `choice ${i} finishes once`);
  }
});

test('completions stop strings: the text ends before the stop string, finish_reason stop; streamed the same', async () => {
  const stop = ' Lily';
  const expected = golden.greedy_output_text.slice(0, golden.greedy_output_text.indexOf(stop));
  assert.ok(expected.length > 10);
  const req = { model: MODEL, prompt: golden.prompt, max_tokens: 64, temperature: 0, stop: [stop, 'zzzz'] };
  const r = await client.completions.create(req);
  assertSchema('CreateCompletionResponse', r);
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');

  const chunks = await collect(await client.completions.create({ ...req, stop, stream: true }));
  chunks.forEach((c, i) => assertCompletionChunk(c, `stop chunk ${i}`));
  assert.equal(chunks.map((c) => c.choices.map((ch) => ch.text).join('')).join(''), expected);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
});

test('seed: the same seed at temperature 1 gives the same text (streamed or not); another seed another', async () => {
  const req = { model: MODEL, prompt: 'Lily and Tom', max_tokens: 32, temperature: 1 };
  const a = await client.completions.create({ ...req, seed: 1234 });
  const b = await client.completions.create({ ...req, seed: 1234 });
  const c = await client.completions.create({ ...req, seed: 4321 });
  for (const x of [a, b, c]) assertSchema('CreateCompletionResponse', x);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
  const chunks = await collect(await client.completions.create({ ...req, seed: 1234, stream: true }));
  chunks.forEach((ch, i) => assertCompletionChunk(ch, `seed chunk ${i}`));
  assert.equal(chunks.map((ch) => ch.choices.map((x) => x.text).join('')).join(''), a.choices[0].text);

  const chatReq = { model: MODEL, messages: [{ role: 'user', content: 'Lily and Tom' }], max_tokens: 24, temperature: 1 };
  const d = await client.chat.completions.create({ ...chatReq, seed: 99 });
  const e = await client.chat.completions.create({ ...chatReq, seed: 99 });
  assertSchema('CreateChatCompletionResponse', d);
  assertSchema('CreateChatCompletionResponse', e);
  assert.equal(d.choices[0].message.content, e.choices[0].message.content);
});

// ---- chat completions ------------------------------------------------------------------------------------------

const chatGoldenRequest = {
  model: MODEL,
  messages: [{ role: 'user', content: golden.prompt }],
  max_completion_tokens: golden.greedy_output_ids.length,
  temperature: 0,
};

test('chat, not streamed: the template renders "<s>Once upon a time", so the golden continuation', async () => {
  const r = await client.chat.completions.create(chatGoldenRequest);
  assertSchema('CreateChatCompletionResponse', r);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  const [choice] = r.choices;
  assert.equal(choice.index, 0);
  assert.equal(choice.message.role, 'assistant');
  assert.equal(choice.message.refusal, null);
  assert.equal(choice.message.content, golden.greedy_output_text);
  assert.equal(choice.finish_reason, 'length');
  assert.equal(choice.logprobs, null);
  // The template's rendering is BOS + the content: the same 5 tokens as the completion prompt.
  assert.deepEqual(r.usage, { prompt_tokens: 5, completion_tokens: 64, total_tokens: 69 });
});

test('chat, streamed: a role chunk, then content deltas; finish_reason only on the last; usage chunk last', async () => {
  const chunks = await collect(
    await client.chat.completions.create({ ...chatGoldenRequest, stream: true, stream_options: { include_usage: true } }),
  );
  chunks.forEach((c, i) => assertSchema('CreateChatCompletionStreamResponse', c, `chat chunk ${i}`));
  assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === MODEL));
  assert.equal(new Set(chunks.map((c) => c.id)).size, 1, 'every chunk has the same id');
  assert.equal(new Set(chunks.map((c) => c.created)).size, 1, 'every chunk has the same created');

  const usageChunk = chunks.at(-1);
  assert.deepEqual(usageChunk.choices, []);
  assert.deepEqual(usageChunk.usage, { prompt_tokens: 5, completion_tokens: 64, total_tokens: 69 });
  const content = chunks.slice(0, -1);
  assert.ok(content.every((c) => c.usage === null), 'usage is null before the last chunk (include_usage)');
  assert.ok(content.every((c) => c.choices.length === 1 && c.choices[0].index === 0));
  assert.equal(content[0].choices[0].delta.role, 'assistant', 'the first delta names the role');
  assert.ok(content.slice(1).every((c) => c.choices[0].delta.role === undefined), 'only the first names the role');
  const finishes = content.map((c) => c.choices[0].finish_reason);
  assert.deepEqual(finishes.slice(0, -1).filter((f) => f !== null), [], 'no finish reason before the last chunk');
  assert.equal(finishes.at(-1), 'length');
  assert.equal(content.map((c) => c.choices[0].delta.content ?? '').join(''), golden.greedy_output_text);

  // Without stream_options: no usage anywhere, and the last chunk is the finishing one.
  const plain = await collect(await client.chat.completions.create({ ...chatGoldenRequest, stream: true }));
  plain.forEach((c, i) => assertSchema('CreateChatCompletionStreamResponse', c, `plain chat chunk ${i}`));
  assert.ok(plain.every((c) => c.usage === undefined || c.usage === null));
  assert.equal(plain.at(-1).choices[0].finish_reason, 'length');
  assert.equal(plain.map((c) => c.choices[0].delta.content ?? '').join(''), golden.greedy_output_text);
});

const weatherTools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 10 }, days: { type: 'integer', minimum: 0 } },
        required: ['city', 'days'],
      },
    },
  },
];

test('tool calling: tool_calls in the reply, the tool result sent back, streamed and not; required and named always parse', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
    const reply = await client.chat.completions.create({
      model: MODEL, messages, tools: weatherTools, tool_choice, temperature: 1, seed: 11, max_tokens: 300,
    });
    assertSchema('CreateChatCompletionResponse', reply, `tool reply (${JSON.stringify(tool_choice)})`);
    const choice = reply.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.ok(choice.message.tool_calls.length >= 1);
    for (const call of choice.message.tool_calls) {
      assert.equal(call.type, 'function');
      assert.equal(call.function.name, 'get_weather');
      const args = JSON.parse(call.function.arguments);
      assert.equal(typeof args.city, 'string');
      assert.ok(Number.isInteger(args.days));
    }
    // The tool's result goes back with the assistant's message as the client returned it.
    const call = choice.message.tool_calls[0];
    const followUp = await client.chat.completions.create({
      model: MODEL,
      messages: [...messages, choice.message, { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ sunny: true }) }],
      tools: weatherTools,
      tool_choice: 'none',
      max_tokens: 8,
      temperature: 0,
    });
    assertSchema('CreateChatCompletionResponse', followUp, 'reply after the tool result');
    assert.equal(typeof followUp.choices[0].message.content, 'string');
  }
  // Streamed: the deltas' tool_calls (a named function's arguments arrive in pieces), accumulated by index as
  // clients do, parse.
  for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
    const chunks = await collect(
      await client.chat.completions.create({
        model: MODEL, messages, tools: weatherTools, tool_choice, temperature: 1, seed: 12, max_tokens: 300, stream: true,
      }),
    );
    chunks.forEach((c, i) => assertSchema('CreateChatCompletionStreamResponse', c, `tool chunk ${i}`));
    const calls = [];
    for (const c of chunks) {
      for (const d of c.choices[0]?.delta?.tool_calls ?? []) {
        calls[d.index] ??= { name: '', arguments: '' };
        calls[d.index].name += d.function?.name ?? '';
        calls[d.index].arguments += d.function?.arguments ?? '';
      }
    }
    assert.ok(calls.length >= 1);
    for (const call of calls) {
      assert.equal(call.name, 'get_weather');
      assert.equal(typeof JSON.parse(call.arguments).city, 'string');
    }
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'tool_calls');
  }
});

test("chat renders the model's template: prompt_tokens and continuation match the reference rendering", async () => {
  // The reference renders [user "Once upon a time", assistant "there was a cat."] as "<s>Once upon a time\nthere
  // was a cat.": BOS, then the contents joined by "\n". The same text as a plain prompt (the tokenizer adds BOS).
  assert.ok(chatExample.rendered.startsWith('<s>'));
  const asPrompt = chatExample.rendered.slice('<s>'.length);
  const byPrompt = await tokenize({ prompt: asPrompt });
  const byMessages = await tokenize({ model: MODEL, messages: chatExample.messages });
  assert.deepEqual(byMessages.tokens, byPrompt.tokens);
  assert.equal(byPrompt.tokens[0], 1, 'BOS first');
  assert.equal(byPrompt.tokens.filter((t) => t === 1).length, 1, 'BOS once: the template renders it, not added again');

  const chat = await client.chat.completions.create({
    model: MODEL,
    messages: chatExample.messages,
    max_tokens: 24,
    temperature: 0,
  });
  assertSchema('CreateChatCompletionResponse', chat);
  assert.equal(chat.usage.prompt_tokens, byPrompt.count);
  const completion = await client.completions.create({ model: MODEL, prompt: asPrompt, max_tokens: 24, temperature: 0 });
  assertSchema('CreateCompletionResponse', completion);
  assert.equal(completion.usage.prompt_tokens, byPrompt.count);
  assert.equal(chat.choices[0].message.content, completion.choices[0].text, 'same tokens in, same continuation out');
});

test('chat logprobs with top_logprobs: one entry per token, each with its alternatives; streamed the same', async () => {
  const req = { ...chatGoldenRequest, max_completion_tokens: 6, logprobs: true, top_logprobs: 2 };
  const r = await client.chat.completions.create(req);
  assertSchema('CreateChatCompletionResponse', r);
  const lp = r.choices[0].logprobs;
  assert.ok(lp && Array.isArray(lp.content), 'logprobs.content');
  assert.equal(lp.refusal, null);
  assert.equal(lp.content.length, 6);
  for (const t of lp.content) {
    assert.equal(t.top_logprobs.length, 2);
    assert.equal(Buffer.from(t.bytes).toString('utf8'), t.token);
    assert.ok(t.top_logprobs.every((a) => a.logprob <= t.logprob + 1e-5), 'greedy picks the most likely');
    assert.equal(t.top_logprobs[0].token, t.token);
  }

  const chunks = await collect(await client.chat.completions.create({ ...req, stream: true }));
  chunks.forEach((c, i) => assertSchema('CreateChatCompletionStreamResponse', c, `logprobs chat chunk ${i}`));
  const streamed = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.logprobs?.content ?? []));
  assert.deepEqual(
    streamed.map((t) => t.token),
    lp.content.map((t) => t.token),
  );
  // Each token is its text as it appears in the content (a SentencePiece "▁" is a space): they add up to it.
  assert.equal(lp.content.map((t) => t.token).join(''), r.choices[0].message.content, 'tokens make the content');
});

test('chat n=2, streamed: each choice gets its role chunk, content and one finish reason', async () => {
  const req = { model: MODEL, messages: [{ role: 'user', content: 'Lily' }], max_tokens: 10, temperature: 1, seed: 5, n: 2 };
  const r = await client.chat.completions.create(req);
  assertSchema('CreateChatCompletionResponse', r);
  assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
  const chunks = await collect(await client.chat.completions.create({ ...req, stream: true }));
  chunks.forEach((c, i) => assertSchema('CreateChatCompletionStreamResponse', c, `n=2 chat chunk ${i}`));
  for (const i of [0, 1]) {
    const mine = chunks.flatMap((c) => c.choices.filter((ch) => ch.index === i));
    assert.equal(mine[0].delta.role, 'assistant');
    assert.equal(mine.filter((ch) => ch.finish_reason).length, 1);
    assert.ok(mine.at(-1).finish_reason, 'the finish reason is on the choice\'s last chunk');
    assert.ok(mine.map((ch) => ch.delta.content ?? '').join('').length > 0);
  }
});

test("vLLM's logprob_token_ids through the client: the listed tokens at every position, instead of the top k", async () => {
  // The client sends fields it has no type for as given (vLLM's extra parameters).
  const listed = [300, 42, 511];
  const req = {
    ...chatGoldenRequest,
    max_completion_tokens: 4,
    logprobs: true,
    top_logprobs: 5,
    logprob_token_ids: listed,
    return_tokens_as_token_ids: true,
  };
  const r = await client.chat.completions.create(req);
  assertSchema('CreateChatCompletionResponse', r);
  const ref = await client.chat.completions.create({ ...req, top_logprobs: 20, logprob_token_ids: undefined });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  const names = listed.map((id) => `token_id:${id}`);
  content.forEach((t, i) => {
    // vLLM's shape: the sampled token first, then each listed token other than it, once.
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
    assert.deepEqual(
      t.top_logprobs.slice(1).map((a) => a.token),
      names.filter((n) => n !== t.token),
      `entries at ${i}`,
    );
    // A listed token's logprob is the one the top 20 report for it, where it is among them.
    for (const alt of t.top_logprobs) {
      const same = ref.choices[0].logprobs.content[i].top_logprobs.find((a) => a.token === alt.token);
      if (same) assert.ok(Math.abs(same.logprob - alt.logprob) < 1e-4, `${alt.token} at ${i}`);
    }
  });

  const chunks = await collect(await client.chat.completions.create({ ...req, stream: true }));
  chunks.forEach((c, i) => assertSchema('CreateChatCompletionStreamResponse', c, `logprob_token_ids chunk ${i}`));
  const streamed = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.logprobs?.content ?? []));
  assert.deepEqual(streamed, content);

  const cmpl = await client.completions.create({
    model: MODEL, prompt: golden.prompt, max_tokens: 3, temperature: 0, logprobs: 0, logprob_token_ids: listed,
  });
  assertSchema('CreateCompletionResponse', cmpl);
  for (const dict of cmpl.choices[0].logprobs.top_logprobs) assert.ok(Object.keys(dict).length >= 3);

  const e = await expectApiError(
    () => client.completions.create({ model: MODEL, prompt: 'hi', logprobs: 0, logprob_token_ids: [512] }),
    BadRequestError,
    400,
  );
  assert.equal(e.param, 'logprob_token_ids');
  assert.match(e.message, /outside the vocabulary \(size 512\)/);
});

test("vLLM's batched chat (/v1/chat/completions/batch) through client.post: one choice per conversation", async () => {
  const conversations = [
    [{ role: 'user', content: golden.prompt }],
    [{ role: 'user', content: golden2.prompt }],
  ];
  const body = { model: MODEL, messages: conversations, max_completion_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 1 };
  const r = await client.post('/chat/completions/batch', { body });
  assertSchema('CreateChatCompletionResponse', r, 'batch chat response');
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  let prompt = 0;
  let completion = 0;
  for (const [i, messages] of conversations.entries()) {
    const one = await client.chat.completions.create({ ...body, messages });
    assert.equal(r.choices[i].message.content, one.choices[0].message.content, `conversation ${i}`);
    // The same tokens, each logprob within 1e-4: batched, a conversation can share a step with another's prompt and
    // go through the GEMM where alone it went through the GEMV (the same products summed in another order).
    const batched = r.choices[i].logprobs.content, alone = one.choices[0].logprobs.content;
    assert.deepEqual(batched.map((e) => e.token), alone.map((e) => e.token), `conversation ${i}`);
    for (const [k, e] of batched.entries()) {
      assert.ok(Math.abs(e.logprob - alone[k].logprob) <= 1e-4, `conversation ${i} token ${k}: ${e.logprob} against ${alone[k].logprob}`);
      assert.deepEqual(e.top_logprobs.map((t) => t.token), alone[k].top_logprobs.map((t) => t.token));
      for (const [j, t] of e.top_logprobs.entries()) assert.ok(Math.abs(t.logprob - alone[k].top_logprobs[j].logprob) <= 1e-4);
    }
    prompt += one.usage.prompt_tokens;
    completion += one.usage.completion_tokens;
  }
  assert.deepEqual(r.usage, { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion });
  // The first conversation is the golden one: its greedy continuation starts the same.
  assert.ok(golden.greedy_output_text.startsWith(r.choices[0].message.content));

  // Streaming is refused by name, as vLLM's batch endpoint does not stream; errors name the conversation.
  const streamed = await expectApiError(() => client.post('/chat/completions/batch', { body: { ...body, stream: true } }), BadRequestError, 400);
  assert.equal(streamed.param, 'stream');
  const bad = await expectApiError(
    () => client.post('/chat/completions/batch', { body: { ...body, messages: [conversations[0], [{ role: 'user' }]] } }),
    BadRequestError,
    400,
  );
  assert.equal(bad.param, 'messages[1][0].content');
});

// ---- models ----------------------------------------------------------------------------------------------------

test('models.list() and models.retrieve()', async () => {
  const raw = await rawFetch('/v1/models');
  assert.equal(raw.status, 200, raw.text);
  assertSchema('ListModelsResponse', raw.json);
  const page = await client.models.list();
  const ids = [];
  for await (const m of page) {
    assertSchema('Model', m);
    ids.push(m.id);
  }
  assert.deepEqual(ids, [MODEL]);

  const m = await client.models.retrieve(MODEL);
  assertSchema('Model', m);
  assert.equal(m.id, MODEL);
  assert.equal(m.object, 'model');
  await expectApiError(() => client.models.retrieve('no-such-model'), NotFoundError, 404);
});

// ---- errors ----------------------------------------------------------------------------------------------------

test('errors through the client: 404 unknown model, 400 invalid field naming the param, 401 wrong key', async () => {
  const nf = await expectApiError(
    () => client.completions.create({ model: 'no-such-model', prompt: 'hi', max_tokens: 1 }),
    NotFoundError,
    404,
  );
  assert.equal(nf.param, 'model');
  await expectApiError(
    () => client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }),
    NotFoundError,
    404,
  );

  const cases = [
    [() => client.completions.create({ model: MODEL, prompt: 'hi', temperature: -1 }), 'temperature'],
    [() => client.completions.create({ model: MODEL, prompt: 'hi', max_tokens: 100000 }), 'max_tokens'],
    [() => client.completions.create({ model: MODEL, prompt: 'hi', logprobs: 21 }), 'logprobs'],
    [
      () => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], top_p: 7 }),
      'top_p',
    ],
    [
      () =>
        client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], top_logprobs: 2 }),
      'top_logprobs',
    ],
    [() => client.chat.completions.create({ model: MODEL, messages: [] }), 'messages'],
  ];
  for (const [call, param] of cases) {
    const e = await expectApiError(call, BadRequestError, 400);
    assert.equal(e.param, param, `param of: ${e.message}`);
    assert.equal(typeof e.message, 'string');
  }
  // The bodies as sent, against ErrorResponse.
  const bad = await rawFetch('/v1/completions', { method: 'POST', body: { model: MODEL, prompt: 'hi', temperature: -1 } });
  assert.equal(bad.status, 400);
  assertSchema('ErrorResponse', bad.json, '400 body');
  assert.equal(bad.json.error.param, 'temperature');
  const missing = await rawFetch('/v1/completions', { method: 'POST', body: { model: 'nope', prompt: 'hi' } });
  assert.equal(missing.status, 404);
  assertSchema('ErrorResponse', missing.json, '404 body');

  const wrong = new OpenAI({ apiKey: 'wrong-key', baseURL: `${server.baseURL}/v1`, maxRetries: 0 });
  await expectApiError(() => wrong.completions.create({ model: MODEL, prompt: 'hi', max_tokens: 1 }), AuthenticationError, 401);
  await expectApiError(
    () => wrong.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
    AuthenticationError,
    401,
  );
  await expectApiError(() => wrong.models.list(), AuthenticationError, 401);
  const noKey = await rawFetch('/v1/models', { key: null });
  assert.equal(noKey.status, 401);
  assertSchema('ErrorResponse', noKey.json, '401 body');

  // The server is still fine.
  const ok = await client.completions.create({ model: MODEL, prompt: golden.prompt, max_tokens: 2, temperature: 0 });
  assertSchema('CreateCompletionResponse', ok);
});

// ---- LoRA adapters ---------------------------------------------------------------------------------------------

test('LoRA: --lora-modules and /v1/load_lora_adapter serve adapters by model name beside the base model', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'actorllm-lora-'));
  const loraServer = new Server(['--served-model-name', MODEL, '--enable-lora', '--max-loras', '2', '--lora-modules',
    `poet=${path.join(dir, 'poet')}`]);
  try {
    for (const [name, seed, targets] of [['poet', 1, 'q_proj,v_proj'], ['critic', 2, 'q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj']]) {
      execFileSync('python3', [path.join(repoRoot, 'scripts', 'make_lora_adapter.py'), '--model', modelDir, '--out',
        path.join(dir, name), '--rank', '8', '--alpha', '16', '--targets', targets, '--seed', String(seed)]);
    }
    await loraServer.start();
    const lc = new OpenAI({ apiKey: 'unused', baseURL: `${loraServer.baseURL}/v1`, maxRetries: 0, timeout: 30000 });
    const ids = [];
    for await (const m of await lc.models.list()) {
      assertSchema('Model', m);
      ids.push(m);
    }
    assert.deepEqual(ids.map((m) => m.id), [MODEL, 'poet']);
    assert.equal(ids[1].parent, MODEL);
    assert.equal(ids[1].root, path.join(dir, 'poet'));

    // Base and adapter requests at once (they share steps): the base one is still the golden continuation.
    const ask = (model) => lc.completions.create({ model, prompt: golden.prompt, max_tokens: 24, temperature: 0 });
    const [base, poet] = await Promise.all([ask(MODEL), ask('poet')]);
    assertSchema('CreateCompletionResponse', poet);
    assert.ok(golden.greedy_output_text.startsWith(base.choices[0].text), base.choices[0].text);
    assert.equal(poet.model, 'poet');
    assert.notEqual(poet.choices[0].text, base.choices[0].text, 'the adapter changes the greedy text');

    // Loaded at run time under a second name: the same weights give the same text; chat works through it too.
    let r = await fetch(`${loraServer.baseURL}/v1/load_lora_adapter`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ lora_name: 'poet2', lora_path: path.join(dir, 'poet') }),
    });
    assert.equal(r.status, 200, await r.clone().text());
    assert.match(await r.text(), /Success: LoRA adapter 'poet2' added successfully/);
    assert.equal((await ask('poet2')).choices[0].text, poet.choices[0].text);
    const hi = [{ role: 'user', content: 'Hi' }];
    const chat = await lc.chat.completions.create({ model: 'poet2', messages: hi, max_tokens: 4, temperature: 0 });
    assertSchema('CreateChatCompletionResponse', chat);
    assert.equal(chat.model, 'poet2');
    // The batch route picks the adapter by name too: each conversation answers as the single chat did.
    const batch = await lc.post('/chat/completions/batch', {
      body: { model: 'poet2', messages: [hi, hi], max_tokens: 4, temperature: 0 },
    });
    assert.equal(batch.model, 'poet2');
    assert.deepEqual(batch.choices.map((c) => c.message.content), [chat.choices[0].message.content, chat.choices[0].message.content]);

    // A second adapter beyond max_loras 2 running at once still answers (it waits for a slot).
    r = await fetch(`${loraServer.baseURL}/v1/load_lora_adapter`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ lora_name: 'critic', lora_path: path.join(dir, 'critic') }),
    });
    assert.equal(r.status, 200);
    const three = await Promise.all([ask('poet'), ask('critic'), ask('poet2'), ask(MODEL)]);
    assert.equal(three[0].choices[0].text, poet.choices[0].text);
    assert.equal(three[2].choices[0].text, poet.choices[0].text);
    assert.equal(three[3].choices[0].text, base.choices[0].text);

    // Refusals: a name taken, a directory that is no adapter, an unknown name to unload; then unloading works.
    const post = (route, body) => fetch(`${loraServer.baseURL}${route}`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    }).then(async (x) => ({ status: x.status, json: await x.json().catch(() => undefined) }));
    let e = await post('/v1/load_lora_adapter', { lora_name: 'poet', lora_path: path.join(dir, 'critic') });
    assert.equal(e.status, 400);
    assert.match(e.json.error.message, /already been loaded/);
    e = await post('/v1/load_lora_adapter', { lora_name: 'bad', lora_path: dir });
    assert.equal(e.status, 400);
    assert.match(e.json.error.message, /adapter_config\.json/);
    e = await post('/v1/unload_lora_adapter', { lora_name: 'nobody' });
    assert.equal(e.status, 404);
    e = await post('/v1/unload_lora_adapter', { lora_name: 'poet2' });
    assert.equal(e.status, 200);
    await expectApiError(() => ask('poet2'), NotFoundError, 404);
  } finally {
    if (loraServer.proc && !loraServer.exit) await loraServer.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// ---- the non-OpenAI routes, via fetch --------------------------------------------------------------------------

test('/tokenize, /detokenize, /health, /metrics, /version answer with the expected shapes', async () => {
  const health = await rawFetch('/health', { key: null });
  assert.equal(health.status, 200);

  const version = await rawFetch('/version', { key: null });
  assert.equal(version.status, 200);
  assert.match(version.headers.get('content-type'), /^application\/json/);
  assert.equal(typeof version.json.version, 'string');
  assert.ok(version.json.version.length > 0);

  const metrics = await rawFetch('/metrics', { key: null });
  assert.equal(metrics.status, 200);
  assert.match(metrics.headers.get('content-type'), /^text\/plain/);
  assert.match(metrics.text, /^actorllm:num_requests_running\{model_name="stories"\} \d+/m);
  assert.match(metrics.text, /^# TYPE \S+ (counter|gauge|histogram)/m);

  const tok = await tokenize({ prompt: golden.prompt });
  assert.deepEqual(tok.tokens, golden.prompt_ids);
  assert.equal(tok.count, golden.prompt_ids.length);
  assert.equal(tok.max_model_len, 512);

  const detok = await rawFetch('/detokenize', { method: 'POST', body: { tokens: golden.greedy_output_ids } });
  assert.equal(detok.status, 200, detok.text);
  assert.equal(typeof detok.json.prompt, 'string');
  assert.equal(detok.json.prompt, golden.greedy_output_text);

  const badDetok = await rawFetch('/detokenize', { method: 'POST', body: { tokens: [-1] } });
  assert.equal(badDetok.status, 400);
  assertSchema('ErrorResponse', badDetok.json, '/detokenize 400 body');
});

// ---- shutdown --------------------------------------------------------------------------------------------------

test('SIGTERM: the server drains and exits 0', async () => {
  const exit = await server.stop();
  assert.deepEqual(exit, { code: 0, signal: null }, `exit ${JSON.stringify(exit)}; log:\n${server.log.slice(-3000)}`);
});
