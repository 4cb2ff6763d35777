"""Leader election with dlock: three candidates campaign for
``example:leader``; one leads for a while and resigns, the next in line takes
over, and an observer prints each change as the server makes it
(``DLOCK.WATCH``). Run it against ``make run``:

    python clients/python/examples/election.py [redis://127.0.0.1:6379/0]
"""

import sys
import threading
import time

import redis

import dlock


def candidate(r: redis.Redis, node: str) -> None:
    election = dlock.Election(r, "example:leader", watchdog_timeout=5)
    leadership = election.campaign(node)  # waits in line to lead
    with leadership:  # resigns on exit
        print(f"{node}: leading in term {leadership.term}")
        # Lead while it holds: pass the term to what you write, and stop at
        # once when the leadership is lost.
        if leadership.lost.wait(0.3):
            print(f"{node}: lost the leadership, stopping")
            return
        print(f"{node}: resigning")


def main() -> None:
    r = redis.Redis.from_url(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/0")
    observer = dlock.Election(r, "example:leader").observe()

    def follow() -> None:
        for leader in observer:  # who leads now, then every change
            if leader is None:
                print("observer: nobody leads")
            else:
                print(f"observer: {leader.text} leads (term {leader.term})")

    follower = threading.Thread(target=follow)
    follower.start()
    nodes = [
        threading.Thread(target=candidate, args=(r, n)) for n in ("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080")
    ]
    for node in nodes:
        node.start()
        time.sleep(0.05)
    for node in nodes:
        node.join()
    time.sleep(0.2)  # let the observer print the end of the last term
    observer.close()  # ends its wait on the server (CLIENT UNBLOCK)
    follower.join()


if __name__ == "__main__":
    main()
