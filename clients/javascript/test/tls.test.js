// TLS against the fixture's servers ($LC_TEST_TLS_ADDRESS with TLS_CERT and
// TLS_KEY; $LC_TEST_MTLS_ADDRESS with TLS_CLIENT_CA too; $LC_TEST_TLS_DIR with
// ca.pem, client.pem, client-key.pem and other-ca.pem): the server's
// certificate and name checked, mutual TLS with and without a client
// certificate.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { Client, UnreachableError, openSession } from '../index.js';
import { fixtureEnv, uniqueKey } from './helpers.js';

const { skip, values } = fixtureEnv('LC_TEST_TLS_ADDRESS', 'LC_TEST_MTLS_ADDRESS', 'LC_TEST_TLS_DIR');
const [address, mtls, dir] = values;
const pem = (name) => readFileSync(join(dir, name));

// The UnreachableError carries the certificate check's error as its cause.
const refusedByVerification = (err) =>
  err instanceof UnreachableError &&
  /CERT|ALTNAME|UNABLE_TO_VERIFY|SELF_SIGNED/.test(String(err.cause?.code));

describe('tls', () => {
  const it = (name, fn) => test(name, { skip, timeout: 30000 }, fn);

  it('a session and the client over TLS', async () => {
    const tls = { ca: pem('ca.pem') };
    const key = uniqueKey('tls');
    const port = address.split(':').pop();
    for (const where of [address, `localhost:${port}`]) {
      // the certificate names both
      const s = await openSession({ address: where, tls, ttl: 5000 });
      const g = await s.lock(key);
      assert.ok(g.token > 0n);
      assert.equal(await s.tryLock(key), null);
      await g.unlock();
      await s.close();
      const c = new Client({ address: where, tls });
      const h = await c.lock(key);
      assert.equal(await c.tryLock(key), false);
      await h.unlock();
    }
  });

  it('a wrong server name is refused', async () => {
    const tls = { ca: pem('ca.pem'), servername: 'wrong.invalid' };
    await assert.rejects(openSession({ address, tls, connectTimeout: 5000 }), refusedByVerification);
    await assert.rejects(new Client({ address, tls }).tryLock('js-tls-wrong'), refusedByVerification);
  });

  it('a certificate of another CA is refused', async () => {
    const tls = { ca: pem('other-ca.pem') };
    await assert.rejects(openSession({ address, tls }), refusedByVerification);
    await assert.rejects(new Client({ address, tls }).tryLock('js-tls-other'), refusedByVerification);
  });

  it('mutual TLS with a client certificate', async () => {
    const tls = { ca: pem('ca.pem'), cert: pem('client.pem'), key: pem('client-key.pem') };
    const key = uniqueKey('mtls');
    const s = await openSession({ address: mtls, tls, ttl: 5000 });
    await (await s.lock(key)).unlock();
    await s.close();
    await (await new Client({ address: mtls, tls }).lock(key)).unlock();
  });

  it('mutual TLS without a client certificate is refused', async () => {
    const tls = { ca: pem('ca.pem') };
    await assert.rejects(openSession({ address: mtls, tls, connectTimeout: 5000 }), UnreachableError);
    await assert.rejects(new Client({ address: mtls, tls }).tryLock('js-mtls-none'), UnreachableError);
  });

  it('plain TCP to a TLS server fails', async () => {
    await assert.rejects(openSession({ address, connectTimeout: 3000 }), UnreachableError);
  });
});
