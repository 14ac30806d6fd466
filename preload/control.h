/*
 * preload/control.h - the control socket that tools/slabinfo talks to.
 */
#ifndef SD_PRELOAD_CONTROL_H
#define SD_PRELOAD_CONTROL_H

/* Open the socket if SLABDEFRAG_CONTROL asks for it (from the library
 * constructor, after the shrinker is allowed to start). */
void control_init(void);
/* Remove the socket (at exit, and in a fork child, which re-opens its own). */
void control_shutdown(void);
void control_after_fork_child(void);

#endif
