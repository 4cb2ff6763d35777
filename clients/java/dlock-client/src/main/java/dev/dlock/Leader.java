package dev.dlock;

import java.util.Objects;

/**
 * Who leads an election: the owner string of the leader's hold ({@code <identity>#<32 hex digits>}),
 * the identity it announced, and its term (the fencing token of its hold; terms only grow).
 */
public final class Leader {
    private final String owner;
    private final long term;
    private final long pttlMillis;

    Leader(String owner, long term, long pttlMillis) {
        this.owner = owner;
        this.term = term;
        this.pttlMillis = pttlMillis;
    }

    /** @return the owner string of the leader's hold */
    public String owner() {
        return owner;
    }

    /** @return the identity the leader announced ({@link DElection#identityOf}) */
    public String identity() {
        return DElection.identityOf(owner);
    }

    /** @return the term: the fencing token of the leader's hold */
    public long term() {
        return term;
    }

    /** @return what was left of the leader's lease when the server answered, in ms (-1 when unknown) */
    public long pttlMillis() {
        return pttlMillis;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Leader && ((Leader) o).owner.equals(owner) && ((Leader) o).term == term;
    }

    @Override
    public int hashCode() {
        return Objects.hash(owner, term);
    }

    @Override
    public String toString() {
        return "Leader[" + identity() + " term=" + term + "]";
    }
}
