using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace LockingCenter.Tests
{
    /// <summary>A test that needs $LC_SERVER_BIN besides the shared server; skipped without them.</summary>
    public sealed class OwnServerFactAttribute : FactAttribute
    {
        public OwnServerFactAttribute()
        {
            if (string.IsNullOrEmpty(TestServer.Shared)) Skip = "LC_TEST_ADDRESS is not set";
            else if (string.IsNullOrEmpty(TestServer.Bin)) Skip = "LC_SERVER_BIN is not set";
        }
    }

    /// <summary>
    /// The SIGKILL test: its holder is this test program run again as "mono LockingCenter.Tests.exe --hold",
    /// which only the Mono runner provides; skipped elsewhere and without the shared server.
    /// </summary>
    public sealed class HolderFactAttribute : FactAttribute
    {
        public HolderFactAttribute()
        {
            if (string.IsNullOrEmpty(TestServer.Shared)) Skip = "LC_TEST_ADDRESS is not set";
            else if (Type.GetType("Mono.Runtime") == null) Skip = "the holder process is started with mono (the Mono runner's --hold)";
        }
    }

    /// <summary>
    /// Sessions against real servers: the shared one at $LC_TEST_ADDRESS (JSON API at
    /// $LC_TEST_WEB_ADDRESS), and servers of the test's own from $LC_SERVER_BIN for restarts and expiry.
    /// Keys carry a random suffix: one server serves every client's suite.
    /// </summary>
    public class SessionTests
    {
        private static readonly string Run = Guid.NewGuid().ToString("N").Substring(0, 8);
        private static readonly string Web = TestServer.SharedWeb;

        private static string Key(string name)
        {
            return "csharp-session-" + Run + "-" + name;
        }

        private static Task<LockingCenterSession> Open(string source)
        {
            return LockingCenterSession.OpenAsync(new SessionOptions { Address = TestServer.Shared, Source = source });
        }

        private static Task<Dictionary<string, object>> AwaitQueue(string key, int n)
        {
            return TestServer.AwaitKey(Web, key, info => TestServer.QueueLength(info) == n, n + " waiters");
        }

        [ConformanceFact]
        public async Task LockTryLockUnlockWithTokens()
        {
            string k = Key("basic");
            using (var a = await Open("cs-a"))
            using (var b = await Open("cs-b"))
            {
                using (SessionLock held = await a.LockAsync(k))
                {
                    Assert.True(held.Token > 0);
                    Assert.Null(await b.TryLockAsync(k));
                    var info = TestServer.KeyInfo(Web, k);
                    Assert.Equal((double)held.Token, (double)info["token"]);
                    Assert.Equal(a.IdHex, (string)info["session"]);
                    await Assert.ThrowsAsync<NotHeldException>(() => b.UnlockAsync(k, held.Token));
                    await Assert.ThrowsAsync<NotHeldException>(() => b.UnlockAsync(k, 0));
                }
                await TestServer.AwaitKey(Web, k, info => info == null, "released");
            }
        }

        [ConformanceFact]
        public async Task StaleUnlockByTokenReleasesNothing()
        {
            string k = Key("stale");
            using (var a = await Open("cs-a"))
            {
                SessionLock first = await a.LockAsync(k);
                await first.UnlockAsync();
                SessionLock second = await a.LockAsync(k);
                Assert.True(second.Token > first.Token);
                await Assert.ThrowsAsync<NotHeldException>(() => a.UnlockAsync(k, first.Token));
                Assert.True(TestServer.KeyInfo(Web, k) != null, "the stale unlock released nothing");
                second.Dispose();
            }
        }

        [ConformanceFact]
        public async Task TokensStrictlyIncrease()
        {
            string k = Key("tokens");
            using (var a = await Open("cs-a"))
            using (var b = await Open("cs-b"))
            {
                ulong last = 0;
                for (int i = 0; i < 20; i++)
                {
                    using (SessionLock held = await (i % 2 == 0 ? a : b).LockAsync(k))
                    {
                        Assert.True(held.Token > last, "token " + held.Token + " after " + last);
                        last = held.Token;
                    }
                }
            }
        }

        [ConformanceFact]
        public async Task FifoAcrossTwoSessions()
        {
            string k = Key("fifo");
            using (var a = await Open("cs-a"))
            using (var b = await Open("cs-b"))
            {
                SessionLock first = await a.LockAsync(k);
                Task<SessionLock> second = b.LockAsync(k);
                await AwaitQueue(k, 1);
                Task<SessionLock> third = a.LockAsync(k); // a waits behind b, and behind itself
                await AwaitQueue(k, 2);
                await first.UnlockAsync();
                SessionLock s2 = await second;
                Assert.False(third.IsCompleted, "a's second Lock waits behind b");
                await s2.UnlockAsync();
                SessionLock s3 = await third;
                Assert.True(s2.Token > first.Token && s3.Token > s2.Token);
                await s3.UnlockAsync();
            }
        }

        [ConformanceFact]
        public async Task TimeoutAndCancelWithdrawTheWaiter()
        {
            string k = Key("cancel");
            using (var a = await Open("cs-a"))
            using (var b = await Open("cs-b"))
            using (SessionLock held = await a.LockAsync(k))
            {
                await Assert.ThrowsAsync<LockTimeoutException>(() => b.LockAsync(k, TimeSpan.FromMilliseconds(300)));
                await AwaitQueue(k, 0);
                var cts = new CancellationTokenSource();
                Task<SessionLock> waiting = b.LockAsync(k, cts.Token);
                await AwaitQueue(k, 1);
                cts.Cancel();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting);
                await AwaitQueue(k, 0);
                SessionLock other = await b.TryLockAsync(Key("cancel-other"));
                Assert.True(other.Token > held.Token, "the session goes on after a cancel");
            }
        }

        [ConformanceFact]
        public async Task ManyPendingLocksOnOneSession()
        {
            string k = Key("many");
            using (var a = await Open("cs-a"))
            using (var b = await Open("cs-b"))
            {
                SessionLock held = await a.LockAsync(k);
                int before = Process.GetCurrentProcess().Threads.Count;
                var waiting = new List<Task<SessionLock>>();
                for (int i = 0; i < 200; i++) waiting.Add(b.LockAsync(k));
                await TestServer.AwaitKey(Web, k, info => TestServer.QueueLength(info) == 200, "200 waiters");
                int during = Process.GetCurrentProcess().Threads.Count;
                Console.WriteLine("session: 200 pending LockAsync: threads " + before + " -> " + during);
                Assert.True(during - before <= 4, "threads grew from " + before + " to " + during);
                var watch = Stopwatch.StartNew();
                await held.UnlockAsync();
                ulong last = held.Token;
                foreach (Task<SessionLock> t in waiting)
                {
                    SessionLock l = await t;
                    Assert.True(l.Token > last, "FIFO: tokens grow in the order of the Locks");
                    last = l.Token;
                    await l.UnlockAsync();
                }
                Console.WriteLine("session: 200 hand-overs on one key in " + watch.ElapsedMilliseconds + " ms");
            }
        }

        [HolderFact]
        public async Task AKilledHolderReleasesItsKeysWithinTheTtl()
        {
            var keys = new[] { Key("kill-1"), Key("kill-2"), Key("kill-3") };
            const int ttlMs = 2000;
            string exe = typeof(SessionTests).Assembly.Location;
            var psi = new ProcessStartInfo("mono", "\"" + exe + "\" --hold " + TestServer.Shared + " " + ttlMs + " " + string.Join(" ", keys))
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
            };
            using (Process child = Process.Start(psi))
            using (var s = await Open("cs-waiter"))
            {
                try
                {
                    Assert.Equal("held", await child.StandardOutput.ReadLineAsync());
                    var waiting = new List<Task<SessionLock>>();
                    foreach (string k in keys) waiting.Add(s.LockAsync(k));
                    foreach (string k in keys) await AwaitQueue(k, 1);
                    var watch = Stopwatch.StartNew();
                    child.Kill(); // SIGKILL: no Close, no unlock
                    child.WaitForExit();
                    foreach (Task<SessionLock> t in waiting)
                    {
                        Assert.True(await Task.WhenAny(t, Task.Delay(ttlMs + 3000)) == t, "the key never passed on");
                        (await t).Dispose();
                    }
                    long ms = watch.ElapsedMilliseconds;
                    Console.WriteLine("session: keys of a SIGKILLed holder (TTL " + ttlMs + " ms) passed on after " + ms + " ms");
                    Assert.True(ms <= ttlMs + 1000, "passed on after " + ms + " ms");
                }
                finally
                {
                    if (!child.HasExited) child.Kill();
                }
            }
        }

        /// <summary>The child of the SIGKILL test: opens a session, locks the keys, prints "held", waits to be killed.</summary>
        internal static int Hold(string[] args)
        {
            var s = LockingCenterSession.OpenAsync(new SessionOptions
            {
                Address = args[0], Source = "cs-holder", Ttl = TimeSpan.FromMilliseconds(int.Parse(args[1])),
            }).GetAwaiter().GetResult();
            for (int i = 2; i < args.Length; i++) s.LockAsync(args[i]).GetAwaiter().GetResult();
            Console.WriteLine("held");
            Console.Out.Flush();
            Thread.Sleep(Timeout.Infinite);
            return 0;
        }

        [ConformanceFact]
        public async Task EndedFromTheWebIsReportedAsLost()
        {
            string k = Key("ended");
            var s = await Open("cs-a");
            SessionLock held = await s.LockAsync(k);
            Assert.Equal(200, TestServer.Http("POST", Web, "/api/v1/sessions/" + s.IdHex + "/end").Item1);
            Assert.True(await Task.WhenAny(s.Completion, Task.Delay(10000)) == s.Completion, "the loss was not reported");
            await Assert.ThrowsAsync<SessionLostException>(() => s.Completion);
            Assert.False(s.IsOpen);
            Assert.True(s.Ended.IsCancellationRequested || await WaitCancelled(s.Ended));
            Assert.Throws<SessionLostException>(() => held.Check());
            Assert.Throws<SessionLostException>(() => held.Dispose());
            await Assert.ThrowsAsync<SessionLostException>(() => s.LockAsync(k));
            await Assert.ThrowsAsync<SessionLostException>(() => s.CloseAsync());
            await s.CloseAsync(); // reported once
        }

        private static async Task<bool> WaitCancelled(CancellationToken t)
        {
            var done = new TaskCompletionSource<bool>();
            using (t.Register(() => done.TrySetResult(true)))
                return await Task.WhenAny(done.Task, Task.Delay(5000)) == done.Task;
        }

        [OwnServerFact]
        public async Task ResumesAfterAServerRestartWithDataPath()
        {
            string dir = Path.Combine(Path.GetTempPath(), "lc-cs-" + Guid.NewGuid().ToString("N"));
            Directory.CreateDirectory(dir);
            var env = new Dictionary<string, string> { { "DATA_PATH", Path.Combine(dir, "wal") } };
            TestServer first = await TestServer.StartAsync(0, env);
            int port = int.Parse(first.Address.Substring(first.Address.LastIndexOf(':') + 1));
            string k = Key("restart");
            try
            {
                using (var s = await LockingCenterSession.OpenAsync(new SessionOptions { Address = first.Address, Source = "cs-r", Ttl = TimeSpan.FromSeconds(10) }))
                {
                    SessionLock held = await s.LockAsync(k);
                    first.Dispose();
                    using (TestServer second = await TestServer.StartAsync(port, env))
                    {
                        // The session resumes on its own; its held key is still its own, same token.
                        SessionLock other = await s.LockAsync(Key("restart-other"), TimeSpan.FromSeconds(10));
                        var info = TestServer.KeyInfo(second.Web, k);
                        Assert.True(info != null, "the key stays held across the restart");
                        Assert.Equal((double)held.Token, (double)info["token"]);
                        Assert.Equal(s.IdHex, (string)info["session"]);
                        Assert.True(other.Token > held.Token);
                        held.Dispose();
                        other.Dispose();
                        Assert.True(s.IsOpen);
                    }
                }
            }
            finally
            {
                first.Dispose();
                Directory.Delete(dir, true);
            }
        }

        [OwnServerFact]
        public async Task ASessionLostPastItsTtlIsReported()
        {
            TestServer server = await TestServer.StartAsync(0, new Dictionary<string, string>());
            var s = await LockingCenterSession.OpenAsync(new SessionOptions { Address = server.Address, Ttl = TimeSpan.FromSeconds(1) });
            try
            {
                Assert.Equal(TimeSpan.FromSeconds(1), s.Ttl);
                SessionLock held = await s.LockAsync(Key("expiry"));
                var watch = Stopwatch.StartNew();
                server.Dispose(); // nothing to resume to: the TTL runs out
                Assert.True(await Task.WhenAny(s.Completion, Task.Delay(5000)) == s.Completion, "the loss was not reported");
                long ms = watch.ElapsedMilliseconds;
                Console.WriteLine("session: loss reported " + ms + " ms after the server stopped (TTL 1000 ms)");
                await Assert.ThrowsAsync<SessionLostException>(() => s.Completion);
                Assert.True(ms <= 1500, "reported after " + ms + " ms");
                Assert.Throws<SessionLostException>(() => held.Dispose());
                await Assert.ThrowsAsync<SessionLostException>(() => s.TryLockAsync(Key("expiry")));
            }
            finally
            {
                server.Dispose();
                try { await s.CloseAsync(); } catch (SessionLostException) { }
            }
        }

        [ConformanceFact]
        public async Task CloseReleasesEveryHold()
        {
            string k = Key("close");
            var s = await Open("cs-a");
            await s.LockAsync(k);
            await s.LockAsync(Key("close-2"));
            await s.CloseAsync();
            Assert.True(s.Completion.IsCompleted && !s.Completion.IsFaulted);
            Assert.Null(TestServer.KeyInfo(Web, k));
            await Assert.ThrowsAsync<SessionClosedException>(() => s.LockAsync(k));
        }
    }
}
