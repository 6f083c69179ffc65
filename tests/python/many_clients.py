"""Runs one workload on many threads at once, as many clients of the server."""

import threading

# A thread still running after this long fails the test instead of hanging it.
JOIN_TIMEOUT_SECONDS = 120


def run_threads(target, count):
    """Calls target(number) for number in range(count), each on its own thread; returns their
    results in order. The first exception a thread raised is raised again here."""
    results = [None] * count
    errors = []

    def guarded(number):
        try:
            results[number] = target(number)
        except BaseException as error:  # raised again in the calling thread below
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_SECONDS)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish"
    if errors:
        raise errors[0]
    return results
