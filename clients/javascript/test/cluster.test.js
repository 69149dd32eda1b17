// Against a real 3-node cluster (clients/run-tests' fixture: $LC_TEST_CLUSTER,
// $LC_TEST_CLUSTER_CONTROL, $LC_TEST_LOST_ANSWER_PREFIX): several addresses, a
// follower's address alone, a session riding through a kill -9 of the leader,
// and the Reissue of a Lock whose answer was lost.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import dns from 'node:dns';
import { performance } from 'node:perf_hooks';

import { Client, openSession } from '../index.js';
import { fixtureEnv, uniqueKey, unusedAddress, until } from './helpers.js';

const { skip, values } = fixtureEnv('LC_TEST_CLUSTER', 'LC_TEST_CLUSTER_CONTROL', 'LC_TEST_LOST_ANSWER_PREFIX');
const [cluster, control, lostPrefix] = values;
const hexId = (s) => s.id.toString(16).padStart(16, '0');

async function call(path, method = 'GET') {
  const res = await fetch(`http://${control}${path}`, { method, signal: AbortSignal.timeout(60000) });
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status}`);
  return res.json();
}

async function leader() {
  const view = await call('/await-leader', 'POST');
  return view.nodes.find((n) => n.id === view.leader);
}

/** The key as the leader's JSON API shows it (null: not held). */
async function keyOnLeader(key) {
  const { web } = await leader();
  const res = await fetch(`http://${web}/api/v1/keys/${encodeURIComponent(key)}?consistent=1`, {
    signal: AbortSignal.timeout(10000),
  });
  if (res.status === 404) return null;
  if (!res.ok) throw new Error(`GET key ${key}: HTTP ${res.status}`);
  return res.json();
}

const queued = async (key) => ((await keyOnLeader(key))?.queue ?? []).length;

describe('cluster', () => {
  const it = (name, fn) => test(name, { skip, timeout: 90000 }, fn);

  it('a session holding 10 keys and waiting on 10 rides through a kill -9 of the leader', async () => {
    const holds = Array.from({ length: 10 }, (_, i) => uniqueKey(`fo-hold-${i}`));
    const waits = Array.from({ length: 10 }, (_, i) => uniqueKey(`fo-wait-${i}`));
    const a = await openSession({ address: cluster, ttl: 10000, source: 'js-failover-a' });
    const b = await openSession({ address: cluster, ttl: 10000, source: 'js-failover-b' });
    try {
      const held = [];
      for (const k of holds) held.push(await a.lock(k));
      const blockers = [];
      for (const k of waits) blockers.push(await b.lock(k));
      const settled = waits.map(() => false);
      const waiting = waits.map((k, i) => a.lock(k).finally(() => (settled[i] = true)));
      for (const k of waits) await until(async () => (await queued(k)) === 1, `${k} queued`, 15000);
      const highest = [...held, ...blockers].reduce((m, g) => (g.token > m ? g.token : m), 0n);

      const killedAt = performance.now();
      const killed = await call('/kill-leader', 'POST');
      try {
        const probe = await a.tryLock(uniqueKey('fo-probe')); // sent once the session is back
        const back = performance.now() - killedAt;
        console.log(`failover seen by the client: kill -9 of ${killed.killed} -> session working again in ${(back / 1000).toFixed(2)}s`);
        assert.ok(probe !== null);
        await probe.unlock();
        assert.equal(a.error, null);
        assert.equal(b.error, null);
        assert.ok(!settled.some(Boolean), 'a wait was answered while its key was held');
        for (const g of held) {
          const info = await keyOnLeader(g.key);
          assert.equal(BigInt(info.token), g.token); // kept, with its token
          assert.equal(info.session, hexId(a));
        }
        for (const k of waits) await until(async () => (await queued(k)) === 1, `${k} queued again`, 15000);
        let last = highest;
        const granted = [];
        for (let i = 0; i < waits.length; i++) {
          await blockers[i].unlock();
          const g = await waiting[i];
          assert.ok(!settled.slice(i + 1).some(Boolean), 'granted out of order');
          const info = await keyOnLeader(g.key);
          assert.equal(BigInt(info.token), g.token);
          assert.equal(info.session, hexId(a));
          assert.ok(g.token > last, 'tokens grow');
          last = g.token;
          granted.push(g);
        }
        for (const g of [...held, ...granted]) await g.unlock();
        for (const k of [...holds, ...waits]) assert.equal(await keyOnLeader(k), null);
      } finally {
        await call('/restart', 'POST');
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a Lock whose answer is lost returns its grant after the reissue', async () => {
    const key = `${lostPrefix}js-${uniqueKey('lost')}`;
    const s = await openSession({ address: cluster, ttl: 10000, source: 'js-lost-answer' });
    try {
      const started = performance.now();
      // The leader commits the grant and dies before answering: the reissue
      // after the resume must find it, not wait behind it.
      const g = await s.lock(key, { timeout: 30000 });
      console.log(`lost answer: grant returned by the reissue ${((performance.now() - started) / 1000).toFixed(2)}s after the Lock`);
      const view = await call('/nodes');
      assert.ok(!view.nodes.every((n) => n.up), `the failpoint did not kill the leader: ${JSON.stringify(view)}`);
      const info = await keyOnLeader(key);
      assert.equal(BigInt(info.token), g.token);
      assert.equal(info.session, hexId(s));
      assert.equal((info.queue ?? []).length, 0, 'the reissue queued behind its own grant');
      await g.unlock();
      assert.equal(await keyOnLeader(key), null);
    } finally {
      await s.close();
      await call('/restart', 'POST');
    }
  });

  it("a follower's address alone works", async () => {
    const view = await call('/await-leader', 'POST');
    const follower = view.nodes.find((n) => n.up && n.id !== view.leader).address;
    const key = uniqueKey('follower');
    const s = await openSession({ address: follower, ttl: 10000 });
    const g = await s.lock(key);
    assert.equal(BigInt((await keyOnLeader(key)).token), g.token);
    await g.unlock();
    await s.close();
    const c = new Client(follower);
    const h = await c.lock(key);
    assert.ok((await keyOnLeader(key)) !== null);
    await h.unlock();
    assert.equal(await keyOnLeader(key), null);
    // Through that one address, a session rides through a kill of the leader
    // too: the follower drops the forwarded connection, and the session
    // resumes through it on the new leader.
    const t = await openSession({ address: follower, ttl: 10000 });
    try {
      const held = await t.lock(key);
      await call('/kill-leader', 'POST');
      const probe = await t.tryLock(`${key}-probe`);
      assert.ok(probe !== null);
      await probe.unlock();
      const info = await keyOnLeader(key);
      assert.equal(BigInt(info.token), held.token);
      assert.equal(info.session, hexId(t));
      await held.unlock();
    } finally {
      await t.close();
      await call('/restart', 'POST');
    }
  });

  it('a list of addresses connects to any that answers', async () => {
    const dead = [await unusedAddress(), await unusedAddress(), await unusedAddress()];
    const nodes = cluster.split(',');
    const key = uniqueKey('list');
    const forms = [
      [...dead, nodes[0]].join(','), // one string, comma-separated
      [...dead, nodes[1]], // an array of strings
      [...dead, nodes[2]].map((a) => ({ host: a.slice(0, a.lastIndexOf(':')), port: Number(a.slice(a.lastIndexOf(':') + 1)) })),
    ];
    for (const address of forms) {
      for (let i = 0; i < 4; i++) {
        // random order: the dead ones come first some of the time
        const s = await openSession({ address, ttl: 5000, connectTimeout: 2000 });
        await (await s.lock(key)).unlock();
        await s.close();
        await (await new Client({ address }).lock(key)).unlock();
      }
    }
  });
});

test('a name with several DNS records connects to any', { skip: process.env.LC_TEST_ADDRESS ? false : 'LC_TEST_ADDRESS not set' }, async (t) => {
  const port = Number(process.env.LC_TEST_ADDRESS.split(':').pop());
  // Two records where nothing listens (127.0.0.2 and .3: the server listens
  // on 127.0.0.1 only), and the server's.
  const real = dns.promises.lookup;
  t.mock.method(dns.promises, 'lookup', async (host, opts) =>
    host === 'lc.cluster.test'
      ? ['127.0.0.2', '127.0.0.3', '127.0.0.1'].map((address) => ({ address, family: 4 }))
      : real(host, opts),
  );
  const key = uniqueKey('dns');
  const seen = [];
  for (let i = 0; i < 6; i++) {
    const s = await openSession({ address: `lc.cluster.test:${port}`, ttl: 5000 });
    seen.push(s.address);
    await (await s.lock(key)).unlock();
    await s.close();
    await (await new Client(`lc.cluster.test:${port}`).lock(key)).unlock();
  }
  assert.ok(seen.every((w) => w.endsWith('(127.0.0.1)')), seen.join(' '));
});
