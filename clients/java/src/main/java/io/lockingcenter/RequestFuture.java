package io.lockingcenter;

import java.util.concurrent.CompletableFuture;

/**
 * A future whose completion by anyone but the worker (cancel, a timeout, completeExceptionally,
 * orTimeout) closes the request's socket, so a queued waiter is withdrawn by the server.
 */
final class RequestFuture<T> extends CompletableFuture<T> {
    final Call call = new Call();

    RequestFuture() {
        super.whenComplete((value, error) -> call.abort());
    }

    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        boolean cancelled = super.cancel(mayInterruptIfRunning);
        call.abort();
        return cancelled;
    }
}
