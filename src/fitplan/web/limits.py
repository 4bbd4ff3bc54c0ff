"""The server's limits, each answered with one line, never a hang (README.md's table lists them).

Connections (fitplan.web.connection, fitplan.web.server)
    MAX_CONNECTIONS         connections open at once, all clients together; one more is 503 and closed
    MAX_CLIENT_CONNECTIONS  connections open at once from one client address; one more is 503 and
                            closed, so one client cannot take every connection
    HEADER_DEADLINE_S       the request line and headers must arrive within this many seconds of the
                            server starting to wait for them, however they trickle (408, closed; an
                            idle keep-alive connection is just closed): a client trickling headers
                            holds a connection for seconds, not for the whole-request deadline
    REQUEST_DEADLINE_S      the whole request, body included, within this many seconds (408, closed)
    WRITE_TIMEOUT_S         to send one answer to a client that does not read
    MAX_BODY_BYTES          a request's body; past it 413 (a refused body up to DISCARD_LIMIT is read
                            and dropped, so the client sees the 413 rather than a reset)

Analyses (fitplan.web.pool, fitplan.web.lanes): two lanes of worker processes, so a light answer
(a single plan, infer, the export of a given layout) never queues behind a search or a sweep
    LIGHT_WORKERS, LIGHT_QUEUE   the fast lane: its workers, and the requests that may wait for one
    HEAVY_WORKERS, HEAVY_QUEUE   searches, sweeps, compares and exports that search (the page asks for
                                 three at once, then a compare); their workers run under Linux's
                                 SCHED_BATCH policy, so a light answer's wake-up preempts them, while
                                 their share of the CPU stays that of any other process (a lower
                                 nice would starve them on a machine shared with other work)
    QUEUE_WAIT_S                 the longest wait for a worker; one more request than a lane's workers
                                 and queue, or a longer wait, is 503 "server busy: ..."
    ANALYSIS_BUDGET_S            wall-clock seconds one analysis may run; past it its worker process is
                                 killed and replaced, and the answer is 503 with one line

The figures are for a small machine: 2 fast-lane workers answer a few hundred light requests a
second (one takes ~5 ms); 4 heavy workers answer one update of the page (three searches or
sweeps, then a compare) without queueing. bench/server_load.py measures them under trickling
clients and heavy sweeps.
"""
MAX_BODY_BYTES = 256 * 1024
DISCARD_LIMIT = 16 * MAX_BODY_BYTES
MAX_CONNECTIONS = 256
MAX_CLIENT_CONNECTIONS = 8
HEADER_DEADLINE_S = 5.0
REQUEST_DEADLINE_S = 15.0
WRITE_TIMEOUT_S = 15.0
LIGHT_WORKERS = 2
LIGHT_QUEUE = 64
HEAVY_WORKERS = 4
HEAVY_QUEUE = 8
QUEUE_WAIT_S = 5.0
ANALYSIS_BUDGET_S = 10.0
ANALYSIS_WORKERS = LIGHT_WORKERS + HEAVY_WORKERS
