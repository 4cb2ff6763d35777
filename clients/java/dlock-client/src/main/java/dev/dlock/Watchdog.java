package dev.dlock;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One thread per client that renews every live hold and marks holds lost. When a renewal falls
 * due, the round also takes every hold due within the next half of its period, and sends them all
 * together (pipelined by the transport), so holds taken at different moments fall into step.
 */
final class Watchdog implements Runnable {
    private final DLockClient client;
    private final Set<Hold> holds = ConcurrentHashMap.newKeySet();
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition wake = lock.newCondition();
    private final Thread thread;
    private final java.util.concurrent.ExecutorService sender;
    private volatile boolean closed;
    // Guarded by lock: a wake-up was asked for; the watchdog sleeps (and until when).
    private boolean signalled;
    private boolean sleeping;
    private long wakeAt;

    Watchdog(DLockClient client) {
        this.client = client;
        this.sender = java.util.concurrent.Executors.newSingleThreadExecutor(task -> {
            Thread t = new Thread(task, "dlock-renewals");
            t.setDaemon(true);
            return t;
        });
        this.thread = new Thread(this, "dlock-watchdog");
        this.thread.setDaemon(true);
        this.thread.start();
    }

    void watch(Hold hold) {
        holds.add(hold);
        long due;
        synchronized (hold) {
            due = hold.renewed ? earliest(hold.deadlineNanos, hold.nextRenewalNanos - hold.periodNanos / 2)
                    : hold.deadlineNanos;
        }
        lock.lock();
        try {
            // A sleeping watchdog that wakes before this hold needs it sees the hold then: no
            // wake-up (a thread switch and a scan of every hold) per acquisition, which on a
            // contended lock would sit on every hand-off.
            if (sleeping && due - wakeAt >= 0) {
                return;
            }
            signalled = true;
            wake.signalAll();
        } finally {
            lock.unlock();
        }
    }

    void unwatch(Hold hold) {
        holds.remove(hold);
    }

    int size() {
        return holds.size();
    }

    private void signal() {
        lock.lock();
        try {
            signalled = true;
            wake.signalAll();
        } finally {
            lock.unlock();
        }
    }

    void close() {
        closed = true;
        sender.shutdownNow();
        signal();
        for (Hold hold : holds) {
            hold.markLost(LostReason.CLIENT_CLOSED);
        }
        try {
            thread.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public void run() {
        while (!closed) {
            long now = System.nanoTime();
            long next = now + TimeUnit.SECONDS.toNanos(1);
            List<Hold> due = new ArrayList<>();
            boolean anyDue = false;
            for (Hold hold : holds) {
                if (!hold.isLive()) {
                    holds.remove(hold);
                    continue;
                }
                long deadline;
                long renewal;
                boolean inFlight;
                long half;
                synchronized (hold) {
                    deadline = hold.deadlineNanos;
                    renewal = hold.nextRenewalNanos;
                    inFlight = hold.inFlight;
                    half = hold.periodNanos / 2;
                }
                if (now - deadline >= 0) {
                    hold.markLost(LostReason.DEADLINE);
                    continue;
                }
                next = earliest(next, deadline);
                if (!hold.renewed || inFlight) {
                    continue;
                }
                if (now - renewal >= 0) {
                    anyDue = true;
                    due.add(hold);
                } else if (renewal - now <= half) {
                    due.add(hold);
                } else {
                    next = earliest(next, renewal - half);
                }
            }
            if (anyDue) {
                renew(due);
            } else {
                for (Hold hold : due) {
                    synchronized (hold) {
                        next = earliest(next, hold.nextRenewalNanos);
                    }
                }
            }
            lock.lock();
            try {
                long wait = next - System.nanoTime();
                if (!signalled && wait > 0 && !closed && !anyDue) {
                    sleeping = true;
                    wakeAt = next;
                    wake.awaitNanos(wait);
                }
                sleeping = false;
                signalled = false;
            } catch (InterruptedException e) {
                return;
            } finally {
                lock.unlock();
            }
        }
    }

    private static long earliest(long a, long b) {
        return b - a < 0 ? b : a;
    }

    private void renew(List<Hold> due) {
        List<Transport.Command> commands = new ArrayList<>();
        for (Hold hold : due) {
            synchronized (hold) {
                hold.inFlight = true;
            }
            byte[] owner = Bytes.of(hold.owner);
            byte[] ttl = Bytes.of(hold.ttlMs);
            for (byte[] key : hold.keyBytes) {
                commands.add(new Transport.Command(key, new byte[][] {Commands.RENEW, key, owner, ttl}));
            }
        }
        // Sent from a thread of its own: a transport may block while it reconnects, and the
        // watchdog's own thread must keep checking deadlines meanwhile.
        try {
            sender.execute(() -> send(due, commands));
        } catch (RuntimeException e) {
            for (Hold hold : due) {
                retryLater(hold);
            }
        }
    }

    private void send(List<Hold> due, List<Transport.Command> commands) {
        long sent = System.nanoTime();
        List<CompletableFuture<Object>> replies;
        try {
            replies = client.transport().callAll(commands);
        } catch (RuntimeException e) {
            for (Hold hold : due) {
                retryLater(hold);
            }
            return;
        }
        int at = 0;
        for (Hold hold : due) {
            int n = hold.keyBytes.length;
            List<CompletableFuture<Object>> mine = replies.subList(at, at + n);
            at += n;
            long ttl = hold.ttlMs;
            CompletableFuture.allOf(mine.toArray(new CompletableFuture<?>[0]))
                    .whenComplete((ignored, error) -> judge(hold, mine, sent, ttl));
        }
    }

    private void judge(Hold hold, List<CompletableFuture<Object>> replies, long sent, long ttl) {
        LostReason lost = null;
        boolean retry = false;
        for (int i = 0; i < replies.size(); i++) {
            try {
                Object reply = replies.get(i).get();
                if (!(reply instanceof Long)) {
                    lost = LostReason.NOT_OWNER;
                } else if ((Long) reply != hold.token(i)) {
                    lost = LostReason.TOKEN_CHANGED;
                }
            } catch (ExecutionException | CompletionException e) {
                Throwable cause = e.getCause();
                if (cause instanceof NotOwnerException) {
                    lost = LostReason.NOT_OWNER;
                } else if (cause instanceof WrongTypeException) {
                    lost = LostReason.WRONG_TYPE;
                } else {
                    retry = true;
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                retry = true;
            }
        }
        if (lost != null) {
            hold.markLost(lost);
        } else if (retry) {
            retryLater(hold);
        } else if (!hold.renewed(sent, ttl)) {
            hold.markLost(LostReason.DEADLINE);
        }
        signal();
    }

    private void retryLater(Hold hold) {
        synchronized (hold) {
            hold.inFlight = false;
            long delay = Math.min(client.config().retryDelay().toNanos(), hold.ttlMs * 1_000_000L / 12);
            hold.nextRenewalNanos = System.nanoTime() + Math.max(1_000_000L, delay);
        }
        signal();
    }
}
