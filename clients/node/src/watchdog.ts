/**
 * One timer for all the leases of a client.
 *
 * @module
 */
import { performance } from "node:perf_hooks";

/** The longest delay a Node timer holds (2^31-1 ms, 24.8 days): a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** @internal Something the watchdog wakes at a time of its choosing (a lease). */
export interface Watched {
  /** When it is to be woken (monotonic ms, `performance.now()`); set by the watchdog. */
  wakeAt: number;
  /** Its place in the watchdog's heap, -1 when not in it; kept by the watchdog. */
  heapIndex: number;
  /** Its time has come; it may schedule itself again. Must not throw. */
  wake(now: number): void;
}

/**
 * @internal The leases' timers as one: a binary heap of leases by wake-up
 * time and a single `unref`'d timer armed for the earliest. A setTimeout
 * and a clearTimeout per lease (each allocating, and each toggling the
 * libuv timer's ref) were a measurable part of an uncontended acquire +
 * release; here a lease costs a heap insert and removal, and the timer is
 * re-armed only when a lease is due before it fires. It never keeps the
 * process alive.
 */
export class Watchdog {
  private readonly heap: Watched[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** When the timer fires (Infinity: not armed). */
  private timerAt = Infinity;

  /** Wakes `item` at `at` (replacing any earlier schedule of it). */
  schedule(item: Watched, at: number): void {
    item.wakeAt = at;
    if (item.heapIndex < 0) {
      item.heapIndex = this.heap.length;
      this.heap.push(item);
      this.up(item.heapIndex);
    } else {
      this.down(this.up(item.heapIndex));
    }
    if (at < this.timerAt) this.arm(at);
  }

  /** Forgets `item` (the timer lapses by itself if nothing else is due). */
  cancel(item: Watched): void {
    const index = item.heapIndex;
    if (index < 0) return;
    item.heapIndex = -1;
    const last = this.heap.pop() as Watched;
    if (index === this.heap.length) return;
    this.heap[index] = last;
    last.heapIndex = index;
    this.down(this.up(index));
  }

  /** How many leases it watches (for tests). */
  get size(): number {
    return this.heap.length;
  }

  private arm(at: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    // A delay above what a timer holds would fire at once, again and again:
    // the timer wakes at most MAX_TIMER_MS ahead and re-arms (fire checks
    // what is due).
    this.timer = setTimeout(this.fire, Math.min(MAX_TIMER_MS, Math.max(0, at - performance.now())));
    this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = undefined;
    this.timerAt = Infinity;
    const now = performance.now();
    // Every item due is taken off first, then woken: a wake that schedules
    // its item again (even at once) cannot keep this loop running.
    const due: Watched[] = [];
    while (this.heap.length > 0 && (this.heap[0] as Watched).wakeAt <= now) {
      const top = this.heap[0] as Watched;
      this.cancel(top);
      due.push(top);
    }
    for (const item of due) {
      try {
        item.wake(now);
      } catch {
        // A lease delivers its failures through its signal; nothing is thrown from a timer.
      }
    }
    const next = this.heap[0];
    if (next && next.wakeAt < this.timerAt) this.arm(next.wakeAt);
  };

  /** Moves the item at `index` towards the root while it is due earlier than its parent; returns its new index. */
  private up(index: number): number {
    const heap = this.heap;
    const item = heap[index] as Watched;
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = heap[parentIndex] as Watched;
      if (parent.wakeAt <= item.wakeAt) break;
      heap[index] = parent;
      parent.heapIndex = index;
      index = parentIndex;
    }
    heap[index] = item;
    item.heapIndex = index;
    return index;
  }

  /** Moves the item at `index` towards the leaves while a child is due earlier. */
  private down(index: number): void {
    const heap = this.heap;
    const item = heap[index] as Watched;
    for (;;) {
      const left = 2 * index + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      let child = left;
      if (right < heap.length && (heap[right] as Watched).wakeAt < (heap[left] as Watched).wakeAt) {
        child = right;
      }
      const smaller = heap[child] as Watched;
      if (smaller.wakeAt >= item.wakeAt) break;
      heap[index] = smaller;
      smaller.heapIndex = index;
      index = child;
    }
    heap[index] = item;
    item.heapIndex = index;
  }
}
