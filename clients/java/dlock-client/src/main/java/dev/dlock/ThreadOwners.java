package dev.dlock;

import java.util.concurrent.ConcurrentHashMap;

/**
 * The owner each thread uses on one lock (shared by a read-write lock's two sides, so that a
 * thread's read and write holds belong to one owner): a new UUID when the thread starts holding,
 * kept while it holds anything.
 */
final class ThreadOwners {
    private static final class Use {
        final String owner;
        final java.util.List<Hold> holds = new java.util.ArrayList<>();
        int count;

        Use(String owner) {
            this.owner = owner;
        }
    }

    private final ConcurrentHashMap<Thread, Use> uses = new ConcurrentHashMap<>();

    /** @return the thread's owner, or null when it holds nothing */
    String current(Thread thread) {
        Use use = uses.get(thread);
        return use == null ? null : use.owner;
    }

    /** Takes the thread's owner (a new one if it holds nothing) for one more hold. */
    String acquire(Thread thread) {
        return uses.compute(thread, (t, use) -> {
            Use u = use == null ? new Use(DLockClient.newOwner()) : use;
            u.count++;
            return u;
        }).owner;
    }

    /** Records one more hold of the thread under {@code owner} (its current owner, or a new one). */
    void use(Thread thread, String owner, Hold hold) {
        uses.compute(thread, (t, use) -> {
            Use u = use == null ? new Use(owner) : use;
            u.count++;
            u.holds.removeIf(h -> !h.isLiveAsKnown());
            // An owner's holds share one token, which an upgrade renews: the other modes' holds
            // must expect the new one from their renewals.
            for (Hold other : u.holds) {
                other.retoken(hold.tokens[0]);
            }
            u.holds.add(hold);
            return u;
        });
    }

    /** Gives back one use of the thread's owner. */
    void release(Thread thread) {
        uses.computeIfPresent(thread, (t, use) -> --use.count == 0 ? null : use);
    }
}
