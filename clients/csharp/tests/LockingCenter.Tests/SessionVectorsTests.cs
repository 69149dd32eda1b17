using System;
using System.Collections.Generic;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace LockingCenter.Tests
{
    /// <summary>
    /// The session entries of the shared vectors, byte for byte: the codec on every entry, and the frames
    /// the public API sends to a loopback stand-in that speaks the session protocol.
    /// </summary>
    public class SessionVectorsTests
    {
        private static ulong U64(object decimalString)
        {
            return ulong.Parse((string)decimalString, System.Globalization.CultureInfo.InvariantCulture);
        }

        private static long Num(Dictionary<string, object> v, string field)
        {
            return (long)(double)v[field];
        }

        [Fact]
        public void OpensEncodeByteForByte()
        {
            var all = Vectors.List("session_open");
            Assert.True(all.Count >= 10);
            foreach (var v in all)
            {
                byte[] got = SessionWire.EncodeOpen((byte)Num(v, "version"), (uint)Num(v, "ttl_ms"), U64(v["resume"]), (string)v["source"], (string)v["auth"]);
                Assert.Equal((string)v["hex"], Vectors.Hex(got));
            }
        }

        [Fact]
        public void OpenAnswersDecode()
        {
            foreach (var v in Vectors.List("session_open_answers"))
            {
                byte status;
                uint ttl;
                ulong session;
                SessionWire.DecodeOpenAnswer(Vectors.Hex((string)v["hex"]), out status, out ttl, out session);
                Assert.Equal(((string)v["status"])[0], (char)status);
                Assert.Equal((uint)Num(v, "ttl_ms"), ttl);
                Assert.Equal(U64(v["session"]), session);
            }
        }

        [Fact]
        public void RequestsEncodeByteForByte()
        {
            foreach (var v in Vectors.List("session_requests"))
            {
                byte[] got = SessionWire.EncodeRequest((byte)Num(v, "action"), (uint)Num(v, "id"), U64(v["token"]), (string)v["key"]);
                Assert.Equal((string)v["hex"], Vectors.Hex(got));
            }
        }

        [Fact]
        public void AnswersDecode()
        {
            foreach (var v in Vectors.List("session_answers"))
            {
                uint id;
                byte status;
                ulong token;
                SessionWire.DecodeAnswer(Vectors.Hex((string)v["hex"]), out id, out status, out token);
                Assert.Equal((uint)Num(v, "id"), id);
                Assert.Equal(((string)v["status"])[0], (char)status);
                Assert.Equal(U64(v["token"]), token);
            }
        }

        [Fact]
        public void InvalidRequestsAreRefusedBeforeSending()
        {
            foreach (var v in Vectors.List("session_invalid"))
                Assert.Throws<InvalidRequestException>(() => SessionWire.EncodeRequest((byte)Num(v, "action"), (uint)Num(v, "id"), U64(v["token"]), (string)v["key"]));
        }

        [Fact]
        public async Task InvalidOpensAreRefusedBeforeConnecting()
        {
            foreach (var v in Vectors.List("session_open_invalid"))
            {
                Assert.Throws<InvalidRequestException>(() => SessionWire.EncodeOpen((byte)Num(v, "version"), (uint)Num(v, "ttl_ms"), U64(v["resume"]), (string)v["source"], (string)v["auth"]));
                var o = new SessionOptions { Address = "127.0.0.1:" + Vectors.DeadPort(), Source = (string)v["source"], AuthToken = (string)v["auth"] };
                await Assert.ThrowsAsync<InvalidRequestException>(() => LockingCenterSession.OpenAsync(o));
            }
        }

        [Fact]
        public void SessionActionsAreTheProtocolNumbers()
        {
            var root = (Dictionary<string, object>)Json.Parse(File.ReadAllText(Vectors.PathOf()));
            var a = (Dictionary<string, object>)root["session_actions"];
            Assert.Equal((double)SessionWire.Open, (double)a["open"]);
            Assert.Equal((double)SessionWire.Lock, (double)a["lock"]);
            Assert.Equal((double)SessionWire.Unlock, (double)a["unlock"]);
            Assert.Equal((double)SessionWire.ResetByKey, (double)a["reset_by_key"]);
            Assert.Equal((double)SessionWire.ResetBySource, (double)a["reset_by_source"]);
            Assert.Equal((double)SessionWire.TryLock, (double)a["trylock"]);
            Assert.Equal((double)SessionWire.Cancel, (double)a["cancel"]);
            Assert.Equal((double)SessionWire.Ping, (double)a["ping"]);
            Assert.Equal((double)SessionWire.Close, (double)a["close"]);
        }

        [Fact]
        public void OriginalFramesAreThePrefixOfTheFullFrames()
        {
            // The client sends full v1 frames; the original server's clients sent shorter forms.
            foreach (var v in Vectors.List("original_frames"))
            {
                string hex = (string)v["hex"];
                LockAction action = Vectors.ActionOf(v);
                byte[] full = WireFormat.Encode(action, (string)v["key"], (string)v["source"]);
                string expected = action == LockAction.ResetBySource ? "0400" + hex.Substring(2) : hex + "00";
                Assert.Equal(expected, Vectors.Hex(full));
            }
        }

        /// <summary>A one-connection stand-in: answers the open, records each request, answers what the test sends.</summary>
        private sealed class FakeSessionServer : IDisposable
        {
            private readonly TcpListener _listener = new TcpListener(IPAddress.Loopback, 0);
            private readonly System.Collections.Concurrent.BlockingCollection<string> _requests = new System.Collections.Concurrent.BlockingCollection<string>();
            private NetworkStream _stream;
            public readonly TaskCompletionSource<string> Open = new TaskCompletionSource<string>();

            public FakeSessionServer()
            {
                _listener.Start();
                Task.Run(() => Serve());
            }

            public string Address
            {
                get { return "127.0.0.1:" + ((IPEndPoint)_listener.LocalEndpoint).Port; }
            }

            private void Serve()
            {
                try
                {
                    using (TcpClient c = _listener.AcceptTcpClient())
                    {
                        var s = c.GetStream();
                        byte[] head = Read(s, 15);
                        byte[] src = Read(s, head[14]);
                        byte[] asize = Read(s, 1);
                        byte[] auth = Read(s, asize[0]);
                        Open.TrySetResult(Vectors.Hex(head) + Vectors.Hex(src) + Vectors.Hex(asize) + Vectors.Hex(auth));
                        _stream = s;
                        Answer("2b000027100123456789abcdef");
                        while (true)
                        {
                            byte[] h = Read(s, 14);
                            byte[] k = Read(s, h[13]);
                            _requests.Add(Vectors.Hex(h) + Vectors.Hex(k));
                        }
                    }
                }
                catch (Exception e) when (e is IOException || e is SocketException || e is ObjectDisposedException)
                {
                    Open.TrySetResult("no open");
                }
            }

            private static byte[] Read(NetworkStream s, int n)
            {
                var b = new byte[n];
                for (int got = 0; got < n;)
                {
                    int r = s.Read(b, got, n - got);
                    if (r == 0) throw new EndOfStreamException();
                    got += r;
                }
                return b;
            }

            public void Answer(string hex)
            {
                byte[] b = Vectors.Hex(hex);
                _stream.Write(b, 0, b.Length);
            }

            public string Next()
            {
                return Next2(3000);
            }

            public string Next2(int millis)
            {
                string r;
                return _requests.TryTake(out r, millis) ? r : "nothing";
            }

            public void Dispose()
            {
                _listener.Stop();
                if (_stream != null) _stream.Dispose();
            }
        }

        [Fact]
        public async Task TheSessionSendsTheVectorsBytes()
        {
            using (var fake = new FakeSessionServer())
            {
                var s = await LockingCenterSession.OpenAsync(new SessionOptions { Address = fake.Address, Ttl = TimeSpan.FromSeconds(30), Source = "svc-a" });
                // "new session, TTL 30 s, with source"
                Assert.Equal("1001000075300000000000000000057376632d6100", await fake.Open.Task);
                Assert.Equal(81985529216486895UL, s.Id);
                Assert.Equal("0123456789abcdef", s.IdHex);
                Assert.Equal(TimeSpan.FromSeconds(10), s.Ttl);

                Task<SessionLock> lockTask = s.LockAsync("abc");
                Assert.Equal("0100000001000000000000000003616263", fake.Next()); // "lock", id 1
                Task<SessionLock> tryTask = s.TryLockAsync("abc");
                Assert.Equal("0500000002000000000000000003616263", fake.Next()); // "trylock", id 2
                fake.Answer("00000002230000000000000000");
                Assert.Null(await tryTask);
                fake.Answer("000000012b00062887831d0c35");
                SessionLock held = await lockTask;
                Assert.Equal(1733412345678901UL, held.Token);

                Task unlock = held.UnlockAsync();
                Assert.Equal("020000000300062887831d0c3503616263", fake.Next());
                fake.Answer("000000032b00062887831d0c35");
                await unlock;

                Task reset = s.ResetBySourceAsync("svc-a");
                Assert.Equal("04000000040000000000000000057376632d61", fake.Next());
                fake.Answer("000000042b0000000000000000");
                await reset;

                // A Lock given up sends Cancel with its id.
                Task<SessionLock> waiting = s.LockAsync("abc", TimeSpan.FromMilliseconds(100));
                Assert.Equal("0100000005000000000000000003616263", fake.Next());
                Assert.Equal("0600000005000000000000000000", fake.Next());
                await Assert.ThrowsAsync<LockTimeoutException>(() => waiting);
                fake.Answer("000000052d0000000000000000");

                // A grant that crossed the Cancel is unlocked by its token.
                var cts = new CancellationTokenSource();
                Task<SessionLock> crossing = s.LockAsync("abc", cts.Token);
                Assert.Equal("0100000006000000000000000003616263", fake.Next());
                cts.Cancel();
                Assert.Equal("0600000006000000000000000000", fake.Next());
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => crossing);
                fake.Answer("000000062b8000000000000001");
                Assert.Equal("02000000078000000000000001" + "03616263", fake.Next());
                fake.Answer("000000072b8000000000000001");

                Task close = s.CloseAsync();
                Assert.Equal("0800000008000000000000000000", fake.Next());
                fake.Answer("000000082b0000000000000000");
                fake.Dispose();
                await close;
                Assert.True(s.Completion.IsCompleted);
                Assert.True(s.Ended.IsCancellationRequested || !s.IsOpen);
            }
        }

        [Fact]
        public async Task AnIdleSessionSendsPing()
        {
            using (var fake = new FakeSessionServer())
            {
                var s = await LockingCenterSession.OpenAsync(fake.Address);
                await fake.Open.Task;
                var watch = System.Diagnostics.Stopwatch.StartNew();
                string r = await Task.Run(() => fake.Next2(6000));
                long ms = watch.ElapsedMilliseconds;
                Assert.True(r.StartsWith("07", StringComparison.Ordinal), "the first request of an idle session is a Ping: " + r);
                Assert.Equal(28, r.Length);
                Assert.True(ms >= 3000 && ms < 4500, "Ping after " + ms + " ms, TTL 10 s");
                fake.Answer(r.Substring(2, 8) + "2b0000000000000000");
                Task close = s.CloseAsync();
                string c = fake.Next();
                Assert.True(c.StartsWith("08", StringComparison.Ordinal), "Close: " + c);
                fake.Answer(c.Substring(2, 8) + "2b0000000000000000");
                fake.Dispose();
                await close;
            }
        }
    }
}
