// Compiled by `tsc --noEmit` only (lib ES2022, no DOM, no @types/node):
// checks that index.d.ts describes a usable API on its own.
import {
  Client,
  Grant,
  HeldLock,
  LockingCenterError,
  LockTimeoutError,
  NotWonError,
  Session,
  SessionLostError,
  encodeFrame,
  encodeRequest,
  decodeAnswer,
  openSession,
  type AbortSignalLike,
  type ErrorCode,
  type WaitOptions,
} from '../index.js';

declare const signal: AbortSignalLike;

export async function usage(): Promise<number> {
  const client = new Client({ address: '127.0.0.1:22119', source: 'svc', connectTimeout: 1000 });
  const other = new Client('127.0.0.1:22119');
  const many = new Client(['a:22119', { host: 'b', port: 22119 }]);
  const secure = new Client({ address: 'a:22119,b:22119', tls: { ca: 'PEM', servername: 'locks' } });
  const roots = new Client({ address: 'a:22119', tls: true });
  const where: string = many.address + secure.address + roots.address;
  const opts: WaitOptions = { signal, timeout: 500 };
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
      const code: ErrorCode = err.code;
      void code;
    }
  }
  const frame: Uint8Array = encodeFrame(1, 'abc', '');
  return n + s.length + frame.length + (won ? 1 : 0);
}

export async function sessions(): Promise<bigint> {
  await using session: Session = await openSession({ ttl: 10_000, source: 'svc', authToken: 't', answerTimeout: null });
  await using clustered: Session = await openSession({
    address: ['a:22119', 'b:22119'],
    tls: { ca: new Uint8Array(0), cert: 'PEM', key: 'PEM' },
  });
  const at: string = clustered.address;
  const grant: Grant = await session.lock('k', { signal, timeout: 1000 });
  const token: bigint = grant.token;
  await grant.unlock();
  {
    await using scoped = await session.lock('k');
    void scoped.token;
  }
  {
    await using maybe = await session.tryLock('k'); // null when someone holds it
    void maybe?.token;
  }
  const released: bigint = await session.unlock('k', token);
  const r: string = await session.withLock('k', async (g, lost) => (lost.aborted ? 'lost' : String(g.token)));
  const why = await session.done;
  if (why instanceof SessionLostError) void why.code;
  session.signal.addEventListener('abort', () => {});
  const id: bigint = session.id;
  const ttl: number = session.ttl;
  const err: LockingCenterError | null = session.error;
  await session.close({ timeout: 1000 });
  const again: Session = await Session.open('127.0.0.1:22119');
  void again;
  const ans = decodeAnswer(encodeRequest(1, 1, 0n, 'k'));
  return released + id + BigInt(ttl + r.length + ans.id) + (err === null ? 0n : 1n);
}
