using System;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    /// <summary>
    /// A key held through a <see cref="LockingCenterSession"/>, with the fencing token of its grant.
    /// Disposing it unlocks that grant by its token (so it can never release a later holder's), which fits
    /// a using statement:
    /// <code>
    /// using (var held = await session.LockAsync("deploy/prod"))
    /// {
    ///     await DeployAsync(held.Token);
    /// } // unlocked here; throws SessionLostException if the session was lost meanwhile
    /// </code>
    /// </summary>
    /// <remarks>
    /// If the session is lost while the key is held, the hold is gone: disposing then throws
    /// <see cref="SessionLostException"/>, so the scoped form reports it, and <see cref="Check"/> throws it
    /// at any moment. The fencing token is what keeps a holder that did not notice harmless: pass
    /// <see cref="Token"/> to the resource with every write. The handle unlocks at most once; it is
    /// thread-safe.
    /// </remarks>
    public sealed class SessionLock : IDisposable
#if NETSTANDARD2_1_OR_GREATER || NETCOREAPP3_0_OR_GREATER || LC_ASYNC_DISPOSABLE
        , IAsyncDisposable
#endif
    {
        private int _released;

        internal SessionLock(LockingCenterSession session, string key, ulong token)
        {
            Session = session;
            Key = key;
            Token = token;
        }

        /// <summary>The key that is held.</summary>
        public string Key { get; private set; }

        /// <summary>The grant's fencing token: greater than every token the server gave before, for any key.</summary>
        public ulong Token { get; private set; }

        /// <summary>The session the key is held through.</summary>
        public LockingCenterSession Session { get; private set; }

        /// <summary>Whether this handle has released the key.</summary>
        public bool IsReleased
        {
            get { return Volatile.Read(ref _released) != 0; }
        }

        /// <summary>
        /// Throws <see cref="SessionLostException"/> if the session was lost, so the hold is gone; returns
        /// otherwise. (An operator's reset can still end a hold unseen: the token covers that.)
        /// </summary>
        public void Check()
        {
            var lost = Session.Failure as SessionLostException;
            if (lost != null)
                throw new SessionLostException("key " + WireFormat.Quote(Key) + " is no longer held: " + lost.Message, lost);
        }

        /// <summary>Unlocks the grant, once; later calls complete at once.</summary>
        /// <param name="cancellationToken">Stops waiting for the answer.</param>
        /// <returns>A task that completes when the grant is released.</returns>
        /// <exception cref="NotHeldException">The session no longer holds it (reset meanwhile).</exception>
        /// <exception cref="OutcomeUnknownException">The answer was lost; the session settles it after the resume.</exception>
        /// <exception cref="SessionLostException">The session was lost while the key was held.</exception>
        /// <exception cref="SessionClosedException">The session was closed (which released the key).</exception>
        public Task UnlockAsync(CancellationToken cancellationToken = default(CancellationToken))
        {
            if (Interlocked.Exchange(ref _released, 1) != 0) return Task.FromResult(true);
            try
            {
                Check();
            }
            catch (SessionLostException e)
            {
                var failed = new TaskCompletionSource<bool>();
                failed.SetException(e);
                return failed.Task;
            }
            return Session.UnlockAsync(Key, Token, cancellationToken);
        }

        /// <summary>
        /// Releases the key at the end of a using block. After the session's close it does nothing (the
        /// close released the key); an unlock whose answer was lost is left to the session, which settles it
        /// by its token after the resume.
        /// </summary>
        /// <exception cref="SessionLostException">The session was lost while the key was held.</exception>
        /// <exception cref="NotHeldException">The hold had ended meanwhile (a reset).</exception>
        public void Dispose()
        {
            DisposeCoreAsync().ConfigureAwait(false).GetAwaiter().GetResult();
        }

#if NETSTANDARD2_1_OR_GREATER || NETCOREAPP3_0_OR_GREATER || LC_ASYNC_DISPOSABLE
        /// <summary>As <see cref="Dispose"/>, for <c>await using</c>.</summary>
        /// <returns>A task that completes when the key is released.</returns>
        public ValueTask DisposeAsync()
        {
            return new ValueTask(DisposeCoreAsync());
        }
#endif

        private async Task DisposeCoreAsync()
        {
            if (IsReleased) return;
            if (Session.Failure is SessionClosedException)
            {
                Interlocked.Exchange(ref _released, 1);
                return;
            }
            try
            {
                await UnlockAsync().ConfigureAwait(false);
            }
            catch (OutcomeUnknownException)
            {
                // the session unlocks this grant by its token after the resume
            }
        }

        /// <summary>The key and token.</summary>
        /// <returns>A short description.</returns>
        public override string ToString()
        {
            return "SessionLock[" + WireFormat.Quote(Key) + ", token=" + Token + (IsReleased ? ", released]" : "]");
        }
    }
}
