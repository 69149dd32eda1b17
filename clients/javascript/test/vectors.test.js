// The shared wire vectors: byte-for-byte frames, refused input, answers.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Action, Answer, InvalidRequestError, encodeFrame } from '../index.js';
import { loadVectors } from './helpers.js';

const vectors = loadVectors();

test('action numbers match', () => {
  assert.deepEqual(vectors.actions, {
    lock: Action.LOCK,
    unlock: Action.UNLOCK,
    reset_by_key: Action.RESET_BY_KEY,
    reset_by_source: Action.RESET_BY_SOURCE,
    trylock: Action.TRY_LOCK,
  });
});

for (const v of vectors.frames) {
  test(`frame: ${v.name}`, () => {
    assert.equal(encodeFrame(v.action, v.key, v.source).toString('hex'), v.hex);
  });
}

for (const v of vectors.invalid) {
  test(`invalid: ${v.name}`, () => {
    assert.throws(() => encodeFrame(v.action, v.key, v.source), InvalidRequestError);
  });
}

test('answers', () => {
  const known = { '+': Answer.OK, '-': Answer.FAIL, '#': Answer.NOT_WON };
  assert.equal(vectors.answers.length, Object.keys(known).length);
  for (const a of vectors.answers) {
    const bytes = Buffer.from(a.hex, 'hex');
    assert.equal(bytes.length, 1);
    assert.equal(bytes.toString('latin1'), a.char);
    assert.equal(known[a.char], bytes[0]);
  }
});
