/*
 * core/forkcopy.h - fork with a meshing heap file (core/forkcopy.c).
 * The design: core/heapfile.h.
 */
#ifndef SD_CORE_FORKCOPY_H
#define SD_CORE_FORKCOPY_H


/* Fork, called by classes/fork.c with every allocator lock held.  The
 * child re-creates the mesh aliases on its new file through the function
 * the meshing layer registers (classes/mesh.c), which alone knows which
 * slabs are aliases; it runs single-threaded, possibly from the SIGSEGV
 * handler, and may call heapfile_alias() only. */
void forkcopy_set_realias(void (*realias)(void));
void forkcopy_prepare(void);
void forkcopy_parent(void);
void forkcopy_child(void);


#endif
