using System;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    /// <summary>
    /// A key held by this process, returned by <see cref="LockingCenterClient.LockAsync(string, CancellationToken)"/>
    /// and its variants. Disposing it unlocks the key, so it fits a using statement:
    /// <code>
    /// using (var held = await client.LockAsync("deploy/prod")) { ... }
    /// await using var held = await client.LockAsync("deploy/prod");   // netstandard2.1 and newer
    /// </code>
    /// The handle unlocks at most once; disposing after <see cref="UnlockAsync"/> does nothing. It is
    /// thread-safe.
    /// </summary>
    /// <remarks>
    /// <para>
    /// <c>IAsyncDisposable</c> is implemented where the target has it: netstandard2.1 and .NET Core 3+
    /// (symbols defined by the SDK), and Mono builds given <c>-define:LC_ASYNC_DISPOSABLE</c> (test.sh
    /// does so when Mono's mscorlib has the interface). The netstandard2.0 build leaves it out rather
    /// than depend on the Microsoft.Bcl.AsyncInterfaces package; <see cref="UnlockAsync"/> is there on
    /// every target.
    /// </para>
    /// <para>
    /// Dispose throws when the unlock fails (<see cref="RefusedException"/> if the key was reset meanwhile,
    /// <see cref="UnreachableException"/> if the server is gone): a lock that may still be held must not
    /// pass silently. If the server could not be reached, the handle stays unreleased and the unlock can
    /// be tried again.
    /// </para>
    /// </remarks>
    public sealed class LockHandle : IDisposable
#if NETSTANDARD2_1_OR_GREATER || NETCOREAPP3_0_OR_GREATER || LC_ASYNC_DISPOSABLE
        , IAsyncDisposable
#endif
    {
        private readonly LockingCenterClient _client;
        private int _released;

        internal LockHandle(LockingCenterClient client, string key)
        {
            _client = client;
            Key = key;
        }

        /// <summary>The key that is held.</summary>
        public string Key { get; private set; }

        /// <summary>Whether this handle has released the key.</summary>
        public bool IsReleased
        {
            get { return Volatile.Read(ref _released) != 0; }
        }

        /// <summary>Unlocks the key, once; later calls complete at once.</summary>
        /// <param name="cancellationToken">Cancels the request (the handle then stays unreleased).</param>
        /// <returns>A task that completes when the key is released.</returns>
        /// <exception cref="RefusedException">The key was no longer held (e.g. it was reset).</exception>
        /// <exception cref="UnreachableException">The server could not be reached.</exception>
        public async Task UnlockAsync(CancellationToken cancellationToken = default(CancellationToken))
        {
            if (Interlocked.Exchange(ref _released, 1) != 0) return;
            try
            {
                await _client.UnlockAsync(Key, cancellationToken).ConfigureAwait(false);
            }
            catch (Exception e) when (e is UnreachableException || e is OperationCanceledException)
            {
                // The key may still be held: leave the handle unreleased so the unlock can be retried.
                Volatile.Write(ref _released, 0);
                throw;
            }
        }

        /// <summary>Unlocks the key (blocking), once.</summary>
        public void Dispose()
        {
            UnlockAsync().GetAwaiter().GetResult();
        }

#if NETSTANDARD2_1_OR_GREATER || NETCOREAPP3_0_OR_GREATER || LC_ASYNC_DISPOSABLE
        /// <summary>Unlocks the key without blocking, once: the end of an <c>await using</c> scope.</summary>
        /// <returns>A task that completes when the key is released.</returns>
        public ValueTask DisposeAsync()
        {
            return new ValueTask(UnlockAsync());
        }
#endif

        /// <summary>The key and whether it was released.</summary>
        /// <returns>A short description.</returns>
        public override string ToString()
        {
            return "LockHandle[" + WireFormat.Quote(Key) + (IsReleased ? ", released]" : "]");
        }
    }
}
