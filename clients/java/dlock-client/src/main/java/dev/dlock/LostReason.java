package dev.dlock;

/** Why a hold was lost. */
public enum LostReason {
    /** The server answered {@code NOTOWNER}: the lease ended, the key was deleted, or another owner took it. */
    NOT_OWNER,
    /** A renewal answered with another fencing token: the hold was replaced. */
    TOKEN_CHANGED,
    /** The key now holds another type ({@code WRONGTYPE}). */
    WRONG_TYPE,
    /** No renewal succeeded before the local deadline (send time + lease - margin). */
    DEADLINE,
    /** The client was closed while the hold was live. */
    CLIENT_CLOSED
}
