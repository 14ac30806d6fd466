/*
 * bench/demos/demo_util.h - helpers shared by the cooperating demos
 * (bench/demos/demo_util.c): a seeded PRNG, hashing, /proc figures,
 * argument parsing.
 */
#ifndef DEMO_UTIL_H
#define DEMO_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef struct { uint64_t s; } demo_rng;
uint64_t demo_rand(demo_rng *r);
uint64_t demo_below(demo_rng *r, uint64_t n);
uint64_t demo_mix(uint64_t a, uint64_t b);
uint64_t demo_fnv1a(const void *p, size_t n, uint64_t h);
void demo_permutation(uint32_t *a, size_t n, demo_rng *r);
long demo_status_kb(const char *field);
long demo_rss_kb(void);
int demo_parse_u64(const char *s, uint64_t *out);
const char *demo_opt(int argc, char **argv, int *i, const char *name);

#endif
