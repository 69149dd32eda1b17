using System;
using System.Collections.Generic;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Threading;

namespace LockingCenter.Tests
{
    /// <summary>
    /// A loopback stand-in for the server: it reads one whole frame per connection, records it, then
    /// answers what the responder returns (a byte), closes without answering (Close), keeps the
    /// connection open until the client hangs up (Hold), waits for the hang-up and then answers '+'
    /// anyway (GrantAfterHangUp: a grant that crossed the client's hang-up on the wire), or waits for
    /// the hang-up and then stays silent without closing for <see cref="SilenceMilliseconds"/>
    /// (SilentAfterHangUp).
    /// </summary>
    internal sealed class FakeServer : IDisposable
    {
        public const int Close = -1;
        public const int Hold = -2;
        public const int GrantAfterHangUp = -3;
        public const int SilentAfterHangUp = -4;

        /// <summary>How long SilentAfterHangUp keeps the connection open after the hang-up: past the client's 2 s grace.</summary>
        public const int SilenceMilliseconds = 5000;

        private readonly TcpListener _listener;
        private readonly Func<byte[], int> _responder;
        private readonly Thread _thread;
        private readonly object _mu = new object();
        private readonly List<byte[]> _frames = new List<byte[]>();
        private readonly List<bool> _halfClosed = new List<bool>();
        private volatile bool _closing;

        public readonly ManualResetEventSlim HangUp = new ManualResetEventSlim(false);
        public readonly ManualResetEventSlim Received = new ManualResetEventSlim(false);

        public FakeServer(Func<byte[], int> responder)
        {
            _responder = responder;
            _listener = new TcpListener(IPAddress.Loopback, 0);
            _listener.Start();
            _thread = new Thread(Serve) { IsBackground = true, Name = "fake-server" };
            _thread.Start();
        }

        public string Address
        {
            get { return "127.0.0.1:" + ((IPEndPoint)_listener.LocalEndpoint).Port; }
        }

        public List<byte[]> Frames
        {
            get { lock (_mu) return new List<byte[]>(_frames); }
        }

        /// <summary>Waits until at least <paramref name="count"/> frames arrived; false if the time ran out.</summary>
        public bool WaitForFrames(int count, TimeSpan timeout)
        {
            var watch = System.Diagnostics.Stopwatch.StartNew();
            lock (_mu)
            {
                while (_frames.Count < count)
                {
                    TimeSpan left = timeout - watch.Elapsed;
                    if (left <= TimeSpan.Zero) return false;
                    Monitor.Wait(_mu, left);
                }
                return true;
            }
        }

        /// <summary>For each connection: whether the client closed its side before the answer.</summary>
        public List<bool> HalfClosedEarly
        {
            get { lock (_mu) return new List<bool>(_halfClosed); }
        }

        private void Serve()
        {
            while (!_closing)
            {
                Socket c;
                try { c = _listener.AcceptSocket(); }
                catch (Exception) { return; }
                try { Handle(c); }
                catch (Exception) { /* the client went away */ }
                finally { c.Close(); }
            }
        }

        private static byte[] ReadN(Socket c, int n)
        {
            var b = new byte[n];
            int got = 0;
            while (got < n)
            {
                int r = c.Receive(b, got, n - got, SocketFlags.None);
                if (r == 0) throw new EndOfStreamException();
                got += r;
            }
            return b;
        }

        /// <summary>Whether the client closed its side within the time: readable with nothing to read.</summary>
        private static bool ClosedWithin(Socket c, int microseconds)
        {
            return c.Poll(microseconds, SelectMode.SelectRead) && c.Available == 0;
        }

        private void Handle(Socket c)
        {
            c.ReceiveTimeout = 5000;
            var frame = new MemoryStream();
            byte[] head = ReadN(c, 2);
            frame.Write(head, 0, 2);
            byte[] key = ReadN(c, head[1]);
            frame.Write(key, 0, key.Length);
            byte[] ss = ReadN(c, 1);
            frame.Write(ss, 0, 1);
            byte[] source = ReadN(c, ss[0]);
            frame.Write(source, 0, source.Length);
            byte[] f = frame.ToArray();
            // The client must keep its write side open until it has the answer.
            bool eof = ClosedWithin(c, 50000);
            lock (_mu)
            {
                _frames.Add(f);
                _halfClosed.Add(eof);
                Monitor.PulseAll(_mu);
            }
            Received.Set();
            int answer = _responder(f);
            if (answer == Close) return;
            if (answer == Hold)
            {
                // Wait up to 10 s for the client to hang up.
                if (ClosedWithin(c, 10000000)) HangUp.Set();
                return;
            }
            if (answer == SilentAfterHangUp)
            {
                if (!ClosedWithin(c, 10000000)) return;
                HangUp.Set();
                Thread.Sleep(SilenceMilliseconds);
                return;
            }
            if (answer == GrantAfterHangUp)
            {
                if (!ClosedWithin(c, 10000000)) return;
                HangUp.Set();
                answer = '+';
            }
            c.Send(new[] { (byte)answer });
        }

        public void Dispose()
        {
            _closing = true;
            _listener.Stop();
        }
    }
}
