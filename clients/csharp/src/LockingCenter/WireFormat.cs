using System;
using System.Text;

namespace LockingCenter
{
    /// <summary>The five actions of the wire protocol, valued as their byte on the wire.</summary>
    public enum LockAction : byte
    {
        /// <summary>Wait in FIFO order until the key is granted.</summary>
        Lock = 1,
        /// <summary>Release a held key (any client may release any key).</summary>
        Unlock = 2,
        /// <summary>Drop the holder of a key and answer '-' to its waiters.</summary>
        ResetByKey = 3,
        /// <summary>Answer '-' to every waiter of a source, then release every key it holds.</summary>
        ResetBySource = 4,
        /// <summary>Take the key only if it is free at this instant.</summary>
        TryLock = 5,
    }

    /// <summary>
    /// Encoding of one request frame (SPEC section 1):
    /// <code>
    /// +--------+---------+-----------------+------------+---------------------+
    /// | action | keySize | key (keySize B) | sourceSize | source (sourceSize) |
    /// | 1 byte | 1 byte  | UTF-8 bytes     | 1 byte     | UTF-8 bytes         |
    /// +--------+---------+-----------------+------------+---------------------+
    /// </code>
    /// Sizes are signed bytes, so a key or source is at most 127 bytes. The answer is one byte.
    /// </summary>
    public static class WireFormat
    {
        /// <summary>Largest key or source, in bytes.</summary>
        public const int MaxSize = 127;
        /// <summary>Answer: success.</summary>
        public const byte Ok = (byte)'+';
        /// <summary>Answer: failure.</summary>
        public const byte Fail = (byte)'-';
        /// <summary>Answer: try-lock not won.</summary>
        public const byte NotWon = (byte)'#';

        private static readonly UTF8Encoding Utf8 = new UTF8Encoding(false, false);

        /// <summary>
        /// Encodes one frame. ResetBySource takes no key (keySize 0); every other action needs a key of
        /// 1..127 bytes; the source (null means empty) may be 0..127 bytes.
        /// </summary>
        /// <param name="action">The action.</param>
        /// <param name="key">The key; empty or null for ResetBySource.</param>
        /// <param name="source">The requester's name; empty lets the server use the peer IP.</param>
        /// <returns>The frame, ready to be written in one write.</returns>
        /// <exception cref="InvalidRequestException">The key or source is invalid for the action.</exception>
        public static byte[] Encode(LockAction action, string key, string source)
        {
            byte[] k;
            if (action == LockAction.ResetBySource)
            {
                if (!string.IsNullOrEmpty(key))
                    throw new InvalidRequestException("reset by source takes no key");
                k = new byte[0];
            }
            else
            {
                k = KeyBytes(key);
            }
            byte[] s = SourceBytes(source);
            var frame = new byte[3 + k.Length + s.Length];
            frame[0] = (byte)action;
            frame[1] = (byte)k.Length;
            Buffer.BlockCopy(k, 0, frame, 2, k.Length);
            frame[2 + k.Length] = (byte)s.Length;
            Buffer.BlockCopy(s, 0, frame, 3 + k.Length, s.Length);
            return frame;
        }

        /// <summary>Checks a key (1..127 bytes once UTF-8 encoded) and returns its bytes.</summary>
        /// <param name="key">The key.</param>
        /// <returns>The UTF-8 bytes of the key.</returns>
        /// <exception cref="InvalidRequestException">The key is empty or too long.</exception>
        public static byte[] KeyBytes(string key)
        {
            if (string.IsNullOrEmpty(key))
                throw new InvalidRequestException("key must not be empty");
            return Checked("key", key);
        }

        /// <summary>Checks a source (0..127 bytes once UTF-8 encoded; null means empty) and returns its bytes.</summary>
        /// <param name="source">The source.</param>
        /// <returns>The UTF-8 bytes of the source.</returns>
        /// <exception cref="InvalidRequestException">The source is too long.</exception>
        public static byte[] SourceBytes(string source)
        {
            return Checked("source", source ?? "");
        }

        private static byte[] Checked(string what, string s)
        {
            byte[] b = Utf8.GetBytes(s);
            if (b.Length > MaxSize)
                throw new InvalidRequestException(what + " is " + b.Length + " bytes once UTF-8 encoded; at most " + MaxSize + " allowed");
            return b;
        }

        internal static string Quote(string s)
        {
            if (s == null) return "null";
            return "\"" + (s.Length > 40 ? s.Substring(0, 40) + "..." : s) + "\"";
        }

        internal static string Answer(int b)
        {
            return b >= 0x20 && b < 0x7f ? "'" + (char)b + "'" : "0x" + b.ToString("x2");
        }
    }
}
