/*
 * tools/flamegraph.h - an SVG flame graph from folded stacks
 * ("outer;...;leaf value" lines, as hooks/profreport.c and Brendan Gregg's
 * stackcollapse scripts write them).
 */
#ifndef SD_TOOLS_FLAMEGRAPH_H
#define SD_TOOLS_FLAMEGRAPH_H

#include <stdio.h>

/* Read folded stacks from in, write one SVG document to out.  `title` is
 * drawn on top, `unit` names the values ("bytes").  Returns 0, or -1 with
 * a one-line message on stderr (a malformed line is named by number). */
int flamegraph_svg(FILE *in, FILE *out, const char *title, const char *unit);

#endif
