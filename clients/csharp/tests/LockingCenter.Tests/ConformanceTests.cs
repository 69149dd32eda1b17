using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Net.Sockets;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace LockingCenter.Tests
{
    /// <summary>A test that needs the real server at $LC_TEST_ADDRESS; skipped when it is unset.</summary>
    public sealed class ConformanceFactAttribute : FactAttribute
    {
        public ConformanceFactAttribute()
        {
            if (string.IsNullOrEmpty(Environment.GetEnvironmentVariable("LC_TEST_ADDRESS")))
                Skip = "LC_TEST_ADDRESS is not set";
        }
    }

    /// <summary>
    /// Conformance against the real server at $LC_TEST_ADDRESS (JSON API at $LC_TEST_WEB_ADDRESS). Keys
    /// carry a random suffix: one server serves every client's suite.
    /// </summary>
    public class ConformanceTests
    {
        private static readonly string Address = Environment.GetEnvironmentVariable("LC_TEST_ADDRESS");
        private static readonly string Web = Environment.GetEnvironmentVariable("LC_TEST_WEB_ADDRESS");
        private static readonly string Run = Guid.NewGuid().ToString("N").Substring(0, 8);
        private static readonly TimeSpan Patience = TimeSpan.FromSeconds(5);

        private static string Key(string name)
        {
            return "csharp-" + Run + "-" + name;
        }

        private static LockingCenterClient Client(string source)
        {
            return new LockingCenterClient(Address, source);
        }

        [ConformanceFact]
        public async Task LockThenUnlock()
        {
            var client = Client("cs-a");
            string k = Key("lock-unlock");
            LockHandle held = await client.LockAsync(k);
            Assert.Equal(k, held.Key);
            await client.UnlockAsync(k);
            await Assert.ThrowsAsync<RefusedException>(() => client.UnlockAsync(k));
        }

        [ConformanceFact]
        public async Task TryLockOnAHeldKeyIsNotWon()
        {
            var a = Client("cs-a");
            var b = Client("cs-b");
            string k = Key("trylock");
            using (await a.LockAsync(k))
            {
                Assert.False(await b.TryLockAsync(k));
                var e = await Assert.ThrowsAsync<NotWonException>(() => b.TryLockOrThrowAsync(k));
                Assert.Equal(k, e.Key);
            }
            await AssertFree(b, k);
        }

        [ConformanceFact]
        public async Task ScopedLockReleasesTheKey()
        {
            var client = Client("cs-a");
            string k = Key("scoped");
            using (var held = await client.LockAsync(k))
            {
                Assert.False(await client.TryLockAsync(k));
            }
            using (client.Lock(k, TimeSpan.FromSeconds(5)))
            {
                Assert.False(client.TryLock(k));
            }
            await AssertFree(client, k);
        }

        [ConformanceFact]
        public async Task WaitersAreServedInFifoOrder()
        {
            var client = Client("cs-fifo");
            string k = Key("fifo");
            LockHandle first = await client.LockAsync(k);
            Task<LockHandle> second = client.LockAsync(k);
            await Settle(k, 1);
            Task<LockHandle> third = client.LockAsync(k);
            await Settle(k, 2);
            Assert.False(second.IsCompleted);
            Assert.False(third.IsCompleted);

            await first.UnlockAsync();
            Assert.True(second.Wait(Patience), "second was not granted");
            await Task.Delay(100);
            Assert.False(third.IsCompleted, "third was granted while second held the key");
            await second.Result.UnlockAsync();
            Assert.True(third.Wait(Patience), "third was not granted");
            third.Result.Dispose();
            await AssertFree(client, k);
        }

        [ConformanceFact]
        public async Task TimeoutWithdrawsTheWaiter()
        {
            var client = Client("cs-timeout");
            string k = Key("timeout");
            using (await client.LockAsync(k))
            {
                await Assert.ThrowsAsync<LockTimeoutException>(() => client.LockAsync(k, TimeSpan.FromMilliseconds(300)));
                await AssertQueueEmpties(k);
            }
            // The withdrawn waiter was not granted the key on release.
            await AssertFree(client, k);
        }

        [ConformanceFact]
        public async Task CancellationWithdrawsTheWaiter()
        {
            var client = Client("cs-cancel");
            string k = Key("cancel");
            using (await client.LockAsync(k))
            using (var cts = new CancellationTokenSource())
            {
                Task<LockHandle> waiting = client.LockAsync(k, cts.Token);
                await Settle(k, 1);
                cts.Cancel();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting);
                await AssertQueueEmpties(k);
            }
            await AssertFree(client, k);
        }

        [ConformanceFact]
        public async Task ResetWhileWaitingRaisesTheResetError()
        {
            var client = Client("cs-reset");
            string k = Key("reset");
            await client.LockAsync(k);
            Task<LockHandle> waiting = client.LockAsync(k);
            await Settle(k, 1);
            await client.ResetByKeyAsync(k);
            await Assert.ThrowsAsync<ResetWhileWaitingException>(() => waiting);
            await AssertFree(client, k);
            await client.ResetByKeyAsync(k); // idempotent
        }

        [ConformanceFact]
        public async Task ResetBySourceReleasesItsKeys()
        {
            string source = "cs-src-" + Run;
            var owner = Client(source);
            var other = Client("cs-other");
            string k1 = Key("by-source-1"), k2 = Key("by-source-2");
            await owner.LockAsync(k1);
            await owner.LockAsync(k2);
            await other.ResetBySourceAsync(source);
            await AssertFree(other, k1);
            await AssertFree(other, k2);
        }

        [ConformanceFact]
        public async Task WaitWaitsForItsTurnAndLeavesTheKeyFree()
        {
            var client = Client("cs-wait");
            string k = Key("wait");
            LockHandle held = await client.LockAsync(k);
            Task turn = client.WaitAsync(k);
            await Settle(k, 1);
            Assert.False(turn.IsCompleted);
            await held.UnlockAsync();
            Assert.True(turn.Wait(Patience), "wait did not return");
            await AssertFree(client, k);
            await client.WaitAsync(k); // free key: returns at once
        }

        [ConformanceFact]
        public async Task OverLongKeyIsRefusedBeforeConnecting()
        {
            var nowhere = new LockingCenterClient("127.0.0.1:" + Vectors.DeadPort());
            await Assert.ThrowsAsync<InvalidRequestException>(() => nowhere.LockAsync(new string('k', 128)));
            await Assert.ThrowsAsync<UnreachableException>(() => nowhere.LockAsync("k"));
            await Assert.ThrowsAsync<InvalidRequestException>(() => Client("").TryLockAsync(new string('é', 64)));
        }

        /// <summary>The key is free: a try-lock wins it (then it is released again).</summary>
        private static async Task AssertFree(LockingCenterClient client, string key)
        {
            Assert.True(await client.TryLockAsync(key), "key " + key + " is not free");
            await client.UnlockAsync(key);
        }

        // ------------------------------------------------------------ JSON API helpers

        /// <summary>GET /api/v1/keys/{key} over a plain socket: the parsed JSON, or null when not a 200.</summary>
        private static Dictionary<string, object> KeyInfo(string key)
        {
            if (string.IsNullOrEmpty(Web)) return null;
            try
            {
                string[] hp = LockingCenterClient.SplitAddress(Web);
                using (var tcp = new TcpClient())
                {
                    tcp.ReceiveTimeout = 2000;
                    tcp.SendTimeout = 2000;
                    tcp.Connect(hp[0], int.Parse(hp[1]));
                    var stream = tcp.GetStream();
                    byte[] request = Encoding.ASCII.GetBytes("GET /api/v1/keys/" + Uri.EscapeDataString(key)
                        + " HTTP/1.0\r\nHost: " + Web + "\r\nAccept: application/json\r\nConnection: close\r\n\r\n");
                    stream.Write(request, 0, request.Length);
                    var all = new System.IO.MemoryStream();
                    stream.CopyTo(all);
                    string text = Encoding.UTF8.GetString(all.ToArray());
                    int split = text.IndexOf("\r\n\r\n", StringComparison.Ordinal);
                    if (split < 0 || !text.StartsWith("HTTP/1.", StringComparison.Ordinal)) return null;
                    string status = text.Substring(9, 3);
                    if (status != "200") return null;
                    return Json.Parse(text.Substring(split + 4)) as Dictionary<string, object>;
                }
            }
            catch (Exception)
            {
                return null;
            }
        }

        /// <summary>The number of waiters in a key's JSON, or -1 when it has no "queue" list.</summary>
        private static int QueueLength(Dictionary<string, object> info)
        {
            object q;
            return info.TryGetValue("queue", out q) && q is List<object> ? ((List<object>)q).Count : -1;
        }

        /// <summary>
        /// Waits until the key shows n waiters in the JSON API; when the API gives no answer for the key
        /// (not available), waits a fixed 300 ms so the request has surely reached the queue.
        /// </summary>
        private static async Task Settle(string key, int n)
        {
            var watch = Stopwatch.StartNew();
            bool seen = false;
            while (watch.Elapsed < TimeSpan.FromSeconds(3))
            {
                var info = KeyInfo(key);
                if (info != null)
                {
                    seen = true;
                    if (QueueLength(info) == n) return;
                }
                else if (!seen)
                {
                    await Task.Delay(300);
                    return;
                }
                await Task.Delay(20);
            }
            Assert.True(false, "key " + key + " never showed " + n + " waiters");
        }

        /// <summary>Polls GET /api/v1/keys/{key} until the held key's queue is empty (5 s deadline).</summary>
        private static async Task AssertQueueEmpties(string key)
        {
            Assert.False(string.IsNullOrEmpty(Web), "LC_TEST_WEB_ADDRESS is not set");
            var watch = Stopwatch.StartNew();
            Dictionary<string, object> last = null;
            while (watch.Elapsed < Patience)
            {
                last = KeyInfo(key);
                if (last != null && QueueLength(last) == 0) return;
                await Task.Delay(50);
            }
            Assert.True(false, "queue of " + key + " did not become empty; last answer: " + (last == null ? "none" : "a held key with waiters"));
        }
    }
}
