// Session rules a real server cannot be made to show on demand, against a
// scripted server: the stray cleanup after a resume, and the give-back of a
// grant that crossed a Cancel.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';

import { LockTimeoutError, OutcomeUnknownError, SessionAction, openSession } from '../index.js';

const SESSION_ID = 0x0123456789abcdefn;

// Accepts sessions; each connection comes out of next() as { resume, next, answer, socket }.
async function fake() {
  const waiting = [];
  const ready = [];
  const server = net.createServer((socket) => {
    let buf = Buffer.alloc(0);
    let opened = false;
    const requests = [];
    const readers = [];
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      if (!opened && buf.length >= 16) {
        opened = true;
        const conn = {
          resume: buf.readBigUInt64BE(6),
          socket,
          answerOpen: () => socket.write(Buffer.concat([Buffer.from([0x2b, 0, 0, 0x27, 0x10]), u64(SESSION_ID)])),
          next: () => (requests.length ? Promise.resolve(requests.shift()) : new Promise((r) => readers.push(r))),
          answer: (id, status, token = 0n) => socket.write(Buffer.concat([u32(id), Buffer.from(status), u64(token)])),
        };
        buf = buf.subarray(16);
        if (waiting.length) waiting.shift()(conn);
        else ready.push(conn);
      }
      while (opened && buf.length >= 14 && buf.length >= 14 + buf[13]) {
        const req = { action: buf[0], id: buf.readUInt32BE(1), token: buf.readBigUInt64BE(5), key: buf.subarray(14, 14 + buf[13]).toString() };
        buf = buf.subarray(14 + buf[13]);
        if (readers.length) readers.shift()(req);
        else requests.push(req);
      }
    });
    socket.on('error', () => {});
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    address: `127.0.0.1:${server.address().port}`,
    conn: () => (ready.length ? Promise.resolve(ready.shift()) : new Promise((r) => waiting.push(r))),
    close: () => new Promise((r) => server.close(r)),
  };
}
const u32 = (n) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};
const u64 = (n) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(n);
  return b;
};

async function closeSession(s, c) {
  const closing = s.close();
  const req = await c.next();
  assert.equal(req.action, SessionAction.CLOSE);
  c.answer(req.id, '+');
  c.socket.end();
  await closing;
}

test('a Lock lost with the connection is reissued with its id first after the resume', { timeout: 20000 }, async () => {
  const f = await fake();
  const opening = openSession({ address: f.address });
  let c = await f.conn();
  assert.equal(c.resume, 0n);
  c.answerOpen();
  const s = await opening;
  const lock = s.lock('abc');
  const first = await c.next();
  assert.equal(first.action, SessionAction.LOCK);
  c.socket.destroy(); // as if its '+' were lost with the connection
  const later = s.lock('abc'); // a new Lock of the same key, made meanwhile
  c = await f.conn();
  assert.equal(c.resume, SESSION_ID);
  c.answerOpen();
  let req = await c.next();
  assert.deepEqual([req.action, req.id, req.token, req.key], [SessionAction.LOCK, first.id, 0n, 'abc']); // the reissue, first
  c.answer(req.id, '+', 7n); // the grant it had made
  assert.equal((await lock).token, 7n);
  req = await c.next();
  assert.deepEqual([req.action, req.key], [SessionAction.LOCK, 'abc']); // then the new Lock
  assert.notEqual(req.id, first.id); // the id of a held grant is not reused
  c.answer(req.id, '+', 8n);
  assert.equal((await later).token, 8n);
  await closeSession(s, c);
  await f.close();
});

test('a Lock given up, then lost with the connection, is unlocked first after the resume', { timeout: 20000 }, async () => {
  const f = await fake();
  const opening = openSession({ address: f.address });
  let c = await f.conn();
  c.answerOpen();
  const s = await opening;
  const timedOut = assert.rejects(s.lock('abc', { timeout: 100 }), LockTimeoutError);
  const lock = await c.next();
  assert.equal(lock.action, SessionAction.LOCK);
  await timedOut;
  const cancel = await c.next();
  assert.deepEqual([cancel.action, cancel.id], [SessionAction.CANCEL, lock.id]);
  c.socket.destroy(); // the outcome of the Lock and its Cancel are lost
  c = await f.conn();
  assert.equal(c.resume, SESSION_ID);
  c.answerOpen();
  const req = await c.next();
  assert.deepEqual([req.action, req.token, req.key], [SessionAction.UNLOCK, 0n, 'abc']); // the cleanup, first
  c.answer(req.id, '-'); // no stray was held
  await closeSession(s, c);
  await f.close();
});

test('a grant that crossed the Cancel is unlocked by its token', { timeout: 20000 }, async () => {
  const f = await fake();
  const opening = openSession({ address: f.address });
  const c = await f.conn();
  c.answerOpen();
  const s = await opening;
  const timedOut = assert.rejects(s.lock('abc', { timeout: 100 }), LockTimeoutError);
  const lock = await c.next();
  assert.equal(lock.action, SessionAction.LOCK);
  await timedOut;
  let req = await c.next();
  assert.deepEqual([req.action, req.id, req.token, req.key], [SessionAction.CANCEL, lock.id, 0n, '']);
  c.answer(lock.id, '+', 42n); // granted anyway
  req = await c.next();
  assert.deepEqual([req.action, req.token, req.key], [SessionAction.UNLOCK, 42n, 'abc']); // given back by its token
  c.answer(req.id, '+', 42n);
  await closeSession(s, c);
  await f.close();
});

test('an unlock lost with the connection is not known, and a tryLock is reissued', { timeout: 20000 }, async () => {
  const f = await fake();
  const opening = openSession({ address: f.address });
  let c = await f.conn();
  c.answerOpen();
  const s = await opening;
  const locking = s.lock('abc');
  let req = await c.next();
  c.answer(req.id, '+', 5n);
  const grant = await locking;
  const unknown = assert.rejects(grant.unlock(), OutcomeUnknownError); // never sent again as such
  req = await c.next();
  assert.deepEqual([req.action, req.token], [SessionAction.UNLOCK, 5n]);
  const trying = s.tryLock('xyz');
  const first = await c.next();
  assert.deepEqual([first.action, first.key], [SessionAction.TRY_LOCK, 'xyz']);
  c.socket.destroy(); // both answers lost
  await unknown;
  c = await f.conn();
  c.answerOpen();
  req = await c.next();
  // The grant is settled by an Unlock naming its token: it can release that grant only.
  assert.deepEqual([req.action, req.token, req.key], [SessionAction.UNLOCK, 5n, 'abc']);
  c.answer(req.id, '-'); // it had been released
  req = await c.next();
  assert.deepEqual([req.action, req.id, req.key], [SessionAction.TRY_LOCK, first.id, 'xyz']); // reissued with its id
  c.answer(req.id, '#');
  assert.equal(await trying, null);
  await closeSession(s, c);
  await f.close();
});
