/*
 * tests/prof/kickmove.c - a cache whose kick() moves every object it is
 * given, for the heap profiler's test that samples follow their objects
 * (tests/prof/prof.sh).  It fills a typed cache, frees three objects in
 * four (every slab left a quarter full: sparse), prints "ready", and on
 * each line read from stdin runs sd_shrink_all() (kick() moves the
 * survivors into full slabs) and prints "shrunk <bytes released>"; at EOF
 * it checks every object kept its contents and exits.
 *
 *   kickmove [objects]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slabdefrag.h"

struct node {
    size_t index;               /* where table[] points at it */
    size_t check;               /* index * 2654435761 */
    char   payload[112];
};

static struct node **table;
static sd_cache *cache;
static size_t moved;

static void *node_get(sd_cache *s, int nr, void **objs)
{
    return NULL;                /* every object can move; no refs needed */
}

static void node_kick(sd_cache *s, int nr, void **objs, void *priv)
{
    for (int i = 0; i < nr; i++) {
        struct node *old = objs[i];
        if (!old)
            continue;
        struct node *n = sd_cache_alloc(s);
        if (!n)
            continue;           /* stays where it is */
        memcpy(n, old, sizeof *n);
        table[n->index] = n;
        sd_cache_free(s, old);
        moved++;
    }
}

static const struct sd_cache_ops ops = { node_get, node_kick };

__attribute__((noinline)) struct node *kept_node_site(size_t i)
{
    struct node *n = sd_cache_alloc(cache);
    if (!n)
        abort();
    n->index = i;
    n->check = i * 2654435761u;
    memset(n->payload, (int)(i & 0xff), sizeof n->payload);
    return n;
}

int main(int argc, char **argv)
{
    size_t count = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
    if (count < 16) {
        fprintf(stderr, "kickmove: expected a count of at least 16\n");
        return 2;
    }
    cache = sd_cache_create("kickmove_node", sizeof(struct node),
                            _Alignof(struct node), 0, NULL, &ops);
    table = calloc(count, sizeof *table);
    if (!cache || !table)
        return 1;
    for (size_t i = 0; i < count; i++)
        table[i] = kept_node_site(i);
    for (size_t i = 0; i < count; i++)
        if (i % 4) {
            sd_cache_free(cache, table[i]);
            table[i] = NULL;
        }
    printf("ready\n");
    fflush(stdout);
    char line[16];
    while (fgets(line, sizeof line, stdin)) {
        size_t bytes = sd_shrink_all();
        printf("shrunk %zu moved %zu\n", bytes, moved);
        fflush(stdout);
    }
    for (size_t i = 0; i < count; i += 4)
        if (table[i]->index != i || table[i]->check != i * 2654435761u ||
            table[i]->payload[7] != (char)(i & 0xff)) {
            fprintf(stderr, "kickmove: object %zu damaged by a move\n", i);
            return 1;
        }
    return 0;
}
