/*
 * preload/control.c - the control socket (SLABDEFRAG_CONTROL=1).
 * Not served yet: see issue 4; with the option set, a warning says so.
 */
#include "control.h"

#include "fmt.h"
#include "options.h"

void control_init(void)
{
    if (sd_opt.control)
        sd_warn("SLABDEFRAG_CONTROL=1: the control socket is not available in "
                "this build");
}

void control_shutdown(void) {}
void control_after_fork_child(void) {}
