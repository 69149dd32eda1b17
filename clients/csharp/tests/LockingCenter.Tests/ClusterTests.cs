using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Security.Cryptography.X509Certificates;
using System.Threading.Tasks;
using Xunit;

namespace LockingCenter.Tests
{
    /// <summary>
    /// A test that needs the cluster and TLS fixture clients/run-tests starts: skipped (loudly) without
    /// its variables, and run (so that it fails) under CI=true.
    /// </summary>
    public sealed class FixtureFactAttribute : FactAttribute
    {
        public FixtureFactAttribute(params string[] vars)
        {
            string missing = vars.FirstOrDefault(v => string.IsNullOrEmpty(Environment.GetEnvironmentVariable(v)));
            if (missing != null && Environment.GetEnvironmentVariable("CI") != "true")
                Skip = missing + " is not set (clients/run-tests starts the cluster and TLS fixture)";
        }
    }

    /// <summary>
    /// Against a real 3-node cluster (LC_TEST_CLUSTER, its control API LC_TEST_CLUSTER_CONTROL, the
    /// lost-answer build's LC_TEST_LOST_ANSWER_PREFIX) and real TLS servers (LC_TEST_TLS_ADDRESS,
    /// LC_TEST_MTLS_ADDRESS, LC_TEST_TLS_DIR).
    /// </summary>
    public class ClusterTests
    {
        private static readonly string Run = Guid.NewGuid().ToString("N").Substring(0, 8);

        private static string Key(string name)
        {
            return "csharp-cluster-" + Run + "-" + name;
        }

        private static string Env(string name)
        {
            string v = Environment.GetEnvironmentVariable(name);
            Assert.True(!string.IsNullOrEmpty(v), name + " is not set under CI=true");
            return v;
        }

        private static Dictionary<string, object> Control(string path)
        {
            var r = TestServer.Http("POST", Env("LC_TEST_CLUSTER_CONTROL"), path);
            Assert.True(r.Item1 == 200, "fixture " + path + ": status " + r.Item1 + " " + r.Item2);
            return (Dictionary<string, object>)Json.Parse(r.Item2);
        }

        /// <summary>A field ("address" or "web") of the leader, or of a follower that is up.</summary>
        private static string Node(bool leader, string field)
        {
            var nodes = (List<object>)Control("/await-leader")["nodes"];
            foreach (Dictionary<string, object> n in nodes)
                if ((bool)n["leader"] == leader && (bool)n["up"]) return (string)n[field];
            Assert.True(false, "no such node");
            return null;
        }

        private static SessionOptions Options(string address)
        {
            return new SessionOptions { Address = address, Source = "cs-cluster", Ttl = TimeSpan.FromSeconds(10), ConnectTimeout = TimeSpan.FromSeconds(3) };
        }

        private static async Task AwaitWaiters(string web, string key, int n)
        {
            var watch = Stopwatch.StartNew();
            while (watch.Elapsed < TimeSpan.FromSeconds(10))
            {
                var info = TestServer.KeyInfo(web, key);
                if (info != null && Convert.ToInt32(info["waiters"]) == n) return;
                await Task.Delay(20);
            }
            Assert.True(false, key + " never had " + n + " waiters on the leader");
        }

        [FixtureFact("LC_TEST_CLUSTER", "LC_TEST_CLUSTER_CONTROL")]
        public async Task ASessionRidesThroughAKillOfTheLeader()
        {
            Control("/await-leader");
            string nodes = Env("LC_TEST_CLUSTER");
            const int n = 10;
            using (var a = await LockingCenterSession.OpenAsync(Options(nodes)))
            using (var b = await LockingCenterSession.OpenAsync(Options(nodes)))
            {
                var held = new List<SessionLock>();
                var others = new List<SessionLock>();
                for (int i = 0; i < n; i++)
                {
                    held.Add(await a.LockAsync(Key("held-" + i), TimeSpan.FromSeconds(10)));
                    others.Add(await b.LockAsync(Key("wait-" + i), TimeSpan.FromSeconds(10)));
                }
                var waiting = new List<Task<SessionLock>>();
                for (int i = 0; i < n; i++) waiting.Add(a.LockAsync(Key("wait-" + i), TimeSpan.FromSeconds(60)));
                string web = Node(true, "web");
                for (int i = 0; i < n; i++) await AwaitWaiters(web, Key("wait-" + i), 1);

                var watch = Stopwatch.StartNew();
                var killed = Control("/kill-leader");
                SessionLock probe = await a.TryLockAsync(Key("probe"));
                long ms = watch.ElapsedMilliseconds;
                Assert.True(probe != null, "the probe key was not free");
                probe.Dispose();
                Console.WriteLine("failover: killed " + killed["killed"] + "; the session answered again " + ms + " ms after the kill -9");

                Assert.True(a.IsOpen && b.IsOpen, "a session was lost");
                for (int i = 0; i < n; i++)
                {
                    Assert.Null(await a.TryLockAsync(Key("wait-" + i)));   // still b's: nothing granted twice
                    Assert.Null(await a.TryLockAsync(Key("held-" + i)));
                    Assert.False(waiting[i].IsCompleted, "a reissued lock completed before its key was free");
                }
                for (int i = 0; i < n; i++) others[i].Dispose();
                for (int i = 0; i < n; i++)
                {
                    SessionLock got = await waiting[i];
                    Assert.True(got.Token > others[i].Token, "token " + got.Token + " after " + others[i].Token);
                    got.Dispose();
                    await a.UnlockAsync(held[i].Key, held[i].Token); // the grant made before the kill, same token
                }
            }
            Control("/restart");
        }

        [FixtureFact("LC_TEST_CLUSTER", "LC_TEST_CLUSTER_CONTROL", "LC_TEST_LOST_ANSWER_PREFIX")]
        public async Task ALockWhoseAnswerWasLostGetsItsGrantByTheReissue()
        {
            Control("/await-leader");
            string key = Env("LC_TEST_LOST_ANSWER_PREFIX") + "csharp-" + Run;
            using (var s = await LockingCenterSession.OpenAsync(Options(Env("LC_TEST_CLUSTER"))))
            {
                var watch = Stopwatch.StartNew();
                SessionLock held = await s.LockAsync(key, TimeSpan.FromSeconds(30)); // a wait behind itself would time out
                Console.WriteLine("lost answer: the reissued lock got its grant (token " + held.Token + ") " + watch.ElapsedMilliseconds + " ms after it was sent");
                Assert.Null(await s.TryLockAsync(key));
                await s.UnlockAsync(key, held.Token);
            }
            Control("/restart");
        }

        [FixtureFact("LC_TEST_CLUSTER", "LC_TEST_CLUSTER_CONTROL")]
        public async Task AFollowersAddressAloneWorks()
        {
            string follower = Node(false, "address");
            foreach (string address in new[] { follower, "127.0.0.1:" + TestServer.FreePort() + "," + follower })
            {
                string k = Key("follower");
                using (var s = await LockingCenterSession.OpenAsync(Options(address)))
                {
                    SessionLock held = await s.LockAsync(k, TimeSpan.FromSeconds(10));
                    Assert.Null(await s.TryLockAsync(k));
                    held.Dispose();
                }
                var client = new LockingCenterClient(address, "cs-cluster-v1");
                Assert.True(await client.TryLockAsync(k));
                await client.UnlockAsync(k);
            }
        }

        // ---- TLS

        /// <summary>
        /// The TLS servers and their PEM folder: the fixture's, unless this is Mono and the fixture's
        /// certificates are ECDSA, which Mono's SslStream cannot verify ("unknown OID"); then RSA ones made
        /// with openssl, served by two servers of the test's own from $LC_SERVER_BIN (plain TLS, and
        /// TLS_CLIENT_CA), started once for the run.
        /// </summary>
        private static readonly Lazy<string[]> TlsFixture = new Lazy<string[]>(() =>
        {
            string dir = Env("LC_TEST_TLS_DIR");
            var ca = TlsOptions.LoadPemCertificates(Path.Combine(dir, "ca.pem"))[0];
            bool ecdsa = ca.PublicKey.Oid.Value == "1.2.840.10045.2.1";
            if (!ecdsa || Type.GetType("Mono.Runtime") == null)
                return new[] { Env("LC_TEST_TLS_ADDRESS"), Env("LC_TEST_MTLS_ADDRESS"), dir };
            Console.WriteLine("tls: the fixture's certificates are ECDSA, which Mono's SslStream cannot verify; "
                + "testing against servers of our own with RSA certificates made by openssl");
            string own = Path.Combine(Path.GetTempPath(), "lc-cs-tls-" + Run);
            Directory.CreateDirectory(own);
            File.WriteAllText(Path.Combine(own, "san.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
            File.WriteAllText(Path.Combine(own, "client.cnf"), "extendedKeyUsage=clientAuth\n");
            foreach (string cmd in new[]
            {
                "req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=lc-cs-test-ca",
                "req -x509 -newkey rsa:2048 -nodes -keyout other-ca-key.pem -out other-ca.pem -days 2 -subj /CN=lc-cs-other-ca",
                "req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj /CN=localhost",
                "x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 2 -extfile san.cnf",
                "req -newkey rsa:2048 -nodes -keyout client-key.pem -out client.csr -subj /CN=lc-cs-client",
                "x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out client.pem -days 2 -extfile client.cnf",
            })
                Openssl(cmd, own);
            string tls = StartTlsServer(own, false), mtls = StartTlsServer(own, true);
            return new[] { tls, mtls, own };
        });

        private static void Openssl(string args, string dir)
        {
            var psi = new ProcessStartInfo("openssl", args) { UseShellExecute = false, WorkingDirectory = dir, RedirectStandardError = true };
            using (var p = Process.Start(psi))
            {
                p.StandardError.ReadToEnd();
                p.WaitForExit();
                Assert.True(p.ExitCode == 0, "openssl " + args + " failed");
            }
        }

        private static readonly List<Process> OwnTlsServers = new List<Process>();

        /// <summary>Starts $LC_SERVER_BIN with TLS (memory only, web off) and waits until its port accepts.</summary>
        private static string StartTlsServer(string dir, bool mutual)
        {
            Assert.True(!string.IsNullOrEmpty(TestServer.Bin), "LC_SERVER_BIN is not set");
            int port = TestServer.FreePort();
            var psi = new ProcessStartInfo(TestServer.Bin) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
            psi.EnvironmentVariables["BIND_ADDRESS"] = "127.0.0.1:" + port;
            psi.EnvironmentVariables["WEB_ADDRESS"] = "off";
            psi.EnvironmentVariables["TLS_CERT"] = Path.Combine(dir, "server.pem");
            psi.EnvironmentVariables["TLS_KEY"] = Path.Combine(dir, "server-key.pem");
            if (mutual) psi.EnvironmentVariables["TLS_CLIENT_CA"] = Path.Combine(dir, "ca.pem");
            var p = Process.Start(psi);
            p.OutputDataReceived += (o, e) => { };
            p.ErrorDataReceived += (o, e) => { };
            p.BeginOutputReadLine();
            p.BeginErrorReadLine();
            lock (OwnTlsServers)
            {
                if (OwnTlsServers.Count == 0)
                    AppDomain.CurrentDomain.ProcessExit += (o, e) =>
                    {
                        foreach (Process q in OwnTlsServers)
                            if (!q.HasExited) q.Kill(); // by its PID
                    };
                OwnTlsServers.Add(p);
            }
            var watch = Stopwatch.StartNew();
            while (watch.Elapsed < TimeSpan.FromSeconds(10))
            {
                Assert.False(p.HasExited, "the TLS server exited with " + (p.HasExited ? p.ExitCode : 0));
                try
                {
                    using (var tcp = new System.Net.Sockets.TcpClient("127.0.0.1", port)) return "127.0.0.1:" + port;
                }
                catch (System.Net.Sockets.SocketException)
                {
                    System.Threading.Thread.Sleep(20);
                }
            }
            Assert.True(false, "the TLS server did not listen within 10 s");
            return null;
        }

        private static TlsOptions Tls(string ca, string serverName = null)
        {
            return new TlsOptions
            {
                TrustedCertificates = TlsOptions.LoadPemCertificates(Path.Combine(TlsFixture.Value[2], ca)),
                ServerName = serverName,
            };
        }

        private static SessionOptions TlsSession(string address, TlsOptions tls)
        {
            return new SessionOptions { Address = address, Tls = tls, ConnectTimeout = TimeSpan.FromSeconds(3) };
        }

        [FixtureFact("LC_TEST_TLS_ADDRESS", "LC_TEST_TLS_DIR")]
        public async Task ASessionOverTlsByIpAndByName()
        {
            string address = TlsFixture.Value[0];
            string byName = "localhost" + address.Substring(address.LastIndexOf(':'));
            foreach (string a in new[] { address, byName })
            {
                string k = Key("tls");
                using (var s = await LockingCenterSession.OpenAsync(TlsSession(a, Tls("ca.pem"))))
                {
                    SessionLock held = await s.LockAsync(k, TimeSpan.FromSeconds(5));
                    Assert.True(held.Token > 0);
                    Assert.Null(await s.TryLockAsync(k));
                    held.Dispose();
                }
            }
        }

        [FixtureFact("LC_TEST_TLS_ADDRESS", "LC_TEST_TLS_DIR")]
        public async Task AWrongServerNameOrAnotherCaIsRefused()
        {
            string address = TlsFixture.Value[0];
            await Assert.ThrowsAsync<TlsException>(() => LockingCenterSession.OpenAsync(TlsSession(address, Tls("ca.pem", "wrong.invalid"))));
            await Assert.ThrowsAsync<TlsException>(() => LockingCenterSession.OpenAsync(TlsSession(address, Tls("other-ca.pem"))));
            Assert.Throws<TlsException>(() => TlsOptions.LoadPemCertificates(Path.Combine(TlsFixture.Value[2], "no-such.pem")));
        }

        /// <summary>client.pem and client-key.pem as PKCS#12, which X509Certificate2 loads everywhere.</summary>
        private static X509Certificate2 ClientCertificate()
        {
            string dir = TlsFixture.Value[2];
            string p12 = Path.Combine(Path.GetTempPath(), "lc-cs-client-" + Run + ".p12");
            var psi = new ProcessStartInfo("openssl", "pkcs12 -export -keypbe PBE-SHA1-3DES -certpbe PBE-SHA1-3DES -macalg sha1 -passout pass:test -in \"" + Path.Combine(dir, "client.pem")
                + "\" -inkey \"" + Path.Combine(dir, "client-key.pem") + "\" -out \"" + p12 + "\"") { UseShellExecute = false };
            using (var p = Process.Start(psi))
            {
                p.WaitForExit();
                Assert.True(p.ExitCode == 0, "openssl pkcs12 failed");
            }
            try { return new X509Certificate2(p12, "test"); }
            finally { File.Delete(p12); }
        }

        [FixtureFact("LC_TEST_MTLS_ADDRESS", "LC_TEST_TLS_DIR")]
        public async Task MutualTls()
        {
            string address = TlsFixture.Value[1];
            TlsOptions with = Tls("ca.pem");
            with.ClientCertificate = ClientCertificate();
            string k = Key("mtls");
            using (var s = await LockingCenterSession.OpenAsync(TlsSession(address, with)))
            {
                SessionLock held = await s.LockAsync(k, TimeSpan.FromSeconds(5));
                held.Dispose();
            }
            await Assert.ThrowsAnyAsync<LockingCenterException>(() => LockingCenterSession.OpenAsync(TlsSession(address, Tls("ca.pem"))));
        }

        // ---- v1 over TLS: one request per TLS connection

        private static LockingCenterClient TlsClient(string address, TlsOptions tls)
        {
            return new LockingCenterClient(new LockingCenterOptions
            {
                Address = address,
                Source = "csharp-v1-tls",
                Tls = tls,
                ConnectTimeout = TimeSpan.FromSeconds(3),
            });
        }

        /// <summary>
        /// Lock, TryLock (held and free), Unlock (held and not), and a Lock that gives up: its hang-up
        /// withdraws the waiter, so the release after it leaves the key free.
        /// </summary>
        private static async Task V1Round(LockingCenterClient client, string k)
        {
            LockHandle held = await client.LockAsync(k, TimeSpan.FromSeconds(5));
            Assert.False(await client.TryLockAsync(k), "try-lock of a held key over TLS was won");
            var watch = Stopwatch.StartNew();
            await Assert.ThrowsAsync<LockTimeoutException>(() => client.LockAsync(k, TimeSpan.FromMilliseconds(300)));
            // The timeout is raised once the server closed the connection it was hung up on (or after a
            // 2 s grace): well before that, the waiter is withdrawn.
            Assert.True(watch.Elapsed < TimeSpan.FromSeconds(2), "the server did not close a hung-up waiter's connection: " + watch.Elapsed);
            await held.UnlockAsync();
            Assert.True(await client.TryLockAsync(k), "the key was granted to a withdrawn waiter");
            await client.UnlockAsync(k);
            await Assert.ThrowsAsync<RefusedException>(() => client.UnlockAsync(k));
        }

        [FixtureFact("LC_TEST_TLS_ADDRESS", "LC_TEST_TLS_DIR")]
        public async Task AV1ClientOverTlsByIpAndByName()
        {
            string address = TlsFixture.Value[0];
            string byName = "localhost" + address.Substring(address.LastIndexOf(':'));
            foreach (string a in new[] { address, byName })
                await V1Round(TlsClient(a, Tls("ca.pem")), Key("v1-tls"));
        }

        [FixtureFact("LC_TEST_TLS_ADDRESS", "LC_TEST_TLS_DIR")]
        public async Task AV1ClientRefusesAWrongServerNameOrAnotherCa()
        {
            string address = TlsFixture.Value[0];
            string k = Key("v1-tls-refused");
            await Assert.ThrowsAsync<TlsException>(() => TlsClient(address, Tls("ca.pem", "wrong.invalid")).TryLockAsync(k));
            await Assert.ThrowsAsync<TlsException>(() => TlsClient(address, Tls("other-ca.pem")).LockAsync(k, TimeSpan.FromSeconds(5)));
            // Nothing was sent: the key is free.
            var client = TlsClient(address, Tls("ca.pem"));
            Assert.True(await client.TryLockAsync(k), "the key was taken by a refused request");
            await client.UnlockAsync(k);
        }

        [FixtureFact("LC_TEST_MTLS_ADDRESS", "LC_TEST_TLS_DIR")]
        public async Task AV1ClientWithMutualTls()
        {
            string address = TlsFixture.Value[1];
            TlsOptions with = Tls("ca.pem");
            with.ClientCertificate = ClientCertificate();
            await V1Round(TlsClient(address, with), Key("v1-mtls"));
            string k = Key("v1-mtls-refused");
            var without = TlsClient(address, Tls("ca.pem"));
            await Assert.ThrowsAsync<TlsException>(() => without.TryLockAsync(k));
            await Assert.ThrowsAsync<TlsException>(() => without.UnlockAsync(k));
            var client = TlsClient(address, with);
            Assert.True(await client.TryLockAsync(k), "the key was taken by a refused request");
            await client.UnlockAsync(k);
        }
    }
}
