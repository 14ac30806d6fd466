/*
 * contrib/sqlite/sdpcache_internal.h - what the preloaded form
 * (preload.c) and the tests need from the module (sdpcache.c) beyond
 * sdpcache.h.
 */
#ifndef SDPCACHE_INTERNAL_H
#define SDPCACHE_INTERNAL_H

#include <sqlite3.h>

/* 1: m is this module's method table (installed already). */
int sdp_methods_are_ours(const sqlite3_pcache_methods2 *m);

/* Pool caches per page geometry from now on, at most SDP_POOL_MAX (0:
 * every new instance shares the shared cache); for the tests. */
void sdp_pool_limit(unsigned n);

#endif /* SDPCACHE_INTERNAL_H */
