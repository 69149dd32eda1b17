// Answer mapping and transport rules, against a scripted in-process server.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';

import {
  Client,
  InvalidRequestError,
  LockingCenterError,
  LockTimeoutError,
  NotWonError,
  ProtocolError,
  RefusedError,
  ResetWhileWaitingError,
  UnreachableError,
} from '../index.js';
import { loadVectors, unusedAddress } from './helpers.js';

const answers = Object.fromEntries(loadVectors().answers.map((a) => [a.char, Buffer.from(a.hex, 'hex')]));

/** Answers each connection with the next scripted byte (null: close unanswered). */
class FakeServer {
  script = [];
  frames = [];
  halfClosed = [];

  async start() {
    this.server = net.createServer((conn) => this.#serve(conn));
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.address = `127.0.0.1:${this.server.address().port}`;
  }

  #serve(conn) {
    let buf = Buffer.alloc(0);
    let done = false;
    let ended = false;
    conn.on('end', () => {
      ended = true;
    });
    conn.on('error', () => {});
    conn.on('data', (chunk) => {
      if (done) return;
      buf = Buffer.concat([buf, chunk]);
      if (buf.length < 2) return;
      const k = buf[1];
      if (buf.length < 3 + k) return;
      if (buf.length < 3 + k + buf[2 + k]) return;
      done = true;
      this.frames.push(buf.toString('hex'));
      // Give a half-closing client time to show itself before answering.
      setTimeout(() => {
        this.halfClosed.push(ended);
        const answer = this.script.shift() ?? null;
        if (answer === null) conn.destroy();
        else conn.end(answer);
      }, 30);
    });
  }

  close() {
    return new Promise((resolve) => this.server.close(resolve));
  }
}

const cases = [
  // [method, answer char, expected value or error class]
  ['lock', '+', 'held'],
  ['lock', '-', ResetWhileWaitingError],
  ['lock', '#', ProtocolError],
  ['tryLock', '+', true],
  ['tryLock', '#', false],
  ['tryLock', '-', RefusedError],
  ['tryAcquire', '#', NotWonError],
  ['withTryLock', '#', NotWonError],
  ['unlock', '+', undefined],
  ['unlock', '-', RefusedError],
  ['resetByKey', '+', undefined],
  ['resetByKey', '-', RefusedError],
  ['resetBySource', '+', undefined],
  ['resetBySource', '-', RefusedError],
];

async function call(client, method) {
  switch (method) {
    case 'lock':
    case 'tryAcquire':
      await client[method]('abc');
      return 'held';
    case 'withTryLock':
      return client.withTryLock('abc', () => 'ran');
    case 'resetBySource':
      return client.resetBySource('svc-a');
    default:
      return client[method]('abc');
  }
}

describe('answer mapping', () => {
  const fake = new FakeServer();
  before(() => fake.start());
  after(() => fake.close());

  for (const [method, char, expected] of cases) {
    test(`${method} answered '${char}'`, async () => {
      fake.script = [answers[char]];
      fake.halfClosed = [];
      const client = new Client({ address: fake.address, source: 'svc-a' });
      if (typeof expected === 'function') {
        await assert.rejects(call(client, method), expected);
      } else {
        assert.equal(await call(client, method), expected);
      }
      assert.deepEqual(fake.halfClosed, [false], 'client must not half-close before the answer');
    });
  }

  test('frames on the wire', async () => {
    fake.script = [answers['+'], answers['+'], answers['+'], answers['+']];
    fake.frames = [];
    const client = new Client({ address: fake.address, source: 'svc-a' });
    assert.equal(await client.withLock('abc', async (held) => held.key), 'abc');
    await client.resetBySource();
    await client.resetByKey('abc');
    assert.deepEqual(fake.frames, [
      '0103616263057376632d61',
      '0203616263057376632d61',
      '0400057376632d61',
      '0303616263057376632d61',
    ]);
  });

  test('withLock unlocks when fn throws, and rethrows its error', async () => {
    fake.script = [answers['+'], answers['-']];
    fake.frames = [];
    const client = new Client({ address: fake.address, source: 'svc-a' });
    await assert.rejects(
      client.withLock('abc', () => {
        throw new SyntaxError('boom');
      }),
      SyntaxError,
    );
    assert.equal(fake.frames.length, 2);
    assert.ok(fake.frames[1].startsWith('02'));
  });

  test('closed without an answer is unreachable', async () => {
    fake.script = [null];
    await assert.rejects(new Client(fake.address).unlock('abc'), UnreachableError);
  });
});

test('nothing listening is unreachable', async () => {
  const client = new Client({ address: await unusedAddress() });
  await assert.rejects(client.tryLock('abc'), (err) => err instanceof UnreachableError && err.code === 'LC_UNREACHABLE');
});

test('invalid input is refused before connecting', async () => {
  const address = await unusedAddress(); // a connection attempt would give UnreachableError
  const client = new Client({ address });
  await assert.rejects(client.lock('k'.repeat(128)), InvalidRequestError);
  await assert.rejects(client.lock('é'.repeat(64)), InvalidRequestError);
  await assert.rejects(client.unlock(''), InvalidRequestError);
  await assert.rejects(client.resetBySource('s'.repeat(128)), InvalidRequestError);
  await assert.rejects(client.withLock('', async () => {}), InvalidRequestError);
  assert.throws(() => new Client({ address, source: 's'.repeat(128) }), InvalidRequestError);
  assert.throws(() => new Client({ address: '127.0.0.1:notaport' }), InvalidRequestError);
});

test('addresses: [v6]:port, bare host, $LC_ADDRESS, then localhost', () => {
  assert.equal(new Client('[::1]:7').address, '[::1]:7');
  assert.equal(new Client('lc.example').address, 'lc.example:22119');
  const saved = process.env.LC_ADDRESS;
  try {
    process.env.LC_ADDRESS = 'lc.example:9';
    assert.equal(new Client().address, 'lc.example:9');
    delete process.env.LC_ADDRESS;
    assert.equal(new Client().address, 'localhost:22119');
  } finally {
    if (saved === undefined) delete process.env.LC_ADDRESS;
    else process.env.LC_ADDRESS = saved;
  }
  for (const bad of ['h:0', '[::1', '[::1]7', '']) {
    assert.throws(() => new Client({ address: bad }), InvalidRequestError, bad);
  }
});

test('every error extends LockingCenterError and carries its code', () => {
  const codes = new Map([
    [NotWonError, 'LC_NOT_WON'],
    [ResetWhileWaitingError, 'LC_RESET'],
    [RefusedError, 'LC_REFUSED'],
    [InvalidRequestError, 'LC_INVALID'],
    [UnreachableError, 'LC_UNREACHABLE'],
    [LockTimeoutError, 'LC_TIMEOUT'],
    [ProtocolError, 'LC_PROTOCOL'],
  ]);
  for (const [ErrorClass, code] of codes) {
    const err = new ErrorClass('x');
    assert.ok(err instanceof LockingCenterError, ErrorClass.name);
    assert.equal(err.code, code);
    assert.equal(err.name, ErrorClass.name);
  }
});

test('an already aborted signal rejects without connecting', async () => {
  const client = new Client({ address: await unusedAddress() });
  const reason = new Error('stop');
  await assert.rejects(client.lock('abc', { signal: AbortSignal.abort(reason) }), (err) => err === reason);
});

test('a connect that hangs is unreachable after connectTimeout', async () => {
  // A child process listens with the smallest backlog and blocks its event
  // loop, so it never accepts; once the backlog is full, new connects hang.
  const { spawn } = await import('node:child_process');
  const child = spawn(
    process.execPath,
    [
      '-e',
      `const s = require('node:net').createServer();
       s.listen(0, '127.0.0.1', 1, () => {
         console.log(s.address().port);
         Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20000);
       });`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  try {
    const port = await new Promise((resolve, reject) => {
      child.stdout.once('data', (d) => resolve(Number(String(d).trim())));
      child.once('error', reject);
    });
    const fillers = [];
    for (let i = 0; i < 4; i++) {
      const s = net.createConnection({ host: '127.0.0.1', port });
      s.on('error', () => {});
      fillers.push(s);
    }
    await new Promise((r) => setTimeout(r, 100));
    const client = new Client({ address: `127.0.0.1:${port}`, connectTimeout: 300, ioTimeout: 2000 });
    const started = Date.now();
    await assert.rejects(client.unlock('abc'), (err) => err instanceof UnreachableError && /timed out/.test(err.message));
    assert.ok(Date.now() - started >= 250);
    for (const s of fillers) s.destroy();
  } finally {
    child.kill();
  }
});

/**
 * A Lock or TryLock given up mid-flight. The first connection's frame is
 * read, then the fake waits for the client to hang up (EOF) and, with
 * `grant`, sends '+' 150 ms later, as a grant the server sent just before it
 * noticed the hang-up would arrive; without `grant` it closes unanswered, as
 * the server does. With `grant` 'silent' it neither answers nor closes: the
 * connection stays open until close(), as from a server that stopped
 * answering. Later connections (a client giving the key back) are recorded
 * and answered `later`.
 */
class HangUpServer {
  frame = null;
  laterFrames = [];
  #held = []; // silent connections, destroyed by close()

  constructor(grant, later = answers['+']) {
    this.grant = grant;
    this.later = later;
    this.gotFrame = new Promise((resolve) => (this.onFrame = resolve));
    this.hungUp = new Promise((resolve) => (this.onHangUp = resolve));
  }

  async start() {
    this.server = net.createServer({ allowHalfOpen: true }, (conn) => this.#serve(conn));
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.address = `127.0.0.1:${this.server.address().port}`;
    return this;
  }

  #serve(conn) {
    let buf = Buffer.alloc(0);
    let role = null; // 'first' or 'later', once the frame is in
    conn.on('error', () => {}); // a client that closed outright resets the grant
    conn.on('data', (chunk) => {
      if (role !== null) return;
      buf = Buffer.concat([buf, chunk]);
      if (buf.length < 2 || buf.length < 3 + buf[1] || buf.length < 3 + buf[1] + buf[2 + buf[1]]) return;
      if (this.frame === null) {
        role = 'first';
        this.frame = buf.toString('hex');
        this.onFrame();
      } else {
        role = 'later';
        this.laterFrames.push(buf.toString('hex'));
        conn.end(this.later);
      }
    });
    conn.on('close', () => role === 'first' && this.onHangUp()); // closed outright, with a reset
    conn.on('end', () => {
      if (role !== 'first') return;
      this.onHangUp();
      if (this.grant === 'silent') this.#held.push(conn);
      else if (!this.grant) conn.destroy();
      else setTimeout(() => conn.end(answers['+']), 150);
    });
  }

  close() {
    for (const conn of this.#held) conn.destroy();
    return new Promise((resolve) => this.server.close(resolve));
  }
}

/** The error the promise rejects with; fails the test if it resolves. */
async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  assert.fail('the give-up resolved');
}

// Each gives up a Lock (or TryLock) one way and resolves to the error it got.
const giveUps = {
  'timeout option': async (fake) => {
    const err = await rejection(new Client({ address: fake.address, source: 'svc-a' }).lock('abc', { timeout: 300 }));
    assert.ok(err instanceof LockTimeoutError, String(err));
    return err;
  },
  'signal aborted': async (fake) => {
    const ac = new AbortController();
    const reason = new Error('stop');
    fake.gotFrame.then(() => ac.abort(reason));
    const err = await rejection(new Client({ address: fake.address, source: 'svc-a' }).lock('abc', { signal: ac.signal }));
    assert.equal(err, reason);
    return err;
  },
  'AbortSignal.timeout': async (fake) => {
    const signal = AbortSignal.timeout(300);
    const err = await rejection(new Client({ address: fake.address, source: 'svc-a' }).wait('abc', { signal }));
    assert.equal(err, signal.reason);
    assert.equal(err.name, 'TimeoutError');
    return err;
  },
  'tryLock past ioTimeout': async (fake) => {
    const client = new Client({ address: fake.address, source: 'svc-a', ioTimeout: 300 });
    const err = await rejection(client.tryLock('abc'));
    assert.ok(err instanceof UnreachableError, String(err));
    return err;
  },
};

describe('giving up', () => {
  for (const [how, giveUp] of Object.entries(giveUps)) {
    test(`${how}: a grant that crossed the hang-up is unlocked again`, async () => {
      const fake = await new HangUpServer(true).start();
      try {
        await giveUp(fake);
        await fake.hungUp;
        // Given back before the promise rejected: an Unlock of the same key and source.
        assert.deepEqual(fake.laterFrames, [`02${fake.frame.slice(2)}`]);
      } finally {
        await fake.close();
      }
    });

    test(`${how}: no grant, no unlock`, async () => {
      const fake = await new HangUpServer(false).start();
      try {
        const started = Date.now();
        await giveUp(fake);
        await fake.hungUp;
        assert.deepEqual(fake.laterFrames, []);
        // The fake closed on the hang-up: the client need not sit out its 2 s grace.
        assert.ok(Date.now() - started < 1500);
      } finally {
        await fake.close();
      }
    });

    test(`${how}: a failed unlock does not replace the error`, async () => {
      const fake = await new HangUpServer(true, answers['-']).start(); // the give-back is refused
      const warnings = [];
      const onWarning = (w) => warnings.push(w);
      process.on('warning', onWarning);
      try {
        const err = await giveUp(fake); // still the give-up's own error...
        assert.deepEqual(fake.laterFrames, [`02${fake.frame.slice(2)}`]);
        if (how.startsWith('signal') || how.startsWith('AbortSignal')) {
          // ...the caller's abort reason untouched, the unlock's error a warning
          assert.equal(err.cause, undefined);
          await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on the next tick
          assert.equal(warnings.length, 1, String(warnings));
          assert.equal(warnings[0].name, 'LockingCenterWarning');
        } else {
          assert.ok(err.cause instanceof RefusedError, String(err.cause)); // ...with the unlock's as its cause
          assert.deepEqual(warnings, []);
        }
      } finally {
        process.off('warning', onWarning);
        await fake.close();
      }
    });
  }

  test('a server silent after the hang-up is given up after the 2 s grace', async () => {
    const fake = await new HangUpServer('silent').start();
    const timeout = 200;
    const grace = 2000; // HANG_UP_GRACE_MS, as the README promises ("at most 2 s")
    let bound;
    try {
      const started = Date.now();
      const lock = new Client({ address: fake.address, source: 'svc-a' }).lock('abc', { timeout });
      const outcome = await Promise.race([
        rejection(lock),
        new Promise((resolve) => (bound = setTimeout(resolve, 3500, 'still waiting'))),
      ]);
      const elapsed = Date.now() - started;
      assert.ok(outcome instanceof LockTimeoutError, `after ${elapsed} ms: ${outcome}`);
      assert.ok(elapsed >= timeout + grace - 50, `rejected after ${elapsed} ms, before the grace ran out`);
      await fake.hungUp;
      assert.deepEqual(fake.laterFrames, []); // no '+' came back: nothing to unlock
    } finally {
      clearTimeout(bound);
      await fake.close();
    }
  });
});
