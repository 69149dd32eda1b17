// The shared wire vectors: byte-for-byte frames, refused input, answers.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  Action,
  Answer,
  InvalidRequestError,
  SessionAction,
  decodeAnswer,
  decodeOpenAnswer,
  encodeFrame,
  encodeOpen,
  encodeRequest,
  openSession,
} from '../index.js';
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

// -------------------------------------------------------------- sessions

const status = { '+': Answer.OK, '-': Answer.FAIL, '#': Answer.NOT_WON };
const hex = (bytes) => Buffer.from(bytes).toString('hex');

test('session action numbers match', () => {
  assert.deepEqual(vectors.session_actions, {
    open: SessionAction.OPEN,
    lock: SessionAction.LOCK,
    unlock: SessionAction.UNLOCK,
    reset_by_key: SessionAction.RESET_BY_KEY,
    reset_by_source: SessionAction.RESET_BY_SOURCE,
    trylock: SessionAction.TRY_LOCK,
    cancel: SessionAction.CANCEL,
    ping: SessionAction.PING,
    close: SessionAction.CLOSE,
  });
});

for (const v of vectors.session_open) {
  test(`session open: ${v.name}`, () => {
    const frame = encodeOpen({ version: v.version, ttlMs: v.ttl_ms, resume: BigInt(v.resume), source: v.source, auth: v.auth });
    assert.equal(hex(frame), v.hex);
  });
}

for (const v of vectors.session_open_answers) {
  test(`session open answer: ${v.name}`, () => {
    assert.deepEqual(decodeOpenAnswer(Buffer.from(v.hex, 'hex')), {
      status: status[v.status],
      ttlMs: v.ttl_ms,
      session: BigInt(v.session),
    });
  });
}

for (const v of vectors.session_requests) {
  test(`session request: ${v.name}`, () => {
    assert.equal(hex(encodeRequest(v.action, v.id, BigInt(v.token), v.key)), v.hex);
  });
}

for (const v of vectors.session_answers) {
  test(`session answer: ${v.name}`, () => {
    assert.deepEqual(decodeAnswer(Buffer.from(v.hex, 'hex')), {
      id: v.id,
      status: status[v.status],
      token: BigInt(v.token),
    });
  });
}

for (const v of vectors.session_invalid) {
  test(`session invalid: ${v.name}`, () => {
    assert.throws(() => encodeRequest(v.action, v.id, BigInt(v.token), v.key), InvalidRequestError);
  });
}

for (const v of vectors.session_open_invalid) {
  test(`session open invalid: ${v.name}`, async () => {
    assert.throws(
      () => encodeOpen({ version: v.version, ttlMs: v.ttl_ms, resume: BigInt(v.resume), source: v.source, auth: v.auth }),
      InvalidRequestError,
    );
    // openSession refuses it too, before connecting anywhere.
    await assert.rejects(openSession({ address: '127.0.0.1:1', source: v.source, authToken: v.auth }), InvalidRequestError);
  });
}
