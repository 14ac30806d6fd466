/*
 * hooks/validate.h - the slab validator behind `slabinfo -v`.
 */
#ifndef SD_HOOKS_VALIDATE_H
#define SD_HOOKS_VALIDATE_H

#include <stddef.h>

struct validate_result {
    size_t caches;              /* caches whose lists were walked */
    size_t slabs;               /* slab descriptors checked */
    size_t errors;              /* corruptions reported */
};

/* Walk every cache's partial and empty lists (under its list lock) and
 * every slab (under its slab lock) and check the invariants of core/types.h.
 * Each corruption is one line on fd:
 *   corrupt: cache <name> slab <addr>: <what>
 * followed by a summary line.  Takes allocator locks in the documented
 * order; does not allocate.  Returns 0 or -errno (writing to fd failed). */
int validate_all(int fd, struct validate_result *out);

#endif
