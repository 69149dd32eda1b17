// Sessions against a real server: $LC_TEST_ADDRESS, and servers of the test's
// own from $LC_SERVER_BIN (restarts, short TTLs, AUTH_TOKEN).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  LockTimeoutError,
  LockingCenterError,
  NotHeldError,
  NotWonError,
  RefusedError,
  ResetWhileWaitingError,
  SessionClosedError,
  SessionLostError,
  UnreachableError,
  openSession,
} from '../index.js';
import { OwnServer, keyInfo, loadVectors, sessionInfo, startProxy, uniqueKey, until, waitForQueue } from './helpers.js';

const address = process.env.LC_TEST_ADDRESS;
const web = process.env.LC_TEST_WEB_ADDRESS;
const skip = !address || !web ? 'LC_TEST_ADDRESS / LC_TEST_WEB_ADDRESS not set (clients/run-tests sets them)' : false;
const skipOwn = !process.env.LC_SERVER_BIN ? 'LC_SERVER_BIN not set (clients/run-tests sets it)' : skip;
const hexId = (s) => s.id.toString(16).padStart(16, '0');

describe('sessions', () => {
  const it = (name, fn) => test(name, { skip, timeout: 30000 }, fn);
  const own = (name, fn) => test(name, { skip: skipOwn, timeout: 30000 }, fn);
  const open = (opts = {}) => openSession({ address, ...opts });

  it('lock returns the token the server shows; dispose releases', async () => {
    const k = uniqueKey('s-token');
    const s = await open({ source: 'js-session' });
    assert.ok(s.id > 0n && s.ttl > 0);
    const grant = await s.lock(k);
    const info = await keyInfo(web, k);
    assert.equal(typeof grant.token, 'bigint');
    assert.equal(BigInt(info.token), grant.token);
    assert.equal(info.session, hexId(s));
    assert.equal(info.source, 'js-session');
    await grant[Symbol.asyncDispose]();
    assert.equal(await keyInfo(web, k), null);
    await s[Symbol.asyncDispose]();
    assert.ok(s.error instanceof SessionClosedError);
    assert.ok((await s.done) instanceof SessionClosedError);
    assert.equal(s.signal.aborted, true);
  });

  it('FIFO across two sessions, tokens strictly increasing', async () => {
    const k = uniqueKey('s-fifo');
    const a = await open({ source: 'js-a' });
    const b = await open({ source: 'js-b' });
    const first = await a.lock(k);
    const bWaits = b.lock(k);
    await waitForQueue(web, k, 1);
    const aWaits = a.lock(k); // a's second Lock queues behind b
    const info = await waitForQueue(web, k, 2);
    assert.deepEqual(
      info.queue.map((w) => w.source),
      ['js-b', 'js-a'],
    );
    await first.unlock();
    const second = await bWaits;
    await second.unlock();
    const third = await aWaits;
    await third.unlock();
    assert.ok(first.token < second.token && second.token < third.token);
    await Promise.all([a.close(), b.close()]);
  });

  it('an AbortSignal or a timeout sends Cancel: the waiter is withdrawn', async () => {
    const k = uniqueKey('s-cancel');
    const a = await open({ source: 'js-a' });
    const b = await open({ source: 'js-b' });
    const held = await a.lock(k);
    const ac = new AbortController();
    const reason = new Error('no longer needed');
    const aborted = assert.rejects(b.lock(k, { signal: ac.signal }), (err) => err === reason);
    await waitForQueue(web, k, 1);
    ac.abort(reason);
    await aborted;
    await waitForQueue(web, k, 0); // Cancel withdrew it
    const started = Date.now();
    await assert.rejects(b.lock(k, { timeout: 200 }), LockTimeoutError);
    assert.ok(Date.now() - started >= 190);
    await waitForQueue(web, k, 0);
    await held.unlock();
    const again = await a.tryLock(k); // b holds nothing
    assert.notEqual(again, null);
    await again.unlock();
    await Promise.all([a.close(), b.close()]);
  });

  it('tryLock and tryAcquire', async () => {
    const k = uniqueKey('s-try');
    const a = await open();
    const b = await open();
    const grant = await a.tryLock(k);
    assert.ok(grant !== null && grant.token > 0n);
    assert.equal(await b.tryLock(k), null);
    assert.equal(await a.tryLock(k), null); // the session itself holds it
    await assert.rejects(b.tryAcquire(k), NotWonError);
    await assert.rejects(b.withTryLock(k, () => 1), NotWonError);
    await grant.unlock();
    assert.equal(await b.withTryLock(k, () => 'won'), 'won');
    await Promise.all([a.close(), b.close()]);
  });

  it('unlock releases only a grant of its own', async () => {
    const k = uniqueKey('s-unlock');
    const a = await open();
    const b = await open();
    const grant = await a.lock(k);
    await assert.rejects(b.unlock(k), NotHeldError);
    await assert.rejects(a.unlock(k, grant.token - 1n), NotHeldError);
    assert.equal(await a.unlock(k, grant.token), grant.token);
    await assert.rejects(a.unlock(k, grant.token), (err) => err instanceof NotHeldError && err.code === 'LC_NOT_HELD');
    await Promise.all([a.close(), b.close()]);
  });

  it('a reset while waiting rejects the Lock', async () => {
    const k = uniqueKey('s-reset');
    const a = await open();
    const b = await open();
    await a.lock(k);
    const refused = assert.rejects(b.lock(k), ResetWhileWaitingError);
    await waitForQueue(web, k, 1);
    await a.resetByKey(k);
    await refused;
    await Promise.all([a.close(), b.close()]);
  });

  it('many concurrent Locks on one session', async () => {
    const k = uniqueKey('s-many');
    const s = await open();
    const keys = Array.from({ length: 200 }, (_, i) => `${k}/${i}`);
    const grants = await Promise.all(keys.map((key) => s.lock(key)));
    assert.equal(new Set(grants.map((g) => g.token)).size, 200);
    await Promise.all(grants.map((g) => g.unlock()));
    // One key, many callers: they take it in turn, never two at once.
    let inside = 0;
    let turns = 0;
    await Promise.all(
      Array.from({ length: 20 }, () =>
        s.withLock(k, async () => {
          inside++;
          assert.equal(inside, 1);
          await sleep(1);
          inside--;
          turns++;
        }),
      ),
    );
    assert.equal(turns, 20);
    await s.close();
  });

  it('close releases the holds and refuses pending Locks', async () => {
    const k = uniqueKey('s-close');
    const a = await open();
    const b = await open();
    await b.lock(k);
    const other = await a.lock(`${k}x`);
    const refused = assert.rejects(a.lock(k), SessionClosedError);
    await waitForQueue(web, k, 1);
    await a.close();
    await refused;
    assert.equal(other.held, false);
    assert.equal(await keyInfo(web, `${k}x`), null);
    await assert.rejects(a.lock(k), SessionClosedError);
    await b.close();
    assert.equal(await keyInfo(web, k), null);
  });

  it('a session ended from the web is lost: signal, done, withLock and dispose report it', async () => {
    const k = uniqueKey('s-lost');
    const s = await open();
    const grant = await s.lock(`${k}-g`);
    const ran = assert.rejects(s.withLock(k, async (_, signal) => {
      const res = await fetch(`http://${web}/api/v1/sessions/${hexId(s)}/end`, { method: 'POST' });
      assert.equal(res.status, 200);
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      return 'finished';
    }), SessionLostError);
    await ran;
    assert.ok((await s.done) instanceof SessionLostError);
    assert.ok(s.signal.reason instanceof SessionLostError);
    await assert.rejects(grant[Symbol.asyncDispose](), (err) => err instanceof SessionLostError && err.code === 'LC_SESSION_LOST');
    await assert.rejects(s.lock(k), SessionLostError);
    await assert.rejects(s[Symbol.asyncDispose](), SessionLostError);
  });

  it('Ping keeps an idle session', async () => {
    const k = uniqueKey('s-ping');
    const s = await open({ ttl: 1000 });
    assert.equal(s.ttl, 1000);
    const grant = await s.lock(k);
    await sleep(2500); // 2.5 TTLs with nothing to say but Ping
    assert.equal(s.error, null);
    assert.equal(BigInt((await keyInfo(web, k)).token), grant.token);
    await s.close();
  });

  it('resumes after a dropped connection; a Lock pending on it is reissued', async () => {
    const k = uniqueKey('s-drop');
    const proxy = await startProxy(address);
    const a = await openSession({ address: proxy.address, ttl: 5000 });
    const b = await open();
    const held = await a.lock(k);
    const blocker = await b.lock(`${k}-b`);
    let settled = false;
    const blocked = a.lock(`${k}-b`).finally(() => (settled = true));
    await waitForQueue(web, `${k}-b`, 1);
    proxy.cut();
    await until(async () => (await sessionInfo(web, a.id))?.connected === true, 'resume');
    await waitForQueue(web, `${k}-b`, 1); // reissued: it waits again
    assert.equal(settled, false);
    const info = await keyInfo(web, k);
    assert.equal(BigInt(info.token), held.token); // the hold survived
    assert.equal(info.session, hexId(a));
    await held.unlock();
    assert.equal(await keyInfo(web, k), null);
    await blocker.unlock();
    const g = await blocked;
    assert.equal(BigInt((await keyInfo(web, `${k}-b`)).token), g.token);
    await g.unlock();
    await Promise.all([a.close(), b.close()]);
    await proxy.close();
  });

  it('original-server frames of the vectors are answered', async () => {
    const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
    for (const v of loadVectors().original_frames) {
      const answer = await new Promise((resolve, reject) => {
        const c = net.createConnection({ host, port }, () => c.write(Buffer.from(v.hex, 'hex')));
        c.once('data', (d) => {
          resolve(d[0]);
          c.destroy();
        });
        c.once('error', reject);
      });
      assert.ok(answer === 0x2b || answer === 0x2d, v.name);
    }
  });

  own('resume after the server restarts with DATA_PATH', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'lc-js-'));
    const srv = await new OwnServer({ DATA_PATH: join(dir, 'lc.wal') }).start();
    try {
      const k = uniqueKey('s-restart');
      const s = await openSession({ address: srv.address, ttl: 10000 });
      const grant = await s.lock(k);
      await srv.stop();
      await srv.start(); // same ports, same log
      await until(async () => (await sessionInfo(srv.webAddress, s.id))?.connected === true, 'resume');
      const info = await keyInfo(srv.webAddress, k);
      assert.equal(info.session, hexId(s));
      assert.equal(BigInt(info.token), grant.token);
      const later = await s.lock(`${k}2`);
      assert.ok(later.token > grant.token); // tokens grow across the restart
      await grant.unlock();
      assert.equal(await keyInfo(srv.webAddress, k), null);
      await s.close();
    } finally {
      await srv.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  own('a session lost past its TTL is reported', async () => {
    const srv = await new OwnServer().start();
    try {
      const s = await openSession({ address: srv.address, ttl: 1000 });
      const grant = await s.lock('js-lost-ttl');
      const started = performance.now();
      await srv.stop(); // nothing to resume on, no log: the session will not come back
      const why = await s.done;
      const took = performance.now() - started;
      assert.ok(why instanceof SessionLostError && /TTL/.test(why.message), String(why));
      assert.ok(took < 1500, `reported after ${took} ms`);
      console.log(`# session lost reported ${Math.round(took)} ms after the server stopped (TTL 1 s)`);
      await assert.rejects(grant[Symbol.asyncDispose](), SessionLostError);
    } finally {
      await srv.stop();
    }
  });

  own('a resume refused after a restart without a log loses the session', async () => {
    const srv = await new OwnServer().start();
    try {
      const s = await openSession({ address: srv.address, ttl: 10000 });
      await s.lock('js-refused');
      await srv.stop();
      await srv.start();
      const why = await s.done;
      assert.ok(why instanceof SessionLostError && /refused/.test(why.message), String(why));
    } finally {
      await srv.stop();
    }
  });

  own('AUTH_TOKEN', async () => {
    const srv = await new OwnServer({ AUTH_TOKEN: 's3cret-token' }).start();
    try {
      await assert.rejects(openSession({ address: srv.address }), RefusedError);
      await assert.rejects(openSession({ address: srv.address, authToken: 'wrong' }), RefusedError);
      const s = await openSession({ address: srv.address, authToken: 's3cret-token' });
      assert.ok((await s.withLock('js-auth', (g) => g.token)) > 0n);
      await s.close();
    } finally {
      await srv.stop();
    }
  });

  test('unreachable', async () => {
    await assert.rejects(openSession({ address: '127.0.0.1:1', connectTimeout: 1000 }), (err) => {
      return err instanceof UnreachableError && err instanceof LockingCenterError && err.code === 'LC_UNREACHABLE';
    });
  });

  it('a SIGKILLed holder: its keys pass to the next waiter within TTL + 1 s', async () => {
    const k = uniqueKey('s-kill');
    const n = 20;
    const holder = `
      import { openSession } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
      const s = await openSession({ address: process.argv[1], ttl: 1000, source: 'js-doomed' });
      for (let i = 0; i < ${n}; i++) await s.lock(process.argv[2] + '/' + i);
      console.log('held');
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', holder, address, k], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    try {
      await new Promise((resolve, reject) => {
        child.stdout.once('data', (d) => (String(d).trim() === 'held' ? resolve() : reject(new Error(String(d)))));
        child.once('exit', (code) => reject(new Error(`holder exited ${code}`)));
      });
      const s = await open();
      const waiters = Array.from({ length: n }, (_, i) => s.lock(`${k}/${i}`));
      await until(async () => {
        const infos = await Promise.all(Array.from({ length: n }, (_, i) => keyInfo(web, `${k}/${i}`)));
        return infos.every((info) => info?.waiters === 1);
      }, 'waiters queued');
      child.kill('SIGKILL');
      const killed = performance.now();
      const grants = await Promise.all(waiters);
      const took = performance.now() - killed;
      assert.ok(took <= 2000, `keys passed on after ${took} ms`);
      console.log(`# SIGKILL: ${n} keys passed on ${Math.round(took)} ms after the kill (TTL 1 s)`);
      await Promise.all(grants.map((g) => g.unlock()));
      await s.close();
    } finally {
      child.kill('SIGKILL');
      await exited;
    }
  });
});
