package dev.dlock.examples;

import dev.dlock.DElection;
import dev.dlock.DLockClient;
import dev.dlock.Lease;

/** Leader election: observe, campaign, serve under the term, resign. */
public final class ElectionExample {
    private ElectionExample() {}

    /**
     * @param args the identity to announce (default: this process's id)
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        String identity = args.length > 0 ? args[0] : "pid-" + ProcessHandle.current().pid();
        try (DLockClient dlock = Examples.connect()) {
            DElection election = dlock.getElection("billing:leader");
            try (DElection.Observer observer = election.observe(leader ->
                    System.out.println("leader now: " + leader.map(Object::toString).orElse("nobody")))) {
                try (Lease leadership = election.campaign(identity)) {
                    leadership.lost().thenRun(() -> System.out.println("no longer the leader: stop at once"));
                    System.out.println(identity + " leads in term " + leadership.token());
                }
            }
        }
    }
}
