// Compiled by `tsc --noEmit` only: checks that index.d.ts describes a usable API.
import {
  Client,
  HeldLock,
  LockingCenterError,
  LockTimeoutError,
  NotWonError,
  encodeFrame,
  type WaitOptions,
} from '../index.js';

export async function usage(): Promise<number> {
  const client = new Client({ address: '127.0.0.1:22119', source: 'svc', connectTimeout: 1000 });
  const other = new Client('127.0.0.1:22119');
  const opts: WaitOptions = { signal: AbortSignal.timeout(1000), timeout: 500 };
  const held: HeldLock = await client.lock('k', opts);
  const key: string | Uint8Array = held.key;
  await held.unlock();
  const won: boolean = await other.tryLock(key);
  await client.wait('k', { timeout: 10 });
  await client.resetByKey('k');
  await client.resetBySource();
  await client.resetBySource(new Uint8Array([0x61]));
  const n: number = await client.withLock('k', async (h) => (h.held ? 1 : 0));
  const s: string = await client.withTryLock('k', () => 'sync result');
  {
    await using scoped = await client.lock('k');
    void scoped.held;
  }
  try {
    await client.tryAcquire('k');
  } catch (err) {
    if (err instanceof NotWonError) {
      const code: 'LC_NOT_WON' = err.code;
      void code;
    } else if (err instanceof LockTimeoutError || err instanceof LockingCenterError) {
      void err.message;
    }
  }
  const frame: Buffer = encodeFrame(1, 'abc', '');
  return n + s.length + frame.length + (won ? 1 : 0);
}
