using System;
using System.Collections.Generic;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Text;

namespace LockingCenter.Tests
{
    /// <summary>The shared test vectors: $LC_VECTORS, else the repository's wire/testdata/vectors.json.</summary>
    internal static class Vectors
    {
        public static string PathOf()
        {
            string env = Environment.GetEnvironmentVariable("LC_VECTORS");
            if (!string.IsNullOrEmpty(env)) return env;
            // Walk up from the working folder and from the test assembly to the repository root.
            foreach (string start in new[] { Directory.GetCurrentDirectory(), AppDomain.CurrentDomain.BaseDirectory })
            {
                for (var d = new DirectoryInfo(start); d != null; d = d.Parent)
                {
                    string p = Path.Combine(d.FullName, "wire", "testdata", "vectors.json");
                    if (File.Exists(p)) return p;
                }
            }
            throw new FileNotFoundException("wire/testdata/vectors.json not found; set LC_VECTORS");
        }

        public static List<Dictionary<string, object>> List(string name)
        {
            var root = (Dictionary<string, object>)Json.Parse(File.ReadAllText(PathOf(), Encoding.UTF8));
            var result = new List<Dictionary<string, object>>();
            foreach (object o in (List<object>)root[name]) result.Add((Dictionary<string, object>)o);
            return result;
        }

        public static LockAction ActionOf(Dictionary<string, object> v)
        {
            return (LockAction)(byte)(double)v["action"];
        }

        public static byte[] Hex(string hex)
        {
            var b = new byte[hex.Length / 2];
            for (int i = 0; i < b.Length; i++) b[i] = Convert.ToByte(hex.Substring(2 * i, 2), 16);
            return b;
        }

        public static string Hex(byte[] b)
        {
            var s = new StringBuilder();
            foreach (byte x in b) s.Append(x.ToString("x2"));
            return s.ToString();
        }

        /// <summary>A loopback port nothing listens on (bound, then released).</summary>
        public static int DeadPort()
        {
            var l = new TcpListener(IPAddress.Loopback, 0);
            l.Start();
            int port = ((IPEndPoint)l.LocalEndpoint).Port;
            l.Stop();
            return port;
        }
    }
}
