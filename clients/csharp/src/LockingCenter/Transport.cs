using System;
using System.Collections.Generic;
using System.IO;
using System.Net;
using System.Net.Security;
using System.Net.Sockets;
using System.Security.Authentication;
using System.Security.Cryptography.X509Certificates;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    /// <summary>
    /// TLS settings of a session (the server's TLS_CERT and TLS_KEY, and TLS_CLIENT_CA for mutual TLS):
    /// <see cref="SslStream"/>, TLS 1.2 or later. The server's certificate must chain to one of
    /// <see cref="TrustedCertificates"/> (or, when that is empty, to a CA the system trusts) and name the
    /// host being connected to (a DNS name, or an IP address among its IP SANs) or <see cref="ServerName"/>.
    /// </summary>
    public sealed class TlsOptions
    {
        /// <summary>The CAs to trust (e.g. <see cref="LoadPemCertificates"/> of a ca.pem); empty: the system's.</summary>
        public X509Certificate2Collection TrustedCertificates { get; set; } = new X509Certificate2Collection();

        /// <summary>
        /// This client's certificate, with its private key, for a server that asks for one (mutual TLS);
        /// null: none. Load it from PKCS#12 (<c>new X509Certificate2("client.p12", password)</c>).
        /// </summary>
        public X509Certificate2 ClientCertificate { get; set; }

        /// <summary>The name the server's certificate must carry, for every address; null: each address's host.</summary>
        public string ServerName { get; set; }

        /// <summary>Reads every certificate of a PEM file (a CA bundle).</summary>
        /// <param name="path">The file.</param>
        /// <returns>Its certificates.</returns>
        /// <exception cref="TlsException">The file holds no certificate, or one does not parse.</exception>
        public static X509Certificate2Collection LoadPemCertificates(string path)
        {
            const string begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----";
            var all = new X509Certificate2Collection();
            string text;
            try { text = File.ReadAllText(path, Encoding.ASCII); }
            catch (IOException e) { throw new TlsException("cannot read " + path + ": " + e.Message, e); }
            catch (UnauthorizedAccessException e) { throw new TlsException("cannot read " + path + ": " + e.Message, e); }
            for (int at = text.IndexOf(begin, StringComparison.Ordinal); at >= 0; at = text.IndexOf(begin, at, StringComparison.Ordinal))
            {
                int stop = text.IndexOf(end, at, StringComparison.Ordinal);
                if (stop < 0) break;
                string b64 = text.Substring(at + begin.Length, stop - at - begin.Length);
                try { all.Add(new X509Certificate2(Convert.FromBase64String(b64.Replace("\r", "").Replace("\n", "").Trim()))); }
                catch (Exception e) when (e is FormatException || e is System.Security.Cryptography.CryptographicException)
                {
                    throw new TlsException("a certificate in " + path + " does not parse: " + e.Message, e);
                }
                at = stop + end.Length;
            }
            if (all.Count == 0) throw new TlsException("no certificate in " + path, null);
            return all;
        }

        /// <summary>
        /// Whether cert names name: a DNS name of its subjectAltName (a leading "*." matching one label), or
        /// an IP address among its IP SANs; without a subjectAltName, its common name.
        /// </summary>
        internal static bool Names(X509Certificate2 cert, string name)
        {
            IPAddress ip;
            bool isIp = IPAddress.TryParse(name, out ip);
            foreach (X509Extension ext in cert.Extensions)
            {
                if (ext.Oid.Value != "2.5.29.17") continue;
                byte[] d = ext.RawData;
                int at = 0, end;
                if (!Der(d, ref at, out end) || d[0] != 0x30) return false;
                while (at < end)
                {
                    byte tag = d[at];
                    int start = at, stop;
                    if (!Der(d, ref at, out stop)) return false;
                    int len = stop - at;
                    if (tag == 0x82 && !isIp && DnsMatch(Encoding.ASCII.GetString(d, at, len), name)) return true;
                    if (tag == 0x87 && isIp)
                    {
                        var b = new byte[len];
                        Buffer.BlockCopy(d, at, b, 0, len);
                        if (new IPAddress(b).Equals(ip)) return true;
                    }
                    at = stop;
                    if (at <= start) return false;
                }
                return false;
            }
            string cn = cert.GetNameInfo(X509NameType.SimpleName, false);
            return !isIp && cn != null && DnsMatch(cn, name);
        }

        /// <summary>Reads a DER tag and length at d[at]: at moves to the contents, end is past them.</summary>
        private static bool Der(byte[] d, ref int at, out int end)
        {
            end = 0;
            if (at + 2 > d.Length) return false;
            int len = d[at + 1];
            at += 2;
            if (len >= 0x80)
            {
                int n = len & 0x7f;
                if (n == 0 || n > 3 || at + n > d.Length) return false;
                len = 0;
                for (int i = 0; i < n; i++) len = len << 8 | d[at++];
            }
            end = at + len;
            return end <= d.Length;
        }

        private static bool DnsMatch(string pattern, string name)
        {
            pattern = pattern.TrimEnd('.');
            name = name.TrimEnd('.');
            if (string.Equals(pattern, name, StringComparison.OrdinalIgnoreCase)) return true;
            if (!pattern.StartsWith("*.", StringComparison.Ordinal)) return false;
            int dot = name.IndexOf('.');
            return dot > 0 && string.Equals(pattern.Substring(1), name.Substring(dot), StringComparison.OrdinalIgnoreCase);
        }

        /// <summary>
        /// Whether the server's certificate is acceptable: the name checked by SslStream (the target host),
        /// the chain either trusted by the system or ending at one of <see cref="TrustedCertificates"/>.
        /// </summary>
        internal bool Validate(X509Certificate certificate, string name, SslPolicyErrors errors)
        {
            if (certificate == null || (errors & SslPolicyErrors.RemoteCertificateNotAvailable) != 0) return false;
            if ((errors & SslPolicyErrors.RemoteCertificateNameMismatch) != 0) return false;
            // The name is checked here too: Mono reports no name mismatch once the chain has failed (as it
            // does for a CA it does not know), so a wrong name would pass with TrustedCertificates.
            if (!Names(new X509Certificate2(certificate), name)) return false;
            X509Certificate2Collection trusted = TrustedCertificates;
            if (trusted == null || trusted.Count == 0) return errors == SslPolicyErrors.None;
            using (var own = new X509Chain())
            {
                own.ChainPolicy.RevocationMode = X509RevocationMode.NoCheck;
                own.ChainPolicy.VerificationFlags = X509VerificationFlags.AllowUnknownCertificateAuthority;
                own.ChainPolicy.ExtraStore.AddRange(trusted);
                var leaf = new X509Certificate2(certificate);
                if (!own.Build(leaf)) return false;
                X509Certificate2 root = own.ChainElements[own.ChainElements.Count - 1].Certificate;
                foreach (X509Certificate2 ca in trusted)
                    if (ca.Thumbprint == root.Thumbprint) return true;
                return false;
            }
        }
    }

    /// <summary>
    /// TLS failed: the server's certificate is not trusted or does not name the server, the server refused
    /// this client's certificate (or its lack of one), or a TLS file could not be read.
    /// </summary>
    public class TlsException : LockingCenterException
    {
        /// <summary>Creates the exception with a message and the cause.</summary>
        /// <param name="message">What failed.</param>
        /// <param name="inner">The cause, or null.</param>
        public TlsException(string message, Exception inner) : base(message, inner) { }
    }

    /// <summary>One address of a list: host and port.</summary>
    internal struct Endpoint
    {
        public string Host;
        public int Port;

        public override string ToString()
        {
            return (Host.IndexOf(':') >= 0 ? "[" + Host + "]" : Host) + ":" + Port;
        }
    }

    /// <summary>How a session reaches a server: the address list, the connect, TLS.</summary>
    internal static class Transport
    {
        /// <summary>Parses "a:1,b:2,..." (each "host:port", "host" or "[v6]:port").</summary>
        internal static Endpoint[] Parse(string addresses)
        {
            if (string.IsNullOrWhiteSpace(addresses)) throw new ArgumentException("address must not be empty", "address");
            var all = new List<Endpoint>();
            foreach (string a in addresses.Split(','))
            {
                string[] hp = LockingCenterClient.SplitAddress(a);
                all.Add(new Endpoint { Host = hp[0], Port = int.Parse(hp[1], System.Globalization.CultureInfo.InvariantCulture) });
            }
            return all.ToArray();
        }

        /// <summary>Shuffles in place (Fisher-Yates) with rng, which the caller locks if it is shared.</summary>
        internal static void Shuffle<T>(T[] a, Random rng)
        {
            for (int i = a.Length - 1; i > 0; i--)
            {
                int j = rng.Next(i + 1);
                T t = a[i];
                a[i] = a[j];
                a[j] = t;
            }
        }

        /// <summary>Every IP address of host (itself when it is one).</summary>
        internal static async Task<IPAddress[]> ResolveAsync(string host)
        {
            IPAddress ip;
            if (IPAddress.TryParse(host, out ip)) return new[] { ip };
            try
            {
                IPAddress[] found = await Dns.GetHostAddressesAsync(host).ConfigureAwait(false);
                if (found.Length == 0) throw new UnreachableException("cannot resolve " + host, null);
                return found;
            }
            catch (SocketException e)
            {
                throw new UnreachableException("cannot resolve " + host + ": " + e.Message, e);
            }
        }

        /// <summary>
        /// The TLS handshake over stream (the socket's), checking the certificate against host or the
        /// configured server name. Throws TlsException when the certificate or the handshake is refused.
        /// </summary>
        internal static async Task<Stream> HandshakeAsync(NetworkStream stream, string host, TlsOptions tls)
        {
            string name = tls.ServerName ?? host;
            var ssl = new SslStream(stream, false, (sender, cert, chain, errors) => tls.Validate(cert, name, errors));
            var clientCerts = new X509CertificateCollection();
            if (tls.ClientCertificate != null) clientCerts.Add(tls.ClientCertificate);
            try
            {
                // TLS 1.2: Mono's SslStream has no 1.3; the server takes 1.2 or later.
                await ssl.AuthenticateAsClientAsync(name, clientCerts, SslProtocols.Tls12, false).ConfigureAwait(false);
            }
            catch (AuthenticationException e)
            {
                ssl.Dispose();
                throw new TlsException("TLS handshake with " + host + " failed: " + e.Message, e);
            }
            catch (NotSupportedException e)
            {
                // Mono's SslStream cannot decode an ECDSA certificate ("unknown OID 1.2.840.10045.2.1").
                ssl.Dispose();
                throw new TlsException("TLS handshake with " + host + " failed: " + e.Message + " (Mono's SslStream takes RSA certificates only)", e);
            }
            catch (Exception)
            {
                ssl.Dispose();
                throw;
            }
            return ssl;
        }
    }
}
