using System;

namespace LockingCenter
{
    /// <summary>
    /// Encoding of the session frames (docs/protocol.md, "Sessions"). Integers are big-endian and
    /// unsigned; sizes are signed bytes, so a source, auth token or key is at most 127 bytes.
    /// <code>
    /// open    [16][version:1][ttl_ms:4][resume:8][sourceSize:1][source][authSize:1][auth]
    /// answer  [status:1][ttl_ms:4][session:8]                                     13 bytes
    /// request [action:1][id:4][token:8][keySize:1][key]                           14 + k bytes
    /// answer  [id:4][status:1][token:8]                                           13 bytes
    /// </code>
    /// </summary>
    public static class SessionWire
    {
        /// <summary>The first byte of a session connection.</summary>
        public const byte Open = 16;
        /// <summary>The session protocol version this client speaks.</summary>
        public const byte Version = 1;
        /// <summary>Length of both kinds of answer.</summary>
        public const int AnswerSize = 13;
        /// <summary>Session action: Lock.</summary>
        public const byte Lock = 1;
        /// <summary>Session action: Unlock (by token; 0: whichever grant this session holds on the key).</summary>
        public const byte Unlock = 2;
        /// <summary>Session action: ResetByKey.</summary>
        public const byte ResetByKey = 3;
        /// <summary>Session action: ResetBySource (the source in the key field).</summary>
        public const byte ResetBySource = 4;
        /// <summary>Session action: TryLock.</summary>
        public const byte TryLock = 5;
        /// <summary>Session action: Cancel of a pending Lock, named by its id.</summary>
        public const byte Cancel = 6;
        /// <summary>Session action: Ping.</summary>
        public const byte Ping = 7;
        /// <summary>Session action: Close.</summary>
        public const byte Close = 8;

        /// <summary>Encodes an open (resume 0: a new session); a source or auth over 127 bytes is refused.</summary>
        /// <param name="version">The protocol version (1).</param>
        /// <param name="ttlMillis">The TTL asked for; 0 asks for the server's.</param>
        /// <param name="resume">The session to resume, or 0.</param>
        /// <param name="source">The source, 0..127 bytes.</param>
        /// <param name="auth">The auth token, 0..127 bytes.</param>
        /// <returns>The frame.</returns>
        /// <exception cref="InvalidRequestException">The source or auth token is too long.</exception>
        public static byte[] EncodeOpen(byte version, uint ttlMillis, ulong resume, string source, string auth)
        {
            byte[] s = WireFormat.SourceBytes(source ?? "");
            byte[] a = AuthBytes(auth);
            var b = new byte[16 + s.Length + a.Length];
            b[0] = Open;
            b[1] = version;
            PutUInt32(b, 2, ttlMillis);
            PutUInt64(b, 6, resume);
            b[14] = (byte)s.Length;
            Buffer.BlockCopy(s, 0, b, 15, s.Length);
            b[15 + s.Length] = (byte)a.Length;
            Buffer.BlockCopy(a, 0, b, 16 + s.Length, a.Length);
            return b;
        }

        /// <summary>The UTF-8 bytes of an auth token, refused over 127 bytes.</summary>
        /// <param name="auth">The token (null: empty).</param>
        /// <returns>Its bytes.</returns>
        public static byte[] AuthBytes(string auth)
        {
            byte[] a = new System.Text.UTF8Encoding(false, false).GetBytes(auth ?? "");
            if (a.Length > WireFormat.MaxSize)
                throw new InvalidRequestException("auth token is " + a.Length + " bytes once UTF-8 encoded; at most " + WireFormat.MaxSize + " allowed");
            return a;
        }

        /// <summary>Decodes the 13-byte answer to an open.</summary>
        /// <param name="b">The answer.</param>
        /// <param name="status">'+' or '-'.</param>
        /// <param name="ttlMillis">The TTL granted.</param>
        /// <param name="session">The session id.</param>
        public static void DecodeOpenAnswer(byte[] b, out byte status, out uint ttlMillis, out ulong session)
        {
            status = b[0];
            ttlMillis = GetUInt32(b, 1);
            session = GetUInt64(b, 5);
        }

        /// <summary>
        /// The key bytes of a request: Lock, TryLock, Unlock and ResetByKey need 1..127 bytes,
        /// ResetBySource carries a source of 0..127 bytes, Cancel, Ping and Close none.
        /// </summary>
        /// <param name="action">The session action.</param>
        /// <param name="key">The key (or source).</param>
        /// <returns>Its bytes.</returns>
        /// <exception cref="InvalidRequestException">The key is invalid for the action.</exception>
        public static byte[] KeyBytes(byte action, string key)
        {
            switch (action)
            {
                case Lock:
                case TryLock:
                case Unlock:
                case ResetByKey:
                    return WireFormat.KeyBytes(key);
                case ResetBySource:
                    return WireFormat.SourceBytes(key ?? "");
                case Cancel:
                case Ping:
                case Close:
                    if (!string.IsNullOrEmpty(key)) throw new InvalidRequestException("action " + action + " takes no key");
                    return new byte[0];
                default:
                    throw new InvalidRequestException("unknown session action " + action);
            }
        }

        /// <summary>Encodes one request, checking its key first.</summary>
        /// <param name="action">The session action.</param>
        /// <param name="id">The request id.</param>
        /// <param name="token">The grant's token (Unlock), else 0.</param>
        /// <param name="key">The key, source, or empty.</param>
        /// <returns>The frame.</returns>
        public static byte[] EncodeRequest(byte action, uint id, ulong token, string key)
        {
            byte[] k = KeyBytes(action, key);
            var b = new byte[14 + k.Length];
            Put(b, 0, action, id, token, k);
            return b;
        }

        /// <summary>Writes a request whose key bytes were checked at <paramref name="offset"/>; returns its length.</summary>
        internal static int Put(byte[] b, int offset, byte action, uint id, ulong token, byte[] key)
        {
            b[offset] = action;
            PutUInt32(b, offset + 1, id);
            PutUInt64(b, offset + 5, token);
            b[offset + 13] = (byte)key.Length;
            Buffer.BlockCopy(key, 0, b, offset + 14, key.Length);
            return 14 + key.Length;
        }

        /// <summary>Decodes a 13-byte answer to a request.</summary>
        /// <param name="b">The answer.</param>
        /// <param name="id">The id it answers.</param>
        /// <param name="status">'+', '-' or '#'.</param>
        /// <param name="token">The token.</param>
        public static void DecodeAnswer(byte[] b, out uint id, out byte status, out ulong token)
        {
            id = GetUInt32(b, 0);
            status = b[4];
            token = GetUInt64(b, 5);
        }

        private static void PutUInt32(byte[] b, int o, uint v)
        {
            for (int i = 3; i >= 0; i--) { b[o + i] = (byte)v; v >>= 8; }
        }

        private static void PutUInt64(byte[] b, int o, ulong v)
        {
            for (int i = 7; i >= 0; i--) { b[o + i] = (byte)v; v >>= 8; }
        }

        private static uint GetUInt32(byte[] b, int o)
        {
            uint v = 0;
            for (int i = 0; i < 4; i++) v = (v << 8) | b[o + i];
            return v;
        }

        private static ulong GetUInt64(byte[] b, int o)
        {
            ulong v = 0;
            for (int i = 0; i < 8; i++) v = (v << 8) | b[o + i];
            return v;
        }
    }
}
