/*
 * contrib/sqlite/sdpcache_internal.h - what the preloaded form
 * (preload.c) needs from the module (sdpcache.c) beyond sdpcache.h.
 */
#ifndef SDPCACHE_INTERNAL_H
#define SDPCACHE_INTERNAL_H

#include <sqlite3.h>

/* 1: m is this module's method table (installed already). */
int sdp_methods_are_ours(const sqlite3_pcache_methods2 *m);

#endif /* SDPCACHE_INTERNAL_H */
