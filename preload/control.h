/*
 * preload/control.h - the control socket that tools/slabinfo talks to.
 *
 * With SLABDEFRAG_CONTROL=1 a process listens on the abstract Unix socket
 * "\0slabdefrag.<pid>" (no file to clean up, gone when the process is;
 * a fork child listens on its own).  The background shrinker thread polls
 * it (hooks/shrinker.h) and serves one connection at a time: a peer of
 * another uid (root excepted) is refused.
 *
 * Protocol: the client sends one request line of at most
 * SD_CONTROL_MAX_REQUEST bytes (newline included) and reads the reply
 * until EOF.  A reply that starts with "error: " is an error.  Requests:
 *   ping                          "slabdefrag <version> pid <pid>"
 *   stats [json] [totals] [sort=size|loss|partial]
 *   report <cache> [json]         one cache: geometry, slab states, counters
 *   shrink [<cache>]              "shrink: <bytes> bytes released"
 *   validate                      "corrupt: ..." lines, then "validate: ..."
 *   prof [on [<bytes>] | off]     heap profiler: status / switch (hooks/prof.h)
 *   prof heap                     gperftools heap profile (google-pprof)
 *   prof folded live|pinned       folded stacks for flame graphs
 *   sites [<rows>]                call sites by estimated live bytes, with
 *                                 the sparse-slab bytes they pin
 *   pinned [<rows>]               the same, by pinned bytes
 */
#ifndef SD_PRELOAD_CONTROL_H
#define SD_PRELOAD_CONTROL_H

#define SD_CONTROL_NAME_FMT    "slabdefrag.%d"  /* after the leading NUL */
#define SD_CONTROL_MAX_REQUEST 256              /* bytes, newline included */
#define SD_CONTROL_READ_MS     1000             /* to receive the request */
#define SD_CONTROL_WRITE_MS    2000             /* per blocked write */

/* Open the socket if SLABDEFRAG_CONTROL asks for it (from the library
 * constructor, after the shrinker is allowed to start). */
void control_init(void);
/* Stop serving (at exit). */
void control_shutdown(void);
/* In a fork child: drop the parent's socket, open our own if enabled. */
void control_after_fork_child(void);

#endif
