"""Blocking library calls that Ctrl-C and other threads can stop.

Python runs signal handlers only between bytecodes of the main thread, so
a library call made from it directly would hold KeyboardInterrupt off for
the whole of its wait (a stage waiting 60 s for a version). A handle's
blocking calls therefore run on another thread while the calling thread
waits for them in short slices. When an exception is raised into that
wait (KeyboardInterrupt from SIGINT, or whatever a signal handler raises),
the call is cancelled through the library (rs_receiver_cancel,
rs_publisher_cancel: it returns within RS_CANCEL_POLL_S of its current
wait), the waiter waits until it has returned, so the handle is never left
in the middle of a call, undoes what the call did if it finished anyway
(a stage that completed is discarded), and raises the exception.
"""
import queue
import threading
from concurrent.futures import Future

SLICE_S = 0.05  # how long a signal may wait for the waiting thread


def _run(fut, fn):
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn())
    except BaseException as e:  # handed to the waiter, raised there
        fut.set_exception(e)


def _serve(q):
    while True:
        item = q.get()
        if item is None:
            return
        _run(*item)
        del item  # holds nothing of the handle between calls


class Runner:
    """One thread of a handle's own that runs its blocking calls in turn,
    so that every call on the handle is made from the same thread (a UCX
    worker made for one thread is only ever used by it). Started on first
    use; stop() lets it end once its queue is done."""

    def __init__(self, name):
        self._name = name
        self._q = None
        self._thread = None
        self._guard = threading.Lock()

    def submit(self, fn):
        """A Future of fn() run on the thread."""
        with self._guard:
            # not alive: never started, stopped, or this is a forked child
            if self._thread is None or not self._thread.is_alive():
                self._q = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=_serve, args=(self._q,), name=self._name,
                    daemon=True)
                self._thread.start()
            fut = Future()
            self._q.put((fut, fn))
            return fut

    def stop(self):
        with self._guard:
            if self._thread is not None:
                self._q.put(None)
                self._q = self._thread = None


def spawn(fn, name):
    """A Future of fn() run on a thread of its own."""
    fut = Future()
    threading.Thread(target=_run, args=(fut, fn), name=name,
                     daemon=True).start()
    return fut


def _wait_out(done):
    while not done.is_set():
        try:
            done.wait(SLICE_S)
        except BaseException:  # pylint: disable=broad-except
            pass  # the call is cancelled: it ends within a poll period


def wait(fut, cancel, undo=None):
    """fut's result (or its exception), waiting in slices of SLICE_S. An
    exception raised into the wait calls cancel(), waits for fut to end,
    calls undo(result) when it succeeded all the same, and is raised."""
    done = threading.Event()
    fut.add_done_callback(lambda _f: done.set())
    try:
        while not done.wait(SLICE_S):
            pass
    except BaseException:
        cancel()
        _wait_out(done)
        if undo is not None and fut.exception() is None:
            undo(fut.result())
        raise
    return fut.result()
