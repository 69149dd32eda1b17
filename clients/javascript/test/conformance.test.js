// Conformance against a real server at $LC_TEST_ADDRESS (skipped when unset).
import { describe, test, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  Client,
  InvalidRequestError,
  LockTimeoutError,
  NotWonError,
  RefusedError,
  ResetWhileWaitingError,
} from '../index.js';
import { keyInfo, uniqueKey, unusedAddress, waitForQueue } from './helpers.js';

const address = process.env.LC_TEST_ADDRESS;
const web = process.env.LC_TEST_WEB_ADDRESS;
const skip = !address || !web ? 'LC_TEST_ADDRESS / LC_TEST_WEB_ADDRESS not set (clients/run-tests sets them)' : false;

describe('conformance', () => {
  // Skipped one by one (not as a suite) so that the skips show in the counts.
  const it = (name, fn) => test(name, { skip }, fn);

  const used = [];
  const key = (name) => {
    const k = uniqueKey(name);
    used.push(k);
    return k;
  };
  const client = (source = 'js-conformance') => new Client({ address, source });

  // Whatever a test left held or queued is reset, so no waiter outlives it.
  afterEach(async () => {
    const c = client();
    for (const k of used.splice(0)) await c.resetByKey(k).catch(() => {});
  });

  it('lock and unlock', async () => {
    const k = key('lock-unlock');
    const c = client();
    const held = await c.lock(k);
    assert.equal(held.held, true);
    await held.unlock();
    assert.equal(held.held, false);
    await assert.rejects(c.unlock(k), RefusedError);
  });

  it('withLock holds the key for the callback and releases after', async () => {
    const k = key('with-lock');
    const c = client();
    const result = await c.withLock(k, async () => {
      assert.equal(await c.tryLock(k), false);
      return 42;
    });
    assert.equal(result, 42);
    await assert.rejects(
      c.withLock(k, async () => {
        throw new RangeError('inside');
      }),
      RangeError,
    );
    assert.equal(await c.tryLock(k), true);
    await c.unlock(k);
  });

  it('await using releases at the end of the block', async () => {
    const k = key('await-using');
    const c = client();
    {
      const held = await c.lock(k, { timeout: 5000 });
      try {
        assert.equal(await c.tryLock(k), false);
      } finally {
        await held[Symbol.asyncDispose]();
      }
    }
    assert.equal(await c.tryLock(k), true);
    await c.unlock(k);
  });

  it('tryLock gives false on a held key', async () => {
    const k = key('trylock');
    const a = client('js-a');
    const b = client('js-b');
    assert.equal(await a.tryLock(k), true);
    assert.equal(await b.tryLock(k), false);
    await assert.rejects(b.tryAcquire(k), NotWonError);
    await assert.rejects(b.withTryLock(k, () => 1), NotWonError);
    await a.unlock(k);
    assert.equal(await b.withTryLock(k, () => 'won'), 'won');
  });

  it('waiters are served in FIFO order', async () => {
    const k = key('fifo');
    const order = [];
    const waiter = (name) =>
      client(`js-${name}`).withLock(
        k,
        async () => {
          order.push(name);
          await sleep(50);
        },
        { timeout: 10000 },
      );
    const held = await client('js-a').lock(k);
    const b = waiter('b');
    b.catch(() => {}); // awaited below; this only keeps an early failure from being "unhandled"
    await waitForQueue(web, k, 1);
    const c = waiter('c');
    c.catch(() => {});
    const info = await waitForQueue(web, k, 2);
    assert.deepEqual(
      info.queue.map((w) => w.source),
      ['js-b', 'js-c'],
    );
    await held.unlock();
    await Promise.all([b, c]);
    assert.deepEqual(order, ['b', 'c']);
  });

  it('a timeout withdraws the waiter', async () => {
    const k = key('timeout');
    const a = client('js-a');
    await a.lock(k);
    const started = Date.now();
    await assert.rejects(client('js-waiter').lock(k, { timeout: 300 }), LockTimeoutError);
    assert.ok(Date.now() - started >= 250);
    await waitForQueue(web, k, 0);
    await a.unlock(k);
    assert.equal(await a.tryLock(k), true, 'the withdrawn waiter must not be handed the key');
    await a.unlock(k);
  });

  it('an AbortSignal withdraws the waiter', async () => {
    const k = key('abort');
    const a = client('js-a');
    await a.lock(k);
    const ac = new AbortController();
    const reason = new Error('no longer needed');
    // Handlers are attached at once: the rejection may come before the next await ends.
    const outcome = assert.rejects(client('js-waiter').wait(k, { signal: ac.signal }), (err) => err === reason);
    await waitForQueue(web, k, 1);
    ac.abort(reason);
    await outcome;
    await waitForQueue(web, k, 0);
    await a.unlock(k);
    assert.equal(await a.tryLock(k), true);
    await a.unlock(k);
  });

  it('reset by key while waiting rejects with ResetWhileWaitingError', async () => {
    const k = key('reset-key');
    const a = client('js-a');
    await a.lock(k);
    const outcome = assert.rejects(client('js-waiter').lock(k, { timeout: 10000 }), ResetWhileWaitingError);
    await waitForQueue(web, k, 1);
    await a.resetByKey(k);
    await outcome;
    assert.equal(await a.tryLock(k), true, 'the holder was dropped too');
    await a.unlock(k);
  });

  it('reset by source while waiting rejects with ResetWhileWaitingError', async () => {
    const k = key('reset-source');
    const source = uniqueKey('src');
    const a = client('js-a');
    await a.lock(k);
    const outcome = assert.rejects(client(source).lock(k, { timeout: 10000 }), ResetWhileWaitingError);
    await waitForQueue(web, k, 1);
    await a.resetBySource(source);
    await outcome;
    await a.unlock(k);
  });

  it('reset by own source releases held keys', async () => {
    const k = key('reset-own');
    const owner = client(uniqueKey('src'));
    await owner.lock(`${k}-1`);
    await owner.lock(`${k}-2`);
    used.push(`${k}-1`, `${k}-2`);
    await owner.resetBySource();
    const other = client('js-other');
    for (const each of [`${k}-1`, `${k}-2`]) {
      assert.equal(await other.tryLock(each), true);
      await other.unlock(each);
    }
  });

  it('wait resolves once the holder releases', async () => {
    const k = key('wait');
    const a = client('js-a');
    await a.lock(k);
    let done = false;
    const pending = client('js-waiter')
      .wait(k, { timeout: 10000 })
      .then(() => {
        done = true;
      });
    pending.catch(() => {}); // awaited below
    await waitForQueue(web, k, 1);
    assert.equal(done, false);
    await a.unlock(k);
    await pending;
    assert.equal(await a.tryLock(k), true, 'wait released the key again');
    await a.unlock(k);
  });

  it('UTF-8 key, empty source named by peer IP', async () => {
    const k = key('ключ/日本');
    const anonymous = new Client({ address });
    await anonymous.withLock(k, async () => {
      const info = await keyInfo(web, k);
      assert.equal(info?.key, k);
      assert.equal(info?.source, '127.0.0.1');
    });
  });

  it('an over-long key is refused before connecting', async () => {
    const nowhere = new Client({ address: await unusedAddress() });
    await assert.rejects(nowhere.lock(`${'k'.repeat(120)}-${'x'.repeat(7)}`), InvalidRequestError);
    await assert.rejects(nowhere.tryLock('é'.repeat(64)), InvalidRequestError);
  });
});
