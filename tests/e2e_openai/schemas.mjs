// Validators for the official OpenAI schemas (../shared/openai/openai-schemas-subset.json, an OpenAPI 3.1 document
// cut from openai/openai-openapi). The whole document is added to Ajv (JSON Schema 2020-12), so every
// `$ref: '#/components/schemas/...'` resolves inside it. The document still carries OpenAPI 3.0's `nullable: true`
// in a few places; JSON Schema has no such keyword, so each `{..., nullable: true}` is rewritten to the equivalent
// `{anyOf: [{...}, {type: 'null'}]}` (the meaning OpenAPI gives it). Nothing else in the document is changed.
import fs from 'node:fs';
import assert from 'node:assert/strict';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { sharedDir } from './server.mjs';
import path from 'node:path';

export const schemaFile = path.join(sharedDir, 'openai', 'openai-schemas-subset.json');
const DOC_ID = 'openai-schemas-subset.json';

/** OpenAPI `nullable: true` -> JSON Schema `anyOf [..., {type: null}]`, recursively. */
function convertNullable(node) {
  if (Array.isArray(node)) return node.map(convertNullable);
  if (node === null || typeof node !== 'object') return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) out[k] = convertNullable(v);
  if (out.nullable === true) {
    delete out.nullable;
    const { description, ...rest } = out;
    const wrapped = { anyOf: [rest, { type: 'null' }] };
    if (description !== undefined) wrapped.description = description;
    return wrapped;
  }
  if (out.nullable === false) delete out.nullable;
  return out;
}

function loadDocument() {
  const doc = JSON.parse(fs.readFileSync(schemaFile, 'utf8'));
  return { ...doc, components: convertNullable(doc.components), $id: DOC_ID };
}

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv);
// The OpenAI document's own formats: a Unix time in seconds, and a 64-bit integer.
ajv.addFormat('unixtime', { type: 'number', validate: (n) => Number.isInteger(n) && n >= 0 });
ajv.addFormat('int64', { type: 'number', validate: (n) => Number.isInteger(n) });
ajv.addSchema(loadDocument());

const cache = new Map();
function validatorFor(name) {
  if (!cache.has(name)) {
    const v = ajv.getSchema(`${DOC_ID}#/components/schemas/${name}`);
    assert.ok(v, `schema ${name} is not in ${schemaFile}`);
    cache.set(name, v);
  }
  return cache.get(name);
}

/** Every validation done by the suite, for the summary printed at the end: name -> {passed, failed, failures}. */
export const tally = new Map();

function record(name, ok, detail) {
  if (!tally.has(name)) tally.set(name, { passed: 0, failed: 0, failures: [] });
  const t = tally.get(name);
  if (ok) t.passed += 1;
  else {
    t.failed += 1;
    if (t.failures.length < 5) t.failures.push(detail);
  }
}

function describeErrors(errors, data) {
  return errors
    .map((e) => {
      let got;
      try {
        got = JSON.stringify(e.instancePath.split('/').slice(1).reduce((o, k) => (o == null ? o : o[k]), data));
      } catch {
        got = '?';
      }
      return `  ${e.instancePath || '(root)'} ${e.message}${e.params ? ' ' + JSON.stringify(e.params) : ''}; got ${got}`;
    })
    .join('\n');
}

/**
 * Asserts that `data` validates against components.schemas[name]. `data` must be the JSON the server sent (parse
 * it from the raw body, or use the client's objects, which are the parsed JSON unchanged). `label` names the line
 * of the summary it is counted in.
 */
export function assertSchema(name, data, what = name, label = name) {
  const validate = validatorFor(name);
  const ok = validate(data);
  const detail = ok ? '' : `${what} does not validate against ${name}:\n${describeErrors(validate.errors, data)}\n` +
    `  body: ${JSON.stringify(data).slice(0, 600)}`;
  record(label, ok, detail);
  assert.ok(ok, detail);
}

export function printTally() {
  const lines = ['schema validations (schema: passed/total):'];
  for (const [name, t] of [...tally.entries()].sort()) {
    lines.push(`  ${name}: ${t.passed}/${t.passed + t.failed}${t.failed ? ' FAILED' : ''}`);
    for (const f of t.failures) lines.push(f.replace(/^/gm, '    '));
  }
  return lines.join('\n');
}
