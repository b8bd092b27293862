"""A group's calls and their work objects.

The calls of a group run one at a time, in the order they were made (every rank
makes the same calls in the same order, and a libprism group is driven by one
thread at a time), on the group's own thread, so that work is asynchronous: DDP
reduces a bucket while autograd computes the next. A caller that waits for a
call runs it itself, with the calls before it, when no other thread is running
one: a synchronous collective (dist.all_reduce without async_op) then pays no
hand-off to the thread and back, which costs two wake-ups (tens of µs each on
a busy machine). The group's thread gives such a caller a moment (GRACE) before
it takes a call itself.
"""
from __future__ import annotations

import collections
import threading

import torch
import torch.distributed as dist


class Work(dist.Work):
    """A call's work. wait() raises the call's error (1.13's `_create_work_from_future` work returns
    as if it had succeeded); get_future() is what DDP's reducer takes."""

    def __init__(self, fut: torch.futures.Future, calls: Calls):
        super().__init__()
        self.fut = fut
        self._calls = calls
        self._taken = False
        # A caller in C++ (DDP's reducer) holds only the C++ half of this object: the Python half, where
        # get_future is, lives in `live` until the call is done and its outcome taken.
        calls.live.add(self)  # Calls._run lets it go once done, if its future was taken

    def wait(self, timeout=None) -> bool:
        try:
            self._calls.wait_for(self.fut)
        finally:
            self._calls.live.discard(self)
        return True

    def get_future(self) -> torch.futures.Future:
        self._taken = True
        if self.fut.done():
            self._calls.live.discard(self)
        return self.fut

    def is_completed(self) -> bool:
        return self.fut.done()


GRACE = 100e-6  # seconds


class Calls:
    def __init__(self, name: str):
        self.live = set()  # the work objects C++ may still ask for their future
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pending = collections.deque()
        self._running = False
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn, result) -> Work:
        """Queues fn(); its work's future gets `result` when fn returns, or fn's exception."""
        fut = torch.futures.Future()
        work = Work(fut, self)
        with self._lock:
            if self._closed:
                self.live.discard(work)
                raise RuntimeError('prism backend: this group is closed')
            self._pending.append((fn, fut, result, work))
            self._changed.notify()
        return work

    def wait_for(self, fut: torch.futures.Future):
        """Until `fut` is done: runs the pending calls here while no other thread runs one, else
        waits. Raises the call's error."""
        while not fut.done():
            with self._lock:
                call = self._take() if self._pending and not self._running else None
            if call is None:
                break  # another thread runs a call: it (or the group's thread after it) runs ours
            self._run(call)
        fut.wait()

    def close(self):
        """Runs what is queued, then stops the group's thread."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        self._thread.join()

    def _take(self):
        self._running = True
        return self._pending.popleft()

    def _run(self, call):
        fn, fut, result, work = call
        error = None
        try:
            fn()
        except Exception as e:  # the work's wait() raises it, with PRISM's message
            error = e
        with self._lock:
            self._running = False
            self._changed.notify_all()
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)
        if work._taken:  # get_future() was called before the result: nothing else will ask for it
            self.live.discard(work)

    def _serve(self):
        idle = True
        while True:
            with self._lock:
                while not (self._pending and not self._running):
                    if self._closed and not self._pending and not self._running:
                        return
                    self._changed.wait()
                    idle = True
                if idle and not self._closed:
                    # The first call after a pause: give a caller that waits for it at once (a
                    # synchronous collective) GRACE to run it itself. An asynchronous call starts
                    # that much later; the calls queued behind a running one start at once.
                    idle = False
                    self._changed.wait(GRACE)
                    continue
                call = self._take()
            self._run(call)
