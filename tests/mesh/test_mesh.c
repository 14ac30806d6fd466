/*
 * tests/mesh/test_mesh.c - the mesh programs' scenarios (tests/subject.h),
 * each run in a process of its own by a Criterion test (tests/drive.h):
 * the Criterion suite names the program, the test its scenario.  What
 * each scenario checks is said at the top of its program; the options
 * (SLABDEFRAG_MESH=1 ...) come from the test's environment
 * (tests/mesh/meson.build).
 */
#include "../drive.h"

Test(mesh_test, basic) { drive("mesh_test", "basic"); }
Test(mesh_test, writer) { drive("mesh_test", "writer"); }
Test(mesh_test, fork) { drive("mesh_test", "fork"); }
Test(mesh_test, maplimit) { drive("mesh_test", "maplimit"); }
Test(mesh_test, handler) { drive("mesh_test", "handler"); }
Test(mesh_test, small) { drive("mesh_test", "small"); }
Test(mesh_test, slots) { drive("mesh_test", "slots"); }
Test(mesh_test, hint) { drive("mesh_test", "hint"); }
Test(mesh_test, harden) { drive("mesh_test", "harden"); }

Test(mesh_syscall, syscall) { drive("mesh_syscall", "syscall"); }
Test(mesh_syscall, kernel) { drive("mesh_syscall", "kernel"); }

Test(mesh_pattern, pattern) { drive("mesh_pattern", "pattern"); }

Test(mesh_policy, backoff) { drive("mesh_policy", "backoff"); }
Test(mesh_policy, busy) { drive("mesh_policy", "busy"); }
Test(mesh_policy, hold) { drive("mesh_policy", "hold"); }
Test(mesh_policy, lazy) { drive("mesh_policy", "lazy"); }
Test(mesh_policy, compute) { drive("mesh_policy", "compute"); }
Test(mesh_policy, decay) { drive("mesh_policy", "decay"); }

Test(mesh_robust, fds) { drive("mesh_robust", "fds"); }
Test(mesh_robust, closeall) { drive("mesh_robust", "closeall"); }
Test(mesh_robust, protect) { drive("mesh_robust", "protect"); }
Test(mesh_robust, rawfork) { drive("mesh_robust", "rawfork"); }

Test(nss_fork, nss_fork) { drive("nss_fork", "nss_fork"); }
