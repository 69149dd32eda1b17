using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace LockingCenter.Tests
{
    /// <summary>Client behaviour against a loopback stand-in: errors, giving up, scoped forms.</summary>
    public class ClientBehaviourTests
    {
        private static readonly TimeSpan Patience = TimeSpan.FromSeconds(3);

        // The Unlock frame of key "k" from source "a": what a client sends to give back a grant.
        private const string UnlockK = "02016b0161";

        // A stand-in that answers a Lock with '+' only after the client hung up, and every other
        // request with then.
        private static FakeServer GrantingAfterHangUp(char then)
        {
            return new FakeServer(f => f[0] == (byte)LockAction.Lock ? FakeServer.GrantAfterHangUp : then);
        }

        [Fact]
        public async Task ConnectionRefusedIsUnreachable()
        {
            var client = new LockingCenterClient("127.0.0.1:" + Vectors.DeadPort());
            await Assert.ThrowsAsync<UnreachableException>(() => client.LockAsync("k"));
            await Assert.ThrowsAsync<UnreachableException>(() => client.TryLockAsync("k"));
            Assert.Throws<UnreachableException>(() => client.Unlock("k"));
        }

        [Fact]
        public async Task UnknownHostIsUnreachable()
        {
            var client = new LockingCenterClient("no-such-host.invalid:22119");
            await Assert.ThrowsAsync<UnreachableException>(() => client.UnlockAsync("k"));
        }

        [Fact]
        public async Task ConnectTimeoutEndsAConnectThatHangs()
        {
            // A listener with backlog 1 that never accepts: once its accept queue is full, Linux drops
            // further SYNs, so a connect to it neither succeeds nor fails until the client gives up.
            var listener = new TcpListener(IPAddress.Loopback, 0);
            listener.Start(1);
            var fillers = new List<TcpClient>();
            try
            {
                int port = ((IPEndPoint)listener.LocalEndpoint).Port;
                Assert.True(await FillAcceptQueue(port, fillers), "precondition: a connect to a full accept queue does not hang here");
                var client = new LockingCenterClient(new LockingCenterOptions
                {
                    Address = "127.0.0.1:" + port,
                    ConnectTimeout = TimeSpan.FromMilliseconds(300),
                });
                var watch = Stopwatch.StartNew();
                // The lock timeout is far past the connect timeout: only the connect timeout ends this
                // early, and a connect that went through would end in LockTimeoutException instead.
                await Assert.ThrowsAsync<UnreachableException>(() => client.LockAsync("k", TimeSpan.FromSeconds(10)));
                long ms = watch.ElapsedMilliseconds;
                Assert.True(ms >= 280 && ms < 3000, "gave up after " + ms + " ms (ConnectTimeout 300 ms, default 5 s)");
            }
            finally
            {
                foreach (TcpClient filler in fillers) filler.Close();
                listener.Stop();
            }
        }

        /// <summary>
        /// Connects plain clients to the port until one hangs (true): the accept queue is then full.
        /// False if a connect failed, or none hung.
        /// </summary>
        private static async Task<bool> FillAcceptQueue(int port, List<TcpClient> fillers)
        {
            for (int i = 0; i < 8; i++)
            {
                var filler = new TcpClient();
                fillers.Add(filler);
                Task connect = filler.ConnectAsync(IPAddress.Loopback, port);
                if (await Task.WhenAny(connect, Task.Delay(500)) != connect) return i > 0;
                if (connect.IsFaulted) return false;
            }
            return false;
        }

        [Fact]
        public async Task ClosedWithoutAnswerIsUnreachable()
        {
            using (var fake = new FakeServer(f => FakeServer.Close))
            {
                var client = new LockingCenterClient(fake.Address);
                await Assert.ThrowsAsync<UnreachableException>(() => client.LockAsync("k"));
                await Assert.ThrowsAsync<UnreachableException>(() => client.UnlockAsync("k"));
            }
        }

        [Fact]
        public async Task SilentServerPastRequestTimeoutIsUnreachable()
        {
            using (var fake = new FakeServer(f => FakeServer.Hold))
            {
                var client = new LockingCenterClient(new LockingCenterOptions
                {
                    Address = fake.Address,
                    RequestTimeout = TimeSpan.FromMilliseconds(200),
                });
                await Assert.ThrowsAsync<UnreachableException>(() => client.UnlockAsync("k"));
                Assert.True(fake.HangUp.Wait(Patience), "server did not see the hang-up");
            }
        }

        [Fact]
        public async Task LockTimeoutClosesTheConnection()
        {
            using (var fake = new FakeServer(f => FakeServer.Hold))
            {
                var client = new LockingCenterClient(fake.Address, "svc");
                var watch = Stopwatch.StartNew();
                var e = await Assert.ThrowsAsync<LockTimeoutException>(() => client.LockAsync("k", TimeSpan.FromMilliseconds(300)));
                long ms = watch.ElapsedMilliseconds;
                Assert.True(ms >= 280 && ms < 3000, "gave up after " + ms + " ms");
                Assert.Equal("k", e.Key);
                Assert.True(fake.HangUp.Wait(Patience), "server did not see the hang-up");
            }
        }

        [Fact]
        public async Task WaitTimeoutClosesTheConnection()
        {
            using (var fake = new FakeServer(f => FakeServer.Hold))
            {
                var client = new LockingCenterClient(fake.Address);
                await Assert.ThrowsAsync<LockTimeoutException>(() => client.WaitAsync("k", TimeSpan.FromMilliseconds(200)));
                Assert.True(fake.HangUp.Wait(Patience));
            }
        }

        [Fact]
        public async Task CancellingLockAsyncClosesTheConnection()
        {
            using (var fake = new FakeServer(f => FakeServer.Hold))
            using (var cts = new CancellationTokenSource())
            {
                var client = new LockingCenterClient(fake.Address);
                Task<LockHandle> waiting = client.LockAsync("k", cts.Token);
                Assert.True(fake.Received.Wait(Patience));
                cts.Cancel();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting);
                Assert.True(fake.HangUp.Wait(Patience), "server did not see the hang-up");
            }
        }

        [Fact]
        public async Task TryLockWonAsItWasCancelledStands()
        {
            // The '+' of a try-lock crosses the client's cancellation on the wire: the client must read
            // it (a try-lock's answer stands) rather than close over it and leave the key held by nobody.
            using (var fake = new FakeServer(f => f[0] == (byte)LockAction.TryLock ? FakeServer.GrantAfterHangUp : '+'))
            using (var cts = new CancellationTokenSource())
            {
                var client = new LockingCenterClient(fake.Address, "a");
                Task<bool> trying = client.TryLockAsync("k", cts.Token);
                Assert.True(fake.Received.Wait(Patience));
                cts.Cancel();
                Assert.True(await trying, "the try-lock won as it was cancelled was not reported won");
                Assert.True(fake.HangUp.Wait(Patience), "server did not see the hang-up");
                Assert.Equal(1, fake.Frames.Count);
            }
        }

        [Fact]
        public async Task CancelAfterClosesTheConnection()
        {
            using (var fake = new FakeServer(f => FakeServer.Hold))
            using (var cts = new CancellationTokenSource(TimeSpan.FromMilliseconds(200)))
            {
                var client = new LockingCenterClient(fake.Address);
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => client.WaitAsync("k", cts.Token));
                Assert.True(fake.HangUp.Wait(Patience));
            }
        }

        [Theory]
        [InlineData('+')]
        [InlineData('-')]
        public async Task GrantAfterCancellingIsUnlockedAgain(char unlockAnswer)
        {
            // The server's '+' crosses the client's hang-up on the wire: the key is held on the server,
            // so the client must give it back (a new connection with an Unlock frame) and still report
            // the cancellation. When that unlock is answered '-', its error is the cancellation's
            // InnerException rather than dropped (README).
            using (var fake = GrantingAfterHangUp(unlockAnswer))
            using (var cts = new CancellationTokenSource())
            {
                var client = new LockingCenterClient(fake.Address, "a");
                Task<LockHandle> waiting = client.LockAsync("k", cts.Token);
                Assert.True(fake.Received.Wait(Patience));
                cts.Cancel();
                var e = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting);
                Assert.True(fake.HangUp.Wait(Patience), "server did not see the hang-up");
                Assert.True(fake.WaitForFrames(2, Patience), "no unlock after the raced grant");
                Assert.Equal(UnlockK, Vectors.Hex(fake.Frames[1]));
                if (unlockAnswer == '-')
                    Assert.True(e.InnerException is RefusedException, "inner: " + e.InnerException);
            }
        }

        [Theory]
        [InlineData('+')]
        [InlineData('-')]
        public async Task GrantAfterTheLockTimeoutIsUnlockedAgain(char unlockAnswer)
        {
            // The caller gets the timeout either way; when the unlock of the raced grant is answered
            // '-', with the unlock's error attached rather than dropped.
            using (var fake = GrantingAfterHangUp(unlockAnswer))
            {
                var client = new LockingCenterClient(fake.Address, "a");
                var e = await Assert.ThrowsAsync<LockTimeoutException>(() => client.LockAsync("k", TimeSpan.FromMilliseconds(300)));
                // The give-back was answered before the timeout was raised: both frames are in already.
                Assert.Equal(2, fake.Frames.Count);
                Assert.True(fake.WaitForFrames(2, Patience), "no unlock after the raced grant");
                Assert.Equal(UnlockK, Vectors.Hex(fake.Frames[1]));
                if (unlockAnswer == '-')
                    Assert.True(e.InnerException is RefusedException, "inner: " + e.InnerException);
                else
                    Assert.Null(e.InnerException);
            }
        }

        [Fact]
        public async Task SilentServerAfterTheHangUpDelaysTheTimeoutByAtMostTheGrace()
        {
            // The stand-in reads the client's hang-up, then neither answers nor closes for 5 s: the
            // client reads on for at most its 2 s grace (the README's "up to 2 s"), not 5 s.
            using (var fake = new FakeServer(f => FakeServer.SilentAfterHangUp))
            {
                var client = new LockingCenterClient(fake.Address, "a");
                var watch = Stopwatch.StartNew();
                await Assert.ThrowsAsync<LockTimeoutException>(() => client.LockAsync("k", TimeSpan.FromMilliseconds(200)));
                long ms = watch.ElapsedMilliseconds;
                const long bound = 200 + 2000 + 1000;
                Assert.True(ms >= 180 && ms < bound, "gave up after " + ms + " ms, bound " + bound + " ms");
                Assert.True(fake.HangUp.Wait(Patience), "server did not see the EOF");
                Assert.Equal(1, fake.Frames.Count);
            }
        }

        [Fact]
        public async Task GivingUpWithoutAGrantUnlocksNothing()
        {
            // The server withdraws the waiter and closes: nothing is held, so nothing may be unlocked
            // (an unlock would release whoever holds the key now).
            using (var fake = new FakeServer(f => f[0] == (byte)LockAction.Lock ? FakeServer.Hold : '+'))
            using (var cts = new CancellationTokenSource())
            {
                var client = new LockingCenterClient(fake.Address, "a");
                Task<LockHandle> waiting = client.LockAsync("k", cts.Token);
                Assert.True(fake.Received.Wait(Patience));
                cts.Cancel();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting);
                await Assert.ThrowsAsync<LockTimeoutException>(() => client.LockAsync("k", TimeSpan.FromMilliseconds(200)));
                // A third request marks the end: every frame before it has arrived.
                await client.ResetByKeyAsync("k");
                var frames = fake.Frames;
                Assert.Equal(3, frames.Count);
                Assert.Equal((byte)LockAction.Lock, frames[0][0]);
                Assert.Equal((byte)LockAction.Lock, frames[1][0]);
                Assert.Equal((byte)LockAction.ResetByKey, frames[2][0]);
            }
        }

        [Fact]
        public async Task AlreadyCancelledTokenConnectsNowhere()
        {
            using (var fake = new FakeServer(f => '+'))
            {
                var client = new LockingCenterClient(fake.Address);
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => client.LockAsync("k", new CancellationToken(true)));
                Thread.Sleep(100);
                Assert.Equal(0, fake.Frames.Count);
            }
        }

        [Fact]
        public async Task ScopedLockUnlocksAtTheEndOfTheBlock()
        {
            using (var fake = new FakeServer(f => '+'))
            {
                var client = new LockingCenterClient(fake.Address, "a");
                using (LockHandle held = await client.LockAsync("k"))
                {
                    Assert.Equal("k", held.Key);
                    await held.UnlockAsync(); // explicit unlock; Dispose must not send a second one
                    Assert.True(held.IsReleased);
                }
                using (var held = await client.TryLockOrThrowAsync("k"))
                {
                    Assert.Equal("k", held.Key);
                }
                using (client.Lock("k"))
                {
                }
                var frames = fake.Frames;
                Assert.Equal(6, frames.Count);
                Assert.Equal("01016b0161", Vectors.Hex(frames[0]));
                Assert.Equal(UnlockK, Vectors.Hex(frames[1]));
                Assert.Equal("05016b0161", Vectors.Hex(frames[2]));
                Assert.Equal(UnlockK, Vectors.Hex(frames[3]));
                Assert.Equal("01016b0161", Vectors.Hex(frames[4]));
                Assert.Equal(UnlockK, Vectors.Hex(frames[5]));
            }
        }

        [Fact]
        public async Task DisposeThrowsWhenTheUnlockIsRefused()
        {
            // Lock is granted, the unlock answered '-' (as after a reset): Dispose must not hide it.
            using (var fake = new FakeServer(f => f[0] == (byte)LockAction.Lock ? '+' : '-'))
            {
                var client = new LockingCenterClient(fake.Address, "a");
                LockHandle held = await client.LockAsync("k");
                Assert.Throws<RefusedException>(() => held.Dispose());
                Assert.True(held.IsReleased);
                Assert.Equal(UnlockK, Vectors.Hex(fake.Frames[1]));
            }
        }

#if NETCOREAPP3_0_OR_GREATER || LC_ASYNC_DISPOSABLE
        [Fact]
        public async Task DisposeAsyncUnlocksOnce()
        {
            using (var fake = new FakeServer(f => '+'))
            {
                var client = new LockingCenterClient(fake.Address, "a");
                LockHandle held = await client.LockAsync("k");
                IAsyncDisposable scope = held;
                await scope.DisposeAsync();
                await scope.DisposeAsync();
                Assert.True(held.IsReleased);
                Assert.Equal(2, fake.Frames.Count);
                Assert.Equal(UnlockK, Vectors.Hex(fake.Frames[1]));
            }
        }
#endif

        [Fact]
        public async Task WaitLocksThenUnlocks()
        {
            using (var fake = new FakeServer(f => '+'))
            {
                var client = new LockingCenterClient(fake.Address);
                await client.WaitAsync("k");
                client.Wait("k");
                var frames = fake.Frames;
                Assert.Equal(4, frames.Count);
                Assert.Equal((byte)1, frames[0][0]);
                Assert.Equal((byte)2, frames[1][0]);
                Assert.Equal((byte)1, frames[2][0]);
                Assert.Equal((byte)2, frames[3][0]);
            }
        }

        [Fact]
        public async Task ResetBySourceSendsNoKey()
        {
            using (var fake = new FakeServer(f => '+'))
            {
                var client = new LockingCenterClient(fake.Address, "me");
                await client.ResetBySourceAsync();
                await client.ResetBySourceAsync("other");
                client.ResetBySource("");
                var frames = fake.Frames;
                Assert.Equal("0400026d65", Vectors.Hex(frames[0]));
                Assert.Equal("0400056f74686572", Vectors.Hex(frames[1]));
                Assert.Equal("040000", Vectors.Hex(frames[2]));
            }
        }

        [Fact]
        public void AddressForms()
        {
            Assert.Equal(new[] { "localhost", "22119" }, LockingCenterClient.SplitAddress("localhost"));
            Assert.Equal(new[] { "10.1.2.3", "80" }, LockingCenterClient.SplitAddress("10.1.2.3:80"));
            Assert.Equal(new[] { "::1", "9000" }, LockingCenterClient.SplitAddress("[::1]:9000"));
            Assert.Equal(new[] { "::1", "22119" }, LockingCenterClient.SplitAddress("::1"));
            Assert.Throws<ArgumentException>(() => LockingCenterClient.SplitAddress("host:0"));
            Assert.Throws<ArgumentException>(() => LockingCenterClient.SplitAddress("host:x"));
            Assert.Throws<ArgumentException>(() => LockingCenterClient.SplitAddress(""));
        }

        [Fact]
        public void NonPositiveTimeoutIsRejected()
        {
            var client = new LockingCenterClient("127.0.0.1:1");
            Assert.Throws<ArgumentOutOfRangeException>(() => client.Lock("k", TimeSpan.Zero));
        }
    }
}
