using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Threading.Tasks;

namespace LockingCenter.Tests
{
    /// <summary>
    /// Helpers for tests against real servers: the JSON API over plain HTTP/1.0, and servers of a test's
    /// own started from $LC_SERVER_BIN on free loopback ports (stopped by PID with SIGTERM).
    /// </summary>
    internal sealed class TestServer : IDisposable
    {
        public static readonly string Shared = Environment.GetEnvironmentVariable("LC_TEST_ADDRESS");
        public static readonly string SharedWeb = Environment.GetEnvironmentVariable("LC_TEST_WEB_ADDRESS");
        public static readonly string Bin = Environment.GetEnvironmentVariable("LC_SERVER_BIN");

        public string Address { get; private set; }
        public string Web { get; private set; }
        private Process _process;

        public static int FreePort()
        {
            return Vectors.DeadPort();
        }

        /// <summary>Starts $LC_SERVER_BIN with env on free ports (or tcpPort when not 0) and waits for /readyz.</summary>
        public static async Task<TestServer> StartAsync(int tcpPort, Dictionary<string, string> env)
        {
            int tcp = tcpPort != 0 ? tcpPort : FreePort();
            int web = FreePort();
            var psi = new ProcessStartInfo(Bin) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
            foreach (var kv in env) psi.EnvironmentVariables[kv.Key] = kv.Value;
            psi.EnvironmentVariables["BIND_ADDRESS"] = "127.0.0.1:" + tcp;
            psi.EnvironmentVariables["WEB_ADDRESS"] = "127.0.0.1:" + web;
            var s = new TestServer { Address = "127.0.0.1:" + tcp, Web = "127.0.0.1:" + web, _process = Process.Start(psi) };
            s._process.OutputDataReceived += (o, e) => { };
            s._process.ErrorDataReceived += (o, e) => { };
            s._process.BeginOutputReadLine();
            s._process.BeginErrorReadLine();
            var watch = Stopwatch.StartNew();
            while (watch.Elapsed < TimeSpan.FromSeconds(10))
            {
                if (s._process.HasExited) throw new InvalidOperationException("server exited with " + s._process.ExitCode);
                if (Http("GET", s.Web, "/readyz").Item1 == 200) return s;
                await Task.Delay(20);
            }
            s.Dispose();
            throw new InvalidOperationException("server not ready within 10 s");
        }

        /// <summary>SIGTERM by PID, then waits for the exit.</summary>
        public void Dispose()
        {
            if (_process == null || _process.HasExited) return;
            using (var kill = Process.Start(new ProcessStartInfo("kill", "-TERM " + _process.Id) { UseShellExecute = false }))
                kill.WaitForExit();
            if (!_process.WaitForExit(10000)) _process.Kill();
            _process.WaitForExit();
        }

        /// <summary>An HTTP/1.0 request over a plain socket: the status and the body; status 0 when unreachable.</summary>
        public static Tuple<int, string> Http(string method, string web, string path)
        {
            try
            {
                string[] hp = LockingCenterClient.SplitAddress(web);
                using (var tcp = new TcpClient())
                {
                    tcp.ReceiveTimeout = 2000;
                    tcp.SendTimeout = 2000;
                    tcp.Connect(hp[0], int.Parse(hp[1]));
                    var stream = tcp.GetStream();
                    string body = method == "POST" ? "{}" : "";
                    byte[] request = Encoding.ASCII.GetBytes(method + " " + path + " HTTP/1.0\r\nHost: " + web
                        + "\r\nAccept: application/json\r\nContent-Type: application/json\r\nContent-Length: " + body.Length
                        + "\r\nConnection: close\r\n\r\n" + body);
                    stream.Write(request, 0, request.Length);
                    var all = new MemoryStream();
                    stream.CopyTo(all);
                    string text = Encoding.UTF8.GetString(all.ToArray());
                    int split = text.IndexOf("\r\n\r\n", StringComparison.Ordinal);
                    if (split < 0 || !text.StartsWith("HTTP/1.", StringComparison.Ordinal)) return Tuple.Create(0, "");
                    return Tuple.Create(int.Parse(text.Substring(9, 3)), text.Substring(split + 4));
                }
            }
            catch (Exception e) when (e is IOException || e is SocketException)
            {
                return Tuple.Create(0, "");
            }
        }

        /// <summary>GET /api/v1/keys/{key}: the JSON, or null when the key is not held.</summary>
        public static Dictionary<string, object> KeyInfo(string web, string key)
        {
            var r = Http("GET", web, "/api/v1/keys/" + Uri.EscapeDataString(key));
            return r.Item1 == 200 ? Json.Parse(r.Item2) as Dictionary<string, object> : null;
        }

        /// <summary>The number of waiters of a held key, or -1 when it is not held.</summary>
        public static int QueueLength(Dictionary<string, object> info)
        {
            return info == null ? -1 : ((List<object>)info["queue"]).Count;
        }

        /// <summary>Polls the key's JSON until the condition holds, or fails after 5 s.</summary>
        public static async Task<Dictionary<string, object>> AwaitKey(string web, string key, Func<Dictionary<string, object>, bool> condition, string what)
        {
            var watch = Stopwatch.StartNew();
            Dictionary<string, object> last = null;
            while (watch.Elapsed < TimeSpan.FromSeconds(5))
            {
                last = KeyInfo(web, key);
                if (condition(last)) return last;
                await Task.Delay(20);
            }
            Xunit.Assert.True(false, "key " + key + " never showed " + what);
            return last;
        }
    }
}
