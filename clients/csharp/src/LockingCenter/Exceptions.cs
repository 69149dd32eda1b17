using System;

namespace LockingCenter
{
    /// <summary>
    /// Base class of every error raised by the Locking-Center client. Catch it to handle every client
    /// failure at once, or catch one of its subclasses. Giving up through a
    /// <see cref="System.Threading.CancellationToken"/> raises the standard
    /// <see cref="OperationCanceledException"/> instead.
    /// </summary>
    public class LockingCenterException : Exception
    {
        /// <summary>Creates an exception with a message.</summary>
        /// <param name="message">What went wrong.</param>
        public LockingCenterException(string message) : base(message) { }

        /// <summary>Creates an exception with a message and its cause.</summary>
        /// <param name="message">What went wrong.</param>
        /// <param name="inner">The underlying error, or null.</param>
        public LockingCenterException(string message, Exception inner) : base(message, inner) { }
    }

    /// <summary>
    /// A try-lock did not win the key: someone holds it (answer '#'). Raised only by
    /// <see cref="LockingCenterClient.TryLockOrThrowAsync"/>; <see cref="LockingCenterClient.TryLockAsync"/>
    /// returns false instead.
    /// </summary>
    public class NotWonException : LockingCenterException
    {
        /// <summary>Creates the exception for the key that was not won.</summary>
        /// <param name="key">The key held by someone else.</param>
        public NotWonException(string key) : base("key " + WireFormat.Quote(key) + " is held by someone else")
        {
            Key = key;
        }

        /// <summary>The key that was already held.</summary>
        public string Key { get; private set; }
    }

    /// <summary>
    /// A lock (or wait) request was answered '-': the key, or this client's source, was reset while the
    /// request waited, or the server could not make the grant durable. The key is not held.
    /// </summary>
    public class ResetWhileWaitingException : LockingCenterException
    {
        /// <summary>Creates the exception for the key that was waited for.</summary>
        /// <param name="key">The key whose lock request was answered '-'.</param>
        public ResetWhileWaitingException(string key)
            : base("lock on key " + WireFormat.Quote(key) + " was answered '-' (reset while waiting, or not made durable)")
        {
            Key = key;
        }

        /// <summary>The key that was waited for.</summary>
        public string Key { get; private set; }
    }

    /// <summary>
    /// The server answered '-' to an unlock, a reset or a try-lock (for unlock: the key was not held, or
    /// the release could not be recorded). Its subclass <see cref="InvalidRequestException"/> covers input
    /// the client refuses itself.
    /// </summary>
    public class RefusedException : LockingCenterException
    {
        /// <summary>Creates the exception with a message.</summary>
        /// <param name="message">What was refused.</param>
        public RefusedException(string message) : base(message) { }

        /// <summary>Creates the exception with a message and its cause.</summary>
        /// <param name="message">What was refused.</param>
        /// <param name="inner">The cause, or null.</param>
        public RefusedException(string message, Exception inner) : base(message, inner) { }
    }

    /// <summary>
    /// Refused by the client before any connection was opened: an empty key, a key or source longer than
    /// 127 bytes once UTF-8 encoded, or a key given where none is allowed.
    /// </summary>
    public class InvalidRequestException : RefusedException
    {
        /// <summary>Creates the exception with the reason.</summary>
        /// <param name="message">Why the input is invalid.</param>
        public InvalidRequestException(string message) : base(message) { }
    }

    /// <summary>
    /// The server could not be reached (name not resolved, connection refused, connect timeout), the frame
    /// could not be sent, or the connection closed (or stayed silent past the request timeout) without an
    /// answer.
    /// </summary>
    public class UnreachableException : LockingCenterException
    {
        /// <summary>Creates the exception with a message and the I/O cause.</summary>
        /// <param name="message">What failed.</param>
        /// <param name="inner">The socket error, or null.</param>
        public UnreachableException(string message, Exception inner) : base(message, inner) { }
    }

    /// <summary>
    /// The lock (or wait) timeout passed while the request was queued. The connection was closed, so the
    /// server withdrew the waiter; the key is not held.
    /// </summary>
    public class LockTimeoutException : LockingCenterException
    {
        /// <summary>Creates the exception for the key and the timeout that passed.</summary>
        /// <param name="key">The key that was waited for.</param>
        /// <param name="timeout">The timeout that passed.</param>
        public LockTimeoutException(string key, TimeSpan timeout)
            : this(key, timeout, null)
        {
        }

        // inner: the error of unlocking a grant that came in as the client gave up, or null.
        internal LockTimeoutException(string key, TimeSpan timeout, Exception inner)
            : base("gave up waiting for key " + WireFormat.Quote(key) + " after " + (long)timeout.TotalMilliseconds + " ms"
                   + (inner == null ? "" : LockingCenterClient.GiveBackFailedNote + inner.Message), inner)
        {
            Key = key;
        }

        /// <summary>The key that was waited for.</summary>
        public string Key { get; private set; }
    }

    /// <summary>
    /// A session's unlock was answered '-': this session does not hold that grant (it was reset, released
    /// already, or ended). Nothing was released, never another holder's grant.
    /// </summary>
    public class NotHeldException : RefusedException
    {
        /// <summary>Creates the exception with a message.</summary>
        /// <param name="message">Which grant is not held.</param>
        public NotHeldException(string message) : base(message) { }
    }

    /// <summary>
    /// The session's connection dropped before this call's answer came. The session resumes on its own;
    /// the call may be made again. A failed Lock or TryLock holds nothing: a grant the server made
    /// meanwhile is released by the session after the resume.
    /// </summary>
    public class DisconnectedException : UnreachableException
    {
        /// <summary>Creates the exception with a message and the I/O cause.</summary>
        /// <param name="message">What was lost.</param>
        /// <param name="inner">The socket error, or null.</param>
        public DisconnectedException(string message, Exception inner) : base(message, inner) { }
    }

    /// <summary>
    /// An unlock or a reset was sent but its answer never came (the connection dropped, or the caller
    /// stopped waiting): it may or may not have taken effect. It is never resent blindly; a session's
    /// unlock by token is settled after the resume, where it can release only that grant.
    /// </summary>
    public class OutcomeUnknownException : UnreachableException
    {
        /// <summary>Creates the exception with a message and the cause.</summary>
        /// <param name="message">What was lost.</param>
        /// <param name="inner">The cause, or null.</param>
        public OutcomeUnknownException(string message, Exception inner) : base(message, inner) { }
    }

    /// <summary>
    /// The session ended without Close: the server refused to resume it (it expired, was ended from the
    /// web API, or the server restarted without its log), or its TTL passed without a resume. Every hold
    /// it had is gone, or goes at the server's expiry; every pending and later call fails with this.
    /// </summary>
    public class SessionLostException : LockingCenterException
    {
        /// <summary>Creates the exception with a message and the cause.</summary>
        /// <param name="message">Why the session was lost.</param>
        /// <param name="inner">The cause, or null.</param>
        public SessionLostException(string message, Exception inner) : base(message, inner) { }
    }

    /// <summary>
    /// A call on a session after <see cref="LockingCenterSession.CloseAsync"/>, or a Lock refused by that
    /// close. Nothing is held through a closed session.
    /// </summary>
    public class SessionClosedException : LockingCenterException
    {
        /// <summary>Creates the exception with a message.</summary>
        /// <param name="message">What was closed.</param>
        public SessionClosedException(string message) : base(message) { }
    }
}
